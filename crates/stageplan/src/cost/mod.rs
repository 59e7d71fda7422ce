//! The cost model: memory and time of a pipeline stage.
//!
//! A stage is a node holding a contiguous range of layers `[start, end)`; the first stage
//! also holds the token embedding, the last one the final norm and LM head. For a decode
//! step of `B` sequences (`workload.batch`) at context `T` (`workload.context`):
//!
//! **Memory** of a stage is the sum of the weights of its layers, the KV cache of its layers,
//! the embedding or head where they sit, the workspace and the node's reserve, against the
//! node's memory (its budget). Layer `l` holds `B × T_l × kv_l` KV bytes, where `T_l = min(T, window_l)`
//! for sliding-window layers and `kv_l = 2 × kv_heads × head_dim` elements in the KV format.
//! A tied LM head is a copy of the embedding on the last stage, shared when one node holds both.
//! The workspace, unless given, is llama.cpp-like activation buffers for one prefill chunk `C`:
//! `C × (2·hidden + 2·ffn) × 4` bytes per stage, plus `C × vocab × 4` for logits on the last.
//!
//! **Decode time per step** of a stage on a node with bandwidth `BW` and compute `F`:
//! `max(bytes_read / BW, flops / F) + send`, the roofline of the step plus the hop to the next
//! stage. Per layer, `bytes_read = dense weights + expert weights × (1 − (1 − k/E)^B) + B × T_l × kv_l`
//! (each step reads the weights once, the experts some token touches, and every sequence's KV
//! cache) and `flops = B × (2 × active params + 4 × heads × head_dim × T_l)`. The first stage
//! reads `B` embedding rows; the last reads the whole LM head and does `B × 2 × vocab × hidden`
//! more FLOPs. `send` is `latency + B × hidden × 2 bytes / link bandwidth` (f16 activations) to
//! the next stage; the last stage of a multi-stage pipeline sends the sampled tokens
//! (`B × 4` bytes) back to the first.
//! `BW` and `F` are the node's figures under the backend's fitted terms
//! ([`crate::calibration`]), or for a measured node (one with a `probe`) as measured, with a
//! CPU's decode `F` twice llama.cpp's weight rate for the model's class
//! ([`crate::calibration::measured`]); prefill divides by the node's `compute`.
//!
//! **Prefill time per prompt token** is the same roofline with weights read once per chunk of
//! `C` tokens, attention over `T/2` tokens on average, and the hop's latency spread over `C`.
//!
//! **Pipeline**: a token of one sequence passes every stage before that sequence's next token
//! can start, so a pipeline is busy only when several groups of sequences are in flight. The
//! workload's `B` sequences may go as `k` micro-batches of `b = B/k` (`1 ≤ k ≤ min(B, S)` for
//! `S` stages); the stage times `t_s(b)` are those of a step of `b` sequences. Each sequence
//! gets one token per *cycle*, and a cycle lasts as long as a micro-batch's trip through every
//! stage or as long as the busiest stage needs for all `k` micro-batches, whichever is longer:
//!
//! `cycle(k) = max(Σ_s t_s(B/k), k · max_s t_s(B/k))`, tokens/s = `B / min_k cycle(k)`.
//!
//! With one sequence that is `1 / Σ_s t_s(1)`: one stream's speed. (Fractional micro-batches
//! keep `t_s(b) / b` non-increasing in `b`, so no `k` beyond the stage count helps.) *With the
//! pipeline full* — `S` micro-batches of `B`, which needs `S·B` sequences and their KV cache —
//! the rate is `B / max_s t_s(B)`, reported apart as a figure the workload does not reach.

mod buffers;
mod offload;

use std::sync::Arc;

use buffers::SharedKv;
pub(crate) use offload::HostRates;
use offload::Memo;
pub use offload::{FIT_MARGIN, HOST_TIER_ERROR, HostParts, Offload, OffloadRule, SPLIT_LATENCY_S};

use crate::engine::{self, Buffers, Dims, Engine, Shape};
use crate::model::{Model, Place};
use crate::problem::{Links, Node, Placement, Problem, Workload};

/// Bytes per activation element crossing a stage boundary (f16/bf16).
pub const ACTIVATION_BYTES: f64 = 2.0;
/// Bytes per sampled token id sent back to the first stage.
pub const TOKEN_BYTES: f64 = 4.0;

/// `memory × fraction` in bytes (the fraction an engine claims).
fn usable_memory(memory: u64, fraction: f64) -> i128 {
    if fraction >= 1.0 { i128::from(memory) } else { (memory as f64 * fraction) as i128 }
}

/// KV cells per sequence of a layer with `window` at `context`, as `engine` (with its
/// prefill chunk) allocates them.
fn kv_cells(engine: Engine, chunk: u64, context: u64, window: Option<u64>) -> u64 {
    match (engine, window) {
        (Engine::LlamaCpp, Some(w)) => engine::llama_cpp_window_cells(context, w, chunk),
        (Engine::LlamaCpp, None) => engine::llama_cpp_context(context),
        (_, Some(w)) => w.min(context),
        (_, None) => context,
    }
}

