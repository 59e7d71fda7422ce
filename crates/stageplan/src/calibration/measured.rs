//! Figures measured on the machine itself (issue #33): what the engine reaches there, so no
//! spec-sheet term applies on top.
//!
//! A node with a `probe` ([`ProbeProvenance`]) plans with its bandwidth as given: not the
//! fitted `η` (a fraction of *spec-sheet* peaks), not `μ`, not the per-thread cap, and not the
//! fitted per-layer `τ`, which on a CPU soaks up compute the published rows could not
//! separate. On a CPU, llama.cpp's decode streams every weight once per token at the probe's
//! read bandwidth unless its matrix-vector products are slower than the memory, which a
//! single thread's F16 and Q8_0 products are (they are not repacked on x86; Q4_0 and Q4_K
//! are). So a measured CPU node's decode step is
//!
//! `max(bytes ÷ bandwidth, Σ_t weights_t ÷ rate_t) + layers · τ`
//!
//! with `rate_t` the products' rate of each tensor type `t` the model holds at the node's
//! threads (a model is several types: a Q4_0 file keeps its output head in Q6_K, which on
//! some CPUs runs at a fifth of Q4_0's rate, so one rate per model mispredicts a size with a
//! larger head). Each type's rate is its prior per thread ([`PRIOR_RATES`]) times the
//! threads, scaled by its class's fit to llama-bench on this machine (`stageplan probe --cpu
//! --engine`); a class not fitted scales as the fitted ones do, on average. A probed GPU keeps
//! its `compute` bound and its backend's `τ` (kernel launches, which the probe cannot see).
//! Prefill runs at the engine's own rate over a prompt where `probe --engine` measured it
//! (llama-bench's `pp`: llama.cpp's quantized kernels for many tokens reached four times the
//! probe's f32 matmul on the 2-vCPU EPYC of BENCHMARKS.md's serve check), else at the
//! node's `compute`.
//!
//! The constants come from llama-bench on random-weight Llama models of real sizes on the
//! 2-core CI machine; `cargo xtask cpu-check` (`crates/xtask/src/cpu_check.rs`) holds the
//! rule to llama-bench there, and its table is in BENCHMARKS.md.

use super::WeightClass;
use crate::device::Backend;
use crate::model::{Model, Place};
use crate::scenario::{EngineFit, ProbeProvenance};
use crate::tensor_type::TensorType;

/// Seconds of one thread's work per layer per decode step on a CPU beyond its products (the
/// graph's ~25 barriers and small ops, shared by the threads): fitted with the rates below to
/// llama-bench of the Llama 1B and 3B shapes (16 and 28 layers) in Q8_0, Q4_0, Q4_K_M and
/// pure types at one and two threads on the CI machine (1.05 ms at one thread, 0.57 ms a
/// layer at two; a constant 0.1 ms a layer left the 1B and 3B predictions 10–20% apart).
pub const CPU_LAYER_WORK_S: f64 = 1.0e-3;

/// Seconds a layer adds to a CPU's decode step at `threads` threads.
pub fn cpu_per_layer_s(threads: f64) -> f64 {
    CPU_LAYER_WORK_S / threads.max(1.0)
}

/// Weights per second one thread's matrix-vector products reach, per tensor type: llama.cpp
/// 0.3.36 on one vCPU of the Intel Xeon (AVX-512, AMX) that runs CI, from llama-bench
/// (`-p 0 -n 32 -r 3 -ngl 0 -t 1`) of Llama 3.2 1B shapes quantized with `--pure` to each
/// type, output and embedding included (BENCHMARKS.md, "CPU products per tensor type"). A
/// prior for CPUs probed without the engine, scaled by the node's threads; a type not here
/// runs as the one of its class nearest in bits per weight ([`prior_rate_per_thread`]).
pub const PRIOR_RATES: [(TensorType, f64); 16] = [
    // Half F16's: not measured (no matrix of a model is F32).
    (TensorType::F32, 3.7e9),
    (TensorType::F16, 7.4e9),
    (TensorType::BF16, 5.6e9),
    (TensorType::Q8_0, 1.6e10),
    (TensorType::Q4_0, 4.0e10),
    (TensorType::Q4_1, 3.3e10),
    (TensorType::Q5_0, 6.2e9),
    (TensorType::Q5_1, 7.9e9),
    (TensorType::Q2_K, 2.5e10),
    // 1.8e10 at one thread, 1.1e10 a thread at two: the mean.
    (TensorType::Q3_K, 1.45e10),
    (TensorType::Q4_K, 2.0e10),
    (TensorType::Q5_K, 1.1e10),
    (TensorType::Q6_K, 1.07e10),
    (TensorType::IQ4_XS, 1.7e10),
    (TensorType::IQ4_NL, 1.2e10),
    (TensorType::MXFP4, 2.1e10),
];

