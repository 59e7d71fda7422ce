//! `stageplan model`: a preset's or a model file's parameters, bytes per layer and type mix.

use std::path::Path;

use stageplan::WeightFormat;
use stageplan::presets::ModelPreset;

use crate::cli::Format;
use crate::outcome::{Failure, Outcome};
use crate::{input, load, render};

/// Summarizes the preset or file `name` (only a file's headers are read, and said so).
/// K's cache format is `kv.0`, V's `kv.1` where it differs.
pub(super) fn model(
    name: &str,
    weights: Option<&str>,
    (kv, kv_v): (&str, Option<&str>),
    format: Format,
) -> Result<Outcome, Failure> {
    let weights: Option<WeightFormat> = weights.map(str::parse).transpose()?;
    let kv = stageplan::tensor_type::kv_format(kv).map_err(|e| Failure(format!("`--kv` {e}")))?;
    let kv_v = match kv_v {
        Some(v) => stageplan::tensor_type::kv_format(v).map_err(|e| Failure(format!("`--kv-v` {e}")))?,
        None => kv,
    };
    let (model, reads) = match ModelPreset::find(name) {
        Ok(preset) => (preset.model(weights.unwrap_or_default())?, None),
        Err(not_a_preset) => {
            let path = Path::new(name);
            match input::probe(path) {
                None => {
                    return Err(Failure(format!("`{name}` is neither a file nor a model preset: {not_a_preset}")));
                }
                Some(meta) => {
                    meta?;
                }
            }
            let loaded = load::model_file(path, weights)?;
            (loaded.model, Some(loaded.reads))
        }
    };
    model.cache_formats(kv, kv_v).map_err(|e| Failure(format!("`--kv-v` {e}")))?;
    let summary = model.summary(kv, kv_v);
    let stdout = match format {
        Format::Json => {
            let mut value = serde_json::to_value(&summary)?;
            if let (Some(reads), Some(object)) = (&reads, value.as_object_mut()) {
                object.insert(
                    "read".to_owned(),
                    serde_json::json!({
                        "files": reads.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
                        "bytes_read": reads.bytes_read,
                        "file_bytes": reads.file_bytes,
                    }),
                );
            }
            serde_json::to_string_pretty(&value)? + "\n"
        }
        Format::Table => {
            let mut text = render::model::summary(&summary);
            if let Some(reads) = &reads {
                text.push_str(&render::model::reads(reads.files.len(), reads.bytes_read, reads.file_bytes));
            }
            text
        }
    };
    Ok(Outcome::ok(stdout))
}
