//! Planner benchmarks: `cargo bench -p stageplan --bench planner`.
//!
//! - `home-70b-8`: Llama 3.1 70B (q4_k_m, 80 layers) on 8 different home machines — the
//!   "80 layers × 8 nodes" target (far under a millisecond).
//! - `experts-2000x256`: 2,000 placement units on 256 nodes of 8 kinds — expert-level
//!   placement (target: under a second).
//!
//! - `host-tiers`: machines with a GPU and system RAM (#34), each stage's placement of its
//!   tensors searched too: `moe-94-1-machine`, a 94-layer MoE (Qwen3-235B-A22B's shapes) on
//!   one GPU and its RAM (target: ≤ 1 ms), and `home-70b-8-with-ram`, the home cluster with
//!   64 GiB of RAM beside every machine (target: ≤ 20 ms); `…-without-ram` are the same
//!   scenarios without the RAM, the baseline of the same run.
//!
//! - `several-gpus`: machines with several GPUs (#46): `moe-94-4-gpus-1-machine` and
//!   `…-with-ram`, the same box with its system RAM (target ≤ 5 ms), and
//!   `70b-4-machines-8-gpus` (target ≤ 50 ms).
//!
//! - `serving`: the most users at a latency target (#47): one llama-server's capacity on
//!   `home-70b-8` (target ≤ 100 ms) and on its first six machines, and on the six and the
//!   eight every split into replicas as well.
//!
//! `home-70b-8/bare-throughput-8-sequences` plans the same cluster for eight sequences: the
//! throughput search then tries every micro-batch count. `home-70b-8/replan-node-lost` re-plans after the node holding the most layers drops out.
//!
//! Each is timed for the `optimal` search alone (`bare`), the full report (`plan`: with
//! baselines, left-out explanations and longest context), and the baseline policies, on the
//! scenario files under `tests/scenarios/`.

use criterion::{Criterion, criterion_group, criterion_main};
use stageplan::planner::PlanOptions;
use stageplan::serving::{self, Percentile, Targets};
use stageplan::units::{Bandwidth, Seconds};
use stageplan::{Objective, Policy, Problem, Scenario};

const HOME: &str = include_str!("../../../tests/scenarios/home-70b-8.json");
const EXPERTS: &str = include_str!("../../../tests/scenarios/experts-2000x256.json");
const MOE_94: &str = include_str!("../../../tests/scenarios/moe-94-ram.json");

fn problem(json: &str, edit: impl FnOnce(&mut Scenario)) -> Problem {
    let mut scenario = Scenario::from_json(json).expect("bench scenario parses");
    edit(&mut scenario);
    stageplan::check(scenario, stageplan::check::no_model_files).expect("bench scenario is valid").problem
}

