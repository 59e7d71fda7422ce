//! A plan: stages with their memory and time breakdowns, the pipeline's figures, and why.
//!
//! The JSON form is a contract: `stages[]` with `node`, `layers` (`[start, end)`),
//! `memory.total`, `memory.budget` and `time_s`; `tokens_per_s`, `latency_s` and
//! `bottleneck` (a stage index); `model` and `workload` say what was planned, so a plan
//! file is enough to export. Everything else is added explanation.

use serde::{Deserialize, Serialize};

use crate::problem::Workload;
use crate::scenario::{Objective, Policy};

/// The result of planning a scenario under one policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Plan {
    pub policy: Policy,
    pub objective: Objective,
    /// The model planned, so a plan file stands on its own (exports read it).
    #[serde(default)]
    pub model: PlannedModel,
    /// The engine whose memory layout the stages hold; exports print its commands by
    /// default. Plans from before engines were modelled read as `llama.cpp`.
    #[serde(default)]
    pub engine: crate::engine::Engine,
    /// The workload planned for: context, sequences, KV-cache format.
    #[serde(default)]
    pub workload: PlannedWorkload,
    /// Every stage fits its node's memory (and there is at least one stage).
    pub feasible: bool,
    /// Stages in pipeline order. Empty when no plan fits.
    pub stages: Vec<Stage>,
    /// Tokens per second the workload's `batch` sequences reach: `batch ÷ cycle`, where each
    /// sequence gets one token per cycle of `micro_batches` groups through the pipeline
    /// (see [`crate::cost`]). With one sequence, one stream's speed. 0 when no plan fits.
    pub tokens_per_s: f64,
    /// Groups the sequences go through the pipeline in: the count that serves them fastest
    /// (throughput objective), or 1 (latency). Stage times are for steps of
    /// `batch ÷ micro_batches` sequences.
    #[serde(default = "one")]
    pub micro_batches: u64,
    /// One step's trip through every stage and back: the sum of stage times. With one
    /// micro-batch, each sequence's time per token. `null` when no plan fits.
    pub latency_s: Option<f64>,
    /// Tokens per second of sequences that go through the pipeline one step at a time
    /// (no overlap): `batch ÷ latency`. What one interactive stream sees, every step reading
    /// the whole context's cache: the speed at the end of a full context.
    pub stream_tokens_per_s: f64,
    /// The same speeds over a response `workload.depth` tokens into the cache, as
    /// llama-bench's `-d` measures them (what published figures give): every step reading
    /// `depth + response ÷ 2` tokens. `null` when no plan fits, or in plans from before it was
    /// given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_depth: Option<AtDepth>,
    /// Prompt tokens per second during prefill, pipelined by chunks.
    pub prefill_tokens_per_s: f64,
    /// Seconds from a `workload.prompt`-token prompt to its first generated token, for one
    /// sequence: the first chunk's trip through every stage, then a chunk per slowest
    /// stage's time. `null` when no plan fits.
    #[serde(default)]
    pub time_to_first_token_s: Option<f64>,
    /// The same split with the pipeline kept full: more sequences in flight than the workload
    /// has. `null` when no plan fits.
    #[serde(default)]
    pub pipeline_full: Option<PipelineFull>,
    /// How sure the speed figures are: the calibration's typical error for the backends the
    /// stages run. `null` when no plan fits or a stage plans with spec-sheet peaks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<Accuracy>,
    /// Index of the slowest stage.
    pub bottleneck: Option<usize>,
    /// The longest context every stage still fits at this split; `null` when it does not fit
    /// even the shortest.
    pub max_context: Option<u64>,
    /// Nodes the plan does not use, and why.
    pub left_out: Vec<LeftOut>,
    /// How the plan was found and how far from the best it can be.
    pub search: Search,
    /// The other policies on the same cost model, for comparison.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baselines: Vec<Baseline>,
    /// Notes, warnings and errors, each with a fix where there is one.
    pub diagnostics: Vec<Diagnostic>,
    /// What rides along with the model (a draft model, a vision projector) and the machine
    /// each is placed on; their bytes are in that stage's `memory.riders`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub riders: Vec<PlannedRider>,
}

