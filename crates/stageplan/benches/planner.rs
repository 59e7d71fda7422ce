//! Planner benchmarks: `cargo bench -p stageplan --bench planner`.
//!
//! - `home-70b`: Llama 3.1 70B (q4_k_m, 80 layers) on 8 different home machines — the
//!   issue's "80 layers × 8 nodes" target (far under a millisecond).
//! - `experts-2000x256`: 2,000 placement units on 256 nodes of 8 kinds — expert-level
//!   placement (target: under a second).
//!
//! Each is measured for the `optimal` search alone (`bare`), the full report (`plan`: with
//! baselines, left-out explanations and longest context), and the baselines alone.

use criterion::{Criterion, criterion_group, criterion_main};
use stageplan::{Policy, Problem, Scenario};

const HOME: &str = r#"{
  "model": {"preset": "llama-3.1-70b", "weights": "q4_k_m"},
  "workload": {"context": 8192},
  "nodes": [
    {"name": "desk", "device": "rtx-4090"},
    {"name": "gamer", "device": "rtx-3090"},
    {"name": "studio", "device": "m2-ultra-192gb"},
    {"name": "mbp", "device": "m3-max-128gb"},
    {"name": "mini", "device": "m4-pro-64gb"},
    {"name": "old-gpu", "device": "rtx-3060-12gb"},
    {"name": "server", "device": "cpu-epyc-12ch-ddr5"},
    {"name": "tower", "device": "cpu-ddr5-dual-channel"}
  ]
}"#;

fn problem(json: &str, edit: impl FnOnce(&mut Scenario)) -> Problem {
    let mut scenario = Scenario::from_json(json).expect("bench scenario parses");
    edit(&mut scenario);
    scenario.problem().expect("bench scenario is valid")
}

fn experts() -> String {
    // 2,000 units: a wide MoE-like stack expressed as 2,000 blocks.
    let config = r#"{"hidden_size": 2048, "intermediate_size": 1408, "num_hidden_layers": 2000,
        "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 102400}"#;
    let kinds = ["rtx-4090", "rtx-3090", "a100-80gb", "h100", "l4", "m2-ultra-192gb", "rtx-3060-12gb", "cpu-ddr5-dual-channel"];
    let nodes: Vec<String> = kinds
        .iter()
        .enumerate()
        .map(|(i, d)| format!(r#"{{"name": "k{i}", "device": "{d}", "count": 32}}"#))
        .collect();
    format!(r#"{{"model": {{"config": {config}, "weights": "bf16"}}, "workload": {{"context": 2048}}, "nodes": [{}]}}"#, nodes.join(","))
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("home-70b");
    let throughput = problem(HOME, |_| {});
    let latency = problem(HOME, |s| s.objective = stageplan::Objective::Latency);
    let pairwise = problem(HOME, |s| {
        s.links.pairs = serde_json::from_str(
            r#"[{"between": ["desk", "gamer"], "bandwidth": "10 Gbit/s", "latency": "0.1 ms"},
                {"between": ["studio", "mbp"], "bandwidth": "40 Gbit/s", "latency": "0.05 ms"}]"#,
        )
        .expect("pairs parse");
    });
    group.bench_function("bare-throughput", |b| b.iter(|| stageplan::plan_bare(&throughput)));
    group.bench_function("bare-latency", |b| b.iter(|| stageplan::plan_bare(&latency)));
    group.bench_function("bare-throughput-pair-links", |b| b.iter(|| stageplan::plan_bare(&pairwise)));
    group.bench_function("plan-throughput", |b| b.iter(|| stageplan::plan(&throughput)));
    for policy in [Policy::MemoryProportional, Policy::Even, Policy::Greedy] {
        let baseline = problem(HOME, |s| s.policy = policy);
        group.bench_function(format!("bare-{}", policy.name()), |b| b.iter(|| stageplan::plan_bare(&baseline)));
    }
    group.finish();

    let mut group = c.benchmark_group("experts-2000x256");
    group.sample_size(10);
    let big = problem(&experts(), |_| {});
    let big_latency = problem(&experts(), |s| s.objective = stageplan::Objective::Latency);
    group.bench_function("bare-throughput", |b| b.iter(|| stageplan::plan_bare(&big)));
    group.bench_function("bare-latency", |b| b.iter(|| stageplan::plan_bare(&big_latency)));
    let proportional = problem(&experts(), |s| s.policy = Policy::MemoryProportional);
    group.bench_function("bare-memory-proportional", |b| b.iter(|| stageplan::plan_bare(&proportional)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
