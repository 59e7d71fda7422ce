//! The one model reader: which files make a model, in what order their bytes are read, and
//! what a failure says — with no I/O. The CLI, the page and the JS API only perform the
//! reads it asks for.
//!
//! A surface offers the files it was given (a path on the command line, files dropped on the
//! page) by name and size; [`ModelReader::step`] answers with the next thing to do: read a
//! byte range of a file ([`Step::Read`], answered by [`ModelReader::supply`]), look for a
//! file beside them by name ([`Step::Find`]: a split set's other parts, a shard the index
//! names, `config.json`; answered by [`ModelReader::found`]), or the model, read.
//!
//! Each step replays the decision from the bytes read so far, so the reader holds no
//! half-parsed state: a header's prefix grows (64 KiB first, then at least doubling, never
//! past what the parser asks by more than that) until the parser is done with it.
//!
//! Which model the files make, in order: GGUF files (a split set's every part, found by
//! llama.cpp's naming), else a `model.safetensors.index.json` with its shards, else a
//! `.safetensors` file, else a `config.json` alone. A safetensors model takes a
//! `config.json` offered with it or found beside it. Its label: a GGUF's file name without
//! `.gguf` and the split suffix; otherwise the folder's name when the surface knows it
//! (the CLI does, a dropped file does not), else the file's stem (`model_type` for a
//! `config.json`).

use super::gguf::{self, GgufHeader};
use super::safetensors::{self, SafetensorsHeader, SafetensorsIndex};
use super::split::Placed;
use super::{FileKind, ImportError, Parse};
use crate::model::{HfConfig, Model};
use crate::{WeightFormat, limits};

/// What a surface tells the reader about a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileEntry {
    /// The file's name, without its folder.
    pub name: String,
    /// Its size in bytes, when the surface knows it.
    pub size: Option<u64>,
}

/// What the reader needs next.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Read bytes `start..end` of file `file` (an index into [`ModelReader::files`]) and
    /// [`ModelReader::supply`] them. `end` is never past the file's size.
    Read { file: usize, start: u64, end: u64 },
    /// Look beside the files for one named `name` and say what was found
    /// ([`ModelReader::found`]).
    Find { name: String },
    /// The model, read.
    Done(Box<Model>),
}

/// Why the files make no model: the file it concerns, and what is wrong.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ReadError {
    /// One file: unreadable, malformed, or not a model file.
    #[error("`{file}`: {message}")]
    File { file: String, message: String },
    /// The set as a whole (nothing offered, a part missing).
    #[error("{0}")]
    Set(String),
}

/// A read the reader cannot finish yet, or the failure that ends it.
enum Pending {
    Step(Step),
    Failed(ReadError),
}

type Flow<T> = Result<T, Pending>;

/// A core header parser: a prefix and the file's size in, the header or a longer prefix out.
type HeaderParser<T> = fn(&[u8], Option<u64>) -> Result<Parse<T>, ImportError>;

/// See the module docs.
#[derive(Clone, Debug)]
pub struct ModelReader {
    files: Vec<FileEntry>,
    /// How many of `files` were offered (the rest were found beside them).
    offered: usize,
    /// Each file's bytes from its start, as far as read.
    bytes: Vec<Vec<u8>>,
    /// Names looked for and not found.
    absent: Vec<String>,
    /// The files the model was read from, as they were used.
    used: std::cell::RefCell<Vec<usize>>,
    weights: Option<WeightFormat>,
    folder: Option<String>,
    config: Option<HfConfig>,
    failed: Option<ReadError>,
}

/// A header's first read.
const FIRST_READ: u64 = 64 << 10;

/// The message for a file that is no model file, the same on every surface.
pub fn not_a_model_file(name: &str) -> ReadError {
    ReadError::File {
        file: name.to_owned(),
        message: "not a model file stageplan reads (.gguf, .safetensors, model.safetensors.index.json, config.json)"
            .into(),
    }
}

impl ModelReader {
    /// A reader of the model the `offered` files make. `weights` is the format of a model
    /// from a `config.json` alone (files with tensors state their own); `folder`, the name of
    /// the folder they are in, when known, labels a safetensors or config model.
    ///
    /// # Errors
    /// No file offered.
    pub fn new(
        offered: Vec<FileEntry>,
        weights: Option<WeightFormat>,
        folder: Option<String>,
    ) -> Result<ModelReader, ReadError> {
        if offered.is_empty() {
            return Err(ReadError::Set("no model file was given".into()));
        }
        Ok(ModelReader {
            offered: offered.len(),
            bytes: vec![Vec::new(); offered.len()],
            files: offered,
            absent: Vec::new(),
            used: std::cell::RefCell::new(Vec::new()),
            weights,
            folder,
            config: None,
            failed: None,
        })
    }

    /// Uses `config` as the model's `config.json` (a surface that has it parsed already).
    pub fn with_config(mut self, config: HfConfig) -> ModelReader {
        self.config = Some(config);
        self
    }