/// The plan alone: the search's own cost, without baselines and explanations.
fn bare(problem: &Problem) -> stageplan::Plan {
    stageplan::plan_with(problem, PlanOptions::bare())
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("home-70b-8");
    let throughput = problem(HOME, |_| {});
    let latency = problem(HOME, |s| s.objective = Objective::Latency);
    let pairwise = problem(HOME, |s| {
        let pair = |a: &str, b: &str, bandwidth: &str, latency: &str| stageplan::scenario::PairLinkSpec {
            between: [a.to_owned(), b.to_owned()],
            bandwidth: Bandwidth::parse(bandwidth).expect("a bandwidth"),
            latency: Seconds::parse(latency).expect("a latency"),
        };
        s.links.pairs =
            vec![pair("desk", "gamer", "10 Gbit/s", "0.1 ms"), pair("studio", "mbp", "40 Gbit/s", "0.05 ms")];
    });
    // Eight sequences: every micro-batch count from 1 to 8, each a bisection of capped searches.
    let eight = problem(HOME, |s| s.workload.batch = 8);
    group.bench_function("bare-throughput", |b| b.iter(|| bare(&throughput)));
    group.bench_function("bare-throughput-8-sequences", |b| b.iter(|| bare(&eight)));
    group.bench_function("bare-latency", |b| b.iter(|| bare(&latency)));
    group.bench_function("bare-throughput-pair-links", |b| b.iter(|| bare(&pairwise)));
    group.bench_function("plan-throughput", |b| b.iter(|| stageplan::plan(&throughput)));
    group.bench_function("plan-latency", |b| b.iter(|| stageplan::plan(&latency)));
    for policy in [Policy::MemoryProportional, Policy::Even, Policy::Greedy] {
        let baseline = problem(HOME, |s| s.policy = policy);
        group.bench_function(format!("bare-{}", policy.name()), |b| b.iter(|| bare(&baseline)));
    }
    // Re-planning after the machine with the most layers drops out.
    let running = bare(&throughput);
    let current: Vec<stageplan::planner::replan::CurrentStage> = running
        .stages
        .iter()
        .map(|s| stageplan::planner::replan::CurrentStage { node: s.node.clone(), layers: s.layers })
        .collect();
    let busiest = running.stages.iter().max_by_key(|s| s.layers[1] - s.layers[0]).expect("a plan").node.clone();
    let lost = problem(HOME, |s| s.nodes.retain(|n| n.name != busiest));
    group.bench_function("replan-node-lost", |b| {
        b.iter(|| stageplan::replan(&lost, &current, stageplan::ReplanOptions::default()).expect("valid current plan"));
    });
    group.finish();

    let mut group = c.benchmark_group("host-tiers");
    let moe = problem(MOE_94, |_| {});
    let moe_alone = problem(MOE_94, |s| s.nodes[0].host = None);
    group.bench_function("moe-94-1-machine", |b| b.iter(|| bare(&moe)));
    group.bench_function("moe-94-1-machine-without-ram", |b| b.iter(|| bare(&moe_alone)));
    // RAM beside each GPU (a unified or CPU machine's RAM is its memory, refused twice).
    let ram = |s: &mut Scenario| {
        let gpu = |node: &stageplan::scenario::NodeSpec| {
            node.device.as_deref().and_then(|d| stageplan::presets::DevicePreset::find(d).ok()).map(|p| p.kind)
                == Some(stageplan::device::DeviceKind::Gpu)
        };
        for node in s.nodes.iter_mut().filter(|n| gpu(n)) {
            node.host = Some(stageplan::scenario::HostSpec {
                ram: Some("ddr5-5600-2ch".into()),
                memory: Some(stageplan::units::Bytes::parse("64 GiB").expect("a size")),
                ..Default::default()
            });
        }
    };
    let tiered = problem(HOME, ram);
    group.bench_function("home-70b-8-with-ram", |b| b.iter(|| bare(&tiered)));
    group.bench_function("home-70b-8-without-ram", |b| b.iter(|| bare(&throughput)));
    group.bench_function("home-70b-8-with-ram-plan", |b| b.iter(|| stageplan::plan(&tiered)));
    group.finish();

    // Machines with several GPUs (#46): a 94-layer MoE on one box of four mixed GPUs
    // (target ≤ 5 ms), and Llama 3.1 70B on 4 machines × 8 GPUs over 100 GbE (target
    // ≤ 50 ms); the baseline of the same run is `host-tiers/moe-94-1-machine-without-ram`.
    let mut group = c.benchmark_group("several-gpus");
    let gpus = |json: &str| -> Vec<stageplan::scenario::NodeSpec> { serde_json::from_str(json).expect("nodes parse") };
    let four = problem(MOE_94, |s| {
        s.nodes = gpus(
            r#"[{"name": "box", "gpus": [{"device": "a100-80gb", "count": 2}, {"device": "l40s", "count": 2}], "gpu_link": "pcie4-x16-p2p"}]"#,
        );
    });
    let racks = problem(HOME, |s| {
        s.nodes = gpus(
            r#"[{"name": "rack", "count": 4, "gpus": [{"device": "rtx-3090", "count": 8}], "gpu_link": "pcie4-x16"}]"#,
        );
        s.links.default = Some(stageplan::scenario::LinkSpec {
            bandwidth: Bandwidth::parse("100 Gbit/s").expect("a bandwidth"),
            latency: Seconds::parse("0.05 ms").expect("a latency"),
        });
    });
    // The same box with its 512 GiB of RAM, which each GPU's layers may use: the plan under
    // each division of it the planner tries.
    let four_ram = problem(MOE_94, |s| {
        s.nodes = gpus(
            r#"[{"name": "box", "gpus": [{"device": "a100-80gb", "count": 2}, {"device": "l40s", "count": 2}], "gpu_link": "pcie4-x16-p2p",
                 "host": {"ram": "ddr5-4800-8ch", "memory": "512 GiB", "threads": 32}}]"#,
        );
    });
    group.bench_function("moe-94-4-gpus-1-machine", |b| b.iter(|| bare(&four)));
    group.bench_function("moe-94-4-gpus-1-machine-with-ram", |b| b.iter(|| bare(&four_ram)));
    group.bench_function("70b-4-machines-8-gpus", |b| b.iter(|| bare(&racks)));
    group.finish();

    // Serving many users (#47): the most users of one llama-server meeting p95 first token
    // ≤ 5 s and per token ≤ 200 ms on all eight machines (target ≤ 100 ms), and on six the
    // same with every split into replicas tried (what `stageplan plan --ttft … --tpot …` does).
    let mut group = c.benchmark_group("serving");
    group.sample_size(10);
    let targets = Targets { ttft_s: Some(5.0), tpot_s: Some(0.2), percentile: Percentile::P95 };
    let six = problem(HOME, |s| s.nodes.truncate(6));
    let capacity = |p: &Problem| serving::capacity(p, serving::Load::llama_server(p, 1), targets);
    group.bench_function("home-70b-8-capacity", |b| b.iter(|| capacity(&throughput)));
    group.bench_function("home-70b-6-capacity", |b| b.iter(|| capacity(&six)));
    group.bench_function("home-70b-6-capacity-and-replicas", |b| {
        b.iter(|| serving::answer(&six, stageplan::demand::Demand::of_targets(targets)));
    });
    group.bench_function("home-70b-8-capacity-and-replicas", |b| {
        b.iter(|| serving::answer(&throughput, stageplan::demand::Demand::of_targets(targets)));
    });
    group.finish();

    let mut group = c.benchmark_group("experts-2000x256");
    group.sample_size(10);
    let big = problem(EXPERTS, |_| {});
    let big_latency = problem(EXPERTS, |s| s.objective = Objective::Latency);
    group.bench_function("bare-throughput", |b| b.iter(|| bare(&big)));
    group.bench_function("bare-latency", |b| b.iter(|| bare(&big_latency)));
    let proportional = problem(EXPERTS, |s| s.policy = Policy::MemoryProportional);
    group.bench_function("bare-memory-proportional", |b| b.iter(|| bare(&proportional)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
