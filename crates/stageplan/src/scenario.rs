//! The scenario file: a model, a workload, a cluster and what to optimise.
//!
//! This is a contract other parts of stageplan (the CLI, the web app, the JS API, tests)
//! rely on; field names are stable. Reading is strict: an unknown field is a typo and an
//! error, a quantity must be finite and non-negative, node names must be unique. Every
//! error names the field by its JSON path (`nodes[1].memory`) and says what to write.
//!
//! ```json
//! {
//!   "model": {"preset": "llama-3.1-70b", "weights": "q4_k_m"},
//!   "workload": {"context": 8192, "batch": 1, "kv": "f16"},
//!   "nodes": [{"name": "desk", "device": "rtx-4090"},
//!             {"name": "mac", "memory": "64 GiB", "bandwidth": "400 GB/s", "compute": "27 TFLOPS", "reserve": "16 GiB"}],
//!   "links": {"default": {"bandwidth": "1.25 GB/s", "latency": "0.5 ms"}},
//!   "objective": "throughput",
//!   "policy": "optimal"
//! }
//! ```

//!
//! Checking a scenario into a [`Problem`](crate::problem::Problem) is [`crate::problem`]'s.

use serde::Serialize;

mod read;
pub(crate) use read::Json;

use crate::device::{Backend, DeviceKind, Efficiency};
use crate::engine::Engine;
use crate::error::ScenarioError;
use crate::units::{Bandwidth, Bytes, Compute, Seconds};

/// A scenario exactly as written in the file.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub model: ModelSpec,
    #[serde(default)]
    pub workload: WorkloadSpec,
    pub nodes: Vec<NodeSpec>,
    #[serde(default)]
    pub links: LinksSpec,
    #[serde(default)]
    pub objective: Objective,
    #[serde(default)]
    pub policy: Policy,
    /// The engine that will run the plan (`llama.cpp`, `vllm`, `generic`): its memory
    /// layout, and what exports print by default.
    #[serde(default)]
    pub engine: Engine,
    /// The stages of a `manual` plan, in pipeline order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<Vec<StageSpec>>,
    /// Many users of one llama-server: how many, or the latency each must see (what
    /// `stageplan plan --users`/`--ttft`/`--tpot` ask, written in the scenario).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<ServingSpec>,
}

/// A scenario's `serving`: `{"users": 8}` to plan and simulate eight users of one
/// llama-server, `{"users": 8, "rate": 2}` for eight slots and two requests a second
/// arriving at random, or `{"ttft": "2 s", "tpot": "80 ms", "percentile": "p95"}` for how
/// many meet those targets (and the replicas that serve more), as the CLI's flags and the
/// JS API's `serve` options ask.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServingSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub users: Option<u32>,
    /// Requests a second arriving at random whatever the replies, `users` the server's slots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Each request's prompt and response drawn within this share of the workload's
    /// (0.5: ±50%, as vLLM's `--random-range-ratio`); 0 when not given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft: Option<Seconds>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot: Option<Seconds>,
    /// What `ttft` and `tpot` hold at; p95 when not given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percentile: Option<crate::demand::Percentile>,
}

impl ServingSpec {
    /// What this asks, checked at its fields: a percentile without a target to hold, no
    /// users and no target, 0 users or more than one server of `engine` is simulated for
    /// ([`crate::demand::most_users`]), a target outside 1 µs to 1 h. The answer itself is [`crate::serving::answer`]'s.
    ///
    /// # Errors
    /// The first of those, at `serving.…`.
    pub fn demand(&self, engine: crate::engine::Engine) -> Result<crate::demand::Demand, ScenarioError> {
        use crate::demand::{Targets, most_users, past_most};
        let field = |name: &str, problem: String| Err(ScenarioError::field(format!("serving.{name}"), problem));
        let targets = (self.ttft.is_some() || self.tpot.is_some()).then(|| Targets {
            ttft_s: self.ttft.map(Seconds::get),
            tpot_s: self.tpot.map(Seconds::get),
            percentile: self.percentile.unwrap_or_default(),
        });
        if self.percentile.is_some() && targets.is_none() {
            return field("percentile", "is what `ttft` and `tpot` hold at; give one of them, or leave it out".into());
        }
        if let Some(rate) = self.rate {
            crate::demand::check_rate(rate, self.users)
                .map_err(|problem| ScenarioError::field("serving.rate", problem))?;
        }
        if let Some(spread) = self.spread {
            crate::demand::check_spread(spread).map_err(|problem| ScenarioError::field("serving.spread", problem))?;
        }
        match self.users {
            None if targets.is_none() => {
                return Err(ScenarioError::field(
                    "serving",
                    "asks nothing; give `users` (users of one llama-server), or a `ttft` or `tpot` target",
                ));
            }
            Some(0) => return field("users", "is 0; give at least 1".into()),
            Some(users) if users > most_users(engine) => {
                return field("users", format!("is {users}, {}", past_most(engine)));
            }
            _ => {}
        }
        if let Some(name) = targets.and_then(|t| t.out_of_range()) {
            return field(name, "must be a time from 1 µs to 1 h".into());
        }
        Ok(crate::demand::Demand { users: self.users, targets, rate: self.rate, spread: self.spread.unwrap_or(0.0) })
    }
}