/// `x` as `u64`, or `u64::MAX` when it does not fit: a size that large fits nowhere.
fn saturate(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

/// `x` clamped into `i64`.
pub(crate) fn clamp_i64(x: i128) -> i64 {
    i64::try_from(x).unwrap_or(if x < 0 { i64::MIN } else { i64::MAX })
}

/// How the workload's sequences go through a pipeline: in `micro_batches` groups, each
/// sequence getting one token per `cycle_s`.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Schedule {
    pub micro_batches: u64,
    pub cycle_s: f64,
}

/// Memory of a stage by part, in bytes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryParts {
    pub weights: u64,
    pub kv: u64,
    pub embed_head: u64,
    pub workspace: u64,
    pub reserve: u64,
}

impl MemoryParts {
    /// Sum of the parts.
    pub fn total(&self) -> u64 {
        [self.kv, self.embed_head, self.workspace, self.reserve].into_iter().fold(self.weights, u64::saturating_add)
    }
}

/// Decode-step time of a stage by part, in seconds.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct TimeParts {
    /// Bytes read ÷ bandwidth.
    pub memory_s: f64,
    /// FLOPs ÷ compute.
    pub compute_s: f64,
    /// The backend's fixed cost per layer per step (kernel launches, small ops).
    pub overhead_s: f64,
    /// The hop to the next stage (or back to the first).
    pub send_s: f64,
    /// On a machine with a host tier, the CPU's part: its roofline and per-layer cost
    /// (`memory_s`, `compute_s` and `overhead_s` are then the GPU's).
    pub host_s: f64,
    /// Changes between GPU and CPU along the step: syncs and hidden-state copies.
    pub split_s: f64,
    /// Prefill time per prompt token.
    pub prefill_s: f64,
}

impl TimeParts {
    /// The stage's time per decode step: roofline, per-layer cost, the host's part and send.
    pub fn total(&self) -> f64 {
        self.memory_s.max(self.compute_s) + self.overhead_s + self.host_s + self.split_s + self.send_s
    }
}

#[derive(Copy, Clone, Debug, Default)]
struct Extra {
    held: u64,
    read: f64,
    flops: f64,
    prefill_read: f64,
    prefill_flops: f64,
}

/// A node reduced to what the cost model needs.
#[derive(Copy, Clone, Debug)]
pub(crate) struct NodeRates {
    pub inv_bandwidth: f64,
    /// Prefill's compute: the node's `compute`.
    pub inv_compute: f64,
    /// A decode step's: per FLOP, `1 ÷ (2 × weights/s)` of a measured CPU's products,
    /// else `inv_compute`.
    pub inv_decode_compute: f64,
    /// Seconds every layer adds to a decode step (the backend's fitted `τ`).
    pub per_layer_s: f64,
    /// Memory left for layers, embedding and head after reserve and workspace (may be < 0);
    /// with a host tier, the GPU's and host RAM's together (what bounds and orderings read).
    pub capacity: i64,
    /// The machine's system RAM and CPU, when the scenario gives them.
    pub host: Option<HostRates>,
    /// The token embedding is in this memory on a first stage: llama.cpp keeps it in host
    /// RAM (`token_embd` on the CPU), so a discrete GPU's memory does not hold it; a CPU's or
    /// a unified memory does, and vLLM keeps it on the GPU.
    pub keeps_embedding: bool,
}

impl NodeRates {
    /// The least time per byte read on any of the node's tiers (for lower bounds).
    pub(crate) fn least_inv_bandwidth(&self) -> f64 {
        self.host.map_or(self.inv_bandwidth, |h| self.inv_bandwidth.min(h.inv_bandwidth))
    }

    /// The least time per FLOP on any tier (for lower bounds).
    pub(crate) fn least_inv_compute(&self) -> f64 {
        self.host.map_or(self.inv_compute, |h| self.inv_compute.min(h.inv_decode_compute))
    }

    /// The least per-layer cost on any tier (for lower bounds).
    pub(crate) fn least_per_layer_s(&self) -> f64 {
        self.host.map_or(self.per_layer_s, |h| self.per_layer_s.min(h.per_layer_s))
    }
}

