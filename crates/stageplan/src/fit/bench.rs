//! A user's own measurements: llama-bench results (`llama-bench -o json` or `-o jsonl`) turned
//! into the scenario node that predicts them.
//!
//! Each decode test (`n_gen > 0`, no prompt) is a measured time per token for a model of
//! `model_size` bytes and `model_n_params` parameters. The model's shape comes from the
//! preset with the nearest parameter count (or the one given); the cost model predicts the
//! test with the backend's fitted terms — planning the one-node scenario the test describes,
//! built as a value — and the node's `efficiency.bandwidth` is what makes prediction and
//! measurement agree (the median over the tests). Fields are those
//! llama.cpp's `tools/llama-bench/llama-bench.cpp` prints (`test::get_fields`).

use serde::Deserialize;

use crate::device::Efficiency;
use crate::device::{Backend, DeviceKind};
use crate::engine::Engine;
use crate::limits::{MAX_CONTEXT, MAX_THREADS};
use crate::model::WeightFormat;
use crate::presets::{DevicePreset, ModelPreset};
use crate::scenario::{LinksSpec, ModelSpec, NodeSpec, Objective, Policy, Scenario, WorkloadSpec};
use crate::units::Bytes;

/// One llama-bench test, with the fields this reads.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct BenchTest {
    #[serde(default)]
    pub backends: String,
    #[serde(default)]
    pub gpu_info: String,
    #[serde(default)]
    pub cpu_info: String,
    #[serde(default)]
    pub model_type: String,
    pub model_size: u64,
    pub model_n_params: u64,
    #[serde(default)]
    pub n_threads: u64,
    /// Layers offloaded to the GPU (`-ngl`): 0 ran on the CPU, whatever the build's backend.
    #[serde(default)]
    pub n_gpu_layers: Option<i64>,
    /// Layers whose experts stay in system RAM (`--n-cpu-moe`).
    #[serde(default)]
    pub n_cpu_moe: Option<i64>,
    /// Tensor placements (`-ot`), `pattern=BUFFER` joined by `;`, or `none`.
    #[serde(default)]
    pub tensor_buft_overrides: String,
    pub n_prompt: u64,
    pub n_gen: u64,
    #[serde(default)]
    pub n_depth: u64,
    /// Tokens per second, averaged over the repetitions.
    pub avg_ts: f64,
}

/// What is wrong with a results file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BenchError {
    #[error("not llama-bench JSON or JSONL ({0}); run `llama-bench -o json > results.json`")]
    Format(String),
    #[error("no decode test (`n_gen` > 0 with `n_prompt` 0); run llama-bench with `-n 128` (its default)")]
    NoDecode,
    #[error("test {index}: `{field}` is {value}; {fix}")]
    Field { index: usize, field: &'static str, value: String, fix: &'static str },
}

/// At most this many tests are read: llama-bench writes one per parameter combination.
pub const MAX_TESTS: usize = 10_000;