/// The model: a preset, an inline `config.json`, or (in the CLI) a file.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<InlineConfig>,
    /// A model file's path; read by the CLI, which replaces it with what it found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// A display name for an inline config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Weight format; defaults to `bf16`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<String>,
    /// A speculative-decoding draft model that rides along (llama.cpp's `--model-draft`):
    /// placed whole on one machine of the plan, its weights, KV cache and buffers counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<DraftSpec>,
    /// A vision projector that rides along (llama.cpp's `--mmproj`): placed on one machine
    /// of the plan, its weights and image-encoding buffers counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mmproj: Option<ProjectorSpec>,
}

/// A `config.json` object as the scenario wrote it, read when the scenario is checked
/// ([`crate::check::Files::config`]), so a surface that plans presets only carries no
/// reader of configs (issue #45).
#[derive(Clone, Debug, Serialize)]
#[serde(transparent)]
pub struct InlineConfig(Box<serde_json::value::RawValue>);

impl InlineConfig {
    /// The config's JSON text, as written.
    pub fn text(&self) -> &str {
        self.0.get()
    }

    /// A config from JSON text.
    ///
    /// # Errors
    /// When the text is not JSON.
    pub fn from_text(text: &str) -> Result<InlineConfig, serde_json::Error> {
        serde_json::value::RawValue::from_string(text.to_owned()).map(InlineConfig)
    }
}

impl PartialEq for InlineConfig {
    fn eq(&self, other: &InlineConfig) -> bool {
        self.text() == other.text()
    }
}

/// A draft model: named as the model is (a preset, an inline `config.json`, or in the CLI a
/// file), with the KV-cache format it runs.
///
/// ```json
/// {"preset": "qwen3-0.6b", "weights": "q8_0"}
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DraftSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<InlineConfig>,
    /// A model file's path; read by the CLI, which replaces it with what it found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<String>,
    /// Its KV-cache format; default `f16`, what llama.cpp gives a draft whatever the
    /// model's own (`--cache-type-k-draft`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<String>,
}

/// A vision projector: its file (the CLI reads the sizes from its header), or its sizes.
///
/// ```json
/// {"file": "mmproj-F16.gguf"}
/// {"weights": "851 MiB", "compute": "1.1 GiB"}
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectorSpec {
    /// The `mmproj` GGUF file, for the export to load; the CLI fills `weights` and
    /// `compute` from its header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Bytes of its tensors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<Bytes>,
    /// Its buffers for encoding one image on the device (llama.cpp's clip compute buffer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<Bytes>,
}

/// What runs: context length, concurrent sequences, KV-cache format, workspace.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkloadSpec {
    /// Tokens of context per sequence.
    pub context: u64,
    /// Sequences decoded together in one step.
    pub batch: u64,
    /// KV-cache element format: `f16`, `bf16`, `f32`, `fp8`, `q8_0`, `q5_1`, `q5_0`, `q4_1`, `q4_0`, `iq4_nl`;
    /// K's and V's, or K's alone where `kv_v` is given.
    pub kv: String,
    /// The V cache's format where it differs from K's (llama.cpp's `-ctk q8_0 -ctv f16`);
    /// omitted: `kv`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_v: Option<String>,
    /// Activation buffers per stage; `"auto"` or omitted estimates them (see [`crate::cost`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<Workspace>,
    /// Prompt tokens processed per step during prefill (llama.cpp's `n_ubatch`).
    pub prefill_chunk: u64,
    /// Attention through the fused flash-attention kernel (llama.cpp's `--flash-attn on`):
    /// no KQ matrix in the compute buffers; a quantized V cache needs it.
    pub flash_attention: bool,
    /// The prompt length the time to first token is given for; omitted: 512 tokens
    /// (llama-bench's prompt test, the figure reviewers publish), or the context if shorter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<u64>,
    /// The tokens already in the cache when the decode speed is given, as llama-bench's
    /// `-d`; omitted: the prompt's. The plan gives one user's speed over the response that
    /// follows (at `depth + response ÷ 2` tokens, on average) beside its speed at the full
    /// context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<u64>,
    /// The tokens generated after `depth`, as llama-bench's `-n`; omitted: 128 (its `tg128`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<u64>,
}

