//! `stageplan presets`: model presets, device presets and weight formats.

use crate::cli::Format;
use crate::outcome::{Failure, Outcome};
use crate::render;

pub(super) fn presets(format: Format) -> Result<Outcome, Failure> {
    let stdout = match format {
        Format::Json => {
            let catalog = serde_json::to_value(stageplan::presets::catalog()).unwrap_or_default();
            serde_json::to_string_pretty(&catalog)? + "\n"
        }
        Format::Table => render::model::presets(),
    };
    Ok(Outcome::ok(stdout))
}
