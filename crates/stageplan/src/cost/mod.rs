//! The cost model: memory and time of a pipeline stage.
//!
//! A stage is a node holding a contiguous range of layers `[start, end)`; the first stage
//! also holds the token embedding, the last one the final norm and LM head. For a decode
//! step of `B` sequences (`workload.batch`) at context `T` (`workload.context`):
//!
//! **Memory** of a stage is the sum of the weights of its layers, the KV cache of its layers,
//! the embedding or head where they sit, the engine's buffers and the node's reserve, against
//! the node's memory (its budget). Layer `l` holds `B × cells_l × kv_l` KV bytes, where
//! `cells_l` is the context (or the window of a sliding-window layer) as the engine allocates
//! it ([`EngineRules::kv_cells`]) and `kv_l` the layer's K and V elements per token in the KV
//! format; a recurrent layer holds its state per sequence instead. A tied LM head is a copy of
//! the embedding on the last stage, shared when one memory holds both. The engine's buffers
//! are [`crate::engine`]'s, by the stage's role in the pipeline ([`Buffers`]), or the
//! scenario's `workspace` on every stage.
//!
//! **Decode time per step** of a stage on a node with bandwidth `BW` and compute `F`:
//! `max(bytes_read / BW, flops / F) + layers · τ + send`, the roofline of the step, the
//! backend's cost per layer, and the hop to the next stage. Per layer,
//! `bytes_read = dense weights + expert weights × (1 − (1 − k/E)^B) + B × T_l × kv_l` (each step
//! reads the weights once, the experts some token touches, and every sequence's KV cache) and
//! `flops = B × (2 × active params + 4 × heads × head_dim × T_l)`. The first stage reads `B`
//! embedding rows; the last reads the whole LM head and does `B × 2 × vocab × hidden` more
//! FLOPs. `send` is `latency + B × hidden × a / link bandwidth` to the next stage, `a` the
//! engine's bytes an element ([`crate::engine::Traffic`]: llama.cpp's f32 hidden state, vLLM's
//! bf16 hidden state and residual); the last stage of a multi-stage pipeline sends the first
//! what it samples from: llama.cpp's logits (`B × vocab × 4` bytes, to llama-server), or
//! another engine's sampled tokens (`B × 4` bytes). Under llama.cpp a cut between two machines
//! that are not the first stage's goes through the first's, where llama-server copies it
//! from one device to the next: two hops ([`CostModel::cut_s`]). `BW`, `F` and `τ` are the node's figures under the backend's
//! fitted terms ([`crate::calibration`]), or for a measured node (one with a `probe`) as
//! measured, with a CPU's decode `F` twice llama.cpp's weight rate for the model's class
//! ([`crate::calibration::measured`]); prefill divides by the node's `compute`.
//!
//! **A machine with system RAM** (`host`) places each stage over its device and its RAM as
//! llama.cpp's flags can ([`offload`](self::Offload)): each memory holds its part, each
//! processor's roofline runs over what it reads, and each change of processor along the
//! token's path costs a sync and a copy. A machine without system RAM of its own is the same
//! model with one placement, [`Offload::NONE`]: every formula above is that placement's.
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
mod layers;
mod node;
mod offload;
mod shares;
mod stage;
mod tensor;

use std::sync::Arc;

use buffers::SharedKv;
use layers::LayerTable;
pub(crate) use node::NodeCost;
pub use offload::{FIT_MARGIN, HOST_TIER_ERROR, Offload, OffloadRule};
pub use shares::RamShare;
pub use stage::SPLIT_LATENCY_S;
#[cfg(test)]
pub(crate) use tensor::AllReduce;
pub(crate) use tensor::TensorGroup;
pub use tensor::degree_refused;

use crate::engine::{Buffers, Dims, EngineRules, Shape};
use crate::model::{Model, Place};
use crate::problem::{Link, Links, Node, Peer, Placement, Problem, Workload};

/// Bytes per sampled token id sent back to the first stage (an engine whose last stage
/// samples: [`crate::engine::Traffic::returns_logits`]).
pub const TOKEN_BYTES: f64 = 4.0;

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

