//! The calibration table (`tests/calibration/`) as samples: each decode row becomes the
//! scenario it describes — its model and weight format, `device_count` alike devices at
//! their spec-sheet peaks (`devices.csv`), split evenly as llama.cpp splits alike GPUs, one
//! sequence — planned by the cost model at peaks. The files are read by the caller (the core
//! does no I/O) and passed in as text.

use super::fit::{Sample, Stage};
use super::{Backend, WeightClass};
use crate::scenario::Scenario;

/// The files of the table, as text: `measurements.csv`, `devices.csv`, `models.csv`, and
/// the model configs `models.csv` names, by file name.
#[derive(Copy, Clone, Debug)]
pub struct TableFiles<'a> {
    pub measurements: &'a str,
    pub devices: &'a str,
    pub models: &'a str,
    pub configs: &'a [(&'a str, &'a str)],
}

/// The month from which llama.cpp's CUDA backend ran each decode step as one CUDA graph
/// (PR #6766; issue #6763 and the PR measured master without them on 2024-04-19, and PR
/// #7302 measured master with them on 2024-05-15). CUDA rows dated earlier paid a kernel
/// launch per op per token: their own per-layer term ([`super::fit::Terms::pre_graphs_per_layer_s`]).
pub const CUDA_GRAPHS: &str = "2024-05";

/// Decode rows as samples, and the rows left out with why.
pub fn decode_samples(files: &TableFiles) -> Result<(Vec<Sample>, Vec<String>), String> {
    let devices = records(files.devices)?;
    let models = records(files.models)?;
    let mut samples = Vec::new();
    let mut skipped = Vec::new();
    for row in records(files.measurements)? {
        if row.get("metric") != "decode_tok_s" {
            continue;
        }
        let what = format!("{} · {} {}", row.get("device"), row.get("model"), row.get("weights"));
        match sample(&row, &devices, &models, files.configs) {
            Ok(s) => samples.push(s),
            Err(why) => skipped.push(format!("{what}: {why}")),
        }
    }
    Ok((samples, skipped))
}

fn sample(row: &Record, devices: &[Record], models: &[Record], configs: &[(&str, &str)]) -> Result<Sample, String> {
    let device = devices.iter().find(|d| d.get("device") == row.get("device")).ok_or("device not in devices.csv")?;
    let bandwidth: f64 = device.get("peak_bandwidth_gb_s").parse().map_err(|_| "no peak bandwidth")?;
    // No published compute peak: decode at one sequence is bound by bandwidth anyway.
    let tflops: f64 = device.get("peak_fp16_tflops").parse().unwrap_or(1e6);
    let model = models.iter().find(|m| m.get("model") == row.get("model")).ok_or("model not in models.csv")?;
    let mut spec = match model.get("config").strip_prefix("preset:") {
        Some(preset) => serde_json::json!({"preset": preset}),
        None => {
            let text = configs.iter().find(|(name, _)| *name == model.get("config")).ok_or("config file missing")?.1;
            serde_json::json!({"config": serde_json::from_str::<serde_json::Value>(text).map_err(|e| e.to_string())?})
        }
    };
    spec["weights"] = row.get("weights").to_ascii_lowercase().into();
    let count: usize = row.get("device_count").parse().map_err(|_| "bad device_count")?;
    let context: u64 = row.get("context").parse().unwrap_or(128);
    let nodes: Vec<serde_json::Value> = (0..count)
        .map(|i| {
            serde_json::json!({"name": format!("d{i}"), "memory": "4 TiB", "reserve": 0, "backend": "peak",
                "bandwidth": format!("{bandwidth} GB/s"), "compute": format!("{tflops} TFLOPS")})
        })
        .collect();
    let threads: Option<f64> = row.get("threads").parse().ok().filter(|_| row.get("backend") == "CPU");
    let scenario = serde_json::json!({
        "model": spec, "workload": {"context": context.max(1), "batch": 1}, "nodes": nodes,
        "links": {"default": {"bandwidth": "1 TB/s", "latency": "0 s"}},
        "policy": "even", "objective": "latency",
    });
    let problem =
        Scenario::from_json(&scenario.to_string()).map_err(|e| e.to_string())?.problem().map_err(|e| e.to_string())?;
    let plan = crate::plan(&problem);
    if !plan.feasible {
        return Err("does not fit 4 TiB".into());
    }
    let backend = match row.get("backend") {
        "CUDA" => Backend::Cuda,
        "Metal" => Backend::Metal,
        "ROCm" => Backend::Rocm,
        "Vulkan" => Backend::Vulkan,
        "CPU" => Backend::Cpu,
        other => return Err(format!("backend `{other}` has no fitted terms")),
    };
    let measured: f64 = row.get("value").parse().map_err(|_| "bad value")?;
    // ISO dates compare as text; a row without a date is taken to be recent.
    let date = row.get("date");
    let before_cuda_graphs = backend == Backend::Cuda && !date.is_empty() && date < CUDA_GRAPHS;
    Ok(Sample {
        backend,
        weights: WeightClass::of(row.get("weights")),
        bandwidth: bandwidth * 1e9,
        threads,
        before_cuda_graphs,
        stages: plan.stages.iter().map(Stage::from).collect(),
        measured_s: 1.0 / measured,
        source: row.get("source").split(" (").next().unwrap_or_default().to_owned(),
        label: format!(
            "{}×{} · {} {} · {} t",
            count,
            row.get("device"),
            row.get("model"),
            row.get("weights"),
            row.get("threads")
        ),
    })
}

/// A CSV row by column name.
#[derive(Clone, Debug)]
pub struct Record {
    columns: std::rc::Rc<Vec<String>>,
    values: Vec<String>,
}

impl Record {
    /// The value in `column`, or "" when the row or the file has none.
    pub fn get(&self, column: &str) -> &str {
        self.columns.iter().position(|c| c == column).and_then(|i| self.values.get(i)).map_or("", String::as_str)
    }
}

/// The rows of a CSV text with a header line (RFC 4180 quoting).
pub fn records(text: &str) -> Result<Vec<Record>, String> {
    let mut lines = parse_csv(text).into_iter();
    let columns = std::rc::Rc::new(lines.next().ok_or("empty CSV")?);
    Ok(lines
        .filter(|v| v.iter().any(|f| !f.is_empty()))
        .map(|values| Record { columns: columns.clone(), values })
        .collect())
}

fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, '\r') => {}
            (false, c) => field.push(c),
        }
    }
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    rows
}
