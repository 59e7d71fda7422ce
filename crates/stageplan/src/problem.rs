//! A scenario after checking: the model resolved, every figure a number, names unique,
//! links per pair, manual stages in range — ready to plan. The checking itself is
//! [`crate::check()`]'s (`check/fields.rs`).

use serde::Serialize;

use crate::device::{Backend, DeviceKind, Efficiency};
use crate::engine::Engine;
use crate::model::Model;
use crate::scenario::{Objective, Policy, ProbeProvenance};
use crate::tensor_type::TensorType;

/// A checked workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Workload {
    pub context: u64,
    pub batch: u64,
    /// The K cache's format (llama.cpp's `-ctk`).
    pub kv: TensorType,
    /// The V cache's format (`-ctv`): `kv` unless the scenario gives `kv_v`.
    pub kv_v: TensorType,
    /// Explicit workspace bytes per stage, or `None` for the engine's buffers.
    pub workspace: Option<u64>,
    pub prefill_chunk: u64,
    pub flash_attention: bool,
    /// The prompt the time to first token is for, at most `context` tokens.
    pub prompt: u64,
    /// Tokens in the cache before the response whose speed the verdict gives (llama-bench's
    /// `-d`), under `context`, and the response's tokens (`-n`).
    pub depth: u64,
    pub response: u64,
    /// The engine whose buffers the stages hold (the scenario's `engine`).
    pub engine: Engine,
}

/// The prompt a time to first token is for when the scenario names none: llama-bench's
/// `pp512`, the prompt test published benchmarks report.
pub const DEFAULT_PROMPT: u64 = 512;

/// The response a decode speed is given over when the scenario names none: llama-bench's
/// `tg128`, the generation test published benchmarks report.
pub const DEFAULT_RESPONSE: u64 = 128;

impl Workload {
    /// What a scenario plans for where it leaves out `workload` or any of its fields: 4,096
    /// tokens of context, one sequence, an f16 KV cache, the engine's own buffers, 512-token
    /// prefill steps (llama.cpp's `n_ubatch`), flash attention on and the time to first token
    /// for a [`DEFAULT_PROMPT`]-token prompt, on llama.cpp. Stated once: [`WorkloadSpec::default`](crate::scenario::WorkloadSpec),
    /// a plan file's absent fields and the surfaces' default `kv` read it.
    pub const DEFAULT: Workload = Workload {
        context: 4096,
        batch: 1,
        kv: TensorType::F16,
        kv_v: TensorType::F16,
        workspace: None,
        prefill_chunk: 512,
        flash_attention: true,
        prompt: DEFAULT_PROMPT,
        depth: DEFAULT_PROMPT,
        response: DEFAULT_RESPONSE,
        engine: Engine::LlamaCpp,
    };
}

impl Workload {
    /// The cache's bytes per token of a layer with `k` and `v` elements per token
    /// (`Transformer::k_and_v_elements`).
    pub fn kv_bytes(&self, elements: (u64, u64)) -> u64 {
        crate::tensor_type::kv_bytes((self.kv, self.kv_v), elements)
    }

    /// Either cache quantized.
    pub fn quantized_kv(&self) -> bool {
        self.kv.is_quantized() || self.kv_v.is_quantized()
    }

    /// The cache a decoded token reads on average over the response: `depth + response ÷ 2`
    /// tokens, at most the context.
    pub fn decode_depth(&self) -> u64 {
        self.depth.saturating_add(self.response / 2).min(self.context)
    }

    /// How the engine runs this workload: what sizes its buffers.
    pub fn shape(&self) -> crate::engine::Shape {
        crate::engine::Shape {
            context: self.context,
            batch: self.batch,
            prefill_chunk: self.prefill_chunk,
            flash_attention: self.flash_attention,
            quantized_k: self.kv.is_quantized(),
            quantized_v: self.kv_v.is_quantized(),
        }
    }
}