/// Per-layer costs of a model under a workload, as prefix sums, plus the cluster's rates.
///
/// Every planner evaluates stages through this one type, so optimal, baseline and exhaustive
/// plans are compared on exactly the same numbers.
#[derive(Clone, Debug)]
pub struct CostModel {
    layers: usize,
    /// Prefix sums in `u128`: per-layer sizes come from untrusted headers, and a prefix sum
    /// that saturated would make the difference of two saturated sums 0 — a stage that
    /// "fits". In `u128` no sum of 100,000 `u64` values can overflow.
    weights: Vec<u128>,
    kv: Vec<u128>,
    /// Per decode step of `step` sequences: bytes read and FLOPs, prefix sums.
    read: Vec<f64>,
    flops: Vec<f64>,
    /// The parts `read` and `flops` are made of, so a step of any size is one pass away:
    /// dense weights, expert weights (scaled by the fraction of experts a step touches),
    /// and per sequence its KV cache read and its FLOPs.
    dense_read: Vec<f64>,
    expert_read: Vec<f64>,
    /// The FFN a machine may keep in host RAM apart from attention (routed experts, or a dense
    /// layer's FFN matrices): bytes held, bytes read per step of dense layers (experts read
    /// as `expert_read`), and per sequence its FLOPs; then the step's read and FLOPs.
    ffn_weights: Vec<u128>,
    ffn_dense_read: Vec<f64>,
    ffn_flops_per_sequence: Vec<f64>,
    ffn_read: Vec<f64>,
    ffn_flops: Vec<f64>,
    kv_read_per_sequence: Vec<f64>,
    flops_per_sequence: Vec<f64>,
    /// For MoE models, the fraction of experts one token routes to.
    active_fraction: Option<f64>,
    /// Sequences the workload holds KV cache for (`workload.batch`).
    batch: u64,
    /// Sequences decoded together in one step: `batch` or a micro-batch `batch / k`.
    step: f64,
    prefill_read: Vec<f64>,
    prefill_flops: Vec<f64>,
    embed: Extra,
    head: Extra,
    /// Bytes the last stage need not hold when it is also the first (a tied head).
    shared_single: u64,
    /// The engine's buffers per stage role (or the scenario's explicit workspace).
    buffers: Buffers,
    /// Layers whose KV cache later layers read (Gemma 3n), for what a stage receives of them.
    shared_kv: Vec<SharedKv>,
    /// The engine, and how it runs the workload: what sizes the KV cells and the buffers.
    engine: Engine,
    shape: Shape,
    /// What recomputes `buffers` at another context (`None`: an explicit workspace).
    dims: Option<Dims>,
    /// Bytes of one embedding row, of one token's activations, and the head's FLOPs per token.
    embedding_row: f64,
    token_activation_bytes: f64,
    /// One token's hidden state in f32, as it crosses between GPU and CPU.
    token_activation_f32: f64,
    head_flops_per_token: f64,
    activation_bytes: f64,
    token_bytes: f64,
    prefill_chunk: f64,
    /// Per layer: KV bytes held per token of context (all sequences), and the layer's window.
    kv_per_context_token: Vec<u64>,
    /// Recurrent state bytes per layer for every sequence: held whatever the context.
    state_per_layer: Vec<u64>,
    windows: Vec<Option<u64>>,
    pub(crate) nodes: Vec<NodeRates>,
    reserves: Vec<u64>,
    budgets: Vec<u64>,
    /// Per node: host RAM's reserve and budget (0 without a host tier), and the memo of
    /// its stages' best placements.
    host_reserves: Vec<u64>,
    host_budgets: Vec<u64>,
    memos: Vec<Memo>,
    /// How machines with a host tier choose their placement.
    rule: OffloadRule,
    /// Placements manual stages fix (`stages[].offload`), before any search.
    fixed: Vec<(Placement, Offload)>,
    /// Shared: the dense per-pair table may be large, and every micro-batch size and subset
    /// of the same cluster reads the same links.
    links: Arc<Links>,
}

impl CostModel {
    /// The cost model of a checked scenario.
    pub fn new(problem: &Problem) -> CostModel {
        let mut cost = CostModel::build(&problem.model, &problem.workload, &problem.nodes, &problem.links);
        cost.fixed = problem
            .fixed_offloads
            .iter()
            .map(|f| {
                let offload = Offload { host_layers: f.host_layers, host_ffn: f.host_ffn, ..Offload::default() };
                (f.stage, offload)
            })
            .collect();
        cost
    }