/// The tests in llama-bench's JSON (an array) or JSONL (one object per line) output.
pub fn parse(text: &str) -> Result<Vec<BenchTest>, BenchError> {
    let text = text.trim_start_matches('\u{feff}').trim();
    let tests: Vec<BenchTest> = if text.starts_with('[') {
        serde_json::from_str(text).map_err(|e| BenchError::Format(e.to_string()))?
    } else {
        let lines = || text.lines().filter(|l| !l.trim().is_empty());
        // One file, one verdict: past the limit the JSONL form is refused as the array is.
        let count = lines().count();
        if count > MAX_TESTS {
            return Err(BenchError::Format(format!("{count} tests; at most {MAX_TESTS} are read")));
        }
        let mut tests = Vec::new();
        for (n, line) in lines().enumerate() {
            tests.push(serde_json::from_str(line).map_err(|e| BenchError::Format(format!("line {}: {e}", n + 1)))?);
        }
        tests
    };
    if tests.len() > MAX_TESTS {
        return Err(BenchError::Format(format!("{} tests; at most {MAX_TESTS} are read", tests.len())));
    }
    for (index, t) in tests.iter().enumerate() {
        let bad = |field, value: String, fix| Err(BenchError::Field { index, field, value, fix });
        if !(t.avg_ts.is_finite() && t.avg_ts > 0.0) {
            return bad("avg_ts", t.avg_ts.to_string(), "a measured rate is a positive number");
        }
        if t.model_size == 0 || t.model_n_params == 0 {
            return bad("model_size", t.model_size.to_string(), "the model's bytes and parameters must be known");
        }
        // The test's context, `n_depth + n_gen`, checked: a wrapped sum once fitted a test
        // 2^64 − 64 tokens deep at a 64-token context.
        if t.n_depth.checked_add(t.n_gen).is_none_or(|context| context > MAX_CONTEXT) {
            return bad(
                "n_depth",
                t.n_depth.to_string(),
                "`n_depth` + `n_gen`, the test's context, is at most 67108864 tokens (2^26)",
            );
        }
    }
    Ok(tests)
}

/// The decode tests: a generated-token rate with no prompt in the same test.
pub fn decode_tests(tests: &[BenchTest]) -> Vec<&BenchTest> {
    tests.iter().filter(|t| t.n_gen > 0 && t.n_prompt == 0).collect()
}

/// The prompt-processing tests: a prompt's token rate with nothing generated in the test.
pub fn prompt_tests(tests: &[BenchTest]) -> Vec<&BenchTest> {
    tests.iter().filter(|t| t.n_prompt > 0 && t.n_gen == 0).collect()
}

/// The backend a test ran on, from llama-bench's `backends` field (`CUDA`, `Metal`,
/// `ROCm`/`HIP`, `Vulkan`, `CPU`, or several joined by commas: the first GPU one wins), and
/// the CPU when it offloaded no layer (`n_gpu_layers` 0, as `llama-bench -ngl 0` writes it
/// with the build's GPU backend named all the same).
pub fn backend_of(test: &BenchTest) -> Backend {
    let b = test.backends.to_ascii_lowercase();
    if test.n_gpu_layers == Some(0) {
        Backend::Cpu
    } else if b.contains("cuda") {
        Backend::Cuda
    } else if b.contains("metal") || b.contains("mtl") {
        Backend::Metal
    } else if b.contains("rocm") || b.contains("hip") {
        Backend::Rocm
    } else if b.contains("vulkan") {
        Backend::Vulkan
    } else {
        Backend::Cpu
    }
}

/// Whether a test kept part of its model in system RAM: fewer layers offloaded than the
/// model's blocks and output (`-ngl`, when the model has `layers` blocks), experts on the
/// CPU (`--n-cpu-moe`), or tensors overridden to a CPU buffer (`-ot …=CPU`, llama-bench's
/// `tensor_buft_overrides`).
pub fn partial_offload(test: &BenchTest, layers: Option<usize>) -> bool {
    let short = match (test.n_gpu_layers, layers) {
        (Some(n), Some(layers)) => n > 0 && u64::try_from(n).is_ok_and(|n| n <= layers as u64),
        _ => false,
    };
    let to_cpu = test.tensor_buft_overrides.split(';').filter_map(|o| o.rsplit_once('=')).any(|(_, buffer)| {
        let buffer = buffer.trim().to_ascii_uppercase();
        buffer.starts_with("CPU") || buffer == "AMX"
    });
    short || test.n_cpu_moe.is_some_and(|n| n > 0) || to_cpu
}

/// The model preset with the parameter count nearest `params` (within 15%), for the shape.
pub fn nearest_preset(params: u64) -> Option<&'static ModelPreset> {
    crate::presets::MODELS
        .iter()
        .map(|p| (p, (p.published_params / params as f64).ln().abs()))
        .filter(|(_, d)| *d < 0.15f64.ln_1p())
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(p, _)| p)
}

