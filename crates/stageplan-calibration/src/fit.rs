//! Fitting the speed terms to measurements, and what the fit is worth.
//!
//! A [`Sample`] is one published decode measurement reduced to what the cost model computes
//! at spec-sheet peaks — per stage, the memory and compute roofline terms and the layer
//! count — so that a prediction with any terms is a few multiplications, and exactly what
//! the cost model would predict with those terms applied. [`fit()`] finds the terms that
//! explain the samples best, [`leave_one_source_out`] what they are worth on figures they were
//! not fitted to, and [`fitted()`] turns both into the core's [`Fitted`] constants.

use stageplan::calibration::{BackendTerms, Fitted, WeightClass};
use stageplan::device::Backend;

/// The `q`-quantile (0–1) of values, nearest rank: the core's, which its llama-bench fit uses
/// too.
pub use stageplan::calibration::quantile;

/// One stage of a measured pipeline, at spec-sheet peaks.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    pub memory_s: f64,
    pub compute_s: f64,
    pub layers: f64,
    /// The hop to the next stage.
    pub send_s: f64,
}

impl From<&stageplan::plan::Stage> for Stage {
    /// A planned stage's terms; plan with `backend: peak` for the terms at peaks.
    fn from(stage: &stageplan::plan::Stage) -> Stage {
        Stage {
            memory_s: stage.time.memory_s,
            compute_s: stage.time.compute_s,
            layers: (stage.layers[1] - stage.layers[0]) as f64,
            send_s: stage.time.send_s,
        }
    }
}

/// A measured decode rate and the cost model's terms for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub backend: Backend,
    pub weights: WeightClass,
    /// The device's peak bandwidth (bytes/s) and, on a CPU, the threads it ran with.
    pub bandwidth: f64,
    pub threads: Option<f64>,
    /// Measured on a CUDA build from before CUDA graphs (see [`Terms::pre_graphs_per_layer_s`]).
    pub before_cuda_graphs: bool,
    pub stages: Vec<Stage>,
    /// Measured seconds per token.
    pub measured_s: f64,
    /// Where the figure was published: the unit left out in cross-validation.
    pub source: String,
    /// The row, for people: device, model and weights.
    pub label: String,
}

/// The fitted numbers: `η` and `τ` per fitted backend (in [`Backend::FITTED`] order), `μ`
/// for Q8, legacy and k-quant weights.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Terms {
    pub bandwidth: [f64; 5],
    pub per_layer_s: [f64; 5],
    pub weights: [f64; 3],
    /// Bytes of F16 weights one CPU thread decodes per second (`β`).
    pub thread_bandwidth: f64,
    /// Seconds per layer per token that CUDA builds from before CUDA graphs paid on top of
    /// `τ_CUDA`: fitted so that their rows count as evidence for the other terms, never
    /// applied to a plan (plans are for the builds people run now).
    pub pre_graphs_per_layer_s: f64,
}

impl Terms {
    /// Peaks: what the cost model predicted before calibration.
    pub const PEAK: Terms = Terms {
        bandwidth: [1.0; 5],
        per_layer_s: [0.0; 5],
        weights: [1.0; 3],
        thread_bandwidth: f64::INFINITY,
        pre_graphs_per_layer_s: 0.0,
    };

    /// Where `cargo xtask calibrate` starts the fit: the peaks, with a small per-layer cost.
    pub const START: Terms = Terms {
        bandwidth: [0.8; 5],
        per_layer_s: [5e-5; 5],
        weights: [1.0; 3],
        thread_bandwidth: 1e10,
        pre_graphs_per_layer_s: 5e-5,
    };

    /// The terms in `fitted`.
    pub fn of(fitted: &Fitted) -> Terms {
        Terms {
            bandwidth: fitted.backends.map(|t| t.bandwidth),
            per_layer_s: fitted.backends.map(|t| t.per_layer_s),
            weights: [fitted.q8, fitted.legacy, fitted.kquant],
            thread_bandwidth: fitted.thread_bandwidth,
            pre_graphs_per_layer_s: fitted.pre_graphs_per_layer_s,
        }
    }

    fn index(backend: Backend) -> Option<usize> {
        Backend::FITTED.iter().position(|&b| b == backend)
    }

