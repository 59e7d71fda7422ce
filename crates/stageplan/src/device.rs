//! What a machine is, as the cost model sees it: the kind of memory it plans against, the
//! llama.cpp backend it runs (which selects the fitted speed terms), and the fraction of its
//! peaks it was measured to reach. Plain vocabulary, used by the scenario format, the
//! presets, the checked problem and the calibration alike.

use serde::{Deserialize, Serialize};

/// What kind of memory a device plans against; exports also decide device names and GPU
/// requests by it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub enum DeviceKind {
    /// A discrete GPU: its VRAM. The default when nothing says otherwise.
    #[default]
    Gpu,
    /// Apple silicon: unified memory, of which macOS lets the GPU wire about three quarters.
    Unified,
    /// A CPU box: system RAM.
    Cpu,
}

impl DeviceKind {
    /// Every kind.
    pub const ALL: [DeviceKind; 3] = [DeviceKind::Gpu, DeviceKind::Unified, DeviceKind::Cpu];

    /// The name scenarios use.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Gpu => "gpu",
            DeviceKind::Unified => "unified",
            DeviceKind::Cpu => "cpu",
        }
    }
}

/// The llama.cpp backend a node runs: it selects the fitted speed terms.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub enum Backend {
    Cuda,
    Metal,
    Rocm,
    Vulkan,
    Cpu,
    /// Spec-sheet peaks, no fitted terms.
    Peak,
}

impl Backend {
    /// Every backend with fitted terms.
    pub const FITTED: [Backend; 5] = [Backend::Cuda, Backend::Metal, Backend::Rocm, Backend::Vulkan, Backend::Cpu];

    /// Every backend: the fitted ones and `peak`.
    pub const ALL: [Backend; 6] =
        [Backend::Cuda, Backend::Metal, Backend::Rocm, Backend::Vulkan, Backend::Cpu, Backend::Peak];

    /// The name scenarios use.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda",
            Backend::Metal => "metal",
            Backend::Rocm => "rocm",
            Backend::Vulkan => "vulkan",
            Backend::Cpu => "cpu",
            Backend::Peak => "peak",
        }
    }

    /// As llama.cpp names it.
    pub fn title(self) -> &'static str {
        match self {
            Backend::Cuda => "CUDA",
            Backend::Metal => "Metal",
            Backend::Rocm => "ROCm",
            Backend::Vulkan => "Vulkan",
            Backend::Cpu => "CPU",
            Backend::Peak => "spec-sheet peaks",
        }
    }

    /// The backend of a node without a preset, by its kind: Apple silicon runs Metal, a CPU
    /// box the CPU backend, any other GPU CUDA.
    pub fn of_kind(kind: Option<DeviceKind>) -> Backend {
        match kind {
            Some(DeviceKind::Unified) => Backend::Metal,
            Some(DeviceKind::Cpu) => Backend::Cpu,
            _ => Backend::Cuda,
        }
    }
}

/// What fraction of its stated bandwidth and compute a node achieves on this work.
///
/// Preset figures are vendor peaks; measured stage times (`stageplan run-sharded`) show the
/// fraction a device reaches. [`Efficiency::fit`] estimates it, and a node's `efficiency`
/// in the scenario applies it.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Efficiency {
    pub bandwidth: f64,
    pub compute: f64,
}

impl Default for Efficiency {
    fn default() -> Self {
        Efficiency { bandwidth: 1.0, compute: 1.0 }
    }
}

impl Efficiency {
    /// Fits factors to measurements: each sample is a prediction's roofline terms
    /// `(memory_s, compute_s)` (at efficiency 1) and the measured seconds. A stage is
    /// explained by the term that dominated its prediction; the factor of each term is the
    /// median of `predicted_term / measured` over the stages it explains (1 when none).
    pub fn fit(samples: &[((f64, f64), f64)]) -> Efficiency {
        let median = |mut v: Vec<f64>| {
            v.retain(|x| x.is_finite() && *x > 0.0);
            v.sort_by(f64::total_cmp);
            if v.is_empty() { 1.0 } else { v[v.len() / 2] }
        };
        let memory = samples.iter().filter(|((m, c), _)| m >= c).map(|((m, _), t)| m / t).collect();
        let compute = samples.iter().filter(|((m, c), _)| c > m).map(|((_, c), t)| c / t).collect();
        Efficiency { bandwidth: median(memory), compute: median(compute) }
    }
}
