//! A model's per-layer costs under a workload, as prefix sums: a stage's sums are one
//! subtraction, [`LayerTable::range`].

use std::ops::Sub;

use crate::engine::EngineRules;
use crate::engine::element::F32;
use crate::model::Model;
use crate::problem::Workload;

/// Bytes a range of layers holds.
///
/// In `u128`: per-layer sizes come from untrusted headers, and a prefix sum that saturated
/// would make the difference of two saturated sums 0 — a stage that "fits". In `u128` no sum
/// of 100,000 `u64` values can overflow.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub(crate) struct Held {
    /// The layers' weights.
    pub weights: u128,
    /// Their KV cache (or recurrent state), every sequence's.
    pub kv: u128,
    /// The part of `weights` a machine may keep in host RAM apart from attention: routed
    /// experts, or a dense layer's FFN matrices.
    pub ffn_weights: u128,
}

impl Sub for Held {
    type Output = Held;

    #[inline]
    fn sub(self, o: Held) -> Held {
        Held { weights: self.weights - o.weights, kv: self.kv - o.kv, ffn_weights: self.ffn_weights - o.ffn_weights }
    }
}

/// What a range of layers costs a decode step of the current step's sequences, and a
/// prompt token.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub(crate) struct Step {
    /// Bytes read and FLOPs…
    pub read: f64,
    pub flops: f64,
    /// …and the part of them in the FFN (the host's FFN reads only the experts a step touches).
    pub ffn_read: f64,
    pub ffn_flops: f64,
    /// Per prompt token: bytes read (weights once a chunk) and FLOPs.
    pub prefill_read: f64,
    pub prefill_flops: f64,
    /// Bytes of quantized cache a device reads again, beyond `read`, where its backend
    /// reads each KV head's cache once per query head sharing it
    /// ([`EngineRules::rereads_quantized_kv`]).
    pub kv_reread: f64,
    /// The part of `read` that is KV cache (what a group holding copies of KV heads reads
    /// again per copy).
    pub kv_read: f64,
}

impl Sub for Step {
    type Output = Step;

    #[inline]
    fn sub(self, o: Step) -> Step {
        Step {
            read: self.read - o.read,
            flops: self.flops - o.flops,
            ffn_read: self.ffn_read - o.ffn_read,
            ffn_flops: self.ffn_flops - o.ffn_flops,
            prefill_read: self.prefill_read - o.prefill_read,
            prefill_flops: self.prefill_flops - o.prefill_flops,
            kv_reread: self.kv_reread - o.kv_reread,
            kv_read: self.kv_read - o.kv_read,
        }
    }
}

/// What a decode step of any size is made of, per layer (prefix sums): dense weights,
/// expert weights (scaled by the fraction of experts a step touches), and per sequence its
/// KV cache read and its FLOPs; the same for the FFN part.
#[derive(Copy, Clone, Debug, Default)]
struct StepParts {
    dense_read: f64,
    expert_read: f64,
    ffn_dense_read: f64,
    ffn_flops_per_sequence: f64,
    kv_read_per_sequence: f64,
    /// Per sequence, the quantized cache's reads beyond the first by a backend that reads a
    /// KV head's cache once per query head: `(query heads per KV head − 1) × cache read`.
    kv_reread_per_sequence: f64,
    flops_per_sequence: f64,
}

/// The per-layer costs of a model under a workload: prefix sums, `[i]` covering layers
/// `[0, i)`, of what they hold and of what a step costs (apart: the searches read one or
/// the other in their inner loops).
#[derive(Clone, Debug)]
pub(crate) struct LayerTable {
    held: Vec<Held>,
    step: Vec<Step>,
    parts: Vec<StepParts>,
    /// For MoE models, the fraction of experts one token routes to.
    active_fraction: Option<f64>,
    /// Per layer: KV bytes held per token of context (all sequences), recurrent state (all
    /// sequences, whatever the context), and the attention window.
    kv_per_context_token: Vec<u64>,
    state: Vec<u64>,
    windows: Vec<Option<u64>>,
}

