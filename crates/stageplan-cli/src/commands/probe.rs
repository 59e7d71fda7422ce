//! `stageplan probe`: this machine's GPU adapters (bandwidth, f32/f16 matmul, memory), or its
//! CPU as llama.cpp's CPU backend uses it, measured and printed as a ready node.

use std::path::{Path, PathBuf};

use stageplan::calibration::measured::class_of;
use stageplan::fit::EngineRun;
use stageplan::fit::bench;
use stageplan_gpu::{AdapterSummary, Gpu, Probe, ProbeOptions};

use crate::cli::Format;
use crate::outcome::{Failure, Outcome};
use crate::{load, render};

/// What `probe` was asked.
pub(super) struct ProbeRequest {
    pub adapter: Option<usize>,
    pub cpu: bool,
    pub gpu: bool,
    pub threads: Option<usize>,
    pub quick: bool,
    /// llama-bench, and the models it runs, for the engine's own rates (`--cpu` only).
    pub engine: Option<PathBuf>,
    pub models: Vec<PathBuf>,
    pub memory_cap: Option<String>,
}

/// Measures the CPU when asked, or when every adapter is a software renderer; else the
/// chosen adapters (all by default).
pub(super) fn probe(request: ProbeRequest, format: Format) -> Result<Outcome, Failure> {
    let ProbeRequest { adapter, cpu, gpu, threads, quick, engine, models, memory_cap } = request;
    let engine = match (engine, models.is_empty()) {
        (None, true) => None,
        (Some(bench), false) => Some((bench, models)),
        (Some(_), true) => {
            return Err(Failure(
                "`--engine` needs models to run: add `--model FILE.gguf`, one per weight type you plan".to_owned(),
            ));
        }
        (None, false) => {
            return Err(Failure("`--model` is what `--engine` runs: add `--engine PATH/llama-bench`".to_owned()));
        }
    };
    if cpu || threads.is_some() || engine.is_some() || (adapter.is_none() && !gpu && !has_hardware_adapter()) {
        return probe_cpu(threads, quick, engine.as_ref(), format);
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

/// `stageplan probe --cpu`, and with `--engine` llama-bench on each model, fitted.
fn probe_cpu(
    threads: Option<usize>,
    quick: bool,
    engine: Option<&(PathBuf, Vec<PathBuf>)>,
    format: Format,
) -> Result<Outcome, Failure> {
    let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    let options =
        if quick { stageplan_cpu::CpuOptions::quick(threads) } else { stageplan_cpu::CpuOptions::new(threads) };
    // Checked before the probe runs: a typo should not cost the minute the probe takes.
    if let Some((bench, models)) = engine {
        for (flag, path) in std::iter::once(("--engine", bench)).chain(models.iter().map(|m| ("--model", m))) {
            // The model's path goes into a scenario, which is text.
            if flag == "--model" && path.to_str().is_none() {
                return Err(Failure(format!(
                    "`--model` {}: the path is not UTF-8; give a path in UTF-8 (rename the file or a folder above it)",
                    stageplan::quote::line(&path.display().to_string())
                )));
            }
            if !path.is_file() {
                return Err(Failure(format!(
                    "`{flag}` {}: no such file; give the path of {}",
                    stageplan::quote::line(&path.display().to_string()),
                    if flag == "--engine" { "llama-bench (your llama.cpp build's bin/)" } else { "a GGUF model" }
                )));
            }
        }
    }
    let probe = stageplan_cpu::probe(&options, &mut |step| eprintln!("probing the CPU: {step}"))
        .map_err(|e| Failure(e.to_string()))?;
    let mut node = probe.node("this-cpu");
    let mut runs = Vec::new();
    if let Some((bench, models)) = engine {
        runs = engine_runs(bench, models, &node, threads)?;
        let mut fit = stageplan::fit::fit_engine(&runs).map_err(Failure)?;
        fit.method = format!(
            "{} -p {BENCH_PROMPT} -n {BENCH_TOKENS} -r {BENCH_REPETITIONS} -ngl 0 -t {threads} on {}",
            bench.display(),
            runs.iter()
                .map(|r| format!("{} ({})", r.problem.model.name, class_of(&r.problem.model).name()))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(provenance) = node.probe.as_mut() {
            provenance.engine = Some(fit);
        }
    }
    // Each run against the node that was fitted to all of them.
    let checked: Vec<(String, String, f64, f64)> = runs
        .iter()
        .map(|run| {
            let mut problem = run.problem.clone();
            problem.nodes[0].probe.clone_from(&node.probe);
            let plan = stageplan::plan(&problem);
            (
                problem.model.name.clone(),
                class_of(&problem.model).name().to_owned(),
                run.tokens_per_s,
                plan.stream_tokens_per_s,
            )
        })
        .collect();
    let warning = (!probe.stable()).then(|| {
        format!(
            "warning: the machine was too busy to measure steadily (bandwidth spread {:.0}%, compute {:.0}%); \
             close other programs and probe again, or plan with the wider error band the node carries\n",
            probe.bandwidth.spread * 100.0,
            probe.compute.spread * 100.0
        )
    });
    let stdout = match format {
        Format::Json => {
            let engine: Vec<serde_json::Value> = checked
                .iter()
                .map(|(model, weights, measured, predicted)| {
                    serde_json::json!({"model": model, "weights": weights, "measured_tokens_per_s": measured,
                        "predicted_tokens_per_s": predicted})
                })
                .collect();
            serde_json::to_string_pretty(&serde_json::json!({"cpu": probe, "engine_runs": engine, "nodes": [node]}))?
                + "\n"
        }
        Format::Table => render::gpu::cpu_probe(&probe, &node, &checked),
    };
    Ok(Outcome { stderr: warning.unwrap_or_default(), ..Outcome::ok(stageplan::quote::terminal(&stdout).into_owned()) })
}

/// Tokens each llama-bench decode run generates, and its repetitions: a few seconds a model.
const BENCH_TOKENS: u32 = 32;
const BENCH_REPETITIONS: u32 = 3;
/// The prompt each llama-bench run also processes (`-p`), for the rate of the engine's
/// products over many tokens: past 32 tokens llama.cpp's CPU kernels work as matrix
/// products, and a short prompt keeps the probe to a few seconds more.
const BENCH_PROMPT: u32 = 32;

/// llama-bench on each model with the probe's threads, on the CPU (`-ngl 0`): each run as
/// the one-node problem it was (the model read from its file) and its decode rate.
fn engine_runs(
    bench: &Path,
    models: &[PathBuf],
    node: &stageplan::scenario::NodeSpec,
    threads: usize,
) -> Result<Vec<EngineRun>, Failure> {
    let shown = |p: &Path| stageplan::quote::line(&p.display().to_string()).into_owned();
    let mut runs = Vec::new();
    for model in models {
        eprintln!("probing the CPU: llama-bench on {}", shown(model));
        let output = std::process::Command::new(bench)
            .arg("-m")
            .arg(model)
            .args(["-p", &BENCH_PROMPT.to_string(), "-n", &BENCH_TOKENS.to_string()])
            .args(["-r", &BENCH_REPETITIONS.to_string()])
            .args(["-ngl", "0", "-o", "jsonl", "-t", &threads.to_string()])
            .output()
            .map_err(|e| Failure(format!("`--engine` {}: {e}; give the path of llama-bench", shown(bench))))?;
        if !output.status.success() {
            let said = String::from_utf8_lossy(&output.stderr);
            return Err(Failure(format!(
                "`--engine` {} failed on {} ({}): {}",
                shown(bench),
                shown(model),
                output.status,
                stageplan::quote::line(said.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message"))
            )));
        }
        let tests = bench::parse(&String::from_utf8_lossy(&output.stdout))
            .map_err(|e| Failure(format!("`--engine` {}: {e}", shown(bench))))?;
        let test = *bench::decode_tests(&tests)
            .first()
            .ok_or_else(|| Failure(format!("`--engine` {} printed no decode test", shown(bench))))?;
        // UTF-8, as checked before the probe.
        let file = model.to_string_lossy();
        let scenario = serde_json::json!({
            "model": {"file": file},
            // The decode test's context is its generated tokens (llama-bench runs `-p` and
            // `-n` as separate tests).
            "workload": {"context": test.n_gen.max(1), "batch": 1, "prompt": 1},
            "nodes": [node],
        });
        let problem = load::problem(Path::new("."), stageplan::Scenario::from_json(&scenario.to_string())?)?;
        let prompt = bench::prompt_tests(&tests).first().map(|t| (t.n_prompt, t.avg_ts));
        runs.push(EngineRun { problem, tokens_per_s: test.avg_ts, prompt });
    }
    Ok(runs)
}