    /// The cost model of a model and workload on nodes joined by links.
    pub fn build(model: &Model, workload: &Workload, nodes: &[Node], links: &Links) -> CostModel {
        let arch = &model.arch;
        let context = workload.context;
        let chunk = workload.prefill_chunk as f64;
        let (touched_prefill, active_fraction) = match &arch.moe {
            Some(moe) => {
                let p = moe.active as f64 / moe.experts as f64;
                (1.0 - (1.0 - p).powf(chunk), Some(p))
            }
            None => (1.0, None),
        };
        // In f64: head counts and sizes may come from a GGUF's metadata, unbounded.
        let attention = 4.0 * arch.num_heads as f64 * arch.head_dim as f64;

        let layers = model.layers();
        let n = layers.len();
        let mut kv_per_context_token = Vec::with_capacity(n);
        let mut state_per_layer = Vec::with_capacity(n);
        let mut windows = Vec::with_capacity(n);
        let mut weights = vec![0u128; n + 1];
        let mut kv = vec![0u128; n + 1];
        let mut dense_read = vec![0.0; n + 1];
        let mut expert_read = vec![0.0; n + 1];
        let mut ffn_weights = vec![0u128; n + 1];
        let mut ffn_dense_read = vec![0.0; n + 1];
        let mut ffn_flops_per_sequence = vec![0.0; n + 1];
        let mut kv_read_per_sequence = vec![0.0; n + 1];
        let mut flops_per_sequence = vec![0.0; n + 1];
        let mut prefill_read = vec![0.0; n + 1];
        let mut prefill_flops = vec![0.0; n + 1];
        for (i, layer) in layers.iter().enumerate() {
            let window = arch.windows.get(i).copied().flatten();
            let tokens = window.map_or(context, |w| w.min(context));
            let padded = if workload.flash_attention { 0 } else { arch.v_pad_elements.get(i).copied().unwrap_or(0) };
            let kv_per_token = workload.kv.bytes(arch.kv_elements.get(i).copied().unwrap_or(0).saturating_add(padded));
            let dense = (layer.bytes - layer.expert_bytes) as f64;
            let active_params = (layer.params - layer.expert_params) as f64
                + layer.expert_params as f64 * active_fraction.unwrap_or(1.0);
            // Saturating: sizes from model files are untrusted, and a saturated total simply
            // does not fit anywhere.
            let cells = kv_cells(workload.engine, workload.prefill_chunk, context, window);
            // A recurrent layer's state is one per sequence, whatever the context (f32).
            let state =
                workload.batch.saturating_mul(arch.state_elements.get(i).copied().unwrap_or(0)).saturating_mul(4);
            let kv_held = workload.batch.saturating_mul(cells).saturating_mul(kv_per_token).saturating_add(state);
            kv_per_context_token.push(workload.batch.saturating_mul(kv_per_token));
            state_per_layer.push(state);
            windows.push(window);
            weights[i + 1] = weights[i] + u128::from(layer.bytes);
            kv[i + 1] = kv[i] + u128::from(kv_held);
            dense_read[i + 1] = dense_read[i] + dense;
            expert_read[i + 1] = expert_read[i] + layer.expert_bytes as f64;
            ffn_weights[i + 1] = ffn_weights[i] + u128::from(layer.ffn_bytes);
            let (ffn_dense, ffn_active) = if layer.expert_bytes > 0 {
                (0.0, layer.expert_params as f64 * active_fraction.unwrap_or(1.0))
            } else {
                (layer.ffn_bytes as f64, layer.ffn_params as f64)
            };
            ffn_dense_read[i + 1] = ffn_dense_read[i] + ffn_dense;
            ffn_flops_per_sequence[i + 1] = ffn_flops_per_sequence[i] + 2.0 * ffn_active;
            // A recurrent layer reads its state each step (and writes it back).
            let state_read = 4.0 * arch.state_elements.get(i).copied().unwrap_or(0) as f64;
            kv_read_per_sequence[i + 1] = kv_read_per_sequence[i] + tokens as f64 * kv_per_token as f64 + state_read;
            flops_per_sequence[i + 1] = flops_per_sequence[i] + 2.0 * active_params + attention * tokens as f64;
            prefill_read[i + 1] =
                prefill_read[i] + (dense + layer.expert_bytes as f64 * touched_prefill) / chunk + kv_per_token as f64;
            prefill_flops[i + 1] = prefill_flops[i] + 2.0 * active_params + attention * tokens as f64 / 2.0;
        }

        let hidden = arch.hidden_size as f64;
        let vocab = arch.vocab_size as f64;
        let row = model.embedding_row_bytes();
        let embed = Extra {
            held: model.bytes_at(Place::Embedding),
            read: 0.0,
            flops: 0.0,
            prefill_read: row,
            prefill_flops: 0.0,
        };
        let head_bytes = model.head_bytes();
        let head = Extra {
            held: head_bytes,
            read: head_bytes as f64,
            flops: 0.0,
            prefill_read: head_bytes as f64 / chunk,
            prefill_flops: 2.0 * vocab * hidden,
        };
        let shared_single = if model.head_shares_embedding { embed.held } else { 0 };

        let shape = workload.shape();
        let (buffers, dims) = match workload.workspace {
            Some(bytes) => (Buffers { stage: bytes, ..Buffers::default() }, None),
            None => {
                let dims = Dims::of(model);
                (engine::buffers(workload.engine, &dims, shape), Some(dims))
            }
        };
        // Copies of caches are the engine's whether or not the scenario gives the workspace.
        let shared_kv = match workload.engine {
            Engine::LlamaCpp => SharedKv::of(&arch.kv_from, n),
            _ => Vec::new(),
        };
        let workspace = buffers.stage;
        let usable = workload.engine.usable_fraction();

        let node_rates = nodes
            .iter()
            .map(|node| {
                // Measured figures are what the engine reaches: no fitted terms on top.
                let measured = crate::calibration::Measured::of_node(node);
                let (reached, per_layer_s) = match &measured {
                    Some(m) => (1.0, m.per_layer_s),
                    None => {
                        crate::calibration::FITTED.speed(node.backend, &model.weights, node.bandwidth, node.threads)
                    }
                };
                let inv_compute = 1.0 / (node.compute * node.efficiency.compute);
                // Two FLOPs per weight of a matrix-vector product.
                let decode_rate = measured.as_ref().and_then(|m| m.decode_rate(model));
                let capacity =
                    clamp_i64(usable_memory(node.memory, usable) - i128::from(node.reserve) - i128::from(workspace));
                let host = node.host.as_ref().map(|host| offload::host_rates(host, model, capacity));
                NodeRates {
                    inv_bandwidth: 1.0 / (node.bandwidth * node.efficiency.bandwidth * reached),
                    inv_compute,
                    inv_decode_compute: decode_rate.map_or(inv_compute, |r| 1.0 / (2.0 * r * node.efficiency.compute)),
                    per_layer_s,
                    capacity: host.map_or(capacity, |h| h.capacity.max(0).saturating_add(capacity)),
                    host,
                    keeps_embedding: node.kind != Some(crate::device::DeviceKind::Gpu)
                        || workload.engine != Engine::LlamaCpp,
                }
            })
            .collect();
        let mut cost = CostModel {
            layers: n,
            weights,
            kv,
            read: Vec::new(),
            flops: Vec::new(),
            dense_read,
            expert_read,
            ffn_weights,
            ffn_dense_read,
            ffn_flops_per_sequence,
            ffn_read: Vec::new(),
            ffn_flops: Vec::new(),
            kv_read_per_sequence,
            flops_per_sequence,
            active_fraction,
            batch: workload.batch,
            step: 0.0,
            prefill_read,
            prefill_flops,
            embed,
            head,
            shared_single,
            buffers,
            shared_kv,
            engine: workload.engine,
            shape,
            dims,
            embedding_row: row,
            token_activation_bytes: hidden * ACTIVATION_BYTES,
            token_activation_f32: hidden * offload::SPLIT_ELEMENT_BYTES,
            head_flops_per_token: 2.0 * vocab * hidden,
            activation_bytes: 0.0,
            token_bytes: 0.0,
            prefill_chunk: chunk,
            kv_per_context_token,
            state_per_layer,
            windows,
            nodes: node_rates,
            reserves: nodes.iter().map(|n| n.reserve).collect(),
            budgets: nodes.iter().map(|n| n.memory).collect(),
            host_reserves: nodes.iter().map(|n| n.host.as_ref().map_or(0, |h| h.reserve)).collect(),
            host_budgets: nodes.iter().map(|n| n.host.as_ref().map_or(0, |h| h.memory)).collect(),
            memos: nodes.iter().map(|_| Memo::default()).collect(),
            rule: OffloadRule::Fastest,
            fixed: Vec::new(),
            links: Arc::new(links.clone()),
        };
        cost.set_step(workload.batch as f64);
        cost
    }

