//! One GPU with its system RAM against published llama.cpp runs
//! (`tests/calibration/offload.csv`, a source per row): each run's machine and flags as a
//! manual plan whose stage keeps in RAM what the flags kept, its decode speed predicted at
//! the depth the run measured (`workload.depth`, llama-bench's `-d`; sweep-bench's `N_KV`),
//! and the signed error against what was published, per row, per class of placement and per
//! weight class. `--nocapture` prints the tables BENCHMARKS.md records.
//!
//! The host tier's one fitted term, `HOST_TIER_BANDWIDTH`, minimises the median |error|
//! over these rows (0.685 still does with the rows below), so this is an in-sample check: it
//! holds the rule and the table together. Issue #45 asks for a median |error| ≤ 8%, a 90th
//! percentile ≤ 20% and no class biased by more than 5% at the median; measured when fitted
//! on 24 runs: 8.0%, 20.5%, and −8.0% for q8_0 weights (five runs, all of one machine, a
//! Threadripper PRO whose RAM its owner measured at 225–250 of its 307 GB/s). Three runs the
//! fit never saw came after (an RTX 5080 beside a Ryzen 9 9950X's DDR5-4800, Qwen3.5-35B-A3B
//! from a file): 9.1% off too slow to 17.6% too slow, as the Threadripper's q8_0 runs are —
//! a desktop's or server's RAM read better than the one fraction of its peak gives. With
//! them: 9.1%, 20.5%, q8_0 −14.0%. A quantized cache's rereads per query head then counted
//! at 0.7 of their bytes (`QUANTIZED_KV_REREADS_FROM_MEMORY`, the rest from L2) took the
//! Threadripper's q8_0-cache depths from −14% to −7% and −3%: 7.95%, 20.55%, q8_0 −7.5%
//! (the one class past 5%: the RTX 5080's −17.6% and the Threadripper's f16-cache runs,
//! −8%). The bounds below are those figures, rounded up: a change that makes any of them
//! worse fails.
//!
//! gpt-oss (MXFP4 experts) runs are in the table and out of the figures: its all-GPU run on
//! an RX 7900 XT is 70% slower than planned, so the GPU side, not its RAM, is what is off
//! there (issue #45, what is left).

// A test harness reads its fixtures; the core it tests does not.
#![allow(clippy::disallowed_methods, clippy::print_stderr)]

mod common;

use std::collections::BTreeMap;

use common::split_csv;

const MEDIAN_ERROR: f64 = 0.08;
const P90_ERROR: f64 = 0.21;
const CLASS_BIAS: f64 = 0.055;
/// Classes whose bias is known and past [`CLASS_BIAS`], with theirs (see the module doc).
const KNOWN_BIAS: &[(&str, f64)] = &[("weights q8_0", 0.076)];

/// A published run, predicted.
struct Row {
    class: &'static str,
    weights: String,
    /// predicted ÷ published − 1.
    error: f64,
}

/// Weights whose GPU speed the cost model does not yet hold (see the module doc).
const OUTSIDE_THE_FIGURES: &[&str] = &["mxfp4_moe"];