impl Default for Workload {
    fn default() -> Self {
        Workload::DEFAULT
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Node {
    pub name: String,
    /// The preset it came from, if any.
    pub device: Option<String>,
    /// Given, or the preset's; `None` for custom figures without a kind.
    pub kind: Option<DeviceKind>,
    /// Memory budget in bytes.
    pub memory: u64,
    /// Bytes/s.
    pub bandwidth: f64,
    /// FLOP/s.
    pub compute: f64,
    /// Bytes kept by the runtime.
    pub reserve: u64,
    /// Fractions of bandwidth and compute reached, on top of the backend's fitted terms.
    pub efficiency: Efficiency,
    /// Selects the fitted speed terms.
    pub backend: Backend,
    /// CPU threads, when given.
    pub threads: Option<u32>,
    /// How the figures were measured (`stageplan probe`): the node is then planned as the
    /// engine reaches it, with no fitted spec-sheet terms
    /// ([`Measured::of_node`](crate::calibration::Measured::of_node)). `None`: spec-sheet figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeProvenance>,
    /// The machine's system RAM and CPU beside its GPU, when the scenario gives them: the
    /// planner may place tensors there ([`crate::cost::Offload`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<Host>,
    /// The machine this GPU is one of, when it has several (`nodes[].gpus`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_of: Option<GpuOf>,
}

/// The node name of GPU `index` of `machine`, as plans, exports and the reconcile loop name
/// it: `box/gpu1`.
pub fn gpu_node_name(machine: &str, index: u32) -> String {
    format!("{machine}/gpu{index}")
}

/// A GPU's place in a machine with several: the machine's name, the engine's number for
/// the GPU there (`CUDA{index}`), and the link between the machine's GPUs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuOf {
    pub machine: String,
    pub index: u32,
    pub link: Link,
    /// How the machine's GPUs reach each other's memory.
    pub peer: Peer,
}

/// How a machine's GPUs reach each other's memory, which decides how an engine all-reduces
/// over them ([`crate::cost`]'s tensor-parallel groups).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Peer {
    /// Through host RAM: GeForce cards on PCIe, or a link given by its figures.
    #[default]
    None,
    /// PCIe peer-to-peer.
    Pcie,
    /// NVLink.
    NvLink,
}

/// A machine's host tier after checking.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Host {
    /// The RAM preset it came from, if any.
    pub ram: Option<String>,
    /// RAM installed, bytes.
    pub memory: u64,
    /// RAM kept by the OS, bytes.
    pub reserve: u64,
    /// Peak read bandwidth, bytes/s.
    pub bandwidth: f64,
    /// CPU threads llama.cpp runs with.
    pub threads: u32,
    /// The GPU's link to the host, bytes/s per direction.
    pub link: f64,
}

impl Host {
    /// Threads when the scenario gives none: a desktop CPU's performance cores, what
    /// llama.cpp's default (`cpu_get_num_math`, the physical cores) gives on one.
    pub const DEFAULT_THREADS: u32 = 8;
    /// RAM the OS and other programs keep when the scenario says nothing.
    pub const DEFAULT_RESERVE: u64 = 4 << 30;
    /// PCIe 4.0 ×16 per direction (128b/130b encoding), the common desktop GPU link.
    pub const DEFAULT_LINK: f64 = 31.5e9;
}

/// A link's figures.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct Link {
    /// Bytes/s.
    pub bandwidth: f64,
    /// Seconds, one way.
    pub latency: f64,
}

impl Link {
    /// Time to send `bytes` over this link.
    pub fn time(&self, bytes: f64) -> f64 {
        self.latency + bytes / self.bandwidth
    }
}

/// The default link when a scenario states none: 10 Gb Ethernet.
pub const DEFAULT_LINK: Link = Link { bandwidth: 1.25e9, latency: 0.5e-3 };

/// Links between every pair of nodes (symmetric): the default, and the pairs the scenario
/// names. The `n × n` table exists only when some pair has its own link ([`MAX_NODES`](crate::limits::MAX_NODES)
/// bounds it at a million entries); a cluster on one default link holds none.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Links {
    pub default: Link,
    /// Row-major `n × n`, empty when every pair is on the default; `None` means the default.
    overrides: Vec<Option<Link>>,
    n: usize,
}

impl Links {
    /// Every pair on `default`.
    pub fn uniform(n: usize, default: Link) -> Links {
        Links { default, overrides: Vec::new(), n }
    }

    /// Sets the link between `a` and `b`, both ways.
    pub fn set(&mut self, a: usize, b: usize, link: Link) {
        if a >= self.n || b >= self.n {
            return;
        }
        if self.overrides.is_empty() {
            self.overrides = vec![None; self.n * self.n];
        }
        self.overrides[a * self.n + b] = Some(link);
        self.overrides[b * self.n + a] = Some(link);
    }

    /// Whether the pair has a link of its own (not the default).
    pub fn is_set(&self, a: usize, b: usize) -> bool {
        self.overrides.get(a * self.n + b).is_some_and(Option::is_some)
    }