    /// Makes each decode step one of `sequences` sequences (the memory still holds the KV
    /// cache of all `batch`): per layer, `read = dense + experts × touched + sequences × KV`
    /// and `flops = sequences × per-sequence FLOPs`.
    fn set_step(&mut self, sequences: f64) {
        let touched = self.active_fraction.map_or(1.0, |p| 1.0 - (1.0 - p).powf(sequences));
        self.step = sequences;
        self.read = (0..=self.layers)
            .map(|i| self.dense_read[i] + self.expert_read[i] * touched + sequences * self.kv_read_per_sequence[i])
            .collect();
        self.flops = self.flops_per_sequence.iter().map(|f| sequences * f).collect();
        self.ffn_read = (0..=self.layers).map(|i| self.ffn_dense_read[i] + self.expert_read[i] * touched).collect();
        self.ffn_flops = self.ffn_flops_per_sequence.iter().map(|f| sequences * f).collect();
        // Best placements depend on the step's times.
        self.memos = self.nodes.iter().map(|_| Memo::default()).collect();
        for k in 0..self.nodes.len() {
            let monotone = self.host_is_slower(k);
            if let Some(host) = self.nodes[k].host.as_mut() {
                host.monotone = monotone;
            }
        }
        self.embed.read = sequences * self.embedding_row;
        self.head.flops = sequences * self.head_flops_per_token;
        self.activation_bytes = sequences * self.token_activation_bytes;
        self.token_bytes = sequences * TOKEN_BYTES;
    }

    /// The same cluster and memory with the workload's sequences decoded as `micro_batches`
    /// equal groups: each step is one of `batch / micro_batches` sequences.
    pub fn micro_batched(&self, micro_batches: u64) -> CostModel {
        let mut out = self.clone();
        out.set_step(self.batch as f64 / micro_batches.max(1) as f64);
        out
    }

    /// The same cluster with machines placing tensors by `rule`.
    pub fn with_rule(&self, rule: OffloadRule) -> CostModel {
        let mut out = self.clone();
        out.rule = rule;
        out.memos = self.nodes.iter().map(|_| Memo::default()).collect();
        out
    }

    /// True when some node has a host tier.
    pub fn has_host_tiers(&self) -> bool {
        self.nodes.iter().any(|n| n.host.is_some())
    }

    /// Sequences the workload decodes (and holds KV cache for).
    pub fn batch(&self) -> u64 {
        self.batch
    }

    /// The schedule of `stages` that serves the workload's sequences fastest: the number of
    /// micro-batches `k` (at most one per stage) and the cycle in which every sequence gets
    /// one token, `max(Σ t_s, k · max t_s)` with stage times for `batch / k` sequences.
    /// `self` must be the cost model of whole-batch steps.
    pub fn best_schedule(&self, stages: &[Placement]) -> Schedule {
        let times = self.stage_times(stages);
        let mut best = Schedule { micro_batches: 1, cycle_s: times.iter().sum() };
        let most = self.batch.min(stages.len() as u64);
        for k in 2..=most {
            let cycle_s = self.micro_batched(k).cycle_s(stages, k);
            if cycle_s < best.cycle_s {
                best = Schedule { micro_batches: k, cycle_s };
            }
        }
        best
    }