/// The weight format llama.cpp's `model_type` names (`llama 8B Q4_K - Medium` → `q4_k_m`),
/// else the one whose bits per weight are nearest `model_size ÷ model_n_params`.
pub fn weights_of(test: &BenchTest) -> String {
    let named = test.model_type.split_whitespace().skip(2).collect::<Vec<_>>().join(" ").to_ascii_lowercase();
    let named = named
        .replace(" - medium", "_m")
        .replace(" - small", "_s")
        .replace(" - large", "_l")
        .split(" - ")
        .next()
        .unwrap_or_default()
        .trim_start_matches("all ")
        .to_owned();
    if named.parse::<crate::WeightFormat>().is_ok() {
        return named;
    }
    let bits = test.model_size as f64 * 8.0 / test.model_n_params as f64;
    [
        ("f16", 16.0),
        ("q8_0", 8.5),
        ("q6_k", 6.56),
        ("q5_k_m", 5.7),
        ("q4_k_m", 4.85),
        ("q4_0", 4.5),
        ("q3_k_m", 3.9),
        ("q2_k", 3.0),
    ]
    .into_iter()
    .min_by(|a, b| (a.1 - bits).abs().total_cmp(&(b.1 - bits).abs()))
    .map_or_else(|| "f16".to_owned(), |(name, _)| name.to_owned())
}

/// A decode test against the cost model.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    pub model: String,
    pub weights: String,
    pub measured: f64,
    /// Tokens/s predicted with the backend's fitted terms.
    pub fitted: f64,
    /// Tokens/s predicted with the node's fitted efficiency too.
    pub with_node: f64,
}

/// The node that predicts a machine's llama-bench decode tests.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeFit {
    pub backend: Backend,
    /// `efficiency.bandwidth` on top of the backend's fitted terms.
    pub efficiency: f64,
    pub tests: Vec<Checked>,
    /// Decode tests left out of the fit because they ran on another backend, with how many.
    pub left_out: Vec<(Backend, usize)>,
    /// Decode tests left out because they kept part of the model in system RAM.
    pub partial: usize,
}

impl NodeFit {
    /// What the fit adds to the machine's scenario node: its `backend`, and
    /// `efficiency.bandwidth` to three decimals (`compute` kept from `node`, if it has one).
    pub fn fields(&self, node: &serde_json::Value) -> serde_json::Value {
        let mut efficiency = serde_json::json!({ "bandwidth": (self.efficiency * 1000.0).round() / 1000.0 });
        if let Some(compute) = node.pointer("/efficiency/compute") {
            efficiency["compute"] = compute.clone();
        }
        serde_json::json!({ "backend": self.backend.name(), "efficiency": efficiency })
    }

    /// `3 decode tests on llama.cpp CUDA`.
    pub fn summary(&self) -> String {
        let n = self.tests.len();
        format!("{n} decode test{} on llama.cpp {}", if n == 1 { "" } else { "s" }, self.backend.title())
    }

    /// Why tests were left out, one line each: `left out 2 decode tests that ran on the CPU …`.
    pub fn notes(&self) -> Vec<String> {
        let partial = (self.partial > 0).then(|| {
            let n = self.partial;
            format!(
                "left out {n} decode test{} that kept part of the model in system RAM (`-ngl` under the model's layers, `--n-cpu-moe` or `-ot …=CPU`): this fits the GPU alone; plan such runs with the machine's `host`",
                if n == 1 { "" } else { "s" }
            )
        });
        self.left_out
            .iter()
            .map(|&(backend, n)| {
                let tests = format!("{n} decode test{}", if n == 1 { "" } else { "s" });
                if backend == Backend::Cpu {
                    format!(
                        "left out {tests} that ran on the CPU (`n_gpu_layers` 0 or a CPU build), not on {}: \
                         fit {} to the CPU's own node (`--device` a CPU preset)",
                        self.backend.title(),
                        if n == 1 { "it" } else { "them" }
                    )
                } else {
                    format!("left out {tests} that ran on {}, not on {}", backend.title(), self.backend.title())
                }
            })
            .chain(partial)
            .collect()
    }
}