/// Memory of a stage in one memory (a device's, or a machine's system RAM), by part, in bytes.
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
    /// A step's further sequences' products, beyond the roofline of its first
    /// (`NodeCost::set_step`).
    pub batch_s: f64,
    /// The hop to the next stage (or back to the first).
    pub send_s: f64,
    /// On a machine with a host tier, the CPU's part: its roofline and per-layer cost
    /// (`memory_s`, `compute_s` and `overhead_s` are then the GPU's).
    pub host_s: f64,
    /// Changes between GPU and CPU along the step: syncs and hidden-state copies.
    pub split_s: f64,
    /// A tensor-parallel group's all-reduces of the hidden state, two a layer.
    pub all_reduce_s: f64,
    /// Prefill time per prompt token.
    pub prefill_s: f64,
}

impl TimeParts {
    /// The stage's time per decode step: roofline, per-layer cost, the host's part and send.
    pub fn total(&self) -> f64 {
        self.memory_s.max(self.compute_s)
            + self.batch_s
            + self.overhead_s
            + self.host_s
            + self.split_s
            + self.all_reduce_s
            + self.send_s
    }
}

/// The token embedding's or the LM head's share of the stage that holds it: bytes held,
/// and per decode step and per prompt token bytes read and FLOPs.
#[derive(Copy, Clone, Debug, Default)]
struct Extra {
    held: u64,
    read: f64,
    flops: f64,
    prefill_read: f64,
    prefill_flops: f64,
}

/// What one token costs beyond its layers.
#[derive(Copy, Clone, Debug)]
struct PerToken {
    /// Bytes of its embedding row.
    embedding_row: f64,
    /// Its activations across a stage boundary, in the engine's type
    /// ([`crate::engine::Traffic`]).
    activation_bytes: f64,
    /// What the last stage sends the first for it: its logits or its token's id.
    return_bytes: f64,
    /// Its hidden state in f32, as it crosses between a device and the CPU.
    activation_f32: f64,
    /// The head's FLOPs.
    head_flops: f64,
}

/// Where a stage sends its step: the next stage's node (the first's, from the last stage),
/// and the node of the pipeline's first stage.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Next {
    pub node: usize,
    pub first: usize,
}

impl Next {
    /// Where stage `s` of `stages` sends its step; `None` for a pipeline of one stage.
    pub fn of(stages: &[Placement], s: usize) -> Option<Next> {
        (stages.len() > 1).then(|| Next { node: stages[(s + 1) % stages.len()].node, first: stages[0].node })
    }
}

/// Per-layer costs of a model under a workload, as prefix sums, plus the cluster's machines.
///
/// Every planner evaluates stages through this one type, so optimal, baseline and exhaustive
/// plans are compared on exactly the same numbers.
#[derive(Clone, Debug)]
pub struct CostModel {
    layers: LayerTable,
    /// One value per machine (or GPU of a machine with several), then one per
    /// tensor-parallel group in `groups`' order: node `devices + g` is group `g`.
    pub(crate) nodes: Vec<NodeCost>,
    /// The problem's nodes: the rest of `nodes` are groups.
    devices: usize,
    /// Each problem node's machine: the index of its machine's first node (GPUs of one
    /// machine share it), for an engine that relays cuts through the first stage's machine.
    machine: Arc<Vec<usize>>,
    /// The groups of a machine's GPUs that may hold the whole model as tensor parallel, and
    /// those that may be the stages of a pipeline.
    groups: Arc<Vec<TensorGroup>>,
    /// vLLM's pipelines of groups: per degree, the nodes (groups) its stages may be.
    pipelines: Arc<Vec<(usize, Vec<usize>)>>,
    /// Sequences the workload holds KV cache for (`workload.batch`).
    batch: u64,
    /// Sequences decoded together in one step: `batch` or a micro-batch `batch / k`.
    step: f64,
    embed: Extra,
    head: Extra,
    /// Bytes the last stage need not hold when it also holds the embedding (a tied head).
    shared_single: u64,
    token: PerToken,
    /// Per step: activations sent to the next stage, and what goes back to the first (token
    /// ids, or logits for an engine that samples there).
    activation_bytes: f64,
    token_bytes: f64,
    prefill_chunk: f64,
    /// The engine's buffers per stage role (or the scenario's explicit workspace).
    buffers: Buffers,
    /// Layers whose KV cache later layers read (Gemma 3n), for what a stage receives of them.
    shared_kv: Vec<SharedKv>,
    /// The engine's rules, and how it runs the workload: what sizes the KV cells and buffers.
    rules: &'static EngineRules,
    shape: Shape,
    /// What recomputes `buffers` at another context (`None`: an explicit workspace).
    dims: Option<Dims>,
    /// How machines with system RAM choose their placement.
    rule: OffloadRule,
    /// Placements manual stages fix (`stages[].offload`), before any search.
    fixed: Vec<(Placement, Offload)>,
    /// Shared: the dense per-pair table may be large, and every micro-batch size and subset
    /// of the same cluster reads the same links.
    links: Arc<Links>,
    /// How each machine with several GPUs divides its system RAM among them.
    pub(crate) share: RamShare,
}

