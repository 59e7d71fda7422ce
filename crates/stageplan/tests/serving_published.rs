//! Many users of vLLM against published runs (`tests/calibration/serving.csv`, a source per
//! row): `vllm bench serve` at a fixed `--max-concurrency`, each server started as the source
//! says (vLLM's defaults otherwise: its tokens a step and sequences for that GPU), predicted
//! as `stageplan plan --users` does — the split planned for the users' requests, vLLM's
//! scheduler run over its steps with the KV pool it leaves — with the server's own settings
//! ([`stageplan::serving::served_by`]). Replicas behind a balancer each take their share of
//! the users; a pipeline is the source's `-pp`, its layers split evenly as vLLM splits them.
//! `--nocapture` prints the table BENCHMARKS.md records.
//!
//! Issue #47 asks for a median |error| ≤ 15% in aggregate tok/s on published concurrency
//! measurements. Measured on 16 runs of six sources' machines (an H100 at 1–8 users, RTX 4090,
//! RTX 5090, L40S and H200 at 200–400, single GPUs, replicas and pipelines): 19.3% at the
//! median, 42.0% at the 90th percentile. What is left is the step of a large batch: at
//! 200–400 users a dense 70B's time per token is predicted 1.2–1.6× slow (vLLM's AWQ kernels
//! multiply many sequences faster than llama.cpp's, whose quarter of peak the cost model
//! takes) and an MoE's 0.7–0.75× fast (GLM-4.5-Air), and AWQ files are planned as `iq4_xs`
//! of the same bits. The bounds are the measured figures rounded up: a change that makes them
//! worse fails.

// A test harness reads its fixtures; the core it tests does not.
#![allow(clippy::disallowed_methods, clippy::print_stderr)]

mod common;

use common::split_csv;

use stageplan::calibration::quantile;
use stageplan::serving::{AsRun, Scheduler, Traffic, served_by};

const MEDIAN_ERROR: f64 = 0.20;
const P90_ERROR: f64 = 0.43;

/// Runs in the table and out of the figures, by the end of their source: eight H200s behind
/// one nginx, 2,048 users sending one request each, whose replicas served 1,821 tok/s each
/// (p99 first token 97.8 s) where the same source's one H200 served its 256 users 2,797
/// (p99 27.2 s): the balancer and client, not the servers, set that pace.
const OUTSIDE_THE_FIGURES: &[&str] = &["h200_x_8_cpatonn_GLM-4.5-Air-AWQ-4bit_vllm_benchmark.txt"];

#[test]
fn many_users_of_vllm_hold_against_published_runs() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/calibration/serving.csv");
    let text = std::fs::read_to_string(path).expect("the published serving runs");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("column {name}"));
    let mut table = String::from(
        "| model | GPUs | users | published tok/s | predicted | error | TPOT published | predicted p50 | TTFT published | predicted p50 |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut errors = Vec::new();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let fields = split_csv(line);
        assert_eq!(fields.len(), header.len(), "{line}");
        let get = |name: &str| fields[column(name)].as_str();
        let number = |name: &str| get(name).parse::<u32>().unwrap_or_else(|e| panic!("{name}: {e}: {line}"));
        let (pipeline, replicas, concurrency) = (number("pipeline"), number("replicas"), number("concurrency"));
        let model = get("model");
        let layers = stageplan::presets::ModelPreset::find(model).unwrap().config().transformer().unwrap().num_layers;
        // One machine per replica: its GPU, or its GPUs as pipeline ranks, layers split evenly.
        let (node, stages) = match pipeline {
            1 => (format!(r#"{{"name": "gpu", "device": "{}"}}"#, get("device")), String::new()),
            ranks => {
                let stages: Vec<String> = (0..ranks)
                    .map(|r| {
                        let (start, end) =
                            (layers * u64::from(r) / u64::from(ranks), layers * u64::from(r + 1) / u64::from(ranks));
                        format!(r#"{{"node": "box/gpu{r}", "layers": [{start}, {end}]}}"#)
                    })
                    .collect();
                let gpus =
                    format!(r#"{{"name": "box", "gpus": [{{"device": "{}", "count": {ranks}}}]}}"#, get("device"));
                (gpus, format!(r#", "policy": "manual", "stages": [{}]"#, stages.join(", ")))
            }
        };
        let scenario = format!(
            r#"{{"model": {{"preset": "{model}", "weights": "{}"}}, "engine": "vllm",
                "workload": {{"context": {}, "prompt": {}, "response": {}, "kv": "{}"}},
                "nodes": [{node}]{stages}}}"#,
            get("weights"),
            get("context"),
            get("prompt"),
            get("response"),
            get("kv"),
        );
        let problem = stageplan::check(scenario.as_str(), stageplan::check::no_model_files)
            .unwrap_or_else(|e| panic!("{line}: {e}"))
            .problem;
        let scheduler = Scheduler::Vllm {
            max_num_seqs: number("max_num_seqs"),
            max_num_batched_tokens: number("max_num_batched_tokens"),
        };
        // The balancer keeps each replica's share of the users in flight; each user sends
        // its share of the prompts one after another, all starting together.
        let users = concurrency.div_ceil(replicas);
        let requests_per_user = number("num_prompts").div_ceil(concurrency);
        let as_run = AsRun { scheduler, requests_per_user };
        let (_, served) =
            served_by(&problem, users, Traffic::default(), Some(as_run)).unwrap_or_else(|e| panic!("{line}: {e}"));
        let served = served.unwrap_or_else(|| panic!("{line}: the server as run fits the plan's memory"));
        let predicted = served.tokens_per_s * f64::from(replicas);
        let published: f64 = get("output_tok_s").parse().unwrap();
        let error = predicted / published - 1.0;
        let outside = OUTSIDE_THE_FIGURES.iter().any(|s| get("source").ends_with(s));
        if !outside {
            errors.push(error.abs());
        }
        table.push_str(&format!(
            "| {model} {} | {replicas} × {} {} | {concurrency} | {published} | {predicted:.1} | {:+.1}%{} | {} | {:.2} | {} | {:.0} |\n",
            get("weights"),
            if pipeline > 1 { format!("{pipeline}×") } else { String::new() },
            get("device"),
            error * 100.0,
            if outside { " (outside)" } else { "" },
            get("mean_tpot_ms"),
            served.tpot_s[0] * 1e3,
            get("mean_ttft_ms"),
            served.ttft_s[0] * 1e3,
        ));
    }
    let median = quantile(&errors, 0.5);
    let p90 = quantile(&errors, 0.9);
    eprintln!(
        "{table}\nmedian |error| {:.1}%, 90th percentile {:.1}% over {} runs ({} more in the table, outside the figures)",
        median * 100.0,
        p90 * 100.0,
        errors.len(),
        OUTSIDE_THE_FIGURES.len()
    );
    assert!(median <= MEDIAN_ERROR, "median |error| {median}");
    assert!(p90 <= P90_ERROR, "90th percentile |error| {p90}");
}
