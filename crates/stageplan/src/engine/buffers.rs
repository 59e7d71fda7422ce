//! What llama.cpp allocates besides weights and KV cache, per stage (derived from its source,
//! `docs/llama-cpp-memory.md`, and held to its own projection by the engine tests,
//! `crates/stageplan-cli/tests/engine/`).
//!
//! `llama-server` runs on the first stage's machine with every layer offloaded and
//! `--parallel B`. Its scheduler reserves, per device, a compute buffer for the worst-case
//! micro-batch of `T = ⌈min(context·B, ubatch)⌉_B` tokens (rounded up to a multiple of `B`)
//! over `K` KV cells per sequence (context rounded up to 256). With more than one device it
//! pipelines, keeping `C = 4` copies of every graph input each device receives; with one
//! device, `C = 1`. In bytes, with `m` = 2 (flash attention's f16 mask) or 4 (f32):
//!
//! ```text
//! inputs = 4·(E + P)·T + m·K'·T + 4·T + 8·T + 8·T·(FA ? 1 : E_v) + R
//!          hidden state (and Gemma 3n's per-layer inputs P), mask over K' cells, positions,
//!          the KV rows to write, a quantized cache's rotations R
//! attn   = FA ? 4·T·(E + 2·H·D) : 4·T·(E + K·H + H·D)   the residual, then Q or KQ·V
//! ffn    = 4·T·(E + 3·F + X)                            residual, up, gate, their product; X
//!                                                       routed experts' router logits
//! extra  = 4·T·A                                        rows an architecture keeps live beside
//!                                                       these (MoE, SSM, AltUp, Cohere: `Dims`)
//! out    = 4·n·(V + 2·E)  on the last device, n = min(T, B) outputs
//! slack  = 4·T·(E + H·D)                                allocator holes
//! device = C·inputs + max(attn, ffn [, out]) + extra + slack + 4·B·S  (+ C·4·n output ids on
//!          the last) + 1 MiB alignment
//! ```
//!
//! `K'` is `K` for one mask, `K` plus the window's cells for sliding and full layers with
//! flash attention, `3·K` without; `S` Mamba-2's scan state. The host (the first stage's
//! machine) also keeps the CPU backend's buffer — `C` copies of the token ids, the embedding
//! input and the other inputs, plus the looked-up embeddings — and the logits of `B`
//! outputs, `4·V·B`. Activations are freed layer by layer, so the peaks are one layer's, not
//! a sum. `E_v` is one layer's V width, `F` the MLP width (for MoE the routed experts' width
//! times the experts used, plus the shared expert).
//!
//! **Activations** (vLLM, generic): two rows per token, the hidden state's and the MLP's, in
//! f32, for a prefill chunk of `c` tokens, and `c × vocab` logits on the last stage.

use super::element::{F16, F32, I32, I64};
use super::{
    BufferModel, Buffers, EngineRules, LLAMA_CPP_ALIGNMENT_SLACK, LLAMA_CPP_PIPELINE_COPIES, Shape, llama_cpp_context,
    llama_cpp_window_cells,
};
use crate::model::{Arch, Model};

/// Hidden rows an MoE layer's peak holds beyond its experts' activations (the router's
/// weights and the gathered experts' inputs): real-size pipelines of Qwen3-30B-A3B and
/// GLM-4.5-Air under llama-server's `--fit` projection (the arch engine test).
const MOE_PEAK_ROWS: f64 = 5.0;

/// Hidden rows a recurrent layer keeps live beside the MLP's: its scan's input and output
/// rows, `inner` (twice the hidden size) wide each, and the state; Mamba-2's one more
/// (`GGML_SCHED_DEBUG` of a two-stage pipeline).
const SSM_ROWS: f64 = 8.0;
const MAMBA2_ROWS: f64 = 9.0;

/// Mamba-2's rows across a cut: its input projection (`2·inner + 2·groups·state + heads`, at
/// most 5 hidden rows) ahead to the next stage and its gate row (`inner`) back
/// (`GGML_SCHED_DEBUG` of a two-stage run).
const MAMBA2_ROWS_AHEAD: f64 = 5.0;
const MAMBA2_ROWS_BACK: f64 = 2.0;

/// Gemma 3n's AltUp: three more residual streams live in a layer (two rows each), and the
/// stack a pipelined device receives per token (the active row, the stack made contiguous,
/// the stack: 1 + 4 + 4 rows), from `gemma3n.cpp` and the arch engine test's pipelines.
const GEMMA3N_STREAM_ROWS: f64 = 6.0;
const GEMMA3N_ALTUP_ROWS: f64 = 9.0;