#[test]
fn gpu_with_ram_predictions_hold_against_published_runs() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/calibration/offload.csv");
    let text = std::fs::read_to_string(path).expect("the published offload runs");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("column {name}"));
    let mut rows = Vec::new();
    let mut table = String::from(
        "| model | flags | machine | depth | published tok/s | predicted | error |\n|---|---|---|---|---|---|---|\n",
    );
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let fields = split_csv(line);
        assert_eq!(fields.len(), header.len(), "{line}");
        let get = |name: &str| fields[column(name)].as_str();
        // A preset, or `file:NAME`: a model only a file describes (a hybrid of gated delta-net
        // and attention layers), planned from the header in `tests/calibration/models/`.
        let (model, file) = match get("model").strip_prefix("file:") {
            Some(name) => {
                let model = header_model(name);
                (format!(r#"{{"file": "{name}.gguf"}}"#), Some(model))
            }
            None => (format!(r#"{{"preset": "{}", "weights": "{}"}}"#, get("model"), get("weights")), None),
        };
        let layers = match &file {
            Some(model) => model.num_layers() as u64,
            None => {
                stageplan::presets::ModelPreset::find(get("model")).unwrap().config().transformer().unwrap().num_layers
            }
        };
        let scenario = format!(
            r#"{{"model": {}, "workload": {{"context": {}, "depth": {}, "kv": "{}"}}, "policy": "manual",
                "nodes": [{{"name": "pc", "kind": "gpu", "backend": "{}", "memory": "{} GiB", "bandwidth": "{} GB/s", "compute": "{} TFLOPS",
                            "host": {{"memory": "{} GiB", "bandwidth": "{} GB/s", "threads": {}, "link": "{} GB/s"}}}}],
                "stages": [{{"node": "pc", "layers": [0, {layers}], "offload": {{"host_layers": {}, "host_ffn": {}}}}}]}}"#,
            model,
            get("context"),
            get("depth"),
            get("kv"),
            get("backend"),
            get("gpu_memory_gib"),
            get("gpu_bandwidth_gb_s"),
            get("gpu_tflops"),
            get("ram_gib"),
            get("ram_bandwidth_gb_s"),
            get("threads"),
            get("link_gb_s"),
            get("host_layers"),
            get("host_ffn"),
        );
        let files = |field, name: &str| match &file {
            Some(model) => Ok(model.clone()),
            None => stageplan::check::no_model_files(field, name),
        };
        let problem = stageplan::check(scenario.as_str(), files).unwrap_or_else(|e| panic!("{line}: {e}")).problem;
        let plan = stageplan::plan(&problem);
        assert!(plan.feasible, "{line}: the published placement fits the plan's memory");
        let predicted = plan.at_depth.as_ref().expect("a feasible plan's speed at its depth").stream_tokens_per_s;
        let published: f64 = get("decode_tok_s").parse().unwrap();
        let error = predicted / published - 1.0;
        let class = match (get("host_layers"), get("host_ffn")) {
            (_, ffn) if ffn != "0" => "experts in RAM",
            (layers, _) if layers != "0" => "layers in RAM",
            _ => "all on the GPU (a reference)",
        };
        rows.push(Row { class, weights: get("weights").to_owned(), error });
        table.push_str(&format!(
            "| {} {} | `{}` | {} + {} ({}) | {} | {published} | {predicted:.2} | {:+.1}% |\n",
            get("model"),
            get("weights"),
            get("flags"),
            get("gpu"),
            get("ram"),
            get("backend"),
            get("depth"),
            error * 100.0
        ));
    }

    let counted: Vec<&Row> = rows.iter().filter(|r| !OUTSIDE_THE_FIGURES.contains(&r.weights.as_str())).collect();
    let mut absolute: Vec<f64> = counted.iter().map(|r| r.error.abs()).collect();
    absolute.sort_by(f64::total_cmp);
    let median = quantile(&absolute, 0.5);
    let p90 = quantile(&absolute, 0.9);
    let mut classes: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for row in &counted {
        classes.entry(row.class.to_owned()).or_default().push(row.error);
        classes.entry(format!("weights {}", row.weights)).or_default().push(row.error);
    }
    table.push_str("\n| class | runs | median signed error | least | most |\n|---|---|---|---|---|\n");
    let mut biased = Vec::new();
    for (class, errors) in &mut classes {
        errors.sort_by(f64::total_cmp);
        let bias = quantile(errors, 0.5);
        table.push_str(&format!(
            "| {class} | {} | {:+.1}% | {:+.1}% | {:+.1}% |\n",
            errors.len(),
            bias * 100.0,
            errors[0] * 100.0,
            errors[errors.len() - 1] * 100.0
        ));
        // A class of one or two runs says little about bias; its rows still count above.
        let bound = KNOWN_BIAS.iter().find(|(c, _)| c == class).map_or(CLASS_BIAS, |&(_, b)| b);
        if errors.len() >= 3 && bias.abs() > bound {
            biased.push(format!("{class} {:+.1}%", bias * 100.0));
        }
    }
    eprintln!(
        "{table}\nmedian |error| {:.2}%, 90th percentile {:.2}% over {} runs ({} more in the table, outside the figures)",
        median * 100.0,
        p90 * 100.0,
        counted.len(),
        rows.len() - counted.len()
    );
    assert!(median <= MEDIAN_ERROR, "median |error| {median}");
    assert!(p90 <= P90_ERROR, "90th percentile |error| {p90}");
    assert!(biased.is_empty(), "biased classes: {biased:?}");
}

/// The `q` quantile of sorted values, by the nearest rank.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The model of a header in `tests/calibration/models/` (`write_headers.py`: the shape, each
/// tensor's type as llama.cpp's `llama-quantize --dry-run` gives it, no data).
fn header_model(name: &str) -> stageplan::Model {
    let path = format!("{}/../../tests/calibration/models/{name}.gguf", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let stageplan::import::Parse::Done(header) = stageplan::import::gguf::parse(&bytes, None).unwrap() else {
        panic!("{path}: the whole header is in the file");
    };
    stageplan::import::gguf_model(name, &[header]).unwrap()
}
