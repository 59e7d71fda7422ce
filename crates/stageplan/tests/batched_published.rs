//! Several sequences decoded together against published llama.cpp runs
//! (`tests/calibration/batched.csv`, a source per row): llama-batched-bench's aggregate decode
//! speed (`S_TG`) of B sequences, each after its own prompt of PP tokens (`-pps` off), on one
//! device, predicted as a plan of `batch` B at the depth the run decoded at (`workload.depth`
//! PP, `response` TG, so the step reads `PP + TG ÷ 2` tokens of each sequence's cache) — the
//! step of many that `stageplan plan --users` and its capacity search run on (issue #47,
//! item 2). `--nocapture` prints the table BENCHMARKS.md records.
//!
//! Issue #47 asks for a median |error| ≤ 15% on published concurrency measurements. With a
//! step's further sequences priced at a quarter of the device's compute, added to the first
//! sequence's roofline (`cost::node::BATCHED_PRODUCTS`): 11.9% at the median, 27.6% at the
//! 90th percentile over 72 runs of Qwen2.5 7B and Qwen3 30B-A3B in Q8_0 (+3.7% at B = 1,
//! +6.4% at 2–4, +1.9% at 8–16, −17.8% at 32, where llama.cpp's kernels for many columns
//! take over). Under the plain roofline, which priced them at the device's peak under the
//! weights' read, it was 22.1% and 105%. The bounds are the measured figures, rounded up: a
//! change that makes them worse fails. gpt-oss's MXFP4 rows are in the table and out of the
//! figures (its GPU side is issue #45's open gap); models without a preset are left out.

// A test harness reads its fixtures; the core it tests does not.
#![allow(clippy::disallowed_methods, clippy::print_stderr)]

mod common;

use std::collections::BTreeMap;

use common::split_csv;

use stageplan::calibration::quantile;

const MEDIAN_ERROR: f64 = 0.12;
const P90_ERROR: f64 = 0.28;

/// The presets of the devices the sources name.
const DEVICES: &[(&str, &str)] = &[("NVIDIA GB10 (DGX Spark)", "dgx-spark"), ("Apple M2 Ultra", "m2-ultra-192gb")];

/// Weights whose GPU speed the cost model does not yet hold.
const OUTSIDE_THE_FIGURES: &[&str] = &["MXFP4"];

#[test]
fn several_sequences_at_once_hold_against_published_runs() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/calibration/batched.csv");
    let text = std::fs::read_to_string(path).expect("the published batched runs");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("column {name}"));
    let mut table = String::from(
        "| device | model | PP | B | published S_TG tok/s | predicted | error |\n|---|---|---|---|---|---|---|\n",
    );
    let mut errors: Vec<(String, u64, f64)> = Vec::new();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let fields = split_csv(line);
        assert_eq!(fields.len(), header.len(), "{line}");
        let get = |name: &str| fields[column(name)].as_str();
        let (Some(&(_, device)), Some(_)) = (
            DEVICES.iter().find(|(d, _)| *d == get("device")),
            stageplan::presets::ModelPreset::find(get("model")).ok(),
        ) else {
            continue;
        };
        let (pp, tg, b): (u64, u64, u64) =
            (get("pp").parse().unwrap(), get("tg").parse().unwrap(), get("b").parse().unwrap());
        let scenario = format!(
            r#"{{"model": {{"preset": "{}", "weights": "{}"}},
                "workload": {{"context": {}, "batch": {b}, "depth": {pp}, "response": {tg}, "flash_attention": {}}},
                "nodes": [{{"name": "box", "device": "{device}"}}]}}"#,
            get("model"),
            get("weights").to_lowercase(),
            pp + tg,
            get("flash_attention") == "on",
        );
        let problem = stageplan::check(scenario.as_str(), stageplan::check::no_model_files)
            .unwrap_or_else(|e| panic!("{line}: {e}"))
            .problem;
        let plan = stageplan::plan(&problem);
        assert!(plan.feasible, "{line}: the published run fits the plan's memory");
        let predicted = plan.at_depth.as_ref().expect("a feasible plan's speed at its depth").tokens_per_s;
        let published: f64 = get("s_tg_tok_s").parse().unwrap();
        let error = predicted / published - 1.0;
        table.push_str(&format!(
            "| {} | {} {} | {pp} | {b} | {published} | {predicted:.1} | {:+.1}% |\n",
            get("device"),
            get("model"),
            get("weights"),
            error * 100.0
        ));
        if !OUTSIDE_THE_FIGURES.contains(&get("weights")) {
            errors.push((format!("{} {}", get("device"), get("model")), b, error));
        }
    }
    let mut absolute: Vec<f64> = errors.iter().map(|e| e.2.abs()).collect();
    absolute.sort_by(f64::total_cmp);
    let (median, p90) = (quantile(&absolute, 0.5), quantile(&absolute, 0.9));
    let mut classes: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (machine, b, error) in &errors {
        classes.entry(machine.clone()).or_default().push(*error);
        let sequences = match b {
            1 => "B = 1",
            2..=4 => "B = 2–4",
            5..=16 => "B = 8–16",
            _ => "B = 32",
        };
        classes.entry(sequences.to_owned()).or_default().push(*error);
    }
    table.push_str("\n| class | runs | median signed error |\n|---|---|---|\n");
    for (class, errors) in &classes {
        table.push_str(&format!("| {class} | {} | {:+.1}% |\n", errors.len(), quantile(errors, 0.5) * 100.0));
    }
    eprintln!(
        "{table}\nmedian |error| {:.2}%, 90th percentile {:.2}% over {} runs",
        median * 100.0,
        p90 * 100.0,
        errors.len()
    );
    assert!(errors.len() >= 60, "only {} runs counted", errors.len());
    assert!(median <= MEDIAN_ERROR, "median |error| {median}");
    assert!(p90 <= P90_ERROR, "90th percentile |error| {p90}");
}
