//! Reconcile-loop benchmarks: `cargo bench -p stageplan --bench reconcile`.
//!
//! A fleet of 5,000 nodes (4,000 with 8 GPUs and 640 GiB, 1,000 CPU boxes with 512 GiB) and
//! 1,000 deployments with 100,000 replicas in all: 400 two-stage GPU pipelines × 40
//! replicas (32,000 stages, every GPU), and 600 one-stage CPU deployments × 140 replicas
//! (84,000 stages) — 116,000 placement decisions.
//!
//! - `first-pass`: one pass from no bindings to every replica bound, including reading the
//!   in-memory store and committing every binding to it.
//! - `idle-pass`: the next pass, which finds nothing to do (what the loop does most).
//! - `node-lost`: a pass after one GPU node leaves (its stages move, nothing else).
//! - `baseline-scan`: the same placements by scoring every node for every stage
//!   (MostAllocated over all feasible nodes, as kube-scheduler does with
//!   `percentageOfNodesToScore: 100`), without a store: what the index saves.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use stageplan_reconcile::{Controller, Deployment, Event, MemoryStore, NoMetrics, Node, StageRequest};

const GIB: u64 = 1 << 30;

fn deployment(name: String, replicas: u32, stages: Vec<StageRequest>) -> Deployment {
    Deployment::new(name, replicas, stages)
}

fn fleet() -> (Vec<Node>, Vec<Deployment>) {
    let mut nodes: Vec<Node> =
        (0..4_000).map(|i| Node { name: format!("gpu-{i:04}"), memory: 640 * GIB, gpus: 8 }).collect();
    nodes.extend((0..1_000).map(|i| Node { name: format!("cpu-{i:04}"), memory: 512 * GIB, gpus: 0 }));
    let gpu_stage = StageRequest { layers: [0, 40], memory: 40 * GIB, gpus: 1, node: None, gpu_ids: Vec::new() };
    let cpu_stage = StageRequest { layers: [0, 32], memory: 4 * GIB, gpus: 0, node: None, gpu_ids: Vec::new() };
    let mut deployments: Vec<Deployment> =
        (0..400).map(|i| deployment(format!("llm-{i:03}"), 40, vec![gpu_stage.clone(), gpu_stage.clone()])).collect();
    deployments.extend((0..600).map(|i| deployment(format!("small-{i:03}"), 140, vec![cpu_stage.clone()])));
    (nodes, deployments)
}

fn store_with(nodes: &[Node], deployments: &[Deployment]) -> MemoryStore {
    let mut store = MemoryStore::new();
    let mut controller = Controller::default();
    for node in nodes {
        controller.handle(&mut store, Event::NodeJoined(node.clone()), &NoMetrics).expect("memory store");
    }
    for d in deployments {
        controller.handle(&mut store, Event::DeploymentChanged(d.clone()), &NoMetrics).expect("memory store");
    }
    store
}

/// The baseline: for each stage, score every node (filter by fit, MostAllocated by the
/// fraction of GPUs and memory in use after placing) and take the best.
fn scan_place(nodes: &[Node], deployments: &[Deployment]) -> usize {
    let mut free: Vec<(u64, u32)> = nodes.iter().map(|n| (n.memory, n.gpus)).collect();
    let mut placed = 0;
    for d in deployments {
        for _ in 0..d.replicas {
            for stage in &d.stages {
                let mut best: Option<(f64, usize)> = None;
                for (i, (node, &(memory, gpus))) in nodes.iter().zip(&free).enumerate() {
                    if memory < stage.memory || gpus < stage.gpus {
                        continue;
                    }
                    let memory_used = 1.0 - (memory - stage.memory) as f64 / node.memory as f64;
                    let gpus_used =
                        if node.gpus == 0 { 1.0 } else { 1.0 - f64::from(gpus - stage.gpus) / f64::from(node.gpus) };
                    let score = memory_used + gpus_used;
                    if best.is_none_or(|(b, _)| score > b) {
                        best = Some((score, i));
                    }
                }
                if let Some((_, i)) = best {
                    free[i].0 -= stage.memory;
                    free[i].1 -= stage.gpus;
                    placed += 1;
                }
            }
        }
    }
    placed
}

fn bench(c: &mut Criterion) {
    let (nodes, deployments) = fleet();
    let empty = store_with(&nodes, &deployments);
    let mut placed = empty.clone();
    let report = Controller::default().pass(&mut placed, 0, &NoMetrics).expect("memory store");
    assert_eq!(report.scheduled.len(), 116_000, "every stage fits");

    let mut group = c.benchmark_group("reconcile-100k-replicas-5k-nodes");
    group.sample_size(10);
    group.bench_function("first-pass", |b| {
        b.iter_batched(
            || empty.clone(),
            |mut store| Controller::default().pass(&mut store, 0, &NoMetrics).expect("memory store"),
            BatchSize::LargeInput,
        );
    });
    group.bench_function("idle-pass", |b| {
        b.iter_batched(
            || placed.clone(),
            |mut store| Controller::default().pass(&mut store, 1, &NoMetrics).expect("memory store"),
            BatchSize::LargeInput,
        );
    });
    let mut lost = placed.clone();
    Controller::default().handle(&mut lost, Event::NodeLeft("gpu-0000".into()), &NoMetrics).expect("memory store");
    // Room for the moved stages: one spare GPU node.
    let spare = Node { name: "gpu-spare".into(), memory: 640 * GIB, gpus: 8 };
    Controller::default().handle(&mut lost, Event::NodeJoined(spare), &NoMetrics).expect("memory store");
    group.bench_function("node-lost", |b| {
        b.iter_batched(
            || lost.clone(),
            |mut store| {
                let report = Controller::default().pass(&mut store, 2, &NoMetrics).expect("memory store");
                assert_eq!(report.scheduled.len(), report.released.len());
                report
            },
            BatchSize::LargeInput,
        );
    });
    group.bench_function("baseline-scan", |b| b.iter(|| scan_place(&nodes, &deployments)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