/// A workspace size, or `"auto"`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Workspace {
    Size(Bytes),
    Auto(AutoWord),
}

/// The word `auto`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AutoWord {
    Auto,
}

/// One machine (or, with `count`, several alike).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    pub name: String,
    /// A device preset; the fields below override its figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// `gpu`, `unified` (Apple silicon) or `cpu`: the preset's kind unless given. Exports
    /// name devices and request GPUs by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<DeviceKind>,
    /// Memory usable for the model: VRAM on a discrete GPU, RAM on a CPU or unified-memory machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Bytes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Bandwidth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<Compute>,
    /// Memory kept by the runtime and OS, not available to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<Bytes>,
    /// This many identical machines, named `name-1` … `name-N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Fractions of `bandwidth` and `compute` the node reaches (default 1, the figures as
    /// given); `stageplan run-sharded` fits them from measured stage times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efficiency: Option<Efficiency>,
    /// The llama.cpp backend it runs (`cuda`, `metal`, `rocm`, `vulkan`, `cpu`), which
    /// selects the fitted speed terms ([`crate::calibration`]); `peak` plans with the
    /// figures as given. Default: the preset's (NVIDIA `cuda`, AMD `rocm`, Apple `metal`,
    /// CPU `cpu`), else by `kind`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
    /// CPU threads llama.cpp runs with (`-t`): on a CPU node, decode reaches at most this
    /// many threads' worth of bandwidth. Default: as many as help.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    /// Where measured figures came from (`stageplan probe`). A node with a probe plans
    /// with its figures as what the engine reaches: no fitted spec-sheet efficiency on top
    /// ([`crate::calibration::measured`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeProvenance>,
    /// The machine's system RAM beside its GPU: the planner may keep some layers, or some
    /// layers' FFN (MoE experts first), there and run them on the CPU, as llama.cpp's
    /// `-ngl`, `--n-cpu-moe` and `-ot` do. Absent: the node is one memory, as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostSpec>,
    /// The machine's GPUs when it has several (two RTX 3090s on one board): each a device
    /// of its own, in the order the engine numbers them (`CUDA0`, `CUDA1`…), planned as
    /// stages of one server over `gpu_link`; the machine's `host` serves its first GPU. The
    /// machine's own device fields are then absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<GpuSpec>>,
    /// How the GPUs of `gpus` reach each other: a preset (`pcie4-x8`, `pcie4-x16-p2p`,
    /// `nvlink3`; `stageplan presets` lists them), default `pcie4-x16`. Other figures: a
    /// `links.pairs` entry between two of them (`box/gpu0`, `box/gpu1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_link: Option<String>,
}

/// One GPU (or, with `count`, several alike) of a machine with several.
///
/// ```json
/// {"device": "rtx-3090", "count": 2}
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// A device preset; the fields below override its figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Bytes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Bandwidth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<Compute>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<Bytes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
    /// This many GPUs alike, numbered on from the ones before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
}

/// A machine's system RAM and CPU, beside its GPU.
///
/// ```json
/// {"ram": "ddr5-6000-2ch", "memory": "64 GiB", "threads": 8}
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// A host-RAM preset (`ddr5-6000-2ch`: DDR5-6000, two channels) giving `bandwidth`;
    /// `stageplan presets` lists them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ram: Option<String>,
    /// System RAM installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Bytes>,
    /// RAM kept by the OS and other programs; default 4 GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<Bytes>,
    /// Peak read bandwidth of the RAM (channels × 8 bytes × MT/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Bandwidth>,
    /// CPU threads llama.cpp runs with (`-t`); default 8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    /// The GPU's link to the host, per direction: PCIe 4.0 ×16 (31.5 GB/s) unless given.
    /// Activations cross it at each change of place, and prefill streams host-held weights
    /// over it to the GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<Bandwidth>,
}

