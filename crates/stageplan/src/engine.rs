//! What the inference engine allocates besides weights and KV cache, per stage.
//!
//! **llama.cpp** (derived from its source, `docs/llama-cpp-memory.md`, and checked against
//! its logs by `tests/engine`): `llama-server` runs on the first stage's machine with every
//! layer offloaded (`-ngl N+1`) and `--parallel B`. Its scheduler reserves, per device, a
//! compute buffer for the worst-case micro-batch of `T = ⌈min(context·B, ubatch)⌉_B` tokens
//! (rounded up to a multiple of `B`) over `K` KV cells per sequence (context rounded up to
//! 256). With more than one device it pipelines, keeping `C = 4` copies of every graph input
//! each device receives; with one device, `C = 1`. In f32 bytes, with `m` = 2 (flash
//! attention's f16 mask) or 4:
//!
//! ```text
//! inputs = 4·E·T + m·K·T + 4·T + 8·T + 8·T·(FA ? 1 : E_v)   hidden state, mask, positions, KV rows
//! attn   = FA ? 4·T·(E + 2·H·D) : 4·T·(E + K·H + H·D)       the residual, then Q or KQ·V
//! ffn    = 4·T·(E + 3·F)                                     residual, up, gate, their product
//! out    = 4·n·(V + 2·E)  on the last device, n = min(T, B) outputs
//! slack  = 4·T·(E + H·D)                                     allocator holes (measured)
//! device = C·inputs + max(attn, ffn [, out]) + slack  (+ C·4·n on the last: output row ids)
//! ```
//!
//! plus 1 MiB for alignment ([`LLAMA_CPP_ALIGNMENT_SLACK`]).
//!
//! The host (the first stage's machine) also keeps the CPU backend's buffer — `C` copies of
//! the token ids, the embedding input and the other inputs, plus the looked-up embeddings —
//! and the logits buffer for `B` outputs, `4·V·B`. Activations are freed layer by layer, so
//! the peaks are one layer's, not a sum. `E_v` is one layer's V width, `F` the MLP width
//! (for MoE the routed experts' width times the experts used, plus the shared expert).
//!
//! **vLLM** takes `--gpu-memory-utilization` (0.9, as exported) of each GPU and profiles its
//! activations over `max_num_batched_tokens`; the stage keeps the estimate below for one
//! prefill chunk and the 10% it leaves unclaimed.
//!
//! **Generic** (no engine): `C × (2·hidden + 2·ffn) × 4` bytes per stage for a prefill chunk
//! of `C` tokens, plus `C × vocab × 4` for logits on the last.

use serde::{Deserialize, Serialize};

use crate::model::{Arch, Model};

/// The engine a plan is for: how it lays out memory, and what exports print by default.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub enum Engine {
    #[default]
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
    #[serde(rename = "vllm")]
    Vllm,
    /// Activation buffers only, as a generic estimate (the model before engine profiles).
    #[serde(rename = "generic")]
    Generic,
}

impl Engine {
    pub const ALL: [Engine; 3] = [Engine::LlamaCpp, Engine::Vllm, Engine::Generic];

    pub fn name(self) -> &'static str {
        self.rules().name
    }

    /// Everything that differs by engine: the one place that tells engines apart.
    pub const fn rules(self) -> &'static EngineRules {
        match self {
            Engine::LlamaCpp => &LLAMA_CPP,
            Engine::Vllm => &VLLM,
            Engine::Generic => &GENERIC,
        }
    }
}

/// The rules of one engine, as data. The cost model, the planner's riders and the exports
/// read these and never branch on [`Engine`] themselves, so a new engine is one more table.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct EngineRules {
    /// The name scenarios and plans use.
    pub name: &'static str,
    /// The fraction of each device's memory the engine claims.
    pub usable_fraction: f64,
    /// KV cells per sequence are whole blocks of this many, and a sliding window keeps one
    /// micro-batch more (llama.cpp); `None`: exactly the context or the window.
    pub kv_block: Option<u64>,
    /// A GPU holds no token embedding: the server's host RAM does (llama.cpp keeps
    /// `token_embd` on the CPU backend, `docs/llama-cpp-placement.md`). A CPU's or a unified
    /// memory holds it either way.
    pub embedding_in_host_ram: bool,
    /// What a machine's system RAM does for a stage placed partly there.
    pub host_ram: HostRam,
    /// Copies of a cache another device holds that a device receives per reading layer
    /// (llama.cpp's scheduler: one per pipeline copy, [`LLAMA_CPP_PIPELINE_COPIES`]); 0: the
    /// engine shares no cache across a cut.
    pub shared_cache_copies: u64,
    /// The export (`--to`) that runs plans made for this engine, if one does.
    pub export: Option<&'static str>,
    /// How its buffers are sized.
    buffers: BufferModel,
}