/// Hidden rows beside Gemma 3n's projection of every layer's input at once
/// (`per_layer_model_proj`), at a layer's peak.
const GEMMA3N_PROJECTION_ROWS: f64 = 4.0;

/// Cohere's parallel block runs attention and the MLP from one norm: the residual, the norm
/// and attention's output stay live beside the MLP (a real-size pipeline of Command R7B,
/// 7 MiB over the other families' peak).
const PARALLEL_BLOCK_ROWS: f64 = 2.0;

/// Masks' worth of cells without flash attention where sliding and full layers mix: three,
/// which Llama 4's chunked layers need (the arch engine test without flash attention).
const MASKS_WITHOUT_FLASH_ATTENTION: f64 = 3.0;

/// The side of V's rotation matrix of a quantized cache (`llama-kv-cache.cpp`'s
/// `build_input_v_rot`).
const V_ROTATION: f64 = 64.0;

/// The model's widths the buffers depend on, as `f64` (they may come from a file's header).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Dims {
    hidden: f64,
    vocab: f64,
    heads: f64,
    head_dim: f64,
    /// The widest layer's V row (`kv_heads × head_dim`).
    v_width: f64,
    /// The MLP's width a token goes through (for MoE: the experts used plus the shared one).
    mlp: f64,
    /// Routed experts per MoE layer, 0 for a dense model.
    experts: f64,
    /// Activations per token a layer keeps live beyond attention's and the MLP's, in
    /// elements: what the architecture's graph adds (`Dims::of`).
    extra: f64,
    /// Attention masks per micro-batch: none without attention, two when sliding and full
    /// layers mix (the second over the window's cells).
    masks: u8,
    window: Option<u64>,
    /// Inputs per token the host builds beyond the embedding's row (Gemma 3n's per-layer
    /// embeddings), in elements.
    host_extra: f64,
    /// Inputs per token each device receives beyond the hidden row, in elements: Gemma 3n's
    /// every layer's per-layer input.
    input_extra: f64,
    /// Gemma 3n's AltUp stack as a pipelined device receives it, per token: the active row,
    /// the stack made contiguous, and the stack (1 + 4 + 4 hidden rows).
    altup: f64,
    /// Mamba-2's scan state per sequence (the widest layer's), live in the scan's step.
    scan_state: f64,
    /// The rotation matrices of one cache (f32 elements) when K is quantized: `n × n` for the
    /// largest power of two `n ≥ 64` dividing the head (`llama-kv-cache.cpp`'s
    /// `build_input_k_rot`), when the head is a multiple of 64; V's, when V is quantized,
    /// `64 × 64` (`build_input_v_rot`).
    k_rotation: f64,
    v_rotation: f64,
    /// Mamba-2's rows across a cut, per token: its input projection (`2·inner + 2·groups·state
    /// + heads`, at most 5 hidden rows with inner twice the hidden size) to the next stage and
    /// its gate row (`inner`) back (`GGML_SCHED_DEBUG` of a two-stage run).
    cut_after: f64,
    cut_before: f64,
}

