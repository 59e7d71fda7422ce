//! This machine measured (`probe`, `probe --cpu`) and a plan run on it (`run-sharded`).

use std::fmt::Write;

use stageplan::device::Efficiency;
use stageplan::units::{format_bandwidth, format_bytes, format_compute, format_seconds, sig3};
use stageplan_gpu::Probe;
use stageplan_gpu::sharded::{MlpSpec, ShardedReport};

/// The probe as a table, with a ready node for each adapter.
pub(crate) fn probe(adapters: &[stageplan_gpu::AdapterSummary], probes: &[Probe]) -> String {
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

/// The CPU probe as text: its figures, the engine's rates fitted to llama-bench (each run
/// as measured and as the node predicts it), and the node.
pub(crate) fn cpu_probe(
    p: &stageplan_cpu::CpuProbe,
    node: &stageplan::scenario::NodeSpec,
    checked: &[(String, String, f64, f64)],
) -> String {
    let mut out = format!(
        "measured {} ({} logical cores{}) with {} threads\n",
        p.cpu,
        p.logical_cores,
        if p.numa_nodes > 1 { format!(", {} NUMA nodes", p.numa_nodes) } else { String::new() },
        p.options.threads
    );
    let runs = format!("; median of {} steady runs of {}", p.options.repetitions, p.bandwidth.runs);
    row(&mut out, "read bandwidth", &format_bandwidth(p.bandwidth.median), p.bandwidth.spread, &runs);
    let kernel = "; a portable kernel, a lower bound on llama.cpp's prefill";
    row(&mut out, "f32 matmul", &format_compute(p.compute.median), p.compute.spread, kernel);
    let _ = writeln!(
        out,
        "  memory          {} ({} available now)",
        format_bytes(p.memory_total as f64),
        format_bytes(p.memory_available as f64)
    );
    if let Some(fit) = node.probe.as_ref().and_then(|p| p.engine.as_ref()) {
        let _ = writeln!(out, "\nllama.cpp's decode products, fitted ({})", fit.method);
        for class in stageplan::calibration::WeightClass::ALL {
            if let Some(rate) = fit.rate(class) {
                let _ = writeln!(out, "  {:<15} {} weights/s", class.name(), sig3(rate));
            }
        }
        for (model, weights, measured, predicted) in checked {
            let _ = writeln!(
                out,
                "  {model} ({weights}): llama-bench {} tok/s, the node predicts {} ({:+.0}%)",
                sig3(*measured),
                sig3(*predicted),
                (predicted / measured - 1.0) * 100.0
            );
        }
    }
    let node = serde_json::to_string(node).unwrap_or_default();
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

/// A sharded run: its shape, each stage predicted against measured, the pipeline's rate and
/// the efficiency fitted to it.
pub(crate) fn sharded(
    model: &str,
    spec: &MlpSpec,
    replicas: usize,
    report: &ShardedReport,
    fitted: &Efficiency,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} MLP layers of width {} (standing for {}'s layers), {} micro-batches of {} rows, {} replica{}",
        spec.layers,
        spec.width,
        model,
        spec.micro_batches,
        spec.tokens,
        replicas,
        if replicas == 1 { "" } else { "s" }
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
    out
}
