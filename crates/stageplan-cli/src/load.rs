//! Model files from disk: only their headers are read.
//!
//! The core's model reader says which bytes of which files it needs (growing a header's
//! prefix geometrically, so a 10 MB vocabulary costs a handful of reads) and which files
//! beside the given one to look for; this module performs those reads.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use stageplan::check::{FileField, Files};
use stageplan::import::{self, FileEntry, FileKind, ModelReader, ReadError, Step};
use stageplan::{Checked, Model, ScenarioInput, WeightFormat};

use crate::input;
use crate::outcome::Failure;

/// The core's one road from a scenario to a problem ([`stageplan::check()`]), reading the
/// headers of the files the scenario names (relative to `base`, the scenario file's folder).
pub(crate) fn check<'a>(base: &Path, scenario: impl Into<ScenarioInput<'a>>) -> Result<Checked, Failure> {
    stageplan::check(scenario, Disk { base })
}

/// The files a scenario names, read from disk beside it.
struct Disk<'a> {
    base: &'a Path,
}

impl Files for Disk<'_> {
    type Error = Failure;

    fn model(&mut self, _: FileField, name: &str) -> Result<Model, Failure> {
        Ok(model_file(&self.base.join(name), None)?.model)
    }

    fn projector(&mut self, name: &str) -> Result<Option<import::ProjectorSize>, Failure> {
        projector_file(&self.base.join(name)).map(Some)
    }
}

/// A vision projector's sizes from its GGUF header.
fn projector_file(path: &Path) -> Result<import::ProjectorSize, Failure> {
    let (mut file, size) = input::open(path)?;
    let shown = || path.display().to_string();
    let mut prefix = Vec::new();
    let mut want: u64 = 1 << 20;
    loop {
        let have = prefix.len() as u64;
        if want > have {
            (&mut file)
                .take(want.min(size) - have.min(size))
                .read_to_end(&mut prefix)
                .map_err(|e| input::failure(path, &e))?;
        }
        match import::gguf::parse(&prefix, Some(size)) {
            Ok(import::Parse::Done(header)) => {
                return import::gguf_projector(&header).map_err(|e| Failure(format!("`{}`: {e}", shown())));
            }
            Ok(import::Parse::NeedMore(n)) if n > prefix.len() as u64 && (prefix.len() as u64) < size => {
                want = n.max(want.saturating_mul(2));
            }
            Ok(import::Parse::NeedMore(_)) => {
                return Err(Failure(format!(
                    "`{}`: the GGUF header ends before its end; the file is cut short",
                    shown()
                )));
            }
            Err(e) => return Err(Failure(format!("`{}`: {e}", shown()))),
        }
    }
}

/// Checks a scenario read from `path` (`-`: standard input) into a problem: a model file
/// it names is relative to the scenario file's folder.
pub(crate) fn problem<'a>(path: &Path, scenario: impl Into<ScenarioInput<'a>>) -> Result<stageplan::Problem, Failure> {
    let base = if path == Path::new("-") { Path::new(".") } else { path.parent().unwrap_or(Path::new(".")) };
    Ok(check(base, scenario)?.problem)
}

/// A model read from files, and what reading it cost.
pub(crate) struct Loaded {
    pub model: Model,
    pub reads: Reads,
}

/// What reading cost.
#[derive(Default)]
pub(crate) struct Reads {
    /// The files read.
    pub files: Vec<PathBuf>,
    /// Bytes read from them (headers only).
    pub bytes_read: u64,
    /// Their total size.
    pub file_bytes: u64,
}

/// Reads a model from a `.gguf` (a split set from any of its parts), a `.safetensors`,
/// a `model.safetensors.index.json` (with its shards), or a `config.json` (with `weights`):
/// the core's [`ModelReader`] decides what to read; this performs the reads.
///
/// # Errors
/// Unreadable files, malformed headers (with the file and byte offset), missing parts.
pub(crate) fn model_file(path: &Path, weights: Option<WeightFormat>) -> Result<Loaded, Failure> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
    let (mut file, size) = input::open(path)?;
    let mut first = [0u8; 16];
    let got = file.read(&mut first).map_err(|e| input::failure(path, &e))?;
    if weights.is_some() && import::detect(&name, &first[..got]).is_some_and(|k| k != FileKind::Config) {
        return Err(Failure(format!(
            "`--weights` applies to presets and config.json; `{}` states its own tensor types",
            path.display()
        )));
    }
    let offered = vec![FileEntry { name, size: Some(size) }];
    let mut reader = ModelReader::new(offered, weights, folder_name(path)).map_err(|e| Failure(e.to_string()))?;
    let mut paths = vec![path.to_path_buf()];
    let mut open: Vec<Option<File>> = vec![Some(file)];
    loop {
        match reader.step() {
            Ok(Step::Read { file, start, end }) => {
                let handle = match &mut open[file] {
                    Some(handle) => handle,
                    slot => slot.insert(input::open(&paths[file])?.0),
                };
                let mut bytes = Vec::new();
                handle
                    .seek(SeekFrom::Start(start))
                    .and_then(|_| handle.take(end - start).read_to_end(&mut bytes))
                    .map_err(|e| input::failure(&paths[file], &e))?;
                reader.supply(file, start, &bytes);
            }
            Ok(Step::Find { name }) => {
                let beside = path.with_file_name(&name);
                match input::probe(&beside) {
                    Some(meta) => {
                        let size = meta?.len();
                        reader.found(&name, Some(size));
                        paths.push(beside);
                        open.push(None);
                    }
                    None => reader.missing(&name),
                }
            }
            Ok(Step::Done(model)) => {
                let used = reader.used();
                let reads = Reads {
                    files: used.iter().map(|&f| paths[f].clone()).collect(),
                    bytes_read: reader.bytes_read(),
                    file_bytes: reader.file_bytes(),
                };
                return Ok(Loaded { model: *model, reads });
            }
            Err(ReadError::File { file, message }) => {
                let shown = reader
                    .files()
                    .iter()
                    .position(|f| f.name == file)
                    .map_or(file.clone(), |f| paths[f].display().to_string());
                return Err(Failure(format!("`{shown}`: {message}")));
            }
            Err(e @ ReadError::Set(_)) => return Err(Failure(e.to_string())),
        }
    }
}

fn folder_name(path: &Path) -> Option<String> {
    let parent = path.canonicalize().ok()?.parent()?.file_name()?.to_str()?.to_owned();
    Some(parent)
}