impl NodeSpec {
    /// The name of the `k`-th machine (from 1) this node stands for: its name, trimmed, or
    /// with `count` `name-k`. The checker names the nodes so, and the loop's deployment
    /// checks them against a cluster's node names by it.
    pub fn machine_name(&self, k: u32) -> String {
        let name = self.name.trim();
        if self.count.is_some() { format!("{name}-{k}") } else { name.to_owned() }
    }
}

impl EngineFit {
    /// Each class's rate by its field name, in [`crate::calibration::WeightClass`] order:
    /// the one list the checker and the cost model read.
    pub fn rates(&self) -> [(&'static str, Option<f64>); 4] {
        [("float", self.float), ("q8", self.q8), ("legacy", self.legacy), ("kquant", self.kquant)]
    }
}

/// How a node's figures were measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeProvenance {
    pub adapter: String,
    pub backend: String,
    pub device_type: String,
    /// `allocation` (allocated up to a cap) or `max_buffer_size` (a lower bound).
    pub memory_source: String,
    /// `(max − min) / median` of the bandwidth runs.
    pub bandwidth_spread: f64,
    /// The same for compute.
    pub compute_spread: f64,
    /// Kernels and sizes used.
    pub method: String,
    /// What llama.cpp itself reached on this machine with the node's threads, fitted from
    /// llama-bench runs (`stageplan probe --cpu --engine`); absent: the defaults of
    /// [`crate::calibration::measured`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineFit>,
}

/// llama.cpp's decode on a measured CPU beyond its read bandwidth: the rate of its
/// matrix-vector products per weight class (weights per second, all threads together),
/// fitted from llama-bench runs on models of that class. A class without a figure uses the
/// default of [`crate::calibration::measured`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineFit {
    /// F32, F16 and BF16 weights.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub float: Option<f64>,
    /// Q8_0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub q8: Option<f64>,
    /// Q4_0, Q4_1, Q5_0, Q5_1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub legacy: Option<f64>,
    /// k-quants and i-quants.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kquant: Option<f64>,
    /// How much faster than the probe's bandwidth llama.cpp read the weights in the runs its
    /// read bounds (1 to 2): its streaming kernels may outrun the probe's read loop, and only
    /// a run can show it. Omitted: 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read: Option<f64>,
    /// FLOP/s of llama.cpp's products over a prompt (llama-bench's `pp`, all threads): its
    /// quantized kernels for many tokens run well past the probe's f32 matmul, which a
    /// prompt would otherwise be priced at. Omitted: the node's `compute`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill: Option<f64>,
    /// The llama-bench runs fitted, in words (engine build, models, threads).
    pub method: String,
}

/// Network links between nodes: a default, and overrides per pair (both directions).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinksSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<LinkSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pairs: Vec<PairLinkSpec>,
}

/// A link's bandwidth and one-way latency.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub bandwidth: Bandwidth,
    pub latency: Seconds,
}

/// A link between two named nodes.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PairLinkSpec {
    pub between: [String; 2],
    pub bandwidth: Bandwidth,
    pub latency: Seconds,
}

/// A stage of a manual plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    pub node: String,
    /// `[start, end)`: the half-open range of layers.
    pub layers: [u64; 2],
    /// On a machine with system RAM (`host`), what it keeps there, as llama.cpp's flags
    /// would: the stage's first `host_layers` layers whole (`-ngl`, a first stage only),
    /// then `host_ffn` layers' FFN or routed experts (`--n-cpu-moe`), and with `host_head`
    /// the output head too (`-ngl 0`). Absent: the fastest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<OffloadSpec>,
}

/// A manual stage's placement on a machine with system RAM.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct OffloadSpec {
    pub host_layers: u64,
    pub host_ffn: u64,
    /// The output head in RAM as well (`-ngl 0`): a one-stage plan with every layer in RAM.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub host_head: bool,
}