    /// Every file known so far: those offered, then those found.
    pub fn files(&self) -> &[FileEntry] {
        &self.files
    }

    /// The files the model was read from (indices into [`ModelReader::files`]), once done.
    pub fn used(&self) -> Vec<usize> {
        self.used.borrow().clone()
    }

    /// Bytes read from the files the model was read from.
    pub fn bytes_read(&self) -> u64 {
        self.used.borrow().iter().map(|&f| self.bytes[f].len() as u64).sum()
    }

    /// The sizes of the files the model was read from, added up.
    pub fn file_bytes(&self) -> u64 {
        self.used.borrow().iter().map(|&f| self.files[f].size.unwrap_or(self.bytes[f].len() as u64)).sum()
    }

    /// Gives the bytes a [`Step::Read`] asked for, from `start`. None at all (the file
    /// ended before its stated size) ends the reading with an error naming the file.
    pub fn supply(&mut self, file: usize, start: u64, bytes: &[u8]) {
        let Some(buffer) = self.bytes.get_mut(file) else { return };
        if start != buffer.len() as u64 {
            return;
        }
        if bytes.is_empty() {
            self.fail(
                file,
                format!("the file ends at byte {start}, before its size; was it changed while being read?"),
            );
            return;
        }
        buffer.extend_from_slice(bytes);
    }

    /// Says a [`Step::Find`] found the file, of `size` bytes when known; returns its index.
    pub fn found(&mut self, name: &str, size: Option<u64>) -> usize {
        self.files.push(FileEntry { name: name.to_owned(), size });
        self.bytes.push(Vec::new());
        self.files.len() - 1
    }

    /// Says a [`Step::Find`] found no such file.
    pub fn missing(&mut self, name: &str) {
        self.absent.push(name.to_owned());
    }

    /// Ends the reading with a failure the surface met performing a step (an I/O error).
    pub fn fail(&mut self, file: usize, message: impl Into<String>) {
        let file = self.files.get(file).map_or_else(String::new, |f| f.name.clone());
        self.failed = Some(ReadError::File { file, message: message.into() });
    }

    /// The next thing to do.
    ///
    /// # Errors
    /// Files that make no model: not a model file, malformed (with the byte offset or the
    /// tensor), a part, shard or size missing.
    pub fn step(&self) -> Result<Step, ReadError> {
        if let Some(failed) = &self.failed {
            return Err(failed.clone());
        }
        self.used.borrow_mut().clear();
        match self.read() {
            Ok(model) => Ok(Step::Done(Box::new(model))),
            Err(Pending::Step(step)) => Ok(step),
            Err(Pending::Failed(e)) => Err(e),
        }
    }

    fn read(&self) -> Flow<Model> {
        let mut kinds = Vec::with_capacity(self.offered);
        for file in 0..self.offered {
            let first = self.prefix(file, 16)?;
            let name = &self.files[file].name;
            kinds.push(super::detect(name, first).ok_or_else(|| Pending::Failed(not_a_model_file(name)))?);
        }
        let offered = |kind: FileKind| (0..self.offered).find(|&f| kinds[f] == kind);
        if let Some(first) = offered(FileKind::Gguf) {
            return self.gguf(first);
        }
        let config = match offered(FileKind::Config) {
            Some(file) => Some(self.config_file(file)?),
            None => None,
        };
        if let Some(index) = offered(FileKind::SafetensorsIndex) {
            let text = self.text(index)?;
            let parsed = safetensors::parse_index(&text).map_err(|e| self.bad(index, &e))?;
            let mut shards = Vec::new();
            for shard in parsed.shards() {
                let file = self.find(shard)?.ok_or_else(|| {
                    Pending::Failed(ReadError::Set(format!(
                        "the index names the shard `{shard}`; give it together with the index"
                    )))
                })?;
                shards.push((shard.to_owned(), self.header(file, safetensors::parse)?));
            }
            return self.safetensors(index, &shards, Some(&parsed), config);
        }
        if let Some(file) = offered(FileKind::Safetensors) {
            let header: SafetensorsHeader = self.header(file, safetensors::parse)?;
            let name = self.files[file].name.clone();
            return self.safetensors(file, &[(name, header)], None, config);
        }
        let (Some(file), Some(config)) = (offered(FileKind::Config), config) else {
            return Err(Pending::Failed(ReadError::Set("no model file among those given".into())));
        };
        let arch = config.transformer().map_err(|e| self.bad(file, &e))?;
        let label = self.folder.clone().unwrap_or_else(|| arch.model_type.clone());
        Ok(Model::from_transformer(&label, arch, self.weights.unwrap_or_default()))
    }