impl Dims {
    pub fn of(model: &Model) -> Dims {
        let arch = &model.arch;
        let mlp = match &arch.moe {
            Some(moe) => moe
                .expert_intermediate
                .saturating_mul(moe.active)
                .saturating_add(moe.shared_intermediate.unwrap_or(0))
                .max(arch.intermediate_size),
            None => arch.intermediate_size,
        };
        // Checked against llama-server's own projection at published sizes
        // (`tests/engine/arch.rs`): an MoE layer keeps one more activation of its experts'
        // width (the gated product beside up and gate) and `MOE_PEAK_ROWS`; a recurrent layer
        // its scan's rows and state; Gemma 3n three more residual streams (AltUp).
        let moe_extra = if arch.moe.is_some() { mlp as f64 + MOE_PEAK_ROWS * arch.hidden_size as f64 } else { 0.0 };
        // The scan's input and output rows, `inner` wide each (Mamba-2's inner is twice the
        // hidden size; a bound for the others).
        // An SSM's state is `d_state × inner`, far more than a short convolution's rows (LFM2,
        // whose layers need nothing beyond the MLP's).
        let ssm = arch.state_elements.iter().any(|&s| s > 4 * arch.hidden_size);
        let mamba2 = arch.family == Arch::Mamba2;
        let gemma3n = arch.family == Arch::Gemma3n;
        let hidden = arch.hidden_size as f64;
        let recurrent_extra = if mamba2 {
            MAMBA2_ROWS * hidden
        } else if ssm {
            SSM_ROWS * hidden
        } else {
            0.0
        };
        let streams = if gemma3n { GEMMA3N_STREAM_ROWS * hidden } else { 0.0 };
        let parallel = if arch.family.parallel_block() { PARALLEL_BLOCK_ROWS * hidden } else { 0.0 };
        let attends = arch.kv_elements.iter().any(|&e| e > 0);
        let window = arch.windows.iter().flatten().copied().max();
        let full = arch.windows.iter().any(Option::is_none);
        let masks = match (attends, window, full) {
            (false, _, _) => 0,
            (true, Some(_), true) => 2,
            _ => 1,
        };
        let host_extra = if gemma3n { GEMMA3N_PER_LAYER_INPUT * arch.num_layers as f64 } else { 0.0 };
        let head = arch.head_dim;
        let (k_rotation, v_rotation) = if head > 0 && head.is_multiple_of(64) {
            // In f64: the head may come from a file's header, unbounded.
            let k = 2f64.powi(head.trailing_zeros() as i32);
            (k * k, V_ROTATION * V_ROTATION)
        } else {
            (0.0, 0.0)
        };
        Dims {
            k_rotation,
            v_rotation,
            input_extra: host_extra,
            altup: if gemma3n { GEMMA3N_ALTUP_ROWS * hidden } else { 0.0 },
            scan_state: if mamba2 { arch.state_elements.iter().copied().max().unwrap_or(0) as f64 } else { 0.0 },
            cut_after: if mamba2 { MAMBA2_ROWS_AHEAD * hidden } else { 0.0 },
            cut_before: if mamba2 { MAMBA2_ROWS_BACK * hidden } else { 0.0 },
            extra: moe_extra + recurrent_extra + streams + parallel,
            masks,
            window: window.filter(|_| full),
            host_extra,
            hidden: arch.hidden_size as f64,
            vocab: arch.vocab_size as f64,
            heads: arch.num_heads as f64,
            head_dim: arch.head_dim as f64,
            v_width: (arch.kv_elements.iter().copied().max().unwrap_or(0) / 2) as f64,
            mlp: mlp as f64,
            experts: arch.moe.as_ref().map_or(0, |moe| moe.experts) as f64,
        }
    }
}

impl EngineRules {
    /// The engine's buffers for a model of `dims` run as `shape`.
    pub fn buffers(&self, dims: &Dims, shape: Shape) -> Buffers {
        buffers(self.buffers, dims, shape)
    }
}

