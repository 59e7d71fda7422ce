//! `stageplan probe`: this machine's GPU adapters (bandwidth, f32/f16 matmul, memory), or its
//! CPU as llama.cpp's CPU backend uses it, measured and printed as a ready node.

use stageplan_gpu::{AdapterSummary, Gpu, Probe, ProbeOptions};

use crate::cli::Format;
use crate::outcome::{Failure, Outcome};
use crate::render;

/// What `probe` was asked.
pub(super) struct ProbeRequest {
    pub adapter: Option<usize>,
    pub cpu: bool,
    pub gpu: bool,
    pub threads: Option<usize>,
    pub quick: bool,
    pub memory_cap: Option<String>,
}

/// Measures the CPU when asked, or when every adapter is a software renderer; else the
/// chosen adapters (all by default).
pub(super) fn probe(request: ProbeRequest, format: Format) -> Result<Outcome, Failure> {
    let ProbeRequest { adapter, cpu, gpu, threads, quick, memory_cap } = request;
    if cpu || threads.is_some() || (adapter.is_none() && !gpu && !has_hardware_adapter()) {
        return probe_cpu(threads, quick, format);
    }
    let mut options = if quick { ProbeOptions::quick() } else { ProbeOptions::default() };
    options.memory_cap = memory_cap
        .map(|cap| stageplan::units::Bytes::parse(&cap).map(|b| b.get() as u64))
        .transpose()
        .map_err(|e| Failure(format!("`--memory-cap`: {e}")))?;
    let (adapters, probes) = probe_gpu(adapter, &options)?;
    let stdout = match format {
        Format::Json => {
            serde_json::to_string_pretty(&serde_json::json!({
                "adapters": adapters,
                "probes": probes,
                "nodes": probes.iter().enumerate().map(|(i, p)| p.node(&format!("this-device-{i}"))).collect::<Vec<_>>(),
            }))? + "\n"
        }
        Format::Table => render::gpu::probe(&adapters, &probes),
    };
    Ok(Outcome::ok(stdout))
}

/// Whether wgpu sees an adapter that is not a software renderer (llvmpipe, SwiftShader):
/// without one, `stageplan probe` measures the CPU.
fn has_hardware_adapter() -> bool {
    pollster::block_on(Gpu::new().adapters()).iter().any(|a| !a.software)
}

/// Probes the chosen adapters (all by default) and describes them.
fn probe_gpu(adapter: Option<usize>, options: &ProbeOptions) -> Result<(Vec<AdapterSummary>, Vec<Probe>), Failure> {
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

/// `stageplan probe --cpu`.
fn probe_cpu(threads: Option<usize>, quick: bool, format: Format) -> Result<Outcome, Failure> {
    let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    let options =
        if quick { stageplan_cpu::CpuOptions::quick(threads) } else { stageplan_cpu::CpuOptions::new(threads) };
    let probe = stageplan_cpu::probe(&options, &mut |step| eprintln!("probing the CPU: {step}"))
        .map_err(|e| Failure(e.to_string()))?;
    Ok(Outcome::ok(match format {
        Format::Json => {
            serde_json::to_string_pretty(&serde_json::json!({"cpu": probe, "nodes": [probe.node("this-cpu")]}))? + "\n"
        }
        Format::Table => render::gpu::cpu_probe(&probe),
    }))
}