/// Fits `efficiency.bandwidth` of a node with `node` figures (a scenario node's JSON
/// object: `device`, or `bandwidth` and `compute`) to the decode tests.
///
/// # Errors
/// No decode test, a node that is not a scenario node, or no model shape for a test
/// (`model` names a preset to use).
pub fn fit_node(
    tests: &[BenchTest],
    node: &serde_json::Value,
    model: Option<&'static ModelPreset>,
) -> Result<NodeFit, String> {
    let all = decode_tests(tests);
    if all.is_empty() {
        return Err(BenchError::NoDecode.to_string());
    }
    let mut node = machine(node)?;
    // The backend fitted: the CPU's for a CPU node, else the first GPU backend a test ran on
    // (the CPU's when none did and the node's kind is not given); tests on any other backend
    // are left out, with a note. A GPU's node is never fitted to tests that ran on the CPU.
    let kind = node.kind.or_else(|| node.device.as_deref().and_then(|d| DevicePreset::find(d).ok()).map(|d| d.kind));
    let gpu = all.iter().map(|t| backend_of(t)).find(|b| *b != Backend::Cpu);
    let backend = match (kind, gpu) {
        (Some(DeviceKind::Cpu), _) | (None, None) => Backend::Cpu,
        (_, Some(gpu)) => gpu,
        (Some(_), None) => {
            return Err("every decode test ran on the CPU (`n_gpu_layers` 0 or a CPU build), not on this GPU; \
                 fit them to the CPU's own node (`--device` a CPU preset), or run llama-bench with `-ngl 99`"
                .to_owned());
        }
    };
    node.backend = Some(backend);
    let (decode, others): (Vec<&BenchTest>, Vec<&BenchTest>) = all.into_iter().partition(|t| backend_of(t) == backend);
    let mut left_out: Vec<(Backend, usize)> = Vec::new();
    for other in others {
        match left_out.iter_mut().find(|(b, _)| *b == backend_of(other)) {
            Some((_, n)) => *n += 1,
            None => left_out.push((backend_of(other), 1)),
        }
    }
    if decode.is_empty() {
        return Err(format!(
            "no decode test ran on {}, the backend of this machine's node ({}); give the figures of the machine that ran them",
            backend.title(),
            left_out.iter().map(|(b, n)| format!("{n} on {}", b.title())).collect::<Vec<_>>().join(", ")
        ));
    }
    // A GPU's node is fitted to runs on the GPU alone: a run that kept part of the model in
    // system RAM measured the RAM too.
    let layers = |test: &BenchTest| {
        let preset = model.or_else(|| nearest_preset(test.model_n_params))?;
        preset.model(WeightFormat::default()).ok().map(|m| m.num_layers())
    };
    let (decode, partial): (Vec<&BenchTest>, Vec<&BenchTest>) =
        decode.into_iter().partition(|t| backend == Backend::Cpu || !partial_offload(t, layers(t)));
    if decode.is_empty() {
        return Err(format!(
            "every decode test on {} kept part of the model in system RAM (`-ngl` under the model's layers, `--n-cpu-moe` or `-ot …=CPU`); run llama-bench with `-ngl 99` and no overrides to fit the GPU",
            backend.title()
        ));
    }
    let predict = |test: &BenchTest, efficiency: f64| -> Result<(f64, f64, f64, String), String> {
        let preset = model.or_else(|| nearest_preset(test.model_n_params)).ok_or_else(|| {
            format!(
                "no model preset has about {:.2} B parameters like `{}`; give `--model PRESET` for its shape",
                test.model_n_params as f64 / 1e9,
                crate::quote::line(&test.model_type)
            )
        })?;
        let problem = crate::check(bench_scenario(test, preset, &node, efficiency), crate::check::no_model_files)
            .map_err(|e| e.to_string())?
            .problem;
        let plan = crate::plan(&problem);
        let stage = plan.stages.first().ok_or("the model does not fit 4 TiB")?;
        Ok((stage.time_s, stage.time.memory_s, stage.time.overhead_s + stage.time.send_s, preset.name.to_owned()))
    };
    // Each test's efficiency: the memory term that makes the prediction equal the measurement.
    let at_fitted = decode.iter().map(|test| predict(test, 1.0)).collect::<Result<Vec<_>, _>>()?;
    let solved: Vec<f64> = decode
        .iter()
        .zip(&at_fitted)
        .map(|(test, (_, memory_s, overhead_s, _))| {
            let left = 1.0 / test.avg_ts - overhead_s;
            if left > 0.0 { memory_s / left } else { 1.5 }
        })
        .collect();
    let efficiency = crate::calibration::quantile(&solved, 0.5).clamp(0.05, 1.5);
    let mut checked = Vec::new();
    for (test, (fitted, _, _, name)) in decode.iter().zip(at_fitted) {
        let (with_node, _, _, _) = predict(test, efficiency)?;
        checked.push(Checked {
            model: name,
            weights: weights_of(test),
            measured: test.avg_ts,
            fitted: 1.0 / fitted,
            with_node: 1.0 / with_node,
        });
    }
    Ok(NodeFit { backend, efficiency, tests: checked, left_out, partial: partial.len() })
}