impl CostModel {
    /// The cost model of a checked scenario, a machine's RAM divided evenly among its GPUs.
    pub fn new(problem: &Problem) -> CostModel {
        CostModel::with_share(problem, RamShare::Even)
    }

    /// The cost model of a checked scenario, each machine's RAM divided among its GPUs as
    /// `share` says.
    pub fn with_share(problem: &Problem, share: RamShare) -> CostModel {
        let mut cost = CostModel::build_with(&problem.model, &problem.workload, &problem.nodes, &problem.links, share);
        cost.fixed = problem
            .fixed_offloads
            .iter()
            .map(|f| {
                let offload = Offload {
                    host_layers: f.host_layers,
                    host_ffn: f.host_ffn,
                    head_on_host: f.head_on_host,
                    ..Offload::NONE
                };
                (f.stage, offload)
            })
            .collect();
        cost
    }

    /// The cost model of a checked scenario whose decode steps read `depth` tokens of cache
    /// (what a response `depth` tokens in reads), the memory still holding the context's.
    pub fn at_depth(problem: &Problem, depth: u64) -> CostModel {
        let mut cost = CostModel::new(problem);
        cost.layers =
            LayerTable::new(&problem.model, &problem.workload, cost.rules, depth.min(problem.workload.context));
        cost.set_step(problem.workload.batch as f64);
        cost
    }

    /// The same cost model with the stages `placed` kept as they are (a plan's placements).
    pub(crate) fn with_placements(&self, placed: impl IntoIterator<Item = (Placement, Offload)>) -> CostModel {
        let mut out = self.clone();
        out.fixed.extend(placed);
        out.fresh_memos();
        out
    }

    /// Whether `stages` (with the placements this cost model gives them) keep no more in
    /// each machine's system RAM than it has, its GPUs' stages together: what a plan made
    /// under [`RamShare::Whole`] must, and any other division's does.
    pub(crate) fn fits_shared_ram(&self, problem: &Problem, stages: &[Placement]) -> bool {
        shares::machines(&problem.nodes).iter().all(|machine| {
            let Some(host) = &problem.nodes[machine[0]].host else { return true };
            let held: i128 = stages
                .iter()
                .filter(|p| p.node < self.devices && machine.contains(&p.node))
                .map(|p| {
                    let ram = self.tier_parts(p.node, p.start, p.end, self.shown(p.node, p.start, p.end)).1;
                    i128::from(ram.total()) - i128::from(ram.reserve)
                })
                .sum();
            held <= i128::from(host.memory) - i128::from(host.reserve)
        })
    }

    /// Empties each node's memo of placements, one memo for nodes priced alike.
    fn fresh_memos(&mut self) {
        for k in 0..self.nodes.len() {
            self.nodes[k].memo = match (0..k).find(|&j| self.nodes[j].priced_alike(&self.nodes[k])) {
                Some(j) => self.nodes[j].memo.clone(),
                None => Default::default(),
            };
        }
    }