    /// A GGUF file, or every part of the split set `first` belongs to: its header says which
    /// (llama.cpp's rule, [`super::split`]), and the parts are found by their names.
    fn gguf(&self, first: usize) -> Flow<Model> {
        let name = self.files[first].name.clone();
        let header = self.header(first, gguf::parse)?;
        let place = super::split::placed(&name, &header).map_err(|e| self.bad(first, &e))?;
        let Placed::Part { prefix, count, .. } = place else {
            let label = super::split_name(&name).map_or_else(|| stem(&name), |(prefix, _, _)| prefix);
            return super::gguf_model(label, &[header]).map_err(|e| self.bad(first, &e));
        };
        let mut parts = Vec::new();
        for number in 1..=count {
            let part = super::split_part_name(prefix, number, count);
            let file = self.find(&part)?.ok_or_else(|| {
                Pending::Failed(ReadError::Set(format!(
                    "`{name}` is part of a set of {count}; `{part}` is missing: give every part"
                )))
            })?;
            parts.push((file, part));
        }
        let mut headers: Vec<GgufHeader> = Vec::with_capacity(parts.len());
        for (file, part) in parts {
            if file == first {
                headers.push(header.clone());
                continue;
            }
            // Each part by the same rule: its name is the one looked for, so a part its
            // header places elsewhere (another `split.no` or `split.count`) is refused.
            let part_header = self.header(file, gguf::parse)?;
            super::split::placed(&part, &part_header).map_err(|e| self.bad(file, &e))?;
            headers.push(part_header);
        }
        super::gguf_model(prefix, &headers).map_err(|e| self.bad(first, &e))
    }

    fn safetensors(
        &self,
        file: usize,
        shards: &[(String, SafetensorsHeader)],
        index: Option<&SafetensorsIndex>,
        config: Option<HfConfig>,
    ) -> Flow<Model> {
        let config = match (config, &self.config) {
            (Some(config), _) => Some(config),
            (None, Some(given)) => Some(given.clone()),
            (None, None) => match self.find("config.json")? {
                Some(beside) => Some(self.config_file(beside)?),
                None => None,
            },
        };
        let label = self.folder.clone().unwrap_or_else(|| stem(&self.files[file].name).to_owned());
        super::safetensors_model(&label, shards, index, config.as_ref()).map_err(|e| self.bad(file, &e))
    }

    fn config_file(&self, file: usize) -> Flow<HfConfig> {
        let text = self.text(file)?;
        HfConfig::from_json(&text).map_err(|e| self.bad(file, &e))
    }

    /// A file beside the offered ones: its index, `None` when it is not there.
    fn find(&self, name: &str) -> Flow<Option<usize>> {
        if let Some(file) = self.files.iter().position(|f| f.name == name) {
            return Ok(Some(file));
        }
        if self.absent.iter().any(|a| a == name) {
            return Ok(None);
        }
        Err(Pending::Step(Step::Find { name: name.to_owned() }))
    }

    /// The first `len` bytes of a file (all of it when shorter), asking for more as needed.
    fn prefix(&self, file: usize, len: u64) -> Flow<&[u8]> {
        let have = self.bytes[file].len() as u64;
        let want = self.files[file].size.map_or(len, |size| len.min(size));
        if have >= want {
            self.note_used(file);
            return Ok(&self.bytes[file]);
        }
        // At least double what is there, so a header costs a handful of reads.
        let end = want.max(2 * have).max(FIRST_READ.min(want));
        let end = self.files[file].size.map_or(end, |size| end.min(size));
        Err(Pending::Step(Step::Read { file, start: have, end }))
    }

    fn note_used(&self, file: usize) {
        let mut used = self.used.borrow_mut();
        if !used.contains(&file) {
            used.push(file);
        }
    }

    /// A header the parser reads from a growing prefix.
    fn header<T>(&self, file: usize, parse: HeaderParser<T>) -> Flow<T> {
        let size = self.files[file].size;
        let mut want = FIRST_READ;
        loop {
            let bytes = self.prefix(file, want)?;
            match parse(bytes, size).map_err(|e| self.bad(file, &e))? {
                Parse::Done(header) => return Ok(header),
                Parse::NeedMore(needed) => {
                    if needed <= bytes.len() as u64 || size.is_some_and(|s| needed > s) {
                        return Err(self.bad(file, &"the header claims more bytes than the file has"));
                    }
                    want = needed;
                }
            }
        }
    }

    /// A whole JSON file as text.
    fn text(&self, file: usize) -> Flow<String> {
        let size = self.files[file].size.unwrap_or(limits::MAX_TEXT_BYTES + 1);
        if size > limits::MAX_TEXT_BYTES {
            return Err(self
                .bad(file, &format!("longer than {} MiB; that is no config or index", limits::MAX_TEXT_BYTES >> 20)));
        }
        let bytes = self.prefix(file, size)?;
        let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
        String::from_utf8(bytes.to_vec()).map_err(|e| {
            self.bad(file, &format!("not UTF-8 text (invalid byte at offset {})", e.utf8_error().valid_up_to()))
        })
    }

    fn bad(&self, file: usize, message: &dyn std::fmt::Display) -> Pending {
        Pending::Failed(ReadError::File { file: self.files[file].name.clone(), message: message.to_string() })
    }
}

/// A file name up to its first dot.
fn stem(name: &str) -> &str {
    name.split('.').next().unwrap_or(name)
}

#[cfg(test)]
mod tests;