impl LayerTable {
    /// The table of `model` run as `workload` by an engine with `rules`, stepping the whole
    /// batch, each decode step reading `reads` tokens of cache (the context, or a shallower
    /// depth; what the cache holds is the context's either way).
    pub(super) fn new(model: &Model, workload: &Workload, rules: &EngineRules, reads: u64) -> LayerTable {
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
        // Q·K and attention·V: 2 FLOPs each per head element and cached token. In f64: head
        // counts and sizes may come from a GGUF's metadata, unbounded.
        let attention = 4.0 * arch.num_heads as f64 * arch.head_dim as f64;
        // A quantized cache read by the vector kernel (see `EngineRules::rereads_quantized_kv`):
        // ordinary attention with a head size that kernel takes; MLA's one latent head goes
        // to another kernel.
        let vector_kernel =
            workload.quantized_kv() && arch.mla.is_none() && arch.head_dim.is_multiple_of(64) && arch.head_dim <= 256;
        let layers = model.layers();
        let n = layers.len();
        let mut table = LayerTable {
            held: vec![Held::default(); n + 1],
            step: vec![Step::default(); n + 1],
            parts: vec![StepParts::default(); n + 1],
            active_fraction,
            kv_per_context_token: Vec::with_capacity(n),
            state: Vec::with_capacity(n),
            windows: Vec::with_capacity(n),
        };
        for (i, layer) in layers.iter().enumerate() {
            let window = arch.windows.get(i).copied().flatten();
            let tokens = window.map_or(reads, |w| w.min(reads));
            let prefill_tokens = window.map_or(context, |w| w.min(context));
            let padded = if workload.flash_attention { 0 } else { arch.v_pad_elements.get(i).copied().unwrap_or(0) };
            let (k, v) = arch.k_and_v_elements(i);
            let kv_per_token = workload.kv_bytes((k, v.saturating_add(padded)));
            let dense = (layer.bytes - layer.expert_bytes) as f64;
            let active_params = (layer.params - layer.expert_params) as f64
                + layer.expert_params as f64 * active_fraction.unwrap_or(1.0);
            // Saturating: sizes from model files are untrusted, and a saturated total simply
            // does not fit anywhere.
            let cells = rules.kv_cells(context, window, workload.prefill_chunk);
            let state_elements = arch.state_elements.get(i).copied().unwrap_or(0);
            // Recurrent state is f32.
            let state = workload.batch.saturating_mul(state_elements).saturating_mul(F32 as u64);
            let kv_held = workload.batch.saturating_mul(cells).saturating_mul(kv_per_token).saturating_add(state);
            table.kv_per_context_token.push(workload.batch.saturating_mul(kv_per_token));
            table.state.push(state);
            table.windows.push(window);
            // The FFN a layer may keep in RAM: a dense FFN, read whole each step, and routed
            // experts, of which the step reads the active ones.
            let ffn_dense = layer.ffn_bytes.saturating_sub(layer.expert_bytes) as f64;
            let ffn_active = layer.ffn_params.saturating_sub(layer.expert_params) as f64
                + layer.expert_params as f64 * active_fraction.unwrap_or(1.0);
            // A recurrent layer reads its state each step (and writes it back).
            let state_read = F32 * state_elements as f64;
            let kv_elements = arch.kv_elements.get(i).copied().unwrap_or(0);
            let rereads = if vector_kernel && kv_elements > 0 {
                // K and V of one KV head: 2 × head_dim elements.
                let query_heads_per_kv_head = (2 * arch.num_heads).saturating_mul(arch.head_dim) / kv_elements;
                query_heads_per_kv_head.saturating_sub(1) as f64 * crate::engine::QUANTIZED_KV_REREADS_FROM_MEMORY
            } else {
                0.0
            };
            let (p, h, s) = (table.parts[i], table.held[i], table.step[i]);
            table.parts[i + 1] = StepParts {
                dense_read: p.dense_read + dense,
                expert_read: p.expert_read + layer.expert_bytes as f64,
                ffn_dense_read: p.ffn_dense_read + ffn_dense,
                ffn_flops_per_sequence: p.ffn_flops_per_sequence + 2.0 * ffn_active,
                kv_read_per_sequence: p.kv_read_per_sequence + tokens as f64 * kv_per_token as f64 + state_read,
                kv_reread_per_sequence: p.kv_reread_per_sequence + rereads * tokens as f64 * kv_per_token as f64,
                flops_per_sequence: p.flops_per_sequence + 2.0 * active_params + attention * tokens as f64,
            };
            table.held[i + 1] = Held {
                weights: h.weights + u128::from(layer.bytes),
                kv: h.kv + u128::from(kv_held),
                ffn_weights: h.ffn_weights + u128::from(layer.ffn_bytes),
            };
            table.step[i + 1] = Step {
                prefill_read: s.prefill_read
                    + (dense + layer.expert_bytes as f64 * touched_prefill) / chunk
                    + kv_per_token as f64,
                prefill_flops: s.prefill_flops + 2.0 * active_params + attention * prefill_tokens as f64 / 2.0,
                ..Step::default()
            };
        }
        table.set_step(workload.batch as f64);
        table
    }

