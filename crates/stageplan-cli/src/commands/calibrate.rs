//! `stageplan calibrate`: the node that predicts a machine's llama-bench decode tests.

use std::path::Path;

use stageplan::fit::bench;
use stageplan::presets::ModelPreset;

use crate::cli::Format;
use crate::outcome::{Failure, Outcome};
use crate::{input, render};

/// Fits the machine's node, given by a device preset or its peak figures and memory, to the
/// llama-bench results at `results`.
pub(super) fn calibrate(
    results: &Path,
    device: Option<String>,
    bandwidth: Option<String>,
    compute: Option<String>,
    memory: Option<String>,
    model: Option<&str>,
    format: Format,
) -> Result<Outcome, Failure> {
    let mut node = match (device, bandwidth, compute) {
        (Some(device), None, None) => serde_json::json!({ "device": device }),
        // The printed node is pasted into a scenario, which needs the machine's memory: a
        // preset has it; figures need it given, rather than a made-up placeholder.
        (None, Some(_), Some(_)) if memory.is_none() => {
            return Err(Failure(
                "give the machine's memory too: `--memory` (e.g. `24GiB`), for a node a scenario accepts".to_owned(),
            ));
        }
        (None, Some(bandwidth), Some(compute)) => serde_json::json!({ "bandwidth": bandwidth, "compute": compute }),
        _ => {
            return Err(Failure(
                "give the machine's peak figures: `--device PRESET`, or `--bandwidth` and `--compute`".to_owned(),
            ));
        }
    };
    if let Some(memory) = memory {
        node["memory"] = memory.into();
    }
    let model = model.map(ModelPreset::find).transpose()?;
    let tests = bench::parse(&input::read_text(results)?)
        .map_err(|e| Failure(format!("{}: {e}", stageplan::quote::line(&results.display().to_string()))))?;
    let fit = bench::fit_node(&tests, &node, model).map_err(Failure)?;
    let mut ready = node.clone();
    ready["name"] = "this-machine".into();
    if let (Some(ready), serde_json::Value::Object(fields)) = (ready.as_object_mut(), fit.fields(&node)) {
        ready.extend(fields);
    }
    let stdout = match format {
        Format::Json => {
            let tests: Vec<serde_json::Value> = fit
                .tests
                .iter()
                .map(|t| {
                    serde_json::json!({"model": t.model, "weights": t.weights, "measured_tokens_per_s": t.measured,
                        "fitted_tokens_per_s": t.fitted, "node_tokens_per_s": t.with_node})
                })
                .collect();
            let left_out: Vec<serde_json::Value> = fit
                .left_out
                .iter()
                .map(|(backend, n)| serde_json::json!({"backend": backend.name(), "decode_tests": n}))
                .collect();
            format!("{:#}\n", serde_json::json!({ "node": ready, "tests": tests, "left_out": left_out }))
        }
        Format::Table => render::calibrate::fit(&fit, &ready),
    };
    // Tests on another backend than the node's (`n_gpu_layers` 0 rows on a GPU): how many, and why.
    let stderr = fit.notes().iter().map(|n| format!("note: {}\n", stageplan::quote::line(n))).collect();
    Ok(Outcome { stderr, ..Outcome::ok(stageplan::quote::terminal(&stdout).into_owned()) })
}
