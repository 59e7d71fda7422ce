//! Speed terms fitted to published llama.cpp measurements (issue #15).
//!
//! Spec-sheet peaks overstate what an engine reaches: llama.cpp's decode reads weights at a
//! fraction of peak bandwidth that depends on the backend and on how the weights are
//! stored (dequantising k-quants costs more than reading F16), and every layer pays a fixed
//! cost per token (kernel launches, the graph's small ops, synchronisation) that does not
//! shrink with the model. The cost model keeps the peaks in the presets and applies these
//! terms on top, per node:
//!
//! `stage time = max(bytes ÷ (peak bandwidth · η_backend · μ_weights), FLOPs ÷ peak compute)
//!  + layers · τ_backend`
//!
//! `η` (bandwidth reached on F16 weights), `τ` (seconds per layer per token) and `μ` (weight
//! storage relative to F16) are fitted, and on a CPU running `threads` threads `η` is at most
//! `threads · β ÷ peak` (`β`: what one thread decodes per second). CUDA rows measured before
//! CUDA graphs (dated before `stageplan_calibration::table::CUDA_GRAPHS`) pay a further
//! per-layer term in the fit, which plans never pay. They are fitted by `cargo xtask
//! calibrate` to the table under `tests/calibration/` — a robust (Huber) fit of the log of
//! predicted ÷ measured tokens/s, each source's rows weighted by `1 ÷ √rows` — and written to
//! `fitted.rs`, with each backend's typical error when its source is left out of the fit. A
//! node's `backend` selects them (from its preset, else its kind); `"peak"` turns them off.
//!
//! Figures measured on the machine itself (a node's `probe`) are what the engine reaches and
//! get none of these terms: [`measured`] says what they get instead.
//!
//! This module holds only what plans use: the fitted constants ([`FITTED`]), the terms they
//! apply ([`Fitted::speed`]) and what a probed node's figures mean ([`measured`]); the cost
//! model reads it, so it never plans. Fitting a user's own measurements through the planner
//! (`stageplan calibrate`, `stageplan probe --engine`) is [`crate::fit`], above the planner.
//! The table reader and the fit of these constants are tooling, in the
//! `stageplan-calibration` crate (`crates/stageplan-calibration`), which the core does not
//! depend on; its tests hold these constants to the table.

mod fitted;
pub mod measured;

use crate::device::Backend;

pub use fitted::FITTED;
pub use measured::Measured;

/// How weights are stored, as far as reading them costs: classes the fit tells apart.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum WeightClass {
    /// F32, F16, BF16: read as they are.
    Float = 0,
    /// Q8_0.
    Q8 = 1,
    /// Q4_0, Q4_1, Q5_0, Q5_1: blocks with one scale.
    Legacy = 2,
    /// k-quants and i-quants (`q4_k_m`, `iq4_xs`, …): super-blocks with nested scales.
    KQuant = 3,
}

impl WeightClass {
    /// Every class, in the order of their discriminants.
    pub const ALL: [WeightClass; 4] = [WeightClass::Float, WeightClass::Q8, WeightClass::Legacy, WeightClass::KQuant];

    /// The type a class's fitted rate is the rate of (a probe's `engine` fit): the others of
    /// the class run at their priors' share of it.
    pub fn reference(self) -> crate::TensorType {
        match self {
            WeightClass::Float => crate::TensorType::F16,
            WeightClass::Q8 => crate::TensorType::Q8_0,
            WeightClass::Legacy => crate::TensorType::Q4_0,
            WeightClass::KQuant => crate::TensorType::Q4_K,
        }
    }