    /// Makes each decode step one of `sequences` sequences: per layer, `read = dense +
    /// experts × touched + sequences × KV` and `flops = sequences × per-sequence FLOPs`.
    pub(super) fn set_step(&mut self, sequences: f64) {
        let touched = self.active_fraction.map_or(1.0, |p| 1.0 - (1.0 - p).powf(sequences));
        // The vector kernel takes a step of one query row; more go to kernels that share a
        // KV head's reads among its query heads.
        let reread = if sequences <= 1.0 { sequences } else { 0.0 };
        for (sums, p) in self.step.iter_mut().zip(&self.parts) {
            sums.kv_reread = reread * p.kv_reread_per_sequence;
            sums.kv_read = sequences * p.kv_read_per_sequence;
            sums.read = p.dense_read + p.expert_read * touched + sequences * p.kv_read_per_sequence;
            sums.flops = sequences * p.flops_per_sequence;
            sums.ffn_read = p.ffn_dense_read + p.expert_read * touched;
            sums.ffn_flops = sequences * p.ffn_flops_per_sequence;
        }
    }

    /// The fewest weight bytes one sequence's step reads per FLOP of its products, over the
    /// layers: a step's further sequence never costs more than reading its layers' weights
    /// again ([`NodeCost::set_step`](super::node::NodeCost::set_step)).
    pub(super) fn least_read_per_flop(&self) -> f64 {
        let touched = self.active_fraction.unwrap_or(1.0);
        self.parts
            .windows(2)
            .map(|w| {
                let read = (w[1].dense_read - w[0].dense_read) + (w[1].expert_read - w[0].expert_read) * touched;
                read / (w[1].flops_per_sequence - w[0].flops_per_sequence)
            })
            .filter(|r| r.is_finite())
            .fold(f64::INFINITY, f64::min)
    }

    /// Whether the model routes tokens to experts.
    pub(super) fn is_moe(&self) -> bool {
        self.active_fraction.is_some()
    }

    /// Number of layers.
    pub(super) fn len(&self) -> usize {
        self.held.len() - 1
    }

    /// What layers `[start, end)` hold.
    #[inline]
    pub(super) fn held(&self, start: usize, end: usize) -> Held {
        self.held[end] - self.held[start]
    }

    /// What layers `[start, end)` cost a step.
    #[inline]
    pub(super) fn step(&self, start: usize, end: usize) -> Step {
        self.step[end] - self.step[start]
    }

    /// What layers `[0, at)` cost a step.
    #[inline]
    pub(super) fn step_prefix(&self, at: usize) -> &Step {
        &self.step[at]
    }

    /// What layers `[0, at)` hold.
    #[inline]
    pub(super) fn held_prefix(&self, at: usize) -> &Held {
        &self.held[at]
    }

    /// Layer `l`'s KV cache (or state) at the workload's context, all sequences.
    pub(super) fn layer_kv(&self, l: usize) -> u64 {
        super::saturate(self.held(l, l + 1).kv)
    }

    /// Layer `l`'s KV cache (or state) with `cells` KV cells per sequence for a layer with
    /// `window` (`cells(window)`), all sequences.
    pub(super) fn layer_kv_with(&self, l: usize, cells: impl Fn(Option<u64>) -> u64) -> u64 {
        self.kv_per_context_token[l].saturating_mul(cells(self.windows[l])).saturating_add(self.state[l])
    }
}