    /// Predicted seconds per token.
    pub fn predict(&self, sample: &Sample) -> f64 {
        let (eta, tau) = match Terms::index(sample.backend) {
            Some(i) => (self.bandwidth[i], self.per_layer_s[i]),
            None => (1.0, 0.0),
        };
        let tau = if sample.before_cuda_graphs { tau + self.pre_graphs_per_layer_s } else { tau };
        let mu = match sample.weights {
            WeightClass::Float => 1.0,
            WeightClass::Q8 => self.weights[0],
            WeightClass::Legacy => self.weights[1],
            WeightClass::KQuant => self.weights[2],
        };
        // On a CPU, as much bandwidth as the threads can use.
        let reached = match sample.threads {
            Some(threads) if sample.backend == Backend::Cpu => {
                eta.min(threads * self.thread_bandwidth / sample.bandwidth)
            }
            _ => eta,
        };
        sample.stages.iter().map(|s| (s.memory_s / (reached * mu)).max(s.compute_s) + s.layers * tau + s.send_s).sum()
    }

    /// `|predicted ÷ measured − 1|` in tokens/s.
    pub fn error(&self, sample: &Sample) -> f64 {
        (sample.measured_s / self.predict(sample) - 1.0).abs()
    }

    fn to_vec(self) -> Vec<f64> {
        let mut v: Vec<f64> = self.bandwidth.iter().map(|x| x.ln()).collect();
        v.extend(self.per_layer_s.iter().map(|x| x.max(1e-9).ln()));
        v.extend(self.weights.iter().map(|x| x.ln()));
        v.push(self.thread_bandwidth.min(1e15).ln());
        v.push(self.pre_graphs_per_layer_s.max(1e-9).ln());
        v
    }

    fn from_vec(v: &[f64]) -> Terms {
        let e = |i: usize| v[i].exp();
        Terms {
            bandwidth: [e(0), e(1), e(2), e(3), e(4)],
            per_layer_s: [e(5), e(6), e(7), e(8), e(9)],
            weights: [e(10), e(11), e(12)],
            thread_bandwidth: e(13),
            pre_graphs_per_layer_s: e(14),
        }
    }
}

/// Where the loss stops growing quadratically: a row off by more than about 15% (in the
/// log) pulls the fit linearly, not with its square. The bounds are on the median error, and
/// the rows that miss by 50% or more measure conditions the table does not record (a cloud
/// host's slow CPU, a build from before CUDA graphs, a half-populated memory bus); squaring
/// them let a handful of such rows move every prediction.
pub const HUBER_DELTA: f64 = 0.15;

/// Huber's loss of a log ratio.
fn huber(r: f64) -> f64 {
    let r = r.abs();
    if r < HUBER_DELTA { r * r / (2.0 * HUBER_DELTA) } else { r - HUBER_DELTA / 2.0 }
}

/// Terms that minimise `Σ huber(ln(predicted ÷ measured)) ÷ √n_source` over `samples`, by
/// coordinate descent in log space from `start` (each step grows on success and halves on
/// failure, so it settles to about 10⁻⁴ in the log). Rows of one source share its build, host
/// and method, so they are not independent evidence: weighting each by `1 ÷ √n` keeps a
/// 60-row thread from outvoting ten single-row sources, while still counting it for more.
/// Terms no sample depends on stay where they start.
pub fn fit(samples: &[&Sample], start: Terms) -> Terms {
    let mut rows_of = std::collections::BTreeMap::<&str, f64>::new();
    for s in samples {
        *rows_of.entry(s.source.as_str()).or_default() += 1.0;
    }
    let weights: Vec<f64> = samples.iter().map(|s| 1.0 / rows_of[s.source.as_str()].sqrt()).collect();
    let loss = |v: &[f64]| {
        let terms = Terms::from_vec(v);
        samples.iter().zip(&weights).map(|(s, w)| w * huber((terms.predict(s) / s.measured_s).ln())).sum::<f64>()
    };
    let mut x = start.to_vec();
    let mut steps = vec![0.5; x.len()];
    let mut best = loss(&x);
    for _ in 0..500 {
        for i in 0..x.len() {
            let mut moved = false;
            for sign in [1.0, -1.0] {
                let mut y = x.clone();
                y[i] += sign * steps[i];
                let value = loss(&y);
                if value < best {
                    (x, best, moved) = (y, value, true);
                    break;
                }
            }
            steps[i] *= if moved { 1.5 } else { 0.5 };
        }
        if steps.iter().all(|&s| s < 1e-4) {
            break;
        }
    }
    Terms::from_vec(&x)
}