    /// `max(Σ t_s, k · max t_s)` with this cost model's step: the cycle of `k` micro-batches.
    pub fn cycle_s(&self, stages: &[Placement], k: u64) -> f64 {
        let times = self.stage_times(stages);
        let sum: f64 = times.iter().sum();
        let max = times.iter().copied().fold(0.0, f64::max);
        sum.max(k as f64 * max)
    }

    /// True when `node` can hold `[start, end)` with the KV cache of `sequences` sequences
    /// instead of the workload's `batch`.
    pub fn fits_sequences(&self, node: usize, start: usize, end: usize, sequences: u64) -> bool {
        if self.host(node).is_some() {
            let batch = u128::from(self.batch.max(1));
            let kv = |a: usize, b: usize| (self.kv[b] - self.kv[a]) / batch * u128::from(sequences);
            return self.search_offload(node, start, end, &kv, 0).is_some();
        }
        let kv = self.kv[end] - self.kv[start];
        let scaled = kv / u128::from(self.batch.max(1)) * u128::from(sequences);
        let held = u128::from(self.held(node, start, end)) - kv.min(u128::from(self.held(node, start, end))) + scaled;
        i64::try_from(saturate(held)).is_ok_and(|held| held <= self.nodes[node].capacity)
    }

    /// Number of layers.
    pub fn layers(&self) -> usize {
        self.layers
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// True when every pair of nodes shares one link.
    pub fn uniform_links(&self) -> bool {
        self.links.is_uniform()
    }

    /// The embedding and head bytes stage `[start, end)` keeps in a memory that does
    /// (`keeps_embedding`) or does not hold the token embedding: a tied head's copy is
    /// shared only where the embedding is.
    fn embed_head(&self, keeps_embedding: bool, start: usize, end: usize) -> u64 {
        let (first, last) = (start == 0, end == self.layers);
        let embed = if first && keeps_embedding { self.embed.held } else { 0 };
        let mut bytes = embed;
        if last {
            bytes = bytes.saturating_add(self.head.held);
            if first {
                bytes = bytes.saturating_sub(self.shared_single.min(embed));
            }
        }
        bytes
    }

    /// Bytes a stage `[start, end)` on `node` holds besides reserve and workspace.
    fn held(&self, node: usize, start: usize, end: usize) -> u64 {
        self.held_keeping(self.nodes[node].keeps_embedding, start, end)
    }

    fn held_keeping(&self, keeps_embedding: bool, start: usize, end: usize) -> u64 {
        // In u128, saturated once at the end: a sum that saturated early would undercount.
        let mut held = (self.weights[end] - self.weights[start]) + (self.kv[end] - self.kv[start]);
        held += u128::from(self.embed_head(keeps_embedding, start, end));
        // The buffers beyond every stage's own (which the capacity already left out).
        let buffers = self.stage_buffers(start, end, false);
        held += u128::from(buffers);
        held -= u128::from(self.buffers.stage.min(buffers));
        saturate(held)
    }

    /// True when `node` can hold `[start, end)`.
    pub fn fits(&self, node: usize, start: usize, end: usize) -> bool {
        if self.host(node).is_some() {
            return self.offload(node, start, end).is_some();
        }
        i64::try_from(self.held(node, start, end)).is_ok_and(|held| held <= self.nodes[node].capacity)
    }

    /// True when `node` can hold `[start, end)` with the KV cache sized for `context` tokens.
    pub fn fits_at_context(&self, node: usize, start: usize, end: usize, context: u64) -> bool {
        let layer_kv = |l: usize| {
            self.kv_per_context_token[l]
                .saturating_mul(self.kv_cells(context, self.windows[l]))
                .saturating_add(self.state_per_layer[l])
        };
        // The engine's buffers grow with the context too (the attention mask, and without
        // flash attention the KQ matrix).
        let tiered = self.host(node).is_some();
        let at_context = match &self.dims {
            Some(dims) => engine::buffers(self.engine, dims, Shape { context, ..self.shape }),
            None => self.buffers,
        };
        let grown = i128::from(self.buffers_of(&at_context, start, end, &layer_kv, tiered))
            - i128::from(self.stage_buffers(start, end, tiered));
        if self.host(node).is_some() {
            let mut prefix = vec![0u128; end - start + 1];
            for l in start..end {
                prefix[l - start + 1] = prefix[l - start] + u128::from(layer_kv(l));
            }
            let kv = |a: usize, b: usize| prefix[b - start] - prefix[a - start];
            return self.search_offload(node, start, end, &kv, grown).is_some();
        }
        let kv: u64 = (start..end).map(layer_kv).fold(0u64, u64::saturating_add);
        let held = self.held(node, start, end).saturating_sub(saturate(self.kv[end] - self.kv[start]));
        let held = i128::from(held.saturating_add(kv)) + grown;
        held <= i128::from(self.nodes[node].capacity)
    }

    /// The same model and workload on the nodes marked in `keep`, renumbered in order.
    pub(crate) fn subset(&self, keep: &[bool]) -> CostModel {
        let indices: Vec<usize> = (0..self.nodes.len()).filter(|&k| keep[k]).collect();
        let mut out = self.clone();
        out.nodes = indices.iter().map(|&k| self.nodes[k]).collect();
        out.reserves = indices.iter().map(|&k| self.reserves[k]).collect();
        out.budgets = indices.iter().map(|&k| self.budgets[k]).collect();
        out.host_reserves = indices.iter().map(|&k| self.host_reserves[k]).collect();
        out.host_budgets = indices.iter().map(|&k| self.host_budgets[k]).collect();
        out.memos = indices.iter().map(|&k| self.memos[k].clone()).collect();
        out.links = Arc::new(self.links.subset(&indices));
        out
    }

    /// Memory of stage `[start, end)` on `node`, by part: on a machine with a host tier the
    /// GPU's, as the stage's best placement keeps it ([`CostModel::offload`]).
    pub fn memory(&self, node: usize, start: usize, end: usize) -> MemoryParts {
        if self.host(node).is_some() {
            let offload = self.offload(node, start, end).unwrap_or_default();
            return self.tier_parts(node, start, end, offload).0;
        }
        let embed_head = self.embed_head(self.nodes[node].keeps_embedding, start, end);
        MemoryParts {
            weights: saturate(self.weights[end] - self.weights[start]),
            kv: saturate(self.kv[end] - self.kv[start]),
            embed_head,
            workspace: self.stage_buffers(start, end, false),
            reserve: self.reserves[node],
        }
    }

    /// The node's memory budget (its GPU's, beside a host tier).
    pub fn budget(&self, node: usize) -> u64 {
        self.budgets[node]
    }

    /// The node's host RAM (0 without a host tier).
    pub fn host_budget(&self, node: usize) -> u64 {
        self.host_budgets[node]
    }

    /// The roofline time of one decode step of `[start, end)` on `node`, with the backend's
    /// per-layer cost and without the hop.
    #[inline]
    pub fn roofline_s(&self, node: usize, start: usize, end: usize) -> f64 {
        if self.host(node).is_some() {
            return match self.placed(node, start, end) {
                Some((_, time)) => time,
                None => self.offload_time(node, start, end, Offload::default()).total(),
            };
        }
        let (read, flops) = self.step_work(start, end);
        let rates = &self.nodes[node];
        (read * rates.inv_bandwidth).max(flops * rates.inv_decode_compute) + (end - start) as f64 * rates.per_layer_s
    }

    #[inline]
    pub(crate) fn step_work(&self, start: usize, end: usize) -> (f64, f64) {
        self.work(start, end, (&self.read, &self.flops), |x| (x.read, x.flops))
    }

    /// Bytes read and FLOPs of `[start, end)` from per-layer prefix sums, with the
    /// embedding's and head's share (`of`) where the stage holds them.
    #[inline]
    fn work(&self, start: usize, end: usize, sums: (&[f64], &[f64]), of: impl Fn(&Extra) -> (f64, f64)) -> (f64, f64) {
        let (mut read, mut flops) = (sums.0[end] - sums.0[start], sums.1[end] - sums.1[start]);
        for (holds, extra) in [(start == 0, &self.embed), (end == self.layers, &self.head)] {
            if holds {
                let (r, f) = of(extra);
                (read, flops) = (read + r, flops + f);
            }
        }
        (read, flops)
    }

    /// Time of sending one step's activations from `from` to `to`.
    #[inline]
    pub fn hop_s(&self, from: usize, to: usize) -> f64 {
        self.links.get(from, to).time(self.activation_bytes)
    }

    /// Time of sending the sampled tokens from the last stage `from` back to the first, `to`.
    #[inline]
    pub fn return_s(&self, from: usize, to: usize) -> f64 {
        self.links.get(from, to).time(self.token_bytes)
    }

    /// The hop every stage pays when links are uniform (pair `0 → 1` stands for all).
    pub(crate) fn uniform_hop_s(&self) -> f64 {
        self.links.default.time(self.activation_bytes)
    }

    /// The return hop when links are uniform.
    pub(crate) fn uniform_return_s(&self) -> f64 {
        self.links.default.time(self.token_bytes)
    }

    /// Time parts of stage `[start, end)` on `node`, sending to `next` (`None`: single stage).
    pub fn time(&self, node: usize, start: usize, end: usize, next: Option<usize>) -> TimeParts {
        let (read, flops) = self.step_work(start, end);
        let rates = &self.nodes[node];
        let send_s = match next {
            None => 0.0,
            Some(to) if end == self.layers => self.return_s(node, to),
            Some(to) => self.hop_s(node, to),
        };
        let prefill_send = match next {
            Some(to) if end != self.layers => {
                let link = self.links.get(node, to);
                link.latency / self.prefill_chunk + self.token_activation_bytes / link.bandwidth
            }
            _ => 0.0,
        };
        if self.host(node).is_some() {
            let offload = self.offload(node, start, end).unwrap_or_default();
            let parts = self.offload_time(node, start, end, offload);
            return TimeParts { send_s, prefill_s: parts.prefill_s + prefill_send, ..parts };
        }
        let (prefill_read, prefill_flops) = self.prefill_work(start, end);
        let per_layer = (end - start) as f64 * rates.per_layer_s;
        TimeParts {
            memory_s: read * rates.inv_bandwidth,
            compute_s: flops * rates.inv_decode_compute,
            overhead_s: per_layer,
            send_s,
            host_s: 0.0,
            split_s: 0.0,
            // The per-layer cost is paid once per chunk of prompt tokens.
            prefill_s: (prefill_read * rates.inv_bandwidth).max(prefill_flops * rates.inv_compute)
                + per_layer / self.prefill_chunk
                + prefill_send,
        }
    }

    /// Bytes read and FLOPs per prompt token of `[start, end)` (weights once a chunk).
    fn prefill_work(&self, start: usize, end: usize) -> (f64, f64) {
        self.work(start, end, (&self.prefill_read, &self.prefill_flops), |x| (x.prefill_read, x.prefill_flops))
    }

    /// Time of every stage of an assignment, in pipeline order, including hops.
    pub fn stage_times(&self, stages: &[Placement]) -> Vec<f64> {
        let count = stages.len();
        stages
            .iter()
            .enumerate()
            .map(|(s, &Placement { node, start, end })| {
                let send = if count == 1 {
                    0.0
                } else if s + 1 == count {
                    self.return_s(node, stages[0].node)
                } else {
                    self.hop_s(node, stages[s + 1].node)
                };
                self.roofline_s(node, start, end) + send
            })
            .collect()
    }

    /// For each node: is it memory-bound on every layer alone? compute-bound on every one?
    /// A node that is either has a stage time linear in its layers' read bytes (or FLOPs),
    /// which lets the latency search use a sliding-window minimum instead of trying every start.
    pub(crate) fn linear_regime(&self, node: usize) -> Option<Regime> {
        let rates = &self.nodes[node];
        // A tiered stage's time depends on its placement, which depends on its whole range.
        if rates.host.is_some() {
            return None;
        }
        let mut memory_bound = true;
        let mut compute_bound = true;
        for l in 0..self.layers {
            let m = (self.read[l + 1] - self.read[l]) * rates.inv_bandwidth;
            let c = (self.flops[l + 1] - self.flops[l]) * rates.inv_decode_compute;
            memory_bound &= m >= c;
            compute_bound &= c >= m;
        }
        if memory_bound {
            Some(Regime::Memory)
        } else if compute_bound {
            Some(Regime::Compute)
        } else {
            None
        }
    }

    /// The prefix sum a linear regime's time follows, times the node's rate.
    #[inline]
    pub(crate) fn linear_prefix(&self, node: usize, regime: Regime, at: usize) -> f64 {
        let rates = &self.nodes[node];
        at as f64 * rates.per_layer_s
            + match regime {
                Regime::Memory => self.read[at] * rates.inv_bandwidth,
                Regime::Compute => self.flops[at] * rates.inv_decode_compute,
            }
    }

    /// Layer `l` alone: (bytes read, FLOPs) per decode step and bytes held.
    pub(crate) fn layer_work(&self, l: usize) -> (f64, f64, u64) {
        (
            self.read[l + 1] - self.read[l],
            self.flops[l + 1] - self.flops[l],
            saturate((self.weights[l + 1] - self.weights[l]) + (self.kv[l + 1] - self.kv[l])),
        )
    }

    /// Bytes the model needs spread over `stages` nodes, at the least: everything once, the
    /// head copy when tied and split, and one workspace per stage.
    pub(crate) fn minimum_total(&self, stages: usize) -> u64 {
        // A GPU that leaves the embedding in host RAM may start the pipeline.
        let keeps = self.nodes.iter().all(|n| n.keeps_embedding);
        let mut total =
            self.held_keeping(keeps, 0, self.layers).saturating_add(self.buffers.stage.saturating_mul(stages as u64));
        if stages > 1 {
            // Split, a tied head is a copy of its own, beside the embedding where kept.
            let copy = if keeps { self.shared_single } else { 0 };
            total = total.saturating_add(copy).saturating_add(self.buffers.single_saving);
        }
        total
    }

    /// The engine's buffers every stage keeps (more on the first and last).
    pub(crate) fn workspace(&self) -> u64 {
        self.buffers.stage
    }

    /// KV cells a layer with `window` holds per sequence at `context`: the engine's rounding
    /// (llama.cpp allocates whole blocks of 256 cells; a sliding window keeps one
    /// micro-batch more).
    fn kv_cells(&self, context: u64, window: Option<u64>) -> u64 {
        kv_cells(self.engine, self.shape.prefill_chunk, context, window)
    }
}

/// Which roofline term decides a node's time on every layer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Regime {
    Memory,
    Compute,
}

#[cfg(test)]
mod tests;
