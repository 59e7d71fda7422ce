//! Partial offload against published llama.cpp runs (`tests/calibration/offload.csv`): each
//! run's machine and flags as a manual plan whose stage keeps in RAM what the flags kept,
//! its decode speed predicted, and the error against what was published. `--nocapture`
//! prints the table BENCHMARKS.md records.
//!
//! The host tier's one fitted term, `HOST_TIER_BANDWIDTH`, is the median over these rows,
//! so this is an in-sample check: it holds the rule and the table together. The bounds are
//! the errors measured when it was fitted, rounded up.

// A test harness reads its fixtures; the core it tests does not.
#![allow(clippy::disallowed_methods, clippy::print_stderr)]

/// Median and worst |predicted ÷ published − 1| allowed.
const MEDIAN_ERROR: f64 = 0.10;
const WORST_ERROR: f64 = 0.20;

#[test]
fn partial_offload_predictions_hold_against_published_runs() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/calibration/offload.csv");
    let text = std::fs::read_to_string(path).expect("the published offload runs");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("column {name}"));
    let mut errors = Vec::new();
    let mut table = String::from("| model | flags | machine | published tok/s | predicted | error |\n");
    for line in lines.filter(|l| !l.trim().is_empty()) {
        // The notes, last, may hold commas; the other fields do not.
        let fields: Vec<&str> = line.splitn(header.len(), ',').collect();
        let get = |name: &str| fields[column(name)];
        let preset = stageplan::presets::ModelPreset::find(get("model")).unwrap();
        let layers = preset.config().num_hidden_layers.unwrap();
        let scenario = format!(
            r#"{{"model": {{"preset": "{}", "weights": "{}"}}, "workload": {{"context": {}}}, "policy": "manual",
                "nodes": [{{"name": "pc", "kind": "gpu", "backend": "cuda", "memory": "{} GiB", "bandwidth": "{} GB/s", "compute": "{} TFLOPS",
                            "host": {{"memory": "64 GiB", "bandwidth": "{} GB/s", "threads": {}, "link": "{} GB/s"}}}}],
                "stages": [{{"node": "pc", "layers": [0, {layers}], "offload": {{"host_layers": {}, "host_ffn": {}}}}}]}}"#,
            get("model"),
            get("weights"),
            get("context"),
            get("gpu_memory_gib"),
            get("gpu_bandwidth_gb_s"),
            get("gpu_tflops"),
            get("ram_bandwidth_gb_s"),
            get("threads"),
            get("link_gb_s"),
            get("host_layers"),
            get("host_ffn"),
        );
        let problem = stageplan::check(scenario.as_str(), stageplan::check::no_model_files).unwrap().problem;
        let plan = stageplan::plan(&problem);
        assert!(plan.feasible, "{line}: the published placement fits the plan's memory");
        let published: f64 = get("decode_tok_s").parse().unwrap();
        let error = plan.stream_tokens_per_s / published - 1.0;
        errors.push(error.abs());
        table.push_str(&format!(
            "| {} {} | `{}` | {} + {} | {published} | {:.2} | {:+.1}% |\n",
            get("model"),
            get("weights"),
            get("flags"),
            get("gpu"),
            get("ram"),
            plan.stream_tokens_per_s,
            error * 100.0
        ));
    }
    errors.sort_by(f64::total_cmp);
    let median = errors[errors.len() / 2];
    let worst = errors[errors.len() - 1];
    eprintln!("{table}median {:.1}%, worst {:.1}% over {} runs", median * 100.0, worst * 100.0, errors.len());
    assert!(median <= MEDIAN_ERROR, "median error {median}");
    assert!(worst <= WORST_ERROR, "worst error {worst}");
}
