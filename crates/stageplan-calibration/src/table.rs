//! The calibration table (`tests/calibration/`) as samples: each decode row becomes the
//! problem it describes — its model and weight format, `device_count` alike devices at
//! their spec-sheet peaks (`devices.csv`), split evenly as llama.cpp splits alike GPUs, one
//! sequence — built from the core's types and planned by the cost model at peaks. The files
//! are read by the caller and passed in as text.

use stageplan::calibration::WeightClass;
use stageplan::device::Backend;
use stageplan::device::Efficiency;
use stageplan::limits::{MAX_CONTEXT, MAX_NODES};
use stageplan::model::{HfConfig, Model, WeightFormat};
use stageplan::presets::ModelPreset;
use stageplan::problem::{DEFAULT_PROMPT, Link, Links, Node, Problem, Workload};
use stageplan::scenario::{Objective, Policy};

use crate::fit::{Sample, Stage};

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
/// launch per op per token: their own per-layer term ([`Terms::pre_graphs_per_layer_s`]).
///
/// [`Terms::pre_graphs_per_layer_s`]: crate::fit::Terms::pre_graphs_per_layer_s
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
    if !(bandwidth.is_finite() && bandwidth > 0.0 && tflops.is_finite() && tflops > 0.0) {
        return Err(format!("peaks of {bandwidth} GB/s and {tflops} TFLOPS; give positive figures"));
    }
    let model = models.iter().find(|m| m.get("model") == row.get("model")).ok_or("model not in models.csv")?;
    let weights: WeightFormat =
        row.get("weights").to_ascii_lowercase().parse().map_err(|e: stageplan::ModelError| e.to_string())?;
    let model = match model.get("config").strip_prefix("preset:") {
        Some(preset) => ModelPreset::find(preset).and_then(|p| p.model(weights)).map_err(|e| e.to_string())?,
        None => {
            let text = configs.iter().find(|(name, _)| *name == model.get("config")).ok_or("config file missing")?.1;
            let arch = HfConfig::from_json(text).and_then(|c| c.transformer()).map_err(|e| e.to_string())?;
            let name = arch.model_type.clone();
            Model::from_transformer(&name, arch, weights)
        }
    };
    let count: usize = row.get("device_count").parse().map_err(|_| "bad device_count")?;
    if !(1..=MAX_NODES).contains(&count) {
        return Err(format!("device_count is {count}; give 1 to {MAX_NODES}"));
    }
    let context: u64 = row.get("context").parse::<u64>().unwrap_or(128).max(1);
    if context > MAX_CONTEXT {
        return Err(format!("context is {context}; give at most {MAX_CONTEXT}"));
    }
    let threads: Option<f64> = row.get("threads").parse().ok().filter(|_| row.get("backend") == "CPU");
    let plan = stageplan::plan(&peak_problem(model, count, bandwidth, tflops, context));
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

/// The problem a row describes: `count` alike devices with 4 TiB each and nothing reserved,
/// at `bandwidth_gb_s` and `tflops` with no calibration applied (`backend: peak`), on 1 TB/s
/// links without latency; one sequence of `context` tokens, layers split evenly, latency
/// the objective.
fn peak_problem(model: Model, count: usize, bandwidth_gb_s: f64, tflops: f64, context: u64) -> Problem {
    let nodes: Vec<Node> = (0..count)
        .map(|i| Node {
            name: format!("d{i}"),
            device: None,
            kind: None,
            memory: 4 << 40,
            bandwidth: bandwidth_gb_s * 1e9,
            compute: tflops * 1e12,
            reserve: 0,
            efficiency: Efficiency::default(),
            backend: Backend::Peak,
            threads: None,
            probe: None,
            host: None,
            gpu_of: None,
        })
        .collect();
    Problem {
        model,
        workload: Workload { context, batch: 1, prompt: DEFAULT_PROMPT.min(context), ..Workload::default() },
        links: Links::uniform(nodes.len(), Link { bandwidth: 1e12, latency: 0.0 }),
        nodes,
        objective: Objective::Latency,
        policy: Policy::Even,
        manual: None,
        fixed_offloads: Vec::new(),
        file: None,
        riders: Default::default(),
        notes: Vec::new(),
        serving: None,
    }
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