/// The prior rate of `ty`, per thread: [`PRIOR_RATES`]' own, else the rate of the type of
/// its class nearest in bits per weight.
pub fn prior_rate_per_thread(ty: TensorType) -> f64 {
    if let Some(&(_, rate)) = PRIOR_RATES.iter().find(|(t, _)| *t == ty) {
        return rate;
    }
    let class = WeightClass::of(ty.name());
    let bits = ty.bits_per_weight();
    PRIOR_RATES
        .iter()
        .filter(|(t, _)| WeightClass::of(t.name()) == class)
        .min_by(|a, b| (a.0.bits_per_weight() - bits).abs().total_cmp(&(b.0.bits_per_weight() - bits).abs()))
        .map_or(PRIOR_RATES[1].1, |&(_, rate)| rate)
}

/// The rate a model's decode products reach, weights per second: the weights each token
/// multiplies (a layer's, its experts' by the fraction a token is routed to, and the output
/// head's, a tied embedding's included) over the time they take, each type at `rate(type)`.
pub fn products_rate(model: &Model, rate: impl Fn(TensorType) -> f64) -> f64 {
    let routed = model.arch.moe.as_ref().map_or(1.0, |m| m.active as f64 / m.experts.max(1) as f64);
    let (mut weights, mut seconds) = (0.0, 0.0);
    // Matrices only: a norm's or a bias's weights are an element-wise step, not a product.
    for t in model.tensors.iter().filter(|t| t.shape.iter().filter(|&&d| d > 1).count() >= 2) {
        let share = match t.place {
            Place::Layer(_) if t.expert => routed,
            Place::Layer(_) | Place::Head => 1.0,
            Place::Embedding if model.head_shares_embedding => 1.0,
            Place::Embedding => continue,
        };
        let w = t.elements() as f64 * share;
        weights += w;
        seconds += w / rate(t.ty);
    }
    if seconds > 0.0 { weights / seconds } else { rate(TensorType::F16) }
}

/// Median |predicted ÷ measured − 1| of `cargo xtask cpu-check` (BENCHMARKS.md: 1.9–10.2%
/// over three runs with the engine's fitted rates, 14–28% with the probe alone), rounded up:
/// a probed CPU node's typical error. The probe alone is this machine's figure; on another CPU the
/// defaults are a prior, so probe with `--engine` where llama.cpp is at hand.
pub const CHECKED_ERROR: f64 = 0.20;
pub const ENGINE_CHECKED_ERROR: f64 = 0.10;

/// What a node's probe makes of its figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// Weights per second llama.cpp's decode products reach per class (float, Q8_0, legacy,
    /// k-quant), all threads together; `None` on a GPU, which its `compute` bounds.
    pub decode_rates: Option<[f64; 4]>,
    /// Seconds every layer adds to a decode step.
    pub per_layer_s: f64,
    /// The probe's bandwidth spread, `(max − min) ÷ median`.
    pub spread: f64,
    /// Whether the rates were fitted to llama-bench on the machine.
    pub engine_fitted: bool,
    /// The read bandwidth llama.cpp reaches as a multiple of the probe's (≥ 1), from the
    /// engine's memory-bound runs ([`EngineFit::read`](crate::scenario::EngineFit)).
    pub read: f64,
    /// FLOP/s of the engine's products over a prompt ([`EngineFit::prefill`]); `None`: the
    /// node's `compute`.
    ///
    /// [`EngineFit::prefill`]: crate::scenario::EngineFit::prefill
    pub prefill: Option<f64>,
}