/// What a machine's system RAM does for a stage placed partly there.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum HostRam {
    /// The CPU runs what sits there — whole layers with their KV cache (`-ngl`), or a
    /// layer's FFN or experts (`-ot`, `--n-cpu-moe`) — reading the RAM itself (llama.cpp).
    CpuRuns,
    /// The GPU reads weights kept in pinned RAM over its link every step; whole layers'
    /// weights only, the KV cache on the GPU (vLLM's `--cpu-offload-gb`).
    Streamed,
}

/// How an engine's buffers are sized ([`EngineRules::buffers`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum BufferModel {
    /// llama.cpp's scheduler and allocator, from its source (the module's doc).
    LlamaCpp,
    /// Activations of one prefill chunk and the last stage's logits.
    Activations,
}

const LLAMA_CPP: EngineRules = EngineRules {
    name: "llama.cpp",
    usable_fraction: 1.0,
    kv_block: Some(LLAMA_CPP_CONTEXT_PAD),
    embedding_in_host_ram: true,
    host_ram: HostRam::CpuRuns,
    shared_cache_copies: LLAMA_CPP_PIPELINE_COPIES,
    export: Some("llama.cpp"),
    buffers: BufferModel::LlamaCpp,
};

const VLLM: EngineRules = EngineRules {
    name: "vllm",
    usable_fraction: VLLM_GPU_MEMORY_UTILIZATION,
    kv_block: None,
    embedding_in_host_ram: false,
    host_ram: HostRam::Streamed,
    shared_cache_copies: 0,
    export: Some("vllm"),
    buffers: BufferModel::Activations,
};

const GENERIC: EngineRules = EngineRules {
    name: "generic",
    usable_fraction: 1.0,
    kv_block: None,
    embedding_in_host_ram: false,
    host_ram: HostRam::CpuRuns,
    shared_cache_copies: 0,
    export: None,
    buffers: BufferModel::Activations,
};

impl EngineRules {
    /// Whether a device of `kind` holds the token embedding of a first stage (else the
    /// server's host RAM does).
    pub fn embedding_on_device(&self, kind: Option<crate::device::DeviceKind>) -> bool {
        !self.embedding_in_host_ram || kind != Some(crate::device::DeviceKind::Gpu)
    }

    /// KV cells a layer with `window` keeps per sequence at `context`, with micro-batches of
    /// `ubatch` tokens.
    pub fn kv_cells(&self, context: u64, window: Option<u64>, ubatch: u64) -> u64 {
        match (self.kv_block, window) {
            (Some(block), Some(w)) => whole_blocks(w.saturating_add(ubatch), block).min(whole_blocks(context, block)),
            (Some(block), None) => whole_blocks(context, block),
            (None, Some(w)) => w.min(context),
            (None, None) => context,
        }
    }
}

/// `--gpu-memory-utilization` as the vLLM export passes it (vLLM's default).
pub const VLLM_GPU_MEMORY_UTILIZATION: f64 = 0.9;

/// llama.cpp rounds the context of each sequence up to this many KV cells.
pub const LLAMA_CPP_CONTEXT_PAD: u64 = 256;

/// Graph-input copies llama.cpp's scheduler keeps when it pipelines (`GGML_SCHED_MAX_COPIES`).
pub const LLAMA_CPP_PIPELINE_COPIES: u64 = 4;

/// Room for llama.cpp's per-tensor alignment and the buffers' rounding, per stage: the
/// formulas count tensor bytes, the allocator rounds each tensor up.
pub const LLAMA_CPP_ALIGNMENT_SLACK: u64 = 1 << 20;