/// What the planner optimises.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub enum Objective {
    /// Tokens per second of the workload's sequences, in the best number of micro-batches:
    /// minimise the cycle in which each gets a token.
    #[default]
    Throughput,
    /// All sequences stepping together: minimise the sum of stages and hops.
    Latency,
}

/// How layers are split among nodes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub enum Policy {
    /// The best subset, order and split of nodes for the objective.
    #[default]
    Optimal,
    /// Layers in proportion to each node's memory (exo, llama.cpp's default tensor split).
    MemoryProportional,
    /// The same number of layers on every node (vLLM's default).
    Even,
    /// The largest node first, filled up, then the next.
    Greedy,
    /// The stages the scenario gives.
    Manual,
    /// The best split, but each machine with system RAM keeps only whole layers there
    /// (llama.cpp's plain `-ngl`): what layer offload alone reaches.
    LayerOffload,
    /// The best split, each machine with system RAM placing its tensors as llama.cpp's own
    /// `--fit` (on by default) would: fill the GPU less a 1 GiB margin, MoE experts to RAM
    /// first, then whole layers; it ignores speed (the cost model's `OffloadRule::LlamaFit`).
    LlamaFit,
}

impl Policy {
    /// Every policy.
    pub const ALL: [Policy; 7] = [
        Policy::Optimal,
        Policy::MemoryProportional,
        Policy::Even,
        Policy::Greedy,
        Policy::Manual,
        Policy::LayerOffload,
        Policy::LlamaFit,
    ];

    /// The kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Optimal => "optimal",
            Policy::MemoryProportional => "memory-proportional",
            Policy::Even => "even",
            Policy::Greedy => "greedy",
            Policy::Manual => "manual",
            Policy::LayerOffload => "layer-offload",
            Policy::LlamaFit => "llama-fit",
        }
    }
}

impl Objective {
    /// Every objective.
    pub const ALL: [Objective; 2] = [Objective::Throughput, Objective::Latency];

    /// The kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            Objective::Throughput => "throughput",
            Objective::Latency => "latency",
        }
    }
}
impl Scenario {
    /// Reads a scenario from JSON text. (To plan it, [`crate::check()`] reads and checks in one.)
    ///
    /// # Errors
    /// The text is not a JSON object or not a scenario's shape: a [`ScenarioError`] with the
    /// JSON path of the offending field and the value written there.
    pub fn from_json(text: &str) -> Result<Scenario, ScenarioError> {
        let missing = "; a scenario needs at least `model` and `nodes`";
        let object = "a scenario is a JSON object like `{\"model\": {\"preset\": \"llama-3.1-8b\"}, \"nodes\": [...]}`";
        let json = parse(text, object, missing)?;
        read::scenario(&json).map_err(|wrong| located(text, missing, wrong))
    }
}

impl NodeSpec {
    /// Reads one machine, written as a scenario's `nodes[]` entry (what `stageplan probe`
    /// prints), from JSON text; [`crate::check::machine_nodes`] checks it.
    ///
    /// # Errors
    /// As [`Scenario::from_json`], at the field within the entry.
    pub fn from_json(text: &str) -> Result<NodeSpec, ScenarioError> {
        let missing = "; a machine needs at least a `name`";
        let object = "a machine is a JSON object like `{\"name\": \"desk\", \"device\": \"rtx-4090\"}`";
        let json = parse(text, object, missing)?;
        read::node(&json, "").map_err(|wrong| located(text, missing, wrong))
    }
}

/// `text` as JSON, or where it is not: `object` says what it must be, `missing` what a
/// missing field's message adds.
fn parse(text: &str, object: &str, missing: &str) -> Result<Json, ScenarioError> {
    if !text.trim_start().starts_with('{') {
        return Err(ScenarioError::field("", object));
    }
    crate::json::from_str(text).map_err(|(path, inner)| {
        // serde_json appends " at line L column C"; keep it, it helps find the spot.
        located(text, missing, read::Wrong { path, message: inner.to_string() })
    })
}

/// What a reader found wrong, at its JSON path with the value written there.
fn located(text: &str, missing: &str, wrong: read::Wrong) -> ScenarioError {
    let error = if wrong.path.is_empty() {
        let hint = if wrong.message.starts_with("missing field") { missing } else { "" };
        ScenarioError::field("", format!("{}{hint}", wrong.message))
    } else {
        ScenarioError::syntax(wrong.path, wrong.message)
    };
    error.with_value_from(text)
}
