//! `stageplan run-sharded`: a scenario's plan run on this machine's GPU devices as an MLP
//! stack, predicted against measured.

use std::path::Path;

use stageplan::Problem;
use stageplan::device::Efficiency;
use stageplan_gpu::router::ByThroughput;
use stageplan_gpu::sharded::{self, MlpSpec, StageSpec};
use stageplan_gpu::{Gpu, Probe, ProbeOptions};

use crate::outcome::{Failure, Outcome};
use crate::{input, load, render};

/// Checks the run's shape, then runs the scenario at `path`.
pub(super) fn run_sharded(path: &Path, options: &ShardedOptions) -> Result<Outcome, Failure> {
    let problem = load::problem(path, input::read_text(path)?.as_str())?;
    let ShardedOptions { width, tokens, micro_batches, replicas } = *options;
    if width == 0 || tokens == 0 || micro_batches == 0 || replicas == 0 || width > 8192 || replicas > 16 {
        return Err(Failure(
            "`--width` (1–8192), `--tokens`, `--micro-batches` and `--replicas` (1–16) must be positive".into(),
        ));
    }
    Ok(Outcome::ok(plan_and_run(&problem, options)?))
}

/// Options of a sharded run.
#[derive(Clone, Copy)]
pub(super) struct ShardedOptions {
    pub width: u32,
    pub tokens: u32,
    pub micro_batches: u32,
    pub replicas: usize,
}

/// Plans the scenario, runs its stages as an MLP on the local devices, and reports
/// predicted against measured stage times.
fn plan_and_run(problem: &Problem, options: &ShardedOptions) -> Result<String, Failure> {
    let plan = stageplan::plan(problem);
    if !plan.feasible {
        return Err(Failure(
            "the scenario's plan does not fit, so there is nothing to run; `stageplan plan` says why".into(),
        ));
    }
    let gpu = Gpu::new();
    let adapters = pollster::block_on(gpu.adapters());
    if adapters.is_empty() {
        return Err(Failure(stageplan_gpu::GpuError::NoAdapter { requested: 0, available: 0 }.to_string()));
    }
    let spec = MlpSpec {
        width: options.width,
        layers: problem.model.num_layers(),
        tokens: options.tokens,
        micro_batches: options.micro_batches,
        seed: 0x5eed,
    };
    // Each stage of each replica gets its own device: on distinct adapters while there are
    // some, else another device on the same adapter (a separate wgpu device, as a separate
    // machine would be).
    let stage_count = plan.stages.len();
    let total = stage_count * options.replicas.max(1);
    let mut contexts = Vec::with_capacity(total);
    for k in 0..total {
        let adapter = adapters[k % adapters.len()].index;
        contexts.push(pollster::block_on(gpu.open(adapter)).map_err(|e| Failure(e.to_string()))?);
    }
    let replicas: Vec<Vec<StageSpec>> = (0..options.replicas.max(1))
        .map(|r| {
            plan.stages
                .iter()
                .enumerate()
                .map(|(s, stage)| StageSpec {
                    node: stage.node.clone(),
                    device: r * stage_count + s,
                    layers: stage.layers[0]..stage.layers[1],
                })
                .collect()
        })
        .collect();
    // Predictions come from the cost model fed with a quick probe of each device used.
    let quick = ProbeOptions::quick();
    let probes: Vec<Probe> = contexts
        .iter()
        .map(|c| pollster::block_on(stageplan_gpu::probe(c, &quick, &mut |_| {})))
        .collect::<Result<_, _>>()
        .map_err(|e| Failure(e.to_string()))?;
    let predicted = stageplan_gpu::predict(&spec, &replicas[0], &probes);
    let terms = stageplan_gpu::predicted_terms(&spec, &replicas[0], &probes);
    // Requests go to replicas by key, in proportion to each one's predicted throughput
    // (the inverse of its slowest stage).
    let throughputs: Vec<f64> = replicas
        .iter()
        .map(|r| 1.0 / stageplan_gpu::predict(&spec, r, &probes).into_iter().fold(f64::MIN_POSITIVE, f64::max))
        .collect();
    let mut router = ByThroughput::new(&throughputs).map_err(|e| Failure(e.to_string()))?;
    let report = pollster::block_on(sharded::run_sharded(&contexts, &replicas, &spec, &mut router, Some(&predicted)))
        .map_err(|e| Failure(e.to_string()))?;
    let samples: Vec<((f64, f64), f64)> =
        terms.iter().copied().zip(report.stages.iter().map(|s| s.measured_s)).collect();
    let fitted = Efficiency::fit(&samples);
    Ok(render::gpu::sharded(&problem.model.name, &spec, options.replicas, &report, &fitted))
}