fn buffers(model: BufferModel, dims: &Dims, shape: Shape) -> Buffers {
    let Dims {
        hidden,
        vocab,
        heads,
        head_dim,
        v_width,
        mlp,
        experts,
        extra,
        masks,
        window,
        host_extra,
        input_extra,
        altup,
        scan_state,
        cut_after,
        cut_before,
        k_rotation,
        v_rotation,
    } = *dims;
    match model {
        BufferModel::Activations => {
            let c = shape.prefill_chunk.min(shape.context.max(1)) as f64;
            Buffers {
                stage: bytes(c * (hidden + mlp) * (2.0 * F32)),
                last: bytes(c * vocab * F32),
                first: 0,
                single_saving: 0,
                first_single: 0,
                after_cut: 0,
                before_cut: 0,
                last_per_layer: 0,
            }
        }
        BufferModel::LlamaCpp => {
            let b = shape.batch.max(1);
            let cells = llama_cpp_context(shape.context);
            let tokens = cells.saturating_mul(b).min(shape.prefill_chunk.max(1)).div_ceil(b).saturating_mul(b);
            let (t, k, s) = (tokens as f64, cells as f64, b as f64);
            let outputs = t.min(s);
            let fa = shape.flash_attention;
            // The full layers' mask, and the sliding layers' (which the host builds over all
            // the cells without flash attention; over the window's with it).
            let window_cells = window.map_or(k, |w| llama_cpp_window_cells(shape.context, w, tokens) as f64);
            let mask_cells = match masks {
                0 => 0.0,
                1 => k,
                _ if fa => k + window_cells,
                _ => MASKS_WITHOUT_FLASH_ATTENTION * k,
            };
            let mask = if fa { F16 } else { F32 };
            let rows = I64 * t + I64 * t * if fa { 1.0 } else { v_width };
            // A quantized cache's rotations, one set per cache (sliding and full apart).
            let rotation =
                if shape.quantized_k { k_rotation } else { 0.0 } + if shape.quantized_v { v_rotation } else { 0.0 };
            let rotations = F32 * rotation * f64::from(masks);
            // What a device receives each micro-batch: the hidden state, mask, positions,
            // and the KV rows to write.
            let inputs = F32 * (hidden + input_extra) * t + mask * mask_cells * t + I32 * t + rows + rotations;
            let attention = if fa {
                F32 * t * (hidden + 2.0 * heads * head_dim)
            } else {
                F32 * t * (hidden + k * heads + heads * head_dim)
            };
            // MoE: the router's logits, one per expert, ride along with the experts' MLPs.
            let mlp = F32 * t * (hidden + 3.0 * mlp + experts);
            let extra = F32 * t * extra;
            let logits = F32 * outputs * (vocab + 2.0 * hidden);
            let copies = LLAMA_CPP_PIPELINE_COPIES as f64;
            // Measured beyond the live tensors (ggml-alloc's best fit leaves holes when
            // tensor sizes differ): one token's hidden state and attention width, at most.
            let slack = F32 * t * (hidden + heads * head_dim);
            // Gemma 3n projects every layer's input at once (`host_extra` wide): one such row
            // beside four hidden rows at a layer's peak, two on the first device, which keeps
            // them live through its layers.
            let base = attention.max(mlp);
            let projection =
                if host_extra > 0.0 { F32 * t * (host_extra + GEMMA3N_PROJECTION_ROWS * hidden) } else { 0.0 };
            let peak = base.max(projection) + extra + slack + F32 * s * scan_state;
            let first_device = if host_extra > 0.0 {
                (base + F32 * t * host_extra).max(F32 * t * (2.0 * host_extra + GEMMA3N_PROJECTION_ROWS * hidden))
                    - base.max(projection)
            } else {
                0.0
            };
            // The host: token ids (Gemma 3n's per-layer embeddings have their own), the
            // embedding input (allocated though unused), the other inputs, and the looked-up
            // embeddings; plus the logits of `B` outputs.
            let per_layer_ids = if host_extra > 0.0 { I32 * t } else { 0.0 };
            let host_inputs = I32 * t
                + per_layer_ids
                + F32 * hidden * t
                + I32 * t
                + mask * mask_cells * t
                + rows
                + I32 * outputs
                + rotations;
            let looked_up = F32 * (hidden + host_extra) * t + F32 * vocab * s;
            let host = copies * host_inputs + looked_up;
            let host_single = host_inputs + looked_up;
            // Pipelined, a device receives Gemma 3n's AltUp stack, and the last its layers'
            // per-layer inputs once more (the output's split holds them): one slice per layer.
            let altup = copies * F32 * t * altup;
            let slice = if host_extra > 0.0 { copies * F32 * t * GEMMA3N_PER_LAYER_INPUT } else { 0.0 };
            Buffers {
                stage: bytes(copies * inputs + altup + peak).saturating_add(LLAMA_CPP_ALIGNMENT_SLACK),
                last: bytes(copies * I32 * outputs + peak.max(logits) - peak),
                first: bytes(host + first_device),
                single_saving: bytes((copies - 1.0) * (inputs + I32 * outputs + host_inputs) + altup),
                last_per_layer: bytes(slice),
                first_single: bytes(host_single),
                // The scheduler runs a stage's first norm (weightless `rms_norm`) where the
                // layer before it ran: a device after a cut receives the normalized row beside
                // the residual, each copy (`GGML_SCHED_DEBUG` of real-size pipelines), and
                // ggml-alloc leaves a row's hole more.
                after_cut: bytes(
                    copies * F32 * t * (cut_after + hidden) + F32 * t * hidden + 2.0 * F32 * t * cut_before,
                ),
                before_cut: bytes(copies * F32 * t * cut_before),
            }
        }
    }
}

/// Gemma 3n's per-layer input per token and layer, in elements (a constant in llama.cpp's
/// `gemma3n.cpp`).
const GEMMA3N_PER_LAYER_INPUT: f64 = 256.0;

/// `x` bytes, rounded up; 0 for NaN, `u64::MAX` past it.
fn bytes(x: f64) -> u64 {
    x.ceil() as u64
}