    /// The cost model of a model and workload on nodes joined by links.
    pub fn build(model: &Model, workload: &Workload, nodes: &[Node], links: &Links) -> CostModel {
        CostModel::build_with(model, workload, nodes, links, RamShare::Even)
    }

    fn build_with(model: &Model, workload: &Workload, nodes: &[Node], links: &Links, share: RamShare) -> CostModel {
        let rules = workload.engine.rules();
        let arch = &model.arch;
        let chunk = workload.prefill_chunk as f64;
        let hidden = arch.hidden_size as f64;
        let vocab = arch.vocab_size as f64;
        let token = PerToken {
            embedding_row: model.embedding_row_bytes(),
            activation_bytes: hidden * rules.traffic.activation_element,
            return_bytes: if rules.traffic.returns_logits { vocab * crate::engine::element::F32 } else { TOKEN_BYTES },
            activation_f32: hidden * crate::engine::element::F32,
            head_flops: node::FLOPS_PER_WEIGHT * vocab * hidden,
        };
        let embed = Extra {
            held: model.bytes_at(Place::Embedding),
            read: 0.0,
            flops: 0.0,
            prefill_read: token.embedding_row,
            prefill_flops: 0.0,
        };
        let head_bytes = model.head_bytes();
        let head = Extra {
            held: head_bytes,
            read: head_bytes as f64,
            flops: 0.0,
            prefill_read: head_bytes as f64 / chunk,
            prefill_flops: token.head_flops,
        };
        let shape = workload.shape();
        let (buffers, dims) = match workload.workspace {
            Some(bytes) => (Buffers { stage: bytes, ..Buffers::default() }, None),
            None => {
                let dims = Dims::of(model);
                (rules.buffers(&dims, shape), Some(dims))
            }
        };
        let layers = LayerTable::new(model, workload, rules, workload.context);
        let mut cost = CostModel {
            // Copies of caches are the engine's whether or not the scenario gives the workspace.
            shared_kv: if rules.shared_cache_copies > 0 {
                SharedKv::of(&arch.kv_from, layers.len())
            } else {
                Vec::new()
            },
            layers,
            nodes: nodes
                .iter()
                .zip(share.divide(nodes))
                .map(|(node, host)| NodeCost::new(node, host.as_ref(), model, rules, buffers.stage))
                .collect(),
            devices: nodes.len(),
            machine: Arc::new(
                nodes
                    .iter()
                    .enumerate()
                    .map(|(k, node)| {
                        let machine = node.gpu_of.as_ref().map(|g| g.machine.as_str());
                        machine
                            .and_then(|m| nodes.iter().position(|n| n.gpu_of.as_ref().is_some_and(|g| g.machine == m)))
                            .unwrap_or(k)
                    })
                    .collect(),
            ),
            groups: Arc::default(),
            pipelines: Arc::default(),
            batch: workload.batch,
            step: 0.0,
            embed,
            head,
            shared_single: if model.head_shares_embedding { embed.held } else { 0 },
            token,
            activation_bytes: 0.0,
            token_bytes: 0.0,
            prefill_chunk: chunk,
            buffers,
            rules,
            shape,
            dims,
            rule: OffloadRule::Fastest,
            fixed: Vec::new(),
            links: Arc::new(links.clone()),
            share,
        };
        let mut groups = tensor::groups(nodes, model, workload.engine);
        let mut pipelines = Vec::new();
        for (degree, partition) in tensor::partitions(nodes, model, workload.engine) {
            let mut stages = Vec::new();
            for group in partition {
                let g = groups.iter().position(|o| *o == group).unwrap_or_else(|| {
                    groups.push(group);
                    groups.len() - 1
                });
                stages.push(nodes.len() + g);
            }
            pipelines.push((degree, stages));
        }
        cost.groups = Arc::new(groups);
        cost.pipelines = Arc::new(pipelines);
        for group in cost.groups.iter() {
            let members: Vec<&NodeCost> = group.members.iter().map(|&k| &cost.nodes[k]).collect();
            // The slowest pair's link carries each round.
            let pairs = group.members.iter().flat_map(|&a| group.members.iter().map(move |&b| (a, b)));
            let link = pairs.filter(|(a, b)| a != b).map(|(a, b)| links.get(a, b)).fold(
                Link { bandwidth: f64::INFINITY, latency: 0.0 },
                |w, l| Link { bandwidth: w.bandwidth.min(l.bandwidth), latency: w.latency.max(l.latency) },
            );
            let peer = nodes[group.members[0]].gpu_of.as_ref().map_or(Peer::None, |g| g.peer);
            let all_reduce = tensor::AllReduce::of(workload.engine, group.members.len(), link, peer);
            let d = group.members.len() as u64;
            // vLLM keeps each KV head on `d ÷ heads` GPUs where there are more GPUs than heads.
            let heads = model.arch.num_kv_heads.max(1);
            let copies = if d > heads { u32::try_from(d / heads).unwrap_or(u32::MAX) } else { 1 };
            let grouped = NodeCost::group(&members, all_reduce, copies);
            cost.nodes.push(grouped);
        }
        // A further sequence costs at most a re-read of its layers' weights: so a step of
        // many never costs more than its sequences one at a time, which the search's
        // micro-batches take for granted.
        let read_per_flop = cost.layers.least_read_per_flop();
        for node in &mut cost.nodes {
            node.inv_batched = node.inv_batched.min(read_per_flop * node.inv_bandwidth);
        }
        cost.set_step(workload.batch as f64);
        cost
    }