/// Engine buffers of a stage by its role in the pipeline, in bytes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Buffers {
    /// Every stage of a multi-stage pipeline.
    pub stage: u64,
    /// More on the last stage (logits).
    pub last: u64,
    /// More on the first stage (the engine's host-side buffers).
    pub first: u64,
    /// Less when one stage is the whole pipeline (no pipeline copies).
    pub single_saving: u64,
    /// The host-side part of `first` when one stage is the whole pipeline (one copy of
    /// the inputs): what a tiered machine's RAM holds for it.
    pub first_single: u64,
    /// More on every stage with a stage before it, and on every stage with one after it:
    /// rows the scheduler sends across a cut besides the hidden state (Mamba-2's input
    /// projection one way, its gate row back).
    pub after_cut: u64,
    pub before_cut: u64,
    /// More per layer on a last stage with a stage before it: inputs per layer it receives
    /// (Gemma 3n's per-layer inputs, the slices of its layers).
    pub last_per_layer: u64,
}

impl Buffers {
    /// The buffers of a stage of `layers` layers by its roles.
    pub fn of_stage(&self, first: bool, last: bool, layers: u64) -> u64 {
        let per_layer = if last && !first { self.last_per_layer.saturating_mul(layers) } else { 0 };
        self.of(first, last).saturating_add(per_layer)
    }

    /// The buffers of stage `[first, last]` roles, without what grows with its layers.
    pub fn of(&self, first: bool, last: bool) -> u64 {
        let mut bytes = self.stage;
        if first {
            bytes = bytes.saturating_add(self.first);
        }
        if last {
            bytes = bytes.saturating_add(self.last);
        }
        if first && last {
            bytes = bytes.saturating_sub(self.single_saving);
        }
        if !first {
            bytes = bytes.saturating_add(self.after_cut);
        }
        if !last {
            bytes = bytes.saturating_add(self.before_cut);
        }
        bytes
    }
}

/// What the engine needs to size its buffers.
#[derive(Copy, Clone, Debug)]
pub struct Shape {
    pub context: u64,
    pub batch: u64,
    pub prefill_chunk: u64,
    pub flash_attention: bool,
    /// A quantized KV cache, which llama.cpp rotates (Hadamard matrices as graph inputs).
    pub quantized_kv: bool,
}

/// `cells` rounded up to whole blocks of `block`.
fn whole_blocks(cells: u64, block: u64) -> u64 {
    cells.div_ceil(block).saturating_mul(block)
}

/// The context llama.cpp allocates KV cells for, per sequence.
pub fn llama_cpp_context(context: u64) -> u64 {
    LLAMA_CPP.kv_cells(context, None, 0)
}