    /// The link from `a` to `b`.
    pub fn get(&self, a: usize, b: usize) -> Link {
        self.overrides.get(a * self.n + b).copied().flatten().unwrap_or(self.default)
    }

    /// The same links with one more node, joined to all others by the default link.
    pub fn extended(&self) -> Links {
        self.subset(&(0..=self.n).collect::<Vec<_>>())
    }

    /// The links among `indices` only, renumbered in that order (an index past the nodes is
    /// a new node on the default link).
    pub fn subset(&self, indices: &[usize]) -> Links {
        let mut out = Links::uniform(indices.len(), self.default);
        if self.overrides.is_empty() {
            return out;
        }
        for (a, &x) in indices.iter().enumerate() {
            for (b, &y) in indices.iter().enumerate() {
                if x < self.n
                    && y < self.n
                    && let Some(link) = self.overrides[x * self.n + y]
                {
                    out.set(a, b, link);
                }
            }
        }
        out
    }

    /// True when every pair uses the default link.
    pub fn is_uniform(&self) -> bool {
        self.overrides.iter().all(Option::is_none)
    }
}

/// One stage of an assignment: a node and the layers `start..end` it holds, the range
/// half-open. `Copy` and three words, as the planner's inner loops pass it by value; it
/// serializes as the `[node, start, end]` triple it replaced.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Placement {
    /// The node's index in [`Problem::nodes`].
    pub node: usize,
    /// The first layer the stage holds.
    pub start: usize,
    /// One past the last layer the stage holds.
    pub end: usize,
}

impl Placement {
    /// `node` holding layers `start..end`.
    pub const fn new(node: usize, start: usize, end: usize) -> Self {
        Self { node, start, end }
    }
}

impl Serialize for Placement {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (self.node, self.start, self.end).serialize(serializer)
    }
}

/// A manual stage's placement on a machine with system RAM: its first `host_layers` whole
/// in RAM, then `host_ffn` layers' FFN there.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FixedOffload {
    pub stage: Placement,
    pub host_layers: usize,
    pub host_ffn: usize,
    /// The output head in host RAM too (`-ngl 0`).
    pub head_on_host: bool,
}

/// A scenario after checking: ready to plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Problem {
    pub model: Model,
    pub workload: Workload,
    pub nodes: Vec<Node>,
    pub links: Links,
    pub objective: Objective,
    pub policy: Policy,
    /// Manual stages, in pipeline order.
    pub manual: Option<Vec<Placement>>,
    /// Placements manual stages fix on machines with system RAM (the rest are the fastest).
    pub fixed_offloads: Vec<FixedOffload>,
    /// The model file the scenario names (`model.file`), for exports to load.
    pub file: Option<String>,
    /// What rides along with the model (`model.draft`, `model.mmproj`).
    pub riders: Riders,
    /// What the check noticed in a valid scenario that its plan should say, in words (a GPU
    /// machine with `count`, which means whole machines).
    pub notes: Vec<String>,
    /// The scenario's `serving`: users or latency targets to answer ([`crate::serving::answer`]);
    /// a question about the plan, not part of what is planned.
    #[serde(skip)]
    pub serving: Option<crate::demand::Demand>,
}

/// What rides along with the model: a draft model for speculative decoding and a vision
/// projector, each placed whole on one machine of the plan ([`crate::planner`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Riders {
    pub draft: Option<Draft>,
    pub projector: Option<Projector>,
}

impl Riders {
    /// True when nothing rides along.
    pub fn is_empty(&self) -> bool {
        self.draft.is_none() && self.projector.is_none()
    }
}

/// A checked draft model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Draft {
    pub model: Model,
    /// Its KV-cache format.
    pub kv: TensorType,
    /// Its file, for exports to load.
    pub file: Option<String>,
}

/// A checked vision projector.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Projector {
    /// Its file, for exports to load.
    pub file: Option<String>,
    /// Bytes of its tensors.
    pub weights: u64,
    /// Bytes of its buffers for encoding an image, on its device.
    pub compute: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efficiency_is_fitted_per_roofline_term() {
        // Two compute-bound stages measured at twice their prediction, one memory-bound at 1.25×.
        let fit = Efficiency::fit(&[((1.0, 4.0), 8.0), ((1.0, 2.0), 4.0), ((3.0, 1.0), 3.75)]);
        assert_eq!(fit, Efficiency { bandwidth: 0.8, compute: 0.5 });
        assert_eq!(Efficiency::fit(&[]), Efficiency::default());
    }
}
