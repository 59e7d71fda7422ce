//! Model files dropped on the page: only their headers are read, through `File.slice`.
//!
//! The core parsers say how many bytes they need; each read asks the browser for exactly
//! that range (growing geometrically), so a 40 GB GGUF costs a few megabytes and the rest
//! of the file is never touched. The page reports the bytes read.

use stageplan::Model;
use stageplan::import::{self, FileKind, ImportError, Parse, gguf, safetensors};
use stageplan::model::HfConfig;
use wasm_bindgen_futures::JsFuture;

/// A model read from dropped files, and what it cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Dropped {
    pub model: Model,
    /// The files' names, in order.
    pub names: Vec<String>,
    pub bytes_read: u64,
    pub file_bytes: u64,
}

/// Reads bytes `[start, end)` of a file.
async fn slice(file: &web_sys::File, start: u64, end: u64) -> Result<Vec<u8>, String> {
    let blob = file
        .slice_with_f64_and_f64(start as f64, end as f64)
        .map_err(|_| "the browser refused to read the file".to_owned())?;
    let buffer =
        JsFuture::from(blob.array_buffer()).await.map_err(|_| "the browser could not read the file".to_owned())?;
    Ok(js_sys::Uint8Array::new(&buffer).to_vec())
}

/// Reads a header from the start of `file` as the parser asks, doubling each read.
async fn header<T>(
    file: &web_sys::File,
    parse: impl Fn(&[u8], Option<u64>) -> Result<Parse<T>, ImportError>,
    read: &mut u64,
) -> Result<T, String> {
    let len = file.size() as u64;
    let mut buffer: Vec<u8> = Vec::new();
    let mut want = (64u64 << 10).min(len);
    loop {
        let have = buffer.len() as u64;
        if want > have {
            buffer.extend(slice(file, have, want).await?);
        }
        match parse(&buffer, Some(len)).map_err(|e| format!("`{}`: {e}", file.name()))? {
            Parse::Done(header) => {
                *read += buffer.len() as u64;
                return Ok(header);
            }
            Parse::NeedMore(needed) if needed > buffer.len() as u64 && needed <= len => {
                want = needed.max(2 * buffer.len() as u64).min(len);
            }
            Parse::NeedMore(_) => {
                return Err(format!("`{}`: the header claims more bytes than the file has", file.name()));
            }
        }
    }
}

/// A model from files dropped together: a `.gguf` (all parts of a split set), a
/// `.safetensors`, a `model.safetensors.index.json` with its shards, optionally a
/// `config.json`.
///
/// # Errors
/// A message for the page: what is wrong, in which file.
pub async fn read_model(files: Vec<web_sys::File>) -> Result<Dropped, String> {
    if files.is_empty() {
        return Err("no file was dropped".into());
    }
    let mut kinds = Vec::new();
    for file in &files {
        let first = slice(file, 0, 16.min(file.size() as u64)).await?;
        let kind = import::detect(&file.name(), &first).ok_or_else(|| {
            format!(
                "`{}` is not a model file (.gguf, .safetensors, model.safetensors.index.json, config.json)",
                file.name()
            )
        })?;
        kinds.push(kind);
    }
    let mut read = 0u64;
    let file_bytes: u64 = files.iter().map(|f| f.size() as u64).sum();
    let names: Vec<String> = files.iter().map(web_sys::File::name).collect();
    let find = |kind: FileKind| files.iter().zip(&kinds).filter(move |(_, k)| **k == kind).map(|(f, _)| f);
    let config = match find(FileKind::Config).next() {
        Some(file) => {
            let text = JsFuture::from(file.text()).await.ok().and_then(|v| v.as_string()).unwrap_or_default();
            read += text.len() as u64;
            Some(HfConfig::from_json(&text).map_err(|e| format!("`{}`: {e}", file.name()))?)
        }
        None => None,
    };
    let ggufs: Vec<&web_sys::File> = find(FileKind::Gguf).collect();
    let model = if !ggufs.is_empty() {
        let mut headers = Vec::new();
        for file in &ggufs {
            headers.push(header(file, gguf::parse, &mut read).await?);
        }
        let label =
            import::split_name(&ggufs[0].name()).map_or_else(|| stem(&ggufs[0].name()), |(p, _, _)| p.to_owned());
        import::gguf_model(&label, &headers).map_err(|e| e.to_string())?
    } else if let Some(index_file) = find(FileKind::SafetensorsIndex).next() {
        let text = JsFuture::from(index_file.text()).await.ok().and_then(|v| v.as_string()).unwrap_or_default();
        read += text.len() as u64;
        let index = safetensors::parse_index(&text).map_err(|e| format!("`{}`: {e}", index_file.name()))?;
        let mut shards = Vec::new();
        for shard in index.shards() {
            let file = find(FileKind::Safetensors)
                .find(|f| f.name() == shard)
                .ok_or_else(|| format!("drop the shard `{shard}` together with the index"))?;
            shards.push((shard.to_owned(), header(file, safetensors::parse, &mut read).await?));
        }
        import::safetensors_model("safetensors", &shards, Some(&index), config.as_ref()).map_err(|e| e.to_string())?
    } else if let Some(file) = find(FileKind::Safetensors).next() {
        let h = header(file, safetensors::parse, &mut read).await?;
        import::safetensors_model(&stem(&file.name()), &[(file.name(), h)], None, config.as_ref())
            .map_err(|e| e.to_string())?
    } else if let Some(config) = config {
        let arch = config.transformer().map_err(|e| e.to_string())?;
        Model::from_transformer(&arch.model_type.clone(), arch, stageplan::WeightFormat::default())
    } else {
        return Err("no model file among those dropped".into());
    };
    Ok(Dropped { model, names, bytes_read: read, file_bytes })
}

fn stem(name: &str) -> String {
    name.split('.').next().unwrap_or(name).to_owned()
}