    /// The name scenarios use (`engine` fits in a node's `probe`).
    pub fn name(self) -> &'static str {
        match self {
            WeightClass::Float => "float",
            WeightClass::Q8 => "q8",
            WeightClass::Legacy => "legacy",
            WeightClass::KQuant => "kquant",
        }
    }

    /// The class of a weight format's or tensor type's name (`q4_k_m`, `bf16`, `mxfp4`, …);
    /// formats outside llama.cpp's (`fp8`, `int8`) read like the nearest size, and MXFP4
    /// (blocks of 32 with one shared scale) like the legacy blocks.
    pub fn of(weights: &str) -> WeightClass {
        let w = weights.to_ascii_lowercase();
        if w.starts_with("iq") || w.contains("_k") {
            WeightClass::KQuant
        } else if w.starts_with("q8") || w == "fp8" || w == "int8" {
            WeightClass::Q8
        } else if w.starts_with('q') || w.starts_with("mxfp4") {
            WeightClass::Legacy
        } else {
            WeightClass::Float
        }
    }
}

/// Fitted terms for one backend.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct BackendTerms {
    pub backend: Backend,
    /// Fraction of peak bandwidth reached reading F16 weights (`η`).
    pub bandwidth: f64,
    /// Seconds per layer per decode step (`τ`).
    pub per_layer_s: f64,
    /// Median |predicted ÷ measured − 1| of this backend's rows, each predicted by a fit
    /// that left the row's source out: what a prediction is typically worth.
    pub typical_error: f64,
    /// Rows of the table with this backend.
    pub rows: usize,
}

/// Everything the fit produced, with where it came from.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Fitted {
    pub backends: [BackendTerms; 5],
    /// Bandwidth multiplier of Q8, legacy and k-quant weights relative to F16 (`μ`).
    pub q8: f64,
    pub legacy: f64,
    pub kquant: f64,
    /// Bytes of F16 weights one CPU thread decodes per second (`β`): a CPU node with
    /// `threads` reaches at most `threads · β` of its bandwidth.
    pub thread_bandwidth: f64,
    /// Seconds per layer per token that CUDA rows dated before
    /// `stageplan_calibration::table::CUDA_GRAPHS` paid on top of `τ_CUDA`. Fitted so that
    /// the table's older CUDA rows are evidence for the other terms; plans never use it.
    pub pre_graphs_per_layer_s: f64,
    /// What the terms were fitted to, in words.
    pub provenance: &'static str,
}

impl Fitted {
    /// The terms of `backend`; `None` for [`Backend::Peak`].
    pub fn backend(&self, backend: Backend) -> Option<&BackendTerms> {
        self.backends.iter().find(|t| t.backend == backend)
    }

    /// `μ` of a weight class.
    pub fn weights(&self, class: WeightClass) -> f64 {
        match class {
            WeightClass::Float => 1.0,
            WeightClass::Q8 => self.q8,
            WeightClass::Legacy => self.legacy,
            WeightClass::KQuant => self.kquant,
        }
    }

    /// The multiplier on a node's bandwidth and its per-layer seconds, for `backend`, weights
    /// of `class` (a model's: [`measured::class_of`]), a peak `bandwidth` (bytes/s) and, on
    /// a CPU, the threads it runs.
    pub fn speed(&self, backend: Backend, class: WeightClass, bandwidth: f64, threads: Option<u32>) -> (f64, f64) {
        let Some(t) = self.backend(backend) else { return (1.0, 0.0) };
        let reached = match threads {
            Some(n) if backend == Backend::Cpu => t.bandwidth.min(f64::from(n) * self.thread_bandwidth / bandwidth),
            _ => t.bandwidth,
        };
        (reached * self.weights(class), t.per_layer_s)
    }
}

/// The `q`-quantile (0–1) of `values`, nearest rank; 0 when empty. A backend's
/// [`BackendTerms::typical_error`] is the median (`q` = 0.5) of its rows' errors, and a
/// node's fit to llama-bench results ([`crate::fit::bench::fit_node`]) the median over its tests.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        assert_eq!(quantile(&[3.0, 1.0, 2.0, 4.0], 0.5), 2.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0, 4.0], 0.9), 4.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}