/// A draft model or a vision projector, placed whole on one stage's machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct PlannedRider {
    pub kind: RiderKind,
    /// The draft model's name, or the projector's file name.
    pub name: String,
    /// Its file, for exports to load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The machine it is on: one of the stages' nodes.
    pub node: String,
    /// A draft's blocks (all on its machine, with its output layer).
    #[serde(default, skip_serializing_if = "is_no_layers")]
    pub layers: usize,
    /// A draft's weight format.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub weights: String,
    /// A draft's KV-cache format.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kv: String,
    /// Its bytes on that machine, by part (`reserve` 0; `budget` the machine's memory).
    pub memory: MemoryBreakdown,
}

/// What rides along.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub enum RiderKind {
    /// A speculative-decoding draft model (llama.cpp's `--model-draft`).
    Draft,
    /// A vision projector (llama.cpp's `--mmproj`).
    Mmproj,
}

/// The calibration's word on a plan's speed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Accuracy {
    /// Median |predicted ÷ measured − 1| of published llama.cpp decode figures on this class,
    /// each predicted with its source left out of the fit; for a measured node, of the
    /// probe's check against llama-bench, or half the probe's spread when wider.
    pub typical_error: f64,
    /// The class it is for: the stages' node with the largest typical error
    /// (`llama.cpp CUDA`, `measured, llama.cpp CPU`, …).
    pub class: String,
    /// `tokens_per_s` within the typical error: `[÷ (1 + e), ÷ (1 − e)]`.
    pub tokens_per_s_range: [f64; 2],
}

fn one() -> u64 {
    1
}

/// Decode speeds with a shallower cache than the full context (see [`Plan::at_depth`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct AtDepth {
    /// Tokens of cache every decode step reads: `depth + response ÷ 2`.
    pub tokens: u64,
    /// As [`Plan::tokens_per_s`] and [`Plan::stream_tokens_per_s`], at that depth.
    pub tokens_per_s: f64,
    pub stream_tokens_per_s: f64,
}

/// The pipeline kept full: one group of the workload's `batch` sequences in every stage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct PipelineFull {
    /// Sequences in flight it needs: `batch` per stage.
    pub sequences: u64,
    /// `batch ÷ slowest stage`, with steps of `batch` sequences.
    pub tokens_per_s: f64,
    /// Every stage also holds the KV cache of `sequences` sequences.
    pub kv_fits: bool,
}

/// The model a plan is for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct PlannedModel {
    pub name: String,
    pub weights: String,
    /// Transformer blocks: stages' `layers` ranges cover `[0, layers)`.
    pub layers: usize,
    /// Routed experts per MoE layer; `null` for a dense model.
    pub experts: Option<u64>,
    /// Multi-token-prediction layers after the blocks, which llama.cpp does not load but
    /// counts in `-ngl` and places on the last device (GLM-4.5, Qwen3-Next).
    #[serde(default, skip_serializing_if = "is_no_layers")]
    pub nextn_layers: usize,
    /// The model file the scenario named, which exports load unless told otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// The workload a plan is for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct PlannedWorkload {
    /// Tokens of context per sequence.
    pub context: u64,
    /// Sequences decoded together.
    pub batch: u64,
    /// KV-cache format (`f16`, `q8_0`, …): K's, and V's unless `kv_v` gives it.
    pub kv: String,
    /// The V cache's format where it differs from K's (llama.cpp's `-ctv`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_v: Option<String>,
    /// Prompt tokens per prefill step (llama.cpp's `--ubatch-size`); 512 when absent.
    #[serde(default = "default_prefill_chunk")]
    pub prefill_chunk: u64,
    /// Flash attention on (llama.cpp's `--flash-attn`); on when absent.
    #[serde(default = "default_flash_attention")]
    pub flash_attention: bool,
    /// The prompt length `time_to_first_token_s` is for; 0 in plans from before it was given.
    pub prompt: u64,
    /// The cache before the response `at_depth` is for (llama-bench's `-d`), and the
    /// response's tokens (`-n`); 0 in plans from before they were given.
    pub depth: u64,
    pub response: u64,
}

fn default_prefill_chunk() -> u64 {
    Workload::DEFAULT.prefill_chunk
}

fn default_flash_attention() -> bool {
    Workload::DEFAULT.flash_attention
}