impl Measured {
    /// The measured figures of a node with `probe`, running `backend` with `threads`.
    pub fn of(probe: &ProbeProvenance, backend: Backend, threads: Option<u32>) -> Measured {
        let spread = if probe.bandwidth_spread.is_finite() { probe.bandwidth_spread.max(0.0) } else { 1.0 };
        if backend != Backend::Cpu {
            let per_layer_s = super::FITTED.backend(backend).map_or(0.0, |t| t.per_layer_s);
            return Measured {
                decode_rates: None,
                per_layer_s,
                spread,
                engine_fitted: false,
                read: 1.0,
                prefill: None,
            };
        }
        let threads = f64::from(threads.unwrap_or(1).max(1));
        let fit = probe.engine.as_ref();
        let fitted = |class| fit.and_then(|f| f.rate(class)).filter(|r| r.is_finite() && *r > 0.0);
        // A class not fitted scales as the fitted ones do (their geometric mean), so the type
        // mix of a model predicts alike whichever class a run fitted.
        let prior = |class: WeightClass| prior_rate_per_thread(class.reference()) * threads;
        let scales: Vec<f64> =
            WeightClass::ALL.iter().filter_map(|&c| fitted(c).map(|r| (r / prior(c)).ln())).collect();
        let scale = if scales.is_empty() { 1.0 } else { (scales.iter().sum::<f64>() / scales.len() as f64).exp() };
        let rates = WeightClass::ALL.map(|class| fitted(class).unwrap_or(prior(class) * scale));
        Measured {
            decode_rates: Some(rates),
            per_layer_s: cpu_per_layer_s(threads),
            spread,
            engine_fitted: WeightClass::ALL.iter().any(|&class| fitted(class).is_some()),
            read: fit.and_then(|f| f.read).filter(|r| r.is_finite() && *r >= 1.0).unwrap_or(1.0),
            prefill: fit.and_then(|f| f.prefill).filter(|r| r.is_finite() && *r > 0.0),
        }
    }

    /// The measured figures of a checked node, if it has a probe.
    pub fn of_node(node: &crate::problem::Node) -> Option<Measured> {
        node.probe.as_ref().map(|p| Measured::of(p, node.backend, node.threads))
    }

    /// The decode products' rate for `model`'s weights, weights per second: each type at its
    /// prior's share of its class's rate ([`products_rate`]).
    pub fn decode_rate(&self, model: &Model) -> Option<f64> {
        let rates = self.decode_rates?;
        Some(products_rate(model, |ty| {
            let class = WeightClass::of(ty.name());
            rates[class as usize] * prior_rate_per_thread(ty) / prior_rate_per_thread(class.reference())
        }))
    }

    /// A prediction's typical error from these figures: the check's (with or without the
    /// engine's rates; on a GPU, `backend_error`), or half the probe's spread when wider.
    pub fn typical_error(&self, backend_error: f64) -> f64 {
        let checked = match (self.decode_rates, self.engine_fitted) {
            (None, _) => backend_error,
            (Some(_), true) => ENGINE_CHECKED_ERROR,
            (Some(_), false) => CHECKED_ERROR,
        };
        checked.max(self.spread / 2.0).min(0.95)
    }
}

/// The weight class of a model: its format's, or for a model read from a file the class of
/// the tensor type holding most of its layers' bytes (`q4_k_m` files are mostly Q4_K).
pub fn class_of(model: &Model) -> WeightClass {
    if model.weights.parse::<crate::WeightFormat>().is_ok() {
        return WeightClass::of(&model.weights);
    }
    let mut bytes: Vec<(crate::TensorType, u64)> = Vec::new();
    for t in model.tensors.iter().filter(|t| matches!(t.place, Place::Layer(_))) {
        match bytes.iter_mut().find(|(ty, _)| *ty == t.ty) {
            Some((_, b)) => *b = b.saturating_add(t.bytes),
            None => bytes.push((t.ty, t.bytes)),
        }
    }
    bytes.iter().max_by_key(|(_, b)| *b).map_or(WeightClass::Float, |(ty, _)| WeightClass::of(ty.name()))
}

impl EngineFit {
    /// The rate fitted for `class`, if any.
    pub fn rate(&self, class: WeightClass) -> Option<f64> {
        self.rates()[class as usize].1
    }

    /// Sets the rate of `class`.
    pub fn set_rate(&mut self, class: WeightClass, rate: f64) {
        let slot = match class {
            WeightClass::Float => &mut self.float,
            WeightClass::Q8 => &mut self.q8,
            WeightClass::Legacy => &mut self.legacy,
            WeightClass::KQuant => &mut self.kquant,
        };
        *slot = Some(rate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;

    /// A 1B model in `weights` on one CPU node with `node` fields (JSON, after the name).
    fn problem(weights: &str, node: &str) -> crate::Problem {
        let json = format!(
            r#"{{"model": {{"preset": "llama-3.2-1b", "weights": "{weights}"}}, "workload": {{"context": 16}},
                "nodes": [{{"name": "box", "kind": "cpu", "memory": "64 GiB", "bandwidth": "30 GB/s",
                            "compute": "50 GFLOPS", "threads": 2{node}}}]}}"#
        );
        Scenario::from_json(&json).unwrap().problem().unwrap()
    }