/// The machine that ran the tests, from its scenario node: named `this`, with room for any
/// model (4 TiB, nothing reserved); the caller sets its backend.
fn machine(node: &serde_json::Value) -> Result<NodeSpec, String> {
    let mut fields = node.as_object().cloned().ok_or("a machine is a JSON object like `{\"device\": \"rtx-4090\"}`")?;
    fields.insert("name".to_owned(), "this".into());
    let mut spec: NodeSpec = serde_json::from_value(fields.into()).map_err(|e| format!("the machine: {e}"))?;
    spec.memory = Some(Bytes::new(4.0 * 1024f64.powi(4)).map_err(|e| e.to_string())?);
    spec.reserve = Some(Bytes::default());
    Ok(spec)
}

/// The one-node scenario a decode test measured: `node` at `efficiency` of its bandwidth
/// (on top of the backend's fitted terms) and, on a CPU, the test's threads; `preset` in the
/// test's weight format; one sequence of the test's depth and generated tokens.
fn bench_scenario(test: &BenchTest, preset: &ModelPreset, node: &NodeSpec, efficiency: f64) -> Scenario {
    let mut node = node.clone();
    node.efficiency = Some(Efficiency { bandwidth: efficiency, ..Efficiency::default() });
    if node.backend == Some(Backend::Cpu) && test.n_threads > 0 {
        node.threads = Some(u32::try_from(test.n_threads).unwrap_or(MAX_THREADS).min(MAX_THREADS));
    }
    Scenario {
        model: ModelSpec {
            preset: Some(preset.name.to_owned()),
            weights: Some(weights_of(test)),
            ..ModelSpec::default()
        },
        workload: WorkloadSpec {
            context: test.n_depth.saturating_add(test.n_gen).max(1),
            batch: 1,
            ..WorkloadSpec::default()
        },
        nodes: vec![node],
        links: LinksSpec::default(),
        objective: Objective::default(),
        policy: Policy::default(),
        engine: Engine::default(),
        stages: None,
        serving: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shaped as llama.cpp's `json_printer` and `jsonl_printer` write it.
    const JSON: &str = r#"[
  {
    "build_commit": "8e672efe",
    "build_number": 1550,
    "cpu_info": "AMD Ryzen 9 7950X 16-Core Processor",
    "gpu_info": "NVIDIA GeForce RTX 4090",
    "backends": "CUDA",
    "model_filename": "models/llama-3.1-8b-q4_k_m.gguf",
    "model_type": "llama 8B Q4_K - Medium",
    "model_size": 4920734720,
    "model_n_params": 8030261248,
    "n_batch": 2048,
    "n_ubatch": 512,
    "n_threads": 16,
    "type_k": "f16",
    "type_v": "f16",
    "n_gpu_layers": 99,
    "n_prompt": 512,
    "n_gen": 0,
    "n_depth": 0,
    "test_time": "2025-01-01T00:00:00Z",
    "avg_ns": 51000000,
    "stddev_ns": 100000,
    "avg_ts": 10039.2,
    "stddev_ts": 20.1,
    "samples_ns": [ 51000000 ],
    "samples_ts": [ 10039.2 ]
  },
  {
    "build_commit": "8e672efe", "build_number": 1550, "cpu_info": "AMD Ryzen 9 7950X 16-Core Processor",
    "gpu_info": "NVIDIA GeForce RTX 4090", "backends": "CUDA", "model_filename": "m.gguf",
    "model_type": "llama 8B Q4_K - Medium", "model_size": 4920734720, "model_n_params": 8030261248,
    "n_threads": 16, "n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ts": 127.7, "stddev_ts": 0.3,
    "samples_ns": [ 1002000000 ], "samples_ts": [ 127.7 ]
  }
]"#;

    #[test]
    fn reads_json_and_jsonl_and_picks_decode_tests() {
        let tests = parse(JSON).unwrap();
        assert_eq!(tests.len(), 2);
        let decode = decode_tests(&tests);
        assert_eq!((decode.len(), decode[0].avg_ts), (1, 127.7));
        assert_eq!(backend_of(decode[0]), Backend::Cuda);
        let jsonl: String = tests
            .iter()
            .map(|t| {
                format!(
                    "{{\"backends\": {:?}, \"model_size\": {}, \"model_n_params\": {}, \"n_prompt\": {}, \"n_gen\": {}, \"avg_ts\": {}}}\n",
                    t.backends, t.model_size, t.model_n_params, t.n_prompt, t.n_gen, t.avg_ts
                )
            })
            .collect();
        assert_eq!(decode_tests(&parse(&jsonl).unwrap()).len(), 1);
        assert_eq!(nearest_preset(8_030_261_248).map(|p| p.name), Some("llama-3.1-8b"));
        assert!(nearest_preset(100_000).is_none());
        assert_eq!(weights_of(decode[0]), "q4_k_m");
    }

    #[test]
    fn the_fitted_node_predicts_the_measurement() {
        let tests = parse(JSON).unwrap();
        let fit = fit_node(&tests, &serde_json::json!({"device": "rtx-4090"}), None).unwrap();
        assert_eq!(fit.tests.len(), 1);
        let t = &fit.tests[0];
        assert!((t.with_node / t.measured - 1.0).abs() < 1e-6, "{fit:?}");
        assert!(fit.efficiency > 0.5 && fit.efficiency < 1.5, "{fit:?}");
        // What a scenario node gets: the backend, the bandwidth factor, the node's own compute.
        let fields = fit.fields(&serde_json::json!({"device": "rtx-4090", "efficiency": {"compute": 0.7}}));
        assert_eq!(fields["backend"], "cuda");
        assert_eq!(fields["efficiency"]["compute"], 0.7);
        assert_eq!(fields["efficiency"]["bandwidth"], (fit.efficiency * 1000.0).round() / 1000.0);
        assert_eq!(fit.summary(), "1 decode test on llama.cpp CUDA");
    }

    #[test]
    fn foreign_and_hostile_files_are_one_line_errors() {
        for (text, want) in [
            ("{\"a\": 1}", "not llama-bench"),
            ("hello", "not llama-bench"),
            ("[{\"model_size\": 1, \"model_n_params\": 1, \"n_prompt\": 0, \"n_gen\": 1, \"avg_ts\": -1}]", "avg_ts"),
            (
                "[{\"model_size\": 0, \"model_n_params\": 1, \"n_prompt\": 0, \"n_gen\": 1, \"avg_ts\": 1}]",
                "model_size",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains('\n'), "{e}");
        }
    }

    /// Issue #32 item 11: a JSONL file past the limit was cut to its first tests, while the
    /// array form of the same file was refused.
    #[test]
    fn a_file_past_the_limit_is_refused_in_either_form() {
        let test = r#"{"backends": "CUDA", "model_size": 4920734720, "model_n_params": 8030261248, "n_prompt": 0, "n_gen": 128, "avg_ts": 127.7}"#;
        let jsonl = format!("{test}\n").repeat(MAX_TESTS + 1);
        let array = format!("[{}]", vec![test; MAX_TESTS + 1].join(","));
        for text in [jsonl, array] {
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains("10001 tests; at most 10000 are read") && !e.contains('\n'), "{e}");
        }
        assert_eq!(parse(&format!("{test}\n").repeat(MAX_TESTS)).unwrap().len(), MAX_TESTS);
    }

    /// Issue #32 item 12: `n_depth + n_gen` wrapped, so a test 2^64 − 64 deep was fitted at a
    /// 64-token context; 2^63 deep was refused only by the scenario's check, without the test.
    #[test]
    fn a_context_past_the_limit_names_the_field_and_the_test() {
        for depth in [u64::MAX - 63, 1 << 63, MAX_CONTEXT] {
            let text = format!(
                "[{{\"model_size\": 1, \"model_n_params\": 1, \"n_prompt\": 512, \"n_gen\": 0, \"avg_ts\": 1}},\
                 {{\"model_size\": 1, \"model_n_params\": 1, \"n_prompt\": 0, \"n_gen\": 128, \"n_depth\": {depth}, \"avg_ts\": 1}}]"
            );
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.starts_with(&format!("test 1: `n_depth` is {depth};")) && !e.contains('\n'), "{e}");
        }
        let deepest = format!(
            "{{\"model_size\": 1, \"model_n_params\": 1, \"n_prompt\": 0, \"n_gen\": 128, \"n_depth\": {}, \"avg_ts\": 1}}",
            MAX_CONTEXT - 128
        );
        assert!(parse(&deepest).is_ok());
    }

    /// Issue #32 item 10: `llama-bench -ngl 0,99` tags its `n_gpu_layers` 0 rows with the
    /// build's `CUDA`; they were fitted as GPU runs (the 4090 then predicted 12.1 tok/s for a
    /// test measured at 127.7).
    #[test]
    fn rows_that_ran_on_the_cpu_are_left_out_of_a_gpus_fit() {
        let row = |ngl: u32, ts: f64| {
            format!(
                "{{\"backends\": \"CUDA\", \"model_type\": \"llama 8B Q4_K - Medium\", \"model_size\": 4920734720, \
                 \"model_n_params\": 8030261248, \"n_threads\": 16, \"n_gpu_layers\": {ngl}, \"n_prompt\": 0, \
                 \"n_gen\": 128, \"avg_ts\": {ts}}}"
            )
        };
        let tests = parse(&format!("{}\n{}\n", row(0, 12.1), row(99, 127.7))).unwrap();
        let fit = fit_node(&tests, &serde_json::json!({"device": "rtx-4090"}), None).unwrap();
        assert_eq!((fit.backend, fit.tests.len(), fit.tests[0].measured), (Backend::Cuda, 1, 127.7), "{fit:?}");
        assert!((fit.tests[0].with_node / 127.7 - 1.0).abs() < 1e-6, "{fit:?}");
        assert_eq!(fit.left_out, vec![(Backend::Cpu, 1)]);
        assert!(fit.notes()[0].starts_with("left out 1 decode test that ran on the CPU"), "{:?}", fit.notes());
        // The same rows fit a CPU's node, the GPU's left out.
        let cpu = fit_node(&tests, &serde_json::json!({"device": "cpu-ddr5-dual-channel"}), None).unwrap();
        assert_eq!((cpu.backend, cpu.tests.len(), cpu.tests[0].measured), (Backend::Cpu, 1, 12.1), "{cpu:?}");
        assert_eq!(cpu.left_out, vec![(Backend::Cuda, 1)]);
        // Only CPU rows: a GPU's node is refused, not fitted to them.
        let only_cpu = parse(&row(0, 12.1)).unwrap();
        let e = fit_node(&only_cpu, &serde_json::json!({"device": "rtx-4090"}), None).unwrap_err();
        assert!(e.contains("ran on the CPU") && !e.contains('\n'), "{e}");
        // A GPU's rows with a CPU's node: nothing to fit.
        let only_gpu = parse(&row(99, 127.7)).unwrap();
        let e = fit_node(&only_gpu, &serde_json::json!({"device": "cpu-ddr5-dual-channel"}), None).unwrap_err();
        assert!(e.contains("1 on CUDA") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn a_machine_that_is_no_scenario_node_is_an_error() {
        let tests = parse(JSON).unwrap();
        for node in [serde_json::json!("rtx-4090"), serde_json::json!({"device": "rtx-4090", "memroy": "8 GiB"})] {
            let e = fit_node(&tests, &node, None).unwrap_err();
            assert!(e.contains("machine") && !e.contains('\n'), "{e}");
        }
        let e = fit_node(&tests, &serde_json::json!({"device": "rtx-9090"}), None).unwrap_err();
        assert!(e.contains("nodes[0].device"), "{e}");
    }

    #[test]
    fn runs_that_kept_part_of_the_model_in_ram_are_left_out_of_a_gpus_fit() {
        // Three runs of an 8B model (32 layers) with part of it in RAM, beside one on the
        // GPU alone: a fit of the GPU from them predicted a full-GPU run 81% off (#45).
        let run = |extra: &str, ts: f64| {
            format!(
                r#"{{"backends": "CUDA", "model_type": "llama 8B Q4_K - Medium", "model_size": 4920734720, "model_n_params": 8030261248, "n_prompt": 0, "n_gen": 128, "avg_ts": {ts}{extra}}}"#
            )
        };
        let lines = [
            run(r#", "n_gpu_layers": 99"#, 127.7),
            run(r#", "n_gpu_layers": 16"#, 21.0),
            run(r#", "n_gpu_layers": 99, "n_cpu_moe": 4"#, 60.0),
            run(r#", "n_gpu_layers": 99, "tensor_buft_overrides": "blk.1[0-9].ffn=CPU""#, 40.0),
        ];
        let tests = parse(&lines.join("\n")).unwrap();
        let node = serde_json::json!({"device": "rtx-4090"});
        let fit = fit_node(&tests, &node, None).unwrap();
        assert_eq!((fit.tests.len(), fit.partial), (1, 3));
        assert_eq!(fit.tests[0].measured, 127.7);
        assert!(
            fit.notes()
                .iter()
                .any(|n| n.starts_with("left out 3 decode tests that kept part of the model in system RAM"))
        );
        // Nothing on the GPU alone: nothing to fit, and what to run instead.
        let error = fit_node(&tests[1..], &node, None).unwrap_err();
        assert!(error.contains("kept part of the model in system RAM") && error.contains("-ngl 99"), "{error}");
        // `-ngl 33` of a 32-layer model offloads every block and the output: the GPU alone.
        assert!(!partial_offload(&parse(&run(r#", "n_gpu_layers": 33"#, 1.0)).unwrap()[0], Some(32)));
        assert!(partial_offload(&parse(&run(r#", "n_gpu_layers": 32"#, 1.0)).unwrap()[0], Some(32)));
    }
}