    /// Makes each decode step one of `sequences` sequences (the memory still holds the KV
    /// cache of all `batch`).
    fn set_step(&mut self, sequences: f64) {
        self.step = sequences;
        self.layers.set_step(sequences);
        for node in &mut self.nodes {
            node.set_step(sequences);
        }
        // Best placements depend on the step's times.
        for k in 0..self.nodes.len() {
            let monotone = self.host_is_slower(k);
            if let Some(host) = self.nodes[k].host.as_mut() {
                host.monotone = monotone;
            }
        }
        self.fresh_memos();
        self.embed.read = sequences * self.token.embedding_row;
        self.head.flops = sequences * self.token.head_flops;
        self.activation_bytes = sequences * self.token.activation_bytes;
        self.token_bytes = sequences * self.token.return_bytes;
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
        out.fresh_memos();
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

    /// Number of layers.
    pub fn layers(&self) -> usize {
        self.layers.len()
    }

    /// Number of nodes (the problem's: machines, and GPUs of machines with several).
    pub fn node_count(&self) -> usize {
        self.devices
    }

    /// The tensor-parallel groups: node `node_count() + g` is `groups()[g]`.
    pub(crate) fn groups(&self) -> &[TensorGroup] {
        &self.groups
    }

    /// vLLM's pipelines of tensor-parallel groups: per degree, the nodes its stages may be.
    pub(crate) fn pipelines(&self) -> &[(usize, Vec<usize>)] {
        &self.pipelines
    }

    /// The problem's node whose links a node's stage sends over: itself, or a group's first GPU.
    #[inline]
    fn end(&self, node: usize) -> usize {
        match node.checked_sub(self.devices) {
            Some(g) => self.groups[g].members[0],
            None => node,
        }
    }

    /// The problem's nodes `node` runs on: itself, or a group's GPUs.
    pub(crate) fn members(&self, node: usize) -> Vec<usize> {
        match node.checked_sub(self.devices) {
            Some(g) => self.groups[g].members.clone(),
            None => vec![node],
        }
    }

    /// True when every pair of nodes shares one link (and, for an engine that relays cuts
    /// through the first stage's machine, every node is a machine of its own, so that only
    /// the first stage's cut is direct).
    pub fn uniform_links(&self) -> bool {
        self.links.is_uniform()
            && (!self.rules.traffic.relays_through_first || self.machine.iter().enumerate().all(|(k, &m)| m == k))
    }

    /// True when `node` can hold `[start, end)`.
    #[inline]
    pub fn fits(&self, node: usize, start: usize, end: usize) -> bool {
        self.placement(node, start, end).is_some()
    }

    /// True when `node` can hold `[start, end)` with the KV cache of `sequences` sequences
    /// instead of the workload's `batch`.
    pub fn fits_sequences(&self, node: usize, start: usize, end: usize, sequences: u64) -> bool {
        let batch = u128::from(self.batch.max(1));
        let kv = |a: usize, b: usize| self.layers.held(a, b).kv / batch * u128::from(sequences);
        self.search_offload(node, start, end, &kv, 0).is_some()
    }

    /// True when `node` can hold `[start, end)` with the KV cache sized for `context` tokens.
    pub fn fits_at_context(&self, node: usize, start: usize, end: usize, context: u64) -> bool {
        let cells = |window| self.rules.kv_cells(context, window, self.shape.prefill_chunk);
        let layer_kv = |l: usize| self.layers.layer_kv_with(l, cells);
        // The engine's buffers grow with the context too (the attention mask, and without
        // flash attention the KQ matrix).
        let tiered = self.nodes[node].host.is_some();
        let at_context = match &self.dims {
            Some(dims) => self.rules.buffers(dims, Shape { context, ..self.shape }),
            None => self.buffers,
        };
        let grown = i128::from(self.buffers_of(&at_context, start, end, &layer_kv, tiered))
            - i128::from(self.stage_buffers(start, end, tiered));
        let mut prefix = vec![0u128; end - start + 1];
        for l in start..end {
            prefix[l - start + 1] = prefix[l - start] + u128::from(layer_kv(l));
        }
        let kv = |a: usize, b: usize| prefix[b - start] - prefix[a - start];
        self.search_offload(node, start, end, &kv, grown).is_some()
    }

    /// The same model and workload on the nodes marked in `keep`, renumbered in order.
    pub(crate) fn subset(&self, keep: &[bool]) -> CostModel {
        let indices: Vec<usize> = (0..self.devices).filter(|&k| keep[k]).collect();
        let mut out = self.clone();
        out.nodes = indices.iter().map(|&k| self.nodes[k].clone()).collect();
        // The baselines that read a subset split layers; they form no groups.
        out.devices = indices.len();
        // A kept machine is known by its first kept node.
        out.machine = Arc::new(
            indices
                .iter()
                .map(|&k| indices.iter().position(|&j| self.machine[j] == self.machine[k]).unwrap_or(0))
                .collect(),
        );
        out.groups = Arc::default();
        out.pipelines = Arc::default();
        out.links = Arc::new(self.links.subset(&indices));
        out
    }

    /// Memory of stage `[start, end)` on `node`, by part, in its device's memory, as the
    /// stage's best placement keeps it.
    pub fn memory(&self, node: usize, start: usize, end: usize) -> MemoryParts {
        self.tier_parts(node, start, end, self.shown(node, start, end)).0
    }

    /// The node's device memory budget.
    pub fn budget(&self, node: usize) -> u64 {
        self.nodes[node].budget
    }

    /// The node's system RAM (0 without one).
    pub fn host_budget(&self, node: usize) -> u64 {
        self.nodes[node].host.map_or(0, |h| h.budget)
    }

    /// The time of one decode step of `[start, end)` on `node` as its best placement runs it,
    /// without the hop.
    #[inline]
    pub fn roofline_s(&self, node: usize, start: usize, end: usize) -> f64 {
        // Without system RAM there is one placement, and no fit to check here.
        if self.nodes[node].host.is_none() {
            return self.whole_on_device_s(node, start, end);
        }
        match self.placed(node, start, end) {
            Some((_, time)) => time,
            None => self.decode_s(node, start, end, self.shown(node, start, end)),
        }
    }

    /// Time of sending one step's activations from `from` to `to` over the link between them.
    #[inline]
    pub fn hop_s(&self, from: usize, to: usize) -> f64 {
        self.links.get(self.end(from), self.end(to)).time(self.activation_bytes)
    }

    /// The machine a cut from `from` to `to` passes through in a pipeline whose first stage
    /// runs on `first`: the first's, when the engine relays there and neither end is on it.
    #[inline]
    fn relay(&self, from: usize, to: usize, first: usize) -> Option<usize> {
        let (a, b, f) = (self.end(from), self.end(to), self.end(first));
        let on_first = |k: usize| self.machine[k] == self.machine[f];
        (self.rules.traffic.relays_through_first && !on_first(a) && !on_first(b)).then_some(f)
    }

    /// Time of one step's activations from stage `from` to the next, `to`, in a pipeline
    /// whose first stage runs on `first`: the hop, or under llama.cpp between two machines
    /// that are not the first's, a read into the first's and a write out (two hops).
    #[inline]
    pub fn cut_s(&self, from: usize, to: usize, first: usize) -> f64 {
        match self.relay(from, to, first) {
            None => self.hop_s(from, to),
            Some(via) => self.hop_s(from, via) + self.hop_s(via, to),
        }
    }

    /// Time of sending what the first stage `to` samples from (logits or token ids) back from
    /// the last, `from`.
    #[inline]
    pub fn return_s(&self, from: usize, to: usize) -> f64 {
        self.links.get(self.end(from), self.end(to)).time(self.token_bytes)
    }

    /// The hop every stage pays when links are uniform (pair `0 → 1` stands for all).
    pub(crate) fn uniform_hop_s(&self) -> f64 {
        self.links.default.time(self.activation_bytes)
    }

    /// The cut after the first stage (`first_stage`) or after any other when every hop takes
    /// `hop_s` (uniform links) or at most it (a bound): two hops where the engine relays
    /// through the first stage's machine.
    pub(crate) fn cut_of_hops_s(&self, hop_s: f64, first_stage: bool) -> f64 {
        let hops = if self.rules.traffic.relays_through_first && !first_stage { 2.0 } else { 1.0 };
        hops * hop_s
    }

    /// With uniform links, the cut after the first stage (`first_stage`) or after any other.
    pub(crate) fn uniform_cut_s(&self, first_stage: bool) -> f64 {
        self.cut_of_hops_s(self.uniform_hop_s(), first_stage)
    }

    /// Whether swapping nodes `a` and `b` keeps every cut's relay: no relaying engine, the
    /// same machine, or each a machine of its own.
    pub(crate) fn relays_alike(&self, a: usize, b: usize) -> bool {
        let (a, b) = (self.end(a), self.end(b));
        let alone = |k: usize| self.machine.iter().filter(|&&m| m == self.machine[k]).count() == 1;
        !self.rules.traffic.relays_through_first || self.machine[a] == self.machine[b] || (alone(a) && alone(b))
    }

    /// The return hop when links are uniform.
    pub(crate) fn uniform_return_s(&self) -> f64 {
        self.links.default.time(self.token_bytes)
    }

    /// What a stage on `node` sends each step to `next`: the last stage (`last`) what the
    /// first samples from, any other its cut.
    #[inline]
    fn send_s(&self, node: usize, last: bool, next: Option<Next>) -> f64 {
        match next {
            None => 0.0,
            Some(Next { node: to, .. }) if last => self.return_s(node, to),
            Some(Next { node: to, first }) => self.cut_s(node, to, first),
        }
    }

    /// Time parts of stage `[start, end)` on `node`, sending to `next` (`None`: single stage).
    pub fn time(&self, node: usize, start: usize, end: usize, next: Option<Next>) -> TimeParts {
        let last = end == self.layers();
        let send_s = self.send_s(node, last, next);
        let prefill_send = match next {
            Some(Next { node: to, first }) if !last => {
                let chunk = |a: usize, b: usize| {
                    let link = self.links.get(self.end(a), self.end(b));
                    link.latency / self.prefill_chunk + self.token.activation_bytes / link.bandwidth
                };
                match self.relay(node, to, first) {
                    None => chunk(node, to),
                    Some(via) => chunk(node, via) + chunk(via, to),
                }
            }
            _ => 0.0,
        };
        let parts = self.offload_time(node, start, end, self.shown(node, start, end));
        TimeParts { send_s, prefill_s: parts.prefill_s + prefill_send, ..parts }
    }

    /// Time of every stage of an assignment, in pipeline order, including hops.
    pub fn stage_times(&self, stages: &[Placement]) -> Vec<f64> {
        let count = stages.len();
        stages
            .iter()
            .enumerate()
            .map(|(s, &Placement { node, start, end })| {
                self.roofline_s(node, start, end) + self.send_s(node, s + 1 == count, Next::of(stages, s))
            })
            .collect()
    }

    /// For each node: is it memory-bound on every layer alone? compute-bound on every one?
    /// A node that is either has a stage time linear in its layers' read bytes (or FLOPs),
    /// which lets the latency search use a sliding-window minimum instead of trying every start.
    pub(crate) fn linear_regime(&self, node: usize) -> Option<Regime> {
        let rates = &self.nodes[node];
        // With system RAM a stage's time depends on its placement, which depends on its
        // whole range.
        if rates.host.is_some() {
            return None;
        }
        let mut memory_bound = true;
        let mut compute_bound = true;
        for l in 0..self.layers() {
            let layer = self.layers.step(l, l + 1);
            let m = rates.device_read(&layer) * rates.inv_bandwidth;
            let c = layer.flops * rates.inv_decode_compute;
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
        let sums = self.layers.step_prefix(at);
        at as f64 * rates.per_layer_s
            + sums.flops * rates.inv_further
            + match regime {
                Regime::Memory => rates.device_read(sums) * rates.inv_bandwidth,
                Regime::Compute => sums.flops * rates.inv_decode_compute,
            }
    }

    /// Bytes read and FLOPs of one decode step of `[start, end)`, the embedding's and the
    /// head's share included, wherever they run.
    #[cfg(test)]
    pub(crate) fn step_work(&self, start: usize, end: usize) -> (f64, f64) {
        let stage = self.layers.step(start, end);
        let (mut read, mut flops) = (stage.read, stage.flops);
        for (holds, extra) in [(start == 0, &self.embed), (end == self.layers(), &self.head)] {
            if holds {
                (read, flops) = (read + extra.read, flops + extra.flops);
            }
        }
        (read, flops)
    }

    /// Layer `l` alone: (bytes read, FLOPs) per decode step and bytes held.
    pub(crate) fn layer_work(&self, l: usize) -> (f64, f64, u64) {
        let (step, held) = (self.layers.step(l, l + 1), self.layers.held(l, l + 1));
        (step.read, step.flops, saturate(held.weights + held.kv))
    }

    /// Bytes the model needs spread over `stages` nodes, at the least: everything once, the
    /// head copy when tied and split, and one workspace per stage.
    pub(crate) fn minimum_total(&self, stages: usize) -> u64 {
        // A GPU that leaves the embedding in host RAM may start the pipeline.
        let keeps = self.nodes.iter().all(|n| n.keeps_embedding);
        let n = self.layers();
        let whole = self.layers.held(0, n);
        let buffers = self.stage_buffers(0, n, false);
        let held = whole.weights
            + whole.kv
            + u128::from(self.embed_head(keeps, 0, n, true))
            + u128::from(buffers - self.buffers.stage.min(buffers));
        let mut total = saturate(held).saturating_add(self.buffers.stage.saturating_mul(stages as u64));
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

    /// The embedding and head bytes stage `[start, end)` keeps in one memory: the embedding
    /// where that memory `holds_embedding` (on a first stage), the head where it holds the
    /// head (`holds_head`, on a last stage); a tied head's copy is shared where both are.
    #[inline]
    fn embed_head(&self, holds_embedding: bool, start: usize, end: usize, holds_head: bool) -> u64 {
        let (first, last) = (start == 0, end == self.layers());
        let embed = if first && holds_embedding { self.embed.held } else { 0 };
        let mut bytes = embed;
        if last && holds_head {
            bytes = bytes.saturating_add(self.head.held);
            if first {
                bytes = bytes.saturating_sub(self.shared_single.min(embed));
            }
        }
        bytes
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