/// KV cells a sliding-window layer keeps in llama.cpp, per sequence: the window plus one
/// micro-batch, rounded to 256, at most the full context.
pub fn llama_cpp_window_cells(context: u64, window: u64, ubatch: u64) -> u64 {
    LLAMA_CPP.kv_cells(context, Some(window), ubatch)
}

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
    /// With a quantized KV cache, the rotation matrices of one cache (f32 elements): K's
    /// `n × n` for the largest power of two `n ≥ 64` dividing the head, V's `64 × 64`
    /// (`llama-kv-cache.cpp`'s `build_input_k_rot`), when the head is a multiple of 64.
    rotation: f64,
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
        // width (the gated product beside up and gate); a recurrent layer its scan's input
        // and output rows and its state; Gemma 3n three more residual streams (AltUp).
        // Real-size MoE pipelines hold five hidden rows more at the peak (the router's
        // weights and the gathered experts' inputs, measured on Qwen3-30B-A3B and GLM-4.5-Air).
        let moe_extra = if arch.moe.is_some() { mlp as f64 + 5.0 * arch.hidden_size as f64 } else { 0.0 };
        // The scan's input and output rows, `inner` wide each (Mamba-2's inner is twice the
        // hidden size; a bound for the others).
        // An SSM's state is `d_state × inner`, far more than a short convolution's rows (LFM2,
        // whose layers need nothing beyond the MLP's).
        let ssm = arch.state_elements.iter().any(|&s| s > 4 * arch.hidden_size);
        let mamba2 = arch.family == Arch::Mamba2;
        let gemma3n = arch.family == Arch::Gemma3n;
        let hidden = arch.hidden_size as f64;
        // Mamba-2's layer keeps one more hidden row live beside its scan (measured on a
        // two-stage pipeline).
        let recurrent_extra = if mamba2 {
            9.0 * hidden
        } else if ssm {
            8.0 * hidden
        } else {
            0.0
        };
        let streams = if gemma3n { 6.0 * hidden } else { 0.0 };
        // Cohere's parallel block runs attention and the MLP from one norm: the residual,
        // the norm and attention's output stay live beside the MLP (a real-size pipeline of
        // Command R7B, 7 MiB over the other families' peak).
        let parallel = if arch.family.parallel_block() { 2.0 * hidden } else { 0.0 };
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
        let rotation = if head > 0 && head.is_multiple_of(64) {
            // In f64: the head may come from a file's header, unbounded.
            let k = 2f64.powi(head.trailing_zeros() as i32);
            k * k + 64.0 * 64.0
        } else {
            0.0
        };
        Dims {
            rotation,
            input_extra: host_extra,
            altup: if gemma3n { 9.0 * hidden } else { 0.0 },
            scan_state: if mamba2 { arch.state_elements.iter().copied().max().unwrap_or(0) as f64 } else { 0.0 },
            cut_after: if mamba2 { 5.0 * hidden } else { 0.0 },
            cut_before: if mamba2 { 2.0 * hidden } else { 0.0 },
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
        rotation,
    } = *dims;
    match model {
        BufferModel::Activations => {
            let c = shape.prefill_chunk.min(shape.context.max(1)) as f64;
            Buffers {
                stage: bytes(c * (hidden + mlp) * 8.0),
                last: bytes(c * vocab * 4.0),
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
                // Measured: three masks' worth without flash attention (Llama 4's chunked
                // layers need the most).
                _ => 3.0 * k,
            };
            let mask = if fa { 2.0 } else { 4.0 };
            let rows = 8.0 * t + 8.0 * t * if fa { 1.0 } else { v_width };
            // A quantized cache's rotations, one set per cache (sliding and full apart).
            let rotations = if shape.quantized_kv { 4.0 * rotation * f64::from(masks) } else { 0.0 };
            // What a device receives each micro-batch: the hidden state, mask, positions,
            // and the KV rows to write.
            let inputs = 4.0 * (hidden + input_extra) * t + mask * mask_cells * t + 4.0 * t + rows + rotations;
            let attention = if fa {
                4.0 * t * (hidden + 2.0 * heads * head_dim)
            } else {
                4.0 * t * (hidden + k * heads + heads * head_dim)
            };
            // MoE: the router's logits, one per expert, ride along with the experts' MLPs.
            let mlp = 4.0 * t * (hidden + 3.0 * mlp + experts);
            let extra = 4.0 * t * extra;
            let logits = 4.0 * outputs * (vocab + 2.0 * hidden);
            let copies = LLAMA_CPP_PIPELINE_COPIES as f64;
            // Measured beyond the live tensors (ggml-alloc's best fit leaves holes when
            // tensor sizes differ): one token's hidden state and attention width, at most.
            let slack = 4.0 * t * (hidden + heads * head_dim);
            // Gemma 3n projects every layer's input at once (`host_extra` wide): one such row
            // beside four hidden rows at a layer's peak, two on the first device, which keeps
            // them live through its layers.
            let base = attention.max(mlp);
            let projection = if host_extra > 0.0 { 4.0 * t * (host_extra + 4.0 * hidden) } else { 0.0 };
            let peak = base.max(projection) + extra + slack + 4.0 * s * scan_state;
            let first_device = if host_extra > 0.0 {
                (base + 4.0 * t * host_extra).max(4.0 * t * (2.0 * host_extra + 4.0 * hidden)) - base.max(projection)
            } else {
                0.0
            };
            // The host: token ids (Gemma 3n's per-layer embeddings have their own), the
            // embedding input (allocated though unused), the other inputs, and the looked-up
            // embeddings; plus the logits of `B` outputs.
            let per_layer_ids = if host_extra > 0.0 { 4.0 * t } else { 0.0 };
            let host_inputs = 4.0 * t
                + per_layer_ids
                + 4.0 * hidden * t
                + 4.0 * t
                + mask * mask_cells * t
                + rows
                + 4.0 * outputs
                + rotations;
            let looked_up = 4.0 * (hidden + host_extra) * t + 4.0 * vocab * s;
            let host = copies * host_inputs + looked_up;
            let host_single = host_inputs + looked_up;
            // Pipelined, a device receives Gemma 3n's AltUp stack, and the last its layers'
            // per-layer inputs once more (the output's split holds them): one slice per layer.
            let altup = copies * 4.0 * t * altup;
            let slice = if host_extra > 0.0 { copies * 4.0 * t * GEMMA3N_PER_LAYER_INPUT } else { 0.0 };
            Buffers {
                stage: bytes(copies * inputs + altup + peak).saturating_add(LLAMA_CPP_ALIGNMENT_SLACK),
                last: bytes(copies * 4.0 * outputs + peak.max(logits) - peak),
                first: bytes(host + first_device),
                single_saving: bytes((copies - 1.0) * (inputs + 4.0 * outputs + host_inputs) + altup),
                last_per_layer: bytes(slice),
                first_single: bytes(host_single),
                // The scheduler runs a stage's first norm (weightless `rms_norm`) where the
                // layer before it ran: a device after a cut receives the normalized row beside
                // the residual, each copy (`GGML_SCHED_DEBUG` of real-size pipelines), and
                // ggml-alloc leaves a row's hole more.
                after_cut: bytes(
                    copies * 4.0 * t * (cut_after + hidden) + 4.0 * t * hidden + 2.0 * 4.0 * t * cut_before,
                ),
                before_cut: bytes(copies * 4.0 * t * cut_before),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Model {
        crate::scenario::Scenario::from_json(
            r#"{"model": {"preset": "llama-3.1-8b"}, "nodes": [{"name": "a", "device": "rtx-4090"}]}"#,
        )
        .unwrap()
        .problem()
        .unwrap()
        .model
    }

    #[test]
    fn llama_cpp_rounds_each_sequence_to_whole_blocks_of_cells() {
        assert_eq!(llama_cpp_context(1), 256);
        assert_eq!(llama_cpp_context(8192), 8192);
        assert_eq!(llama_cpp_context(8193), 8448);
        assert_eq!(llama_cpp_context(u64::MAX), u64::MAX, "saturates: fits nowhere");
        // A 4,096-token window keeps one micro-batch more, rounded; never past the context.
        assert_eq!(llama_cpp_window_cells(32768, 4096, 512), 4608);
        assert_eq!(llama_cpp_window_cells(1000, 4096, 512), 1024);
    }

    #[test]
    fn llama_cpp_buffers_follow_the_worked_example() {
        // docs/llama-cpp-memory.md §2.6: Llama 3.1 8B, `-c 8192 -np 1 -ub 512 -fa on`, two
        // devices: 4 copies of ≈16 MiB of inputs and the 92 MiB MLP peak, ≈156 MiB.
        let dims = Dims::of(&model());
        let shape = Shape { context: 8192, batch: 1, prefill_chunk: 512, flash_attention: true, quantized_kv: false };
        let b = Engine::LlamaCpp.rules().buffers(&dims, shape);
        let mib = |x: u64| x as f64 / 1048576.0;
        // 64 MiB of input copies, 92 MiB of MLP, 16 MiB of slack, 1 MiB of alignment.
        assert!((mib(b.stage) - 173.04).abs() < 0.01, "{}", mib(b.stage));
        // Without flash attention the 512-token KQ matrix over 8,192 cells dominates.
        let off = Engine::LlamaCpp.rules().buffers(&dims, Shape { flash_attention: false, ..shape });
        assert!(mib(off.stage) > 600.0, "{}", mib(off.stage));
        // One stage: no pipeline copies, on the device or the host.
        assert_eq!(b.of(true, true), b.stage + b.first + b.last - b.single_saving);
        assert!(b.of(true, true) < b.of(true, false));
        // A longer context grows the mask copies: 4 × 2 bytes × 512 × 8,192 more cells.
        let long = Engine::LlamaCpp.rules().buffers(&dims, Shape { context: 16384, ..shape });
        assert_eq!(long.stage - b.stage, 4 * 2 * 512 * 8192);
        // A quantized cache's rotations ride along with every copy of the inputs, on each
        // device and the host: K's 128 × 128 and V's 64 × 64 in f32 for a 128-wide head.
        let rotated = Engine::LlamaCpp.rules().buffers(&dims, Shape { quantized_kv: true, ..shape });
        let rotations = 4 * 4 * (128 * 128 + 64 * 64);
        assert_eq!((rotated.stage - b.stage, rotated.first - b.first), (rotations, rotations));
    }

    #[test]
    fn vllm_claims_its_share_and_generic_keeps_the_old_estimate() {
        assert_eq!(Engine::Vllm.rules().usable_fraction, 0.9);
        let dims = Dims::of(&model());
        let shape = Shape { context: 8192, batch: 1, prefill_chunk: 512, flash_attention: true, quantized_kv: false };
        let g = Engine::Generic.rules().buffers(&dims, shape);
        assert_eq!(g.stage, 512 * (4096 + 14336) * 8);
        assert_eq!(g.last, 512 * 128_256 * 4);
        assert_eq!((g.first, g.single_saving), (0, 0));
    }
}