/// Each sample's error when predicted by terms fitted without its source.
pub fn leave_one_source_out(samples: &[Sample], start: Terms) -> Vec<f64> {
    let mut errors = vec![0.0; samples.len()];
    let mut sources: Vec<&str> = samples.iter().map(|s| s.source.as_str()).collect();
    sources.sort_unstable();
    sources.dedup();
    for source in sources {
        let train: Vec<&Sample> = samples.iter().filter(|s| s.source != source).collect();
        let terms = fit(&train, start);
        for (i, s) in samples.iter().enumerate() {
            if s.source == source {
                errors[i] = terms.error(s);
            }
        }
    }
    errors
}

/// The fitted terms with each backend's typical error (median of `cross_validated` over its
/// rows) and row count.
pub fn fitted(terms: Terms, samples: &[Sample], cross_validated: &[f64], provenance: &'static str) -> Fitted {
    let backends = Backend::FITTED.map(|backend| {
        let i = Terms::index(backend).unwrap_or(0);
        let errors: Vec<f64> =
            samples.iter().zip(cross_validated).filter(|(s, _)| s.backend == backend).map(|(_, &e)| e).collect();
        BackendTerms {
            backend,
            bandwidth: terms.bandwidth[i],
            per_layer_s: terms.per_layer_s[i],
            typical_error: quantile(&errors, 0.5),
            rows: errors.len(),
        }
    });
    Fitted {
        backends,
        q8: terms.weights[0],
        legacy: terms.weights[1],
        kquant: terms.weights[2],
        thread_bandwidth: terms.thread_bandwidth,
        pre_graphs_per_layer_s: terms.pre_graphs_per_layer_s,
        provenance,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(backend: Backend, memory_s: f64, layers: f64, terms: &Terms, source: &str) -> Sample {
        let mut s = Sample {
            backend,
            weights: WeightClass::Float,
            bandwidth: 1e11,
            threads: None,
            before_cuda_graphs: false,
            stages: vec![Stage { memory_s, compute_s: 0.0, layers, send_s: 0.0 }],
            measured_s: 1.0,
            source: source.into(),
            label: String::new(),
        };
        s.measured_s = terms.predict(&s);
        s
    }

    #[test]
    fn the_fit_recovers_terms_that_made_the_data() {
        let truth = Terms {
            bandwidth: [0.8, 0.7, 0.9, 0.6, 0.5],
            per_layer_s: [5e-5, 1e-4, 7e-5, 3e-5, 2e-4],
            weights: [1.0; 3],
            thread_bandwidth: 1e10,
            pre_graphs_per_layer_s: 1e-4,
        };
        let mut samples = Vec::new();
        for (i, &b) in Backend::FITTED.iter().enumerate() {
            for (j, (m, l)) in [(0.01, 32.0), (0.002, 22.0), (0.05, 80.0), (0.004, 40.0)].into_iter().enumerate() {
                samples.push(sample(b, m, l, &truth, &format!("s{}", (i + j) % 3)));
            }
        }
        // CPU runs on 2 threads (bound by them) and on 64 (bound by memory).
        for (j, threads) in [2.0, 64.0, 3.0, 48.0].into_iter().enumerate() {
            let mut s = sample(Backend::Cpu, 0.01, 32.0, &truth, &format!("s{}", j % 3));
            s.threads = Some(threads);
            s.measured_s = truth.predict(&s);
            samples.push(s);
        }
        // CUDA builds from before graphs, on a small and a large model.
        for (j, (m, l)) in [(0.002, 22.0), (0.05, 80.0)].into_iter().enumerate() {
            let mut s = sample(Backend::Cuda, m, l, &truth, &format!("s{j}"));
            s.before_cuda_graphs = true;
            s.measured_s = truth.predict(&s);
            samples.push(s);
        }
        let refs: Vec<&Sample> = samples.iter().collect();
        let got = fit(&refs, Terms { per_layer_s: [1e-5; 5], thread_bandwidth: 5e9, ..Terms::PEAK });
        for (a, b) in got.bandwidth.iter().zip(truth.bandwidth) {
            assert!((a / b - 1.0).abs() < 0.01, "{got:?}");
        }
        assert!((got.thread_bandwidth / truth.thread_bandwidth - 1.0).abs() < 0.01, "{got:?}");
        assert!((got.pre_graphs_per_layer_s / truth.pre_graphs_per_layer_s - 1.0).abs() < 0.01, "{got:?}");
        assert!(leave_one_source_out(&samples, got).iter().all(|&e| e < 0.02));
    }
}