/// One pipeline stage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Stage {
    pub node: String,
    /// The machine's kind (`gpu`, `unified`, `cpu`) when the scenario or its preset says;
    /// exports name devices and request GPUs by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<crate::device::DeviceKind>,
    /// CPU threads the scenario gives the node; exports pass them to the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    /// `[start, end)`.
    pub layers: [usize; 2],
    /// Holds the token embedding (first stage).
    pub embedding: bool,
    /// Holds the final norm and LM head (last stage).
    pub head: bool,
    pub memory: MemoryBreakdown,
    pub time: TimeBreakdown,
    /// Time of one decode step in this stage (`batch ÷ micro_batches` sequences), hop
    /// included, in seconds.
    pub time_s: f64,
    /// On a machine with system RAM (`host` in the scenario), what the stage keeps there;
    /// `memory` is then the GPU's. Absent: everything on the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<StageOffload>,
    /// On a machine with several GPUs (`nodes[].gpus`), which: the machine's stages run in
    /// one server there. Absent: the node is a machine of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_of: Option<MachineGpu>,
    /// A tensor-parallel stage: the machine's GPUs (engine numbers, `gpu_of`'s first) that
    /// split every matrix of its layers among them; `memory` is then each GPU's share.
    /// Empty: the stage is on one device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tensor_parallel: Vec<u32>,
}

/// A GPU of a machine with several: the machine's name and the engine's number for the GPU
/// (`CUDA{index}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct MachineGpu {
    pub machine: String,
    pub index: u32,
}

/// What a stage keeps in its machine's host RAM, run there by the CPU: llama.cpp's
/// `-ngl` (whole layers) and `--n-cpu-moe` or `-ot` (a layer's FFN).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct StageOffload {
    /// Layers whole with their KV cache in host RAM: `host_range`.
    pub host_layers: usize,
    /// Layers whose FFN is in host RAM (`ffn_layers`): their routed experts where the
    /// layer has them, else its dense FFN matrices; their attention stays on the GPU.
    pub host_ffn: usize,
    /// `[start, end)` of the layers whole in host RAM: the model's first layers, on a first
    /// stage only (llama.cpp's `-ngl` keeps the last layers on the GPU).
    pub host_range: [usize; 2],
    /// `[start, end)` of the layers whose FFN is in host RAM: right after `host_range`
    /// (`--n-cpu-moe`'s order) or, on a stage that hands over to another machine, its last.
    pub ffn_layers: [usize; 2],
    /// Every layer and the output head in host RAM (`-ngl 0`).
    pub head_on_host: bool,
    /// The CPU threads that run what is in host RAM (`--threads`).
    pub threads: u32,
    /// Whether those FFNs are routed experts (an MoE model).
    pub experts: bool,
    /// Host RAM, by part (`budget` is the RAM installed).
    pub memory: MemoryBreakdown,
}

/// Memory of a stage, in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct MemoryBreakdown {
    pub weights: u64,
    pub kv: u64,
    pub embed_head: u64,
    pub workspace: u64,
    pub reserve: u64,
    /// A draft model and a vision projector placed on this machine ([`Plan::riders`]).
    #[serde(default, skip_serializing_if = "is_zero_bytes")]
    pub riders: u64,
    pub total: u64,
    /// The node's memory.
    pub budget: u64,
    /// `budget − total`; negative when the stage does not fit.
    pub headroom: i64,
}

/// Time of one decode step in a stage, in seconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct TimeBreakdown {
    /// Bytes read ÷ bandwidth.
    pub memory_s: f64,
    /// FLOPs ÷ compute.
    pub compute_s: f64,
    /// The backend's fixed cost per layer, for this stage's layers.
    #[serde(default)]
    pub overhead_s: f64,
    /// A step's further sequences' products, beyond the roofline of its first.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub batch_s: f64,
    /// Sending activations to the next stage (or tokens back to the first).
    pub send_s: f64,
    /// Which roofline term decides the stage.
    pub bound: Bound,
    /// Prefill time per prompt token.
    pub prefill_s: f64,
    /// On a machine with a host tier, the CPU's part of the step (roofline and per-layer
    /// cost); `memory_s`, `compute_s` and `overhead_s` are then the GPU's.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub host_s: f64,
    /// Changes between GPU and CPU along the step: syncs and hidden-state copies.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub split_s: f64,
    /// A tensor-parallel stage's all-reduces of the hidden state, two a layer.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub all_reduce_s: f64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes fields by reference
fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl Stage {
    /// The stage's devices in words: its node, or a tensor-parallel stage's machine and GPUs
    /// (`box/gpu0+gpu1`).
    pub fn label(&self) -> String {
        match &self.gpu_of {
            Some(g) if !self.tensor_parallel.is_empty() => {
                let gpus: Vec<String> = self.tensor_parallel.iter().map(|i| format!("gpu{i}")).collect();
                format!("{}/{}", g.machine, gpus.join("+"))
            }
            _ => self.node.clone(),
        }
    }

    /// The problem's nodes the stage runs on: its node, or a tensor-parallel stage's GPUs in
    /// their machine's order. None where the problem has no such node (another problem's
    /// plan).
    pub fn nodes<'a>(&'a self, problem: &'a crate::Problem) -> impl Iterator<Item = usize> + 'a {
        let group = self.gpu_of.as_ref().filter(|_| !self.tensor_parallel.is_empty());
        problem.nodes.iter().enumerate().filter_map(move |(k, n)| {
            let member = match (group, &n.gpu_of) {
                (Some(machine), Some(g)) => g.machine == machine.machine && self.tensor_parallel.contains(&g.index),
                (Some(_), None) => false,
                (None, _) => n.name == self.node,
            };
            member.then_some(k)
        })
    }
}

impl StageOffload {
    /// What the stage keeps in host RAM, in words (`experts of layers 0–17`, `layers 0–3
    /// whole · FFN of layer 4`); `None` when only the embedding is there.
    pub fn kept(&self) -> Option<String> {
        let range =
            |[a, b]: [usize; 2]| if b - a == 1 { format!("layer {a}") } else { format!("layers {a}–{}", b - 1) };
        let mut parts = Vec::new();
        if self.host_layers > 0 {
            let head = if self.head_on_host { " and the head" } else { "" };
            parts.push(format!("{} whole{head}", range(self.host_range)));
        }
        if self.host_ffn > 0 {
            let what = if self.experts { "experts" } else { "FFN" };
            parts.push(format!("{what} of {}", range(self.ffn_layers)));
        }
        (!parts.is_empty()).then(|| parts.join(" · "))
    }
}

/// The roofline term that decides a stage's time.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub enum Bound {
    Memory,
    Compute,
}

/// A node the plan leaves out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct LeftOut {
    pub node: String,
    /// Why, in a sentence.
    pub reason: String,
    /// The best objective value a plan that uses this node reaches (tokens/s for throughput,
    /// seconds per token for latency); `null` when no such plan fits.
    pub with_node: Option<f64>,
}

/// How the plan was found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Search {
    /// `exact`, `heuristic` or `given` (baselines and manual plans).
    pub method: String,
    /// What was searched, in words.
    pub detail: String,
    /// A bound no plan can beat, in the objective's unit (tokens/s or seconds per token).
    pub bound: Option<f64>,
    /// How far the plan can be from the best: `|plan − bound| ÷ bound`; 0 when exact.
    pub gap: Option<f64>,
}

/// Another policy's plan, in brief.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Baseline {
    pub policy: Policy,
    pub feasible: bool,
    pub tokens_per_s: f64,
    pub latency_s: Option<f64>,
    /// `[node, start, end]` per stage.
    pub stages: Vec<BaselineStage>,
    /// Why it does not fit, when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// A stage of a baseline plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct BaselineStage {
    pub node: String,
    pub layers: [usize; 2],
}

/// A note about the plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Diagnostic {
    pub level: Level,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// The fix as a change a surface can apply (the page's buttons); the same change `fix`
    /// words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<Change>,
}

/// A change to the scenario that a fix names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub enum Change {
    /// Set `model.weights` to this format.
    Weights(String),
    /// Set `workload.context` to this many tokens.
    Context(u64),
    /// Set `workload.kv` to this format.
    Kv(String),
    /// Add one more node like the named one.
    CopyNode(String),
}

/// How much a diagnostic matters.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub enum Level {
    Info,
    Warning,
    Error,
}

impl Plan {
    /// The plan's value for its objective: tokens/s for throughput (higher is better),
    /// seconds per token for latency (lower is better).
    pub fn objective_value(&self) -> Option<f64> {
        if !self.feasible {
            return None;
        }
        match self.objective {
            Objective::Throughput => Some(self.tokens_per_s),
            Objective::Latency => self.latency_s,
        }
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes fields by reference
fn is_zero_bytes(n: &u64) -> bool {
    *n == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes fields by reference
fn is_no_layers(n: &usize) -> bool {
    *n == 0
}
