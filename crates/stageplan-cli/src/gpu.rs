//! `stageplan probe` and `stageplan run-sharded`: the local GPU (or CPU), measured and put to work.

use std::fmt::Write;

use stageplan::problem::Efficiency;
use stageplan::units::{format_bandwidth, format_bytes, format_compute, format_seconds, sig3};
use stageplan::{Problem, plan};
use stageplan_gpu::router::ByThroughput;
use stageplan_gpu::sharded::{self, MlpSpec, StageSpec};
use stageplan_gpu::{Gpu, Probe, ProbeOptions};

use crate::outcome::Failure;

/// Whether wgpu sees an adapter that is not a software renderer (llvmpipe, SwiftShader):
/// without one, `stageplan probe` measures the CPU.
pub(crate) fn has_hardware_adapter() -> bool {
    pollster::block_on(Gpu::new().adapters()).iter().any(|a| !a.software)
}

/// Probes the chosen adapters (all by default) and describes them.
pub(crate) fn probe(
    adapter: Option<usize>,
    options: &ProbeOptions,
) -> Result<(Vec<stageplan_gpu::AdapterSummary>, Vec<Probe>), Failure> {
    let gpu = Gpu::new();
    let adapters = pollster::block_on(gpu.adapters());
    if adapters.is_empty() {
        return Err(Failure(stageplan_gpu::GpuError::NoAdapter { requested: 0, available: 0 }.to_string()));
    }
    let chosen: Vec<usize> = match adapter {
        Some(i) => vec![i],
        None => adapters.iter().map(|a| a.index).collect(),
    };
    let mut probes = Vec::new();
    for index in chosen {
        let context = pollster::block_on(gpu.open(index)).map_err(|e| Failure(e.to_string()))?;
        let probe = pollster::block_on(stageplan_gpu::probe(&context, options, &mut |step| {
            eprintln!("probing {}: {step}", context.adapter.name);
        }))
        .map_err(|e| Failure(e.to_string()))?;
        probes.push(probe);
    }
    Ok((adapters, probes))
}

/// The probe as a table, with a ready node for each adapter.
pub(crate) fn render_probe(adapters: &[stageplan_gpu::AdapterSummary], probes: &[Probe]) -> String {
    let mut out = String::from("adapters\n");
    for a in adapters {
        let _ = writeln!(
            out,
            "  {}  {} ({}, {}{}) · max buffer {} · storage binding {} · workgroup {} · f16 {} · subgroups {} · timestamps {}",
            a.index,
            a.name,
            a.backend,
            a.device_type,
            if a.software { ", software" } else { "" },
            format_bytes(a.limits.max_buffer_size as f64),
            format_bytes(a.limits.max_storage_buffer_binding_size as f64),
            a.limits.max_compute_invocations_per_workgroup,
            yes(a.features.shader_f16),
            yes(a.features.subgroups),
            yes(a.features.timestamp_query),
        );
    }
    for p in probes {
        let _ = writeln!(out, "\nmeasured on {} ({})", p.adapter.name, p.adapter.backend);
        row(&mut out, "bandwidth", &format_bandwidth(p.bandwidth.median), p.bandwidth.spread, "");
        row(&mut out, "f32 matmul", &format_compute(p.compute_f32.median), p.compute_f32.spread, "");
        match &p.compute_f16 {
            Some(f) => row(&mut out, "f16 matmul", &format_compute(f.median), f.spread, ""),
            None => out.push_str("  f16 matmul      – (no shader-f16)\n"),
        }
        let _ = writeln!(out, "  memory          {} ({})", format_bytes(p.memory.bytes as f64), p.memory.source);
        let node = serde_json::to_string(&p.node("this-device")).unwrap_or_default();
        let _ = writeln!(out, "  as a node       {node}");
    }
    out
}

/// The CPU probe as text, ending with its node.
pub(crate) fn render_cpu_probe(p: &stageplan_cpu::CpuProbe) -> String {
    let mut out =
        format!("measured {} ({} logical cores) with {} threads\n", p.cpu, p.logical_cores, p.options.threads);
    row(&mut out, "read bandwidth", &format_bandwidth(p.bandwidth.median), p.bandwidth.spread, "");
    let kernel = "; a portable kernel, a lower bound on llama.cpp's";
    row(&mut out, "f32 matmul", &format_compute(p.compute.median), p.compute.spread, kernel);
    let _ = writeln!(
        out,
        "  memory          {} ({} available now)",
        format_bytes(p.memory_total as f64),
        format_bytes(p.memory_available as f64)
    );
    let node = serde_json::to_string(&p.node("this-cpu")).unwrap_or_default();
    let _ = writeln!(out, "  as a node       {node}");
    out
}

/// One measured figure: `  label  value (spread N%note)`.
fn row(out: &mut String, label: &str, value: &str, spread: f64, note: &str) {
    let _ = writeln!(out, "  {label:<15} {value} (spread {:.0}%{note})", spread * 100.0);
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// Options of a sharded run.
pub(crate) struct ShardedOptions {
    pub width: u32,
    pub tokens: u32,
    pub micro_batches: u32,
    pub replicas: usize,
}

/// Plans the scenario, runs its stages as an MLP on the local devices, and reports
/// predicted against measured stage times.
pub(crate) fn run_sharded(problem: &Problem, options: &ShardedOptions) -> Result<String, Failure> {
    let plan = plan(problem);
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

    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} MLP layers of width {} (standing for {}'s layers), {} micro-batches of {} rows, {} replica{}",
        spec.layers,
        spec.width,
        problem.model.name,
        spec.micro_batches,
        spec.tokens,
        options.replicas,
        if options.replicas == 1 { "" } else { "s" }
    );
    out.push_str(
        "\n  #  node        layers     device                                predicted   measured   ratio   transfer\n",
    );
    for (i, s) in report.stages.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {i:<2} {:<11} {:<10} {:<36} {:>10} {:>10} {:>7} {:>10}",
            s.node,
            format!("{}–{}", s.layers[0], s.layers[1]),
            s.device,
            s.predicted_s.map_or_else(|| "–".into(), format_seconds),
            format_seconds(s.measured_s),
            s.ratio.map_or_else(|| "–".into(), |r| format!("{r:.2}")),
            format_seconds(s.transfer_s),
        );
    }
    let _ = writeln!(
        out,
        "\npipeline: {} rows/s over {} ({} micro-batches by key, per replica by its predicted throughput: {:?})",
        sig3(report.tokens_per_s),
        format_seconds(report.pipeline_s),
        spec.micro_batches,
        report.requests_per_replica
    );
    let _ =
        writeln!(out, "checked against the CPU (f64): largest relative error {:.2e} (bound 1e-3)", report.max_error);
    let _ = writeln!(
        out,
        "fitted efficiency of these devices on this work: bandwidth {:.2}, compute {:.2} → add `\"efficiency\": {{\"bandwidth\": {:.2}, \"compute\": {:.2}}}` to a node measured by `stageplan probe`",
        fitted.bandwidth, fitted.compute, fitted.bandwidth, fitted.compute
    );
    Ok(out)
}
