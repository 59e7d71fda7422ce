//! Model files dropped on the page: only their headers are read, through `File.slice`, in
//! the page's worker (see [`crate::worker`]; the parsers are not in the page's download).
//!
//! The core's model reader says which bytes it needs; each read asks the browser for exactly
//! that range (growing geometrically), so a 40 GB GGUF costs a few megabytes and the rest
//! of the file is never touched. The page reports the bytes read.

use stageplan::import::{FileEntry, ModelReader, Step};
use wasm_bindgen_futures::JsFuture;

use crate::worker::Dropped;

/// Reads bytes `[start, end)` of a file.
async fn slice(file: &web_sys::File, start: u64, end: u64) -> Result<Vec<u8>, String> {
    let blob = file
        .slice_with_f64_and_f64(start as f64, end as f64)
        .map_err(|_| format!("`{}`: the browser refused to read the file", file.name()))?;
    let buffer = JsFuture::from(blob.array_buffer())
        .await
        .map_err(|_| format!("`{}`: the browser could not read the file", file.name()))?;
    Ok(js_sys::Uint8Array::new(&buffer).to_vec())
}

/// A model from files dropped together: a `.gguf` (all parts of a split set), a
/// `.safetensors`, a `model.safetensors.index.json` with its shards, optionally a
/// `config.json`. The core's [`ModelReader`] decides what to read; this performs the reads
/// with `File.slice`, and finds "files beside" among those dropped.
///
/// # Errors
/// A message for the page: what is wrong, in which file.
pub async fn read_model(files: Vec<web_sys::File>) -> Result<Dropped, String> {
    let names: Vec<String> = files.iter().map(web_sys::File::name).collect();
    let offered = files.iter().map(|f| FileEntry { name: f.name(), size: Some(f.size() as u64) }).collect();
    let mut reader = ModelReader::new(offered, None, None).map_err(|e| e.to_string())?;
    // The reader's file indices, mapped to the dropped files.
    let mut handles: Vec<usize> = (0..files.len()).collect();
    loop {
        match reader.step().map_err(|e| e.to_string())? {
            Step::Read { file, start, end } => {
                let bytes = slice(&files[handles[file]], start, end).await?;
                reader.supply(file, start, &bytes);
            }
            Step::Find { name } => match files.iter().position(|f| f.name() == name) {
                Some(dropped) => {
                    reader.found(&name, Some(files[dropped].size() as u64));
                    handles.push(dropped);
                }
                None => reader.missing(&name),
            },
            Step::Done(model) => {
                return Ok(Dropped {
                    model: *model,
                    names,
                    bytes_read: reader.bytes_read(),
                    file_bytes: reader.file_bytes(),
                });
            }
        }
    }
}