    const PROBE: &str = r#", "probe": {"adapter": "EPYC", "backend": "cpu", "bandwidth_spread": 0.04}"#;

    #[test]
    fn a_probed_cpus_prompts_run_at_the_engines_measured_rate() {
        let with = |engine: &str| {
            let mut problem = problem("q8_0", &PROBE.replace("0.04", &format!("0.04{engine}")));
            problem.workload.prompt = 16;
            crate::plan(&problem)
        };
        let compute = with("");
        let measured = with(r#", "engine": {"prefill": 2e11}"#);
        // 50 GFLOPS of f32 matmul against 200 of the engine's prompt kernels: the prompt is
        // compute-bound, so it runs 4× as fast; decode is the products' and the read's.
        let ratio = measured.prefill_tokens_per_s / compute.prefill_tokens_per_s;
        assert!((ratio - 4.0).abs() < 0.05, "{ratio}");
        assert_eq!(measured.stream_tokens_per_s, compute.stream_tokens_per_s);
    }

    #[test]
    fn a_probed_cpus_other_sequences_of_a_step_run_at_its_prompt_rate() {
        // One sequence's products at the engine's decode rate, the three others' as one
        // matrix product at its prompt's rate (#47): 1e10 weights/s decoding, 2e11 FLOP/s
        // over a prompt, so each other sequence costs a tenth of the first.
        let engine = r#", "engine": {"q8": 1e10, "prefill": 2e11}"#;
        let time = |batch: u64, engine: &str| {
            let mut problem = problem("q8_0", &PROBE.replace("0.04", &format!("0.04{engine}")));
            problem.workload.batch = batch;
            crate::CostModel::new(&problem).time(0, 0, 16, None)
        };
        // The first sequence's products under the roofline, the others' added.
        let step = |batch: u64, engine: &str| {
            let t = time(batch, engine);
            t.compute_s + t.batch_s
        };
        let (one, four) = (step(1, engine), step(4, engine));
        assert!((four / one - 1.3).abs() < 1e-9, "{one} {four}");
        // A node whose prompt is no faster than its decode prices the others at its decode
        // rate, but none above a re-read of its weights: a step of four never costs more
        // than four steps of one.
        let slow_prompt = r#", "engine": {"q8": 1e10, "prefill": 1e9}"#;
        let ratio = step(4, slow_prompt) / step(1, slow_prompt);
        assert!(ratio > 1.3 && ratio < 4.0, "{ratio}");
        assert!(time(4, slow_prompt).batch_s <= 3.0 * time(1, slow_prompt).memory_s);
    }

    #[test]
    fn a_probed_node_reads_at_its_measured_bandwidth_and_a_spec_node_does_not() {
        let probed = crate::plan(&problem("q4_k_m", PROBE));
        let spec = crate::plan(&problem("q4_k_m", ""));
        let (p, s) = (&probed.stages[0].time, &spec.stages[0].time);
        let bytes = crate::CostModel::new(&problem("q4_k_m", PROBE)).step_work(0, 16).0;
        // No η, no μ, no thread cap on top of the measured figure.
        assert!((p.memory_s - bytes / 30e9).abs() < 1e-12, "{p:?}");
        assert!(s.memory_s > p.memory_s * 1.1, "the spec node has the fitted efficiency: {s:?}");
        // The engine's per-layer cost, not the fitted τ that soaks up compute.
        assert!((p.overhead_s - 16.0 * cpu_per_layer_s(2.0)).abs() < 1e-12);
        let tau = super::super::FITTED.backend(Backend::Cpu).unwrap().per_layer_s;
        assert!((s.overhead_s - 16.0 * tau).abs() < 1e-12 && tau != cpu_per_layer_s(2.0));
    }

    #[test]
    fn decode_products_run_at_the_class_rate_and_prefill_at_compute() {
        let with = |engine: &str| problem("q8_0", &PROBE.replace("0.04", &format!("0.04, \"engine\": {engine}")));
        let fitted = with(r#"{"q8": 1e10}"#);
        let m = Measured::of_node(&fitted.nodes[0]).unwrap();
        assert!(m.engine_fitted);
        assert_eq!(m.decode_rates.unwrap()[WeightClass::Q8 as usize], 1e10);
        // The other classes scale as the fitted one does from its prior, for the node's two
        // threads.
        let scale = 1e10 / (2.0 * prior_rate_per_thread(TensorType::Q8_0));
        let float = m.decode_rates.unwrap()[WeightClass::Float as usize];
        assert!((float / (2.0 * prior_rate_per_thread(TensorType::F16) * scale) - 1.0).abs() < 1e-12, "{float}");
        let stage = crate::plan(&fitted).stages[0].time.clone();
        let flops = crate::CostModel::new(&fitted).step_work(0, 16).1;
        assert!((stage.compute_s - flops / 2e10).abs() < 1e-12, "{stage:?}");
        // A class the fit left out: the default; a fit with no class is no fit.
        assert!(!Measured::of_node(&with(r#"{"method": "none"}"#).nodes[0]).unwrap().engine_fitted);
        // Prefill still divides by `compute`.
        let slow = problem("q8_0", &format!(r#"{PROBE}, "efficiency": {{"compute": 0.5}}"#));
        assert!(crate::plan(&slow).stages[0].time.prefill_s > crate::plan(&fitted).stages[0].time.prefill_s);
    }

    #[test]
    fn the_error_band_is_the_probes() {
        let plan = crate::plan(&problem("q4_0", PROBE));
        let a = plan.accuracy.unwrap();
        assert_eq!(a.class, "measured, llama.cpp CPU");
        assert_eq!(a.typical_error, CHECKED_ERROR);
        // A busy machine's spread widens it.
        let busy = crate::plan(&problem("q4_0", &PROBE.replace("0.04", "0.6")));
        assert!((busy.accuracy.unwrap().typical_error - 0.3).abs() < 1e-12);
        // A spec-sheet CPU keeps the calibration's.
        let spec = crate::plan(&problem("q4_0", "")).accuracy.unwrap();
        assert_eq!(spec.class, "llama.cpp CPU");
        assert!(spec.typical_error > 0.3);
    }

    #[test]
    fn a_probe_out_of_range_is_an_error_at_its_field() {
        let error = |probe: &str| {
            let json = format!(
                r#"{{"model": {{"preset": "llama-3.2-1b"}}, "nodes": [{{"name": "box", "kind": "cpu",
                    "memory": "64 GiB", "bandwidth": "30 GB/s", "compute": "50 GFLOPS", "probe": {probe}}}]}}"#
            );
            Scenario::from_json(&json).unwrap().problem().unwrap_err().to_string()
        };
        let e = error(r#"{"engine": {"q8": 0.001}}"#);
        assert!(e.starts_with("`nodes[0].probe.engine.q8` is 0.00100; give weights per second"), "{e}");
        let e = error(r#"{"engine": {"kquant": 1e300}}"#);
        assert!(e.starts_with("`nodes[0].probe.engine.kquant` is over 1e15"), "{e}");
        let e = error(r#"{"engine": {"prefill": 0}}"#);
        assert!(e.starts_with("`nodes[0].probe.engine.prefill` is 0; give FLOP/s"), "{e}");
        let e = error(r#"{"bandwidth_spread": -1}"#);
        assert!(e.starts_with("`nodes[0].probe.bandwidth_spread` is -1"), "{e}");
    }

    #[test]
    fn each_class_reads_its_own_field() {
        let mut fit = EngineFit::default();
        for (i, class) in WeightClass::ALL.into_iter().enumerate() {
            fit.set_rate(class, 1e9 * (i + 1) as f64);
            assert_eq!(fit.rates()[i].0, class.name());
        }
        assert_eq!([fit.float, fit.q8, fit.legacy, fit.kquant], [Some(1e9), Some(2e9), Some(3e9), Some(4e9)]);
        assert!(WeightClass::ALL.iter().enumerate().all(|(i, &c)| fit.rate(c) == Some(1e9 * (i + 1) as f64)));
    }

    #[test]
    fn a_file_is_of_the_class_of_most_of_its_layer_bytes() {
        let mut model = problem("q4_k_m", "").model;
        assert_eq!(class_of(&model), WeightClass::KQuant);
        model.weights = "gguf".to_owned();
        assert_eq!(class_of(&model), WeightClass::KQuant);
        for t in &mut model.tensors {
            t.ty = crate::TensorType::Q8_0;
        }
        assert_eq!(class_of(&model), WeightClass::Q8);
    }
}
