//! Model files from disk: only their headers are read.
//!
//! The core parsers take a prefix of a file and say how much more they need; this module
//! answers with file reads, growing the prefix geometrically so a 10 MB vocabulary in a
//! GGUF header costs a handful of reads, not thousands.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use stageplan::import::gguf::{self, GgufHeader};
use stageplan::import::safetensors::{self, SafetensorsHeader};
use stageplan::import::{self, FileKind, ImportError, Parse};
use stageplan::model::HfConfig;
use stageplan::{Model, WeightFormat};

use crate::input;
use crate::outcome::Failure;

/// The one road from a scenario to a problem in the CLI: checks it, reading the headers of
/// a model file it names (relative to `base`, the scenario file's folder).
pub(crate) fn problem(base: &Path, scenario: stageplan::Scenario) -> Result<stageplan::Problem, Failure> {
    Ok(match scenario.model.file()? {
        Some(file) => scenario.problem_with_model(model_file(&base.join(file), None)?.model)?,
        None => scenario.problem()?,
    })
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
/// a `model.safetensors.index.json` (with its shards), or a `config.json` (with `weights`).
///
/// # Errors
/// Unreadable files, malformed headers (with the file and byte offset), missing parts.
pub(crate) fn model_file(path: &Path, weights: Option<WeightFormat>) -> Result<Loaded, Failure> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let mut first = [0u8; 16];
    let got = open(path)?.read(&mut first).map_err(|e| io_failure(path, &e))?;
    let kind = import::detect(name, &first[..got]).ok_or_else(|| {
        Failure(format!(
            "`{}` is not a model file stageplan reads (.gguf, .safetensors, model.safetensors.index.json, config.json)",
            path.display()
        ))
    })?;
    if weights.is_some() && kind != FileKind::Config {
        return Err(Failure(format!(
            "`--weights` applies to presets and config.json; `{}` states its own tensor types",
            path.display()
        )));
    }
    let mut loaded = Reads::default();
    let stem = name.split('.').next().unwrap_or(name).to_owned();
    let model = match kind {
        FileKind::Gguf => {
            let paths = match import::split_name(name) {
                Some((prefix, _, count)) => {
                    (1..=count).map(|k| path.with_file_name(import::split_part_name(prefix, k, count))).collect()
                }
                None => vec![path.to_path_buf()],
            };
            let mut headers: Vec<GgufHeader> = Vec::new();
            for part in &paths {
                headers.push(header(part, gguf::parse, &mut loaded)?);
            }
            let label = import::split_name(name).map_or(stem.as_str(), |(prefix, _, _)| prefix);
            import::gguf_model(label, &headers).map_err(|e| in_file(path, &e))?
        }
        FileKind::Safetensors => {
            let header: SafetensorsHeader = header(path, safetensors::parse, &mut loaded)?;
            let config = sibling_config(path)?;
            let label = folder_name(path).unwrap_or(stem);
            import::safetensors_model(&label, &[(name.to_owned(), header)], None, config.as_ref())
                .map_err(|e| in_file(path, &e))?
        }
        FileKind::SafetensorsIndex => {
            let text = read_text(path, &mut loaded)?;
            let index = safetensors::parse_index(&text).map_err(|e| in_file(path, &e))?;
            let mut shards = Vec::new();
            for shard in index.shards() {
                let shard_path = path.with_file_name(shard);
                shards.push((shard.to_owned(), header(&shard_path, safetensors::parse, &mut loaded)?));
            }
            let config = sibling_config(path)?;
            let label = folder_name(path).unwrap_or(stem);
            import::safetensors_model(&label, &shards, Some(&index), config.as_ref()).map_err(|e| in_file(path, &e))?
        }
        FileKind::Config => {
            let text = read_text(path, &mut loaded)?;
            let config = HfConfig::from_json(&text).map_err(|e| Failure(format!("`{}`: {e}", path.display())))?;
            let arch = config.transformer().map_err(|e| Failure(format!("`{}`: {e}", path.display())))?;
            let label = folder_name(path).unwrap_or_else(|| arch.model_type.clone());
            Model::from_transformer(&label, arch, weights.unwrap_or_default())
        }
    };
    Ok(Loaded { model, reads: loaded })
}

fn folder_name(path: &Path) -> Option<String> {
    let parent = path.canonicalize().ok()?.parent()?.file_name()?.to_str()?.to_owned();
    Some(parent)
}

fn open(path: &Path) -> Result<File, Failure> {
    input::open(path).map(|(file, _)| file)
}

fn io_failure(path: &Path, e: &std::io::Error) -> Failure {
    input::failure(path, e)
}

fn in_file(path: &Path, e: &ImportError) -> Failure {
    Failure(format!("`{}`: {e}", path.display()))
}

fn read_text(path: &Path, loaded: &mut Reads) -> Result<String, Failure> {
    let text = input::read_text(path)?;
    loaded.files.push(path.to_path_buf());
    loaded.bytes_read += text.len() as u64;
    loaded.file_bytes += text.len() as u64;
    Ok(text)
}

/// `config.json` beside `path`, if there is one.
fn sibling_config(path: &Path) -> Result<Option<HfConfig>, Failure> {
    let config = path.with_file_name("config.json");
    if input::probe(&config).is_none() {
        return Ok(None);
    }
    let text = input::read_text(&config)?;
    HfConfig::from_json(&text).map(Some).map_err(|e| Failure(format!("`{}`: {e}", config.display())))
}

/// Reads a header: a first chunk, then more as the parser asks, doubling each time.
fn header<T>(
    path: &Path,
    parse: impl Fn(&[u8], Option<u64>) -> Result<Parse<T>, ImportError>,
    loaded: &mut Reads,
) -> Result<T, Failure> {
    const FIRST: u64 = 64 << 10;
    let mut file = open(path)?;
    let len = file.metadata().map_err(|e| io_failure(path, &e))?.len();
    let mut buffer: Vec<u8> = Vec::new();
    let mut want = FIRST.min(len);
    loop {
        let have = buffer.len() as u64;
        if want > have {
            file.seek(SeekFrom::Start(have)).map_err(|e| io_failure(path, &e))?;
            (&mut file).take(want - have).read_to_end(&mut buffer).map_err(|e| io_failure(path, &e))?;
        }
        match parse(&buffer, Some(len)).map_err(|e| in_file(path, &e))? {
            Parse::Done(header) => {
                loaded.files.push(path.to_path_buf());
                loaded.bytes_read += buffer.len() as u64;
                loaded.file_bytes += len;
                return Ok(header);
            }
            Parse::NeedMore(needed) => {
                if needed > len || needed <= buffer.len() as u64 {
                    return Err(Failure(format!(
                        "`{}`: the header claims more bytes than the file has",
                        path.display()
                    )));
                }
                want = needed.max(2 * buffer.len() as u64).min(len);
            }
        }
    }
}
