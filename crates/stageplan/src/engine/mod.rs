//! The engines a plan is for, and what each allocates besides weights and KV cache.
//!
//! Everything that differs by engine is one value of [`EngineRules`]: the fraction of a
//! device's memory it claims, how it rounds KV cells, where it keeps the token embedding,
//! what a machine's system RAM does for it, the caches it copies across a cut, how its
//! buffers are sized ([`EngineRules::buffers`]: llama.cpp's scheduler from its source, or
//! activations of a prefill chunk), and the export that runs it. The cost model, the
//! riders and the exports read the rules; none of them branches on [`Engine`].
//!
//! **vLLM** takes `--gpu-memory-utilization` (0.9, as exported) of each GPU and profiles its
//! activations over `max_num_batched_tokens`; a stage keeps the activations of one prefill
//! chunk and the 10% it leaves unclaimed.

mod buffers;

use crate::device::Backend;
use serde::{Deserialize, Serialize};

pub use buffers::Dims;

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
    /// What a pipeline's links carry for each sequence of a decode step.
    pub traffic: Traffic,
    /// Backends whose decode step reads a quantized KV cache once per query head (see
    /// [`EngineRules::rereads_quantized_kv`]).
    quantized_kv_per_query_head: &'static [Backend],
    /// How its buffers are sized.
    buffers: BufferModel,
}

/// What a pipeline's links carry for one sequence of a decode step.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Traffic {
    /// Bytes a stage hands the next per element of the hidden state.
    pub activation_element: f64,
    /// The last stage sends the first machine the logits (f32, one per vocabulary entry),
    /// which it samples, rather than the sampled token's id.
    pub returns_logits: bool,
    /// A cut between two machines neither of which is the first stage's passes through the
    /// first's: one server there drives every device and copies between two of them itself.
    pub relays_through_first: bool,
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
pub(crate) enum BufferModel {
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
    // One llama-server runs every device, each machine's behind an rpc-server: the scheduler
    // hands a cut's hidden state on in f32 (the graph's own type), and llama-server samples
    // on its own host from the f32 logits it reads back from the device of the output layer
    // (`llama_context::decode`: `ggml_backend_tensor_get_async` of `t_logits`, n_vocab a
    // sequence) — 513 KB a sequence a step for Llama 3's vocabulary.
    // A copy between two rpc-servers is a read into llama-server's host and a write out
    // (`ggml_backend_rpc_buffer_cpy_tensor` copies only within one server, and the scheduler
    // falls back to `ggml_backend_tensor_copy` through host memory).
    traffic: Traffic { activation_element: element::F32, returns_logits: true, relays_through_first: true },
    quantized_kv_per_query_head: &[Backend::Cuda, Backend::Rocm],
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
    // A pipeline rank sends the next its `IntermediateTensors`: the hidden state and the
    // residual, each in the model's 16-bit type (vLLM's Llama, `LlamaModel.forward`); the
    // last rank samples and the ranks share token ids.
    traffic: Traffic { activation_element: 2.0 * element::F16, returns_logits: false, relays_through_first: false },
    quantized_kv_per_query_head: &[],
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
    traffic: Traffic { activation_element: element::F16, returns_logits: false, relays_through_first: false },
    quantized_kv_per_query_head: &[],
    buffers: BufferModel::Activations,
};

impl EngineRules {
    /// Whether a device of `kind` holds the token embedding of a first stage (else the
    /// server's host RAM does).
    pub fn embedding_on_device(&self, kind: Option<crate::device::DeviceKind>) -> bool {
        !self.embedding_in_host_ram || kind != Some(crate::device::DeviceKind::Gpu)
    }

    /// Whether a decode step on `backend` reads a quantized KV cache once per query head
    /// rather than once per KV head. llama.cpp's CUDA and HIP code sends a one-row step with
    /// a quantized K or V cache to its vector flash-attention kernel
    /// (`ggml_cuda_get_best_fattn_kernel`, `ggml-cuda/fattn.cu`), which runs one block per
    /// query head and reads that head's KV head in each (`fattn-vec.cuh`: `K += nb12*(head /
    /// gqa_ratio)`); an f16 cache goes to kernels that read it once per group. Published
    /// runs show it: Qwen3-235B-A22B (16 query heads per KV head) on an RTX A6000 slows from
    /// 10.2 to 6.4 tok/s by 32k tokens with a q8_0 cache, from 10.4 to 9.5 with f16
    /// (`tests/calibration/offload.csv`).
    pub fn rereads_quantized_kv(&self, backend: Backend) -> bool {
        self.quantized_kv_per_query_head.contains(&backend)
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

/// Bytes of the element types an engine keeps beside the weights: f32 activations, logits,
/// masks and recurrent state; flash attention's f16 mask; i32 positions and ids; i64 KV row
/// indices (ggml's `GGML_TYPE_*` sizes).
pub(crate) mod element {
    pub(crate) const F32: f64 = 4.0;
    pub(crate) const F16: f64 = 2.0;
    pub(crate) const I32: f64 = 4.0;
    pub(crate) const I64: f64 = 8.0;
}

/// The share of a quantized KV cache's reads beyond the first per KV head (a backend that
/// reads it once per query head: [`EngineRules::rereads_quantized_kv`]) that reach the
/// device's memory; the rest hit its L2 cache, as the blocks of one KV head's query heads run
/// side by side over the same rows. Fitted to the one published run with depths (Qwen3-235B-
/// A22B, 16 query heads a KV head, q8_0 cache on an RTX A6000: 10.21, 8.09 and 6.41 tok/s at
/// 0, 16k and 32k tokens, ik_llama.cpp PR #370): every reread at DRAM put the two depths at
/// −14.0% and −14.7% against −5.2% at depth 0; 0.7 puts them at −6.6% and −2.8%
/// (`cargo test -p stageplan --test offload_published -- --nocapture`).
pub const QUANTIZED_KV_REREADS_FROM_MEMORY: f64 = 0.7;

/// `--gpu-memory-utilization` as the vLLM export passes it (vLLM's default).
pub const VLLM_GPU_MEMORY_UTILIZATION: f64 = 0.9;

/// Tokens of one vLLM KV block (`--block-size`, 16 on CUDA and ROCm): its scheduler gives a
/// request blocks as its tokens grow (`KVCacheManager.allocate_slots`).
pub const VLLM_BLOCK_TOKENS: u64 = 16;

/// Whether `vllm serve` takes its larger defaults on a GPU (`EngineArgs.get_batch_defaults` in
/// `vllm/engine/arg_utils.py`): one of 70 GiB or more that is not an A100 ("Setting large
/// `max_num_batched_tokens` for A100 reduces throughput", vLLM PR #17885).
fn vllm_large_defaults(gpu_memory: u64, device: Option<&str>) -> bool {
    const LARGE: u64 = 70 << 30;
    let a100 = device.is_some_and(|d| d.to_ascii_lowercase().contains("a100"));
    gpu_memory >= LARGE && !a100
}

/// The tokens a step of `vllm serve` computes when not told (`--max-num-batched-tokens`):
/// 8192 with its larger defaults (a GPU of 70 GiB or more, not an A100), else 2048. Chunked prefill is
/// on, so a longer prompt takes several steps.
pub fn vllm_max_num_batched_tokens(gpu_memory: u64, device: Option<&str>) -> u32 {
    if vllm_large_defaults(gpu_memory, device) { 8192 } else { 2048 }
}

/// The requests `vllm serve` runs at once when not told (`--max-num-seqs`, the same
/// function): 1024 with its larger defaults, else 256. The others wait in its queue.
pub fn vllm_max_num_seqs(gpu_memory: u64, device: Option<&str>) -> u32 {
    if vllm_large_defaults(gpu_memory, device) { 1024 } else { 256 }
}

/// What `vllm serve` adds to each request's time to first token besides the engine's steps
/// (its API server: HTTP, the chat template, tokenizing, the hop to the engine's process and
/// back): GPUStack's runs of Qwen3 8B on an H100 (`tests/calibration/serving.csv`) saw
/// 59.0, 63.8, 64.0 and 74.6 ms at 1, 2, 4 and 8 users where the steps alone take 14, 18,
/// 27 and 44 ms: 31–46 ms more, 40 ms at about the median.
pub const VLLM_REQUEST_S: f64 = 0.040;

/// A vLLM plan's typical error in tok/s: the median |error| of the published one-user vLLM
/// decode figures the cost model holds (`tests/calibration/tensor-parallel.csv`, planned
/// with the nearest presets; a test recomputes it). The fit's figures are llama.cpp's, so
/// a vLLM plan does not borrow them.
pub const VLLM_DECODE_ERROR: f64 = 0.17;

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
    /// A quantized K cache, and V cache, which llama.cpp rotates (Hadamard matrices as
    /// graph inputs, one for each quantized cache).
    pub quantized_k: bool,
    pub quantized_v: bool,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Model;

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

    /// `-c 8192 -np 1 -ub 512 -fa on` with an f16 cache.
    const SHAPE_8K: Shape = Shape {
        context: 8192,
        batch: 1,
        prefill_chunk: 512,
        flash_attention: true,
        quantized_k: false,
        quantized_v: false,
    };

    #[test]
    fn llama_cpp_buffers_follow_the_worked_example() {
        // docs/llama-cpp-memory.md §2.6: Llama 3.1 8B, `-c 8192 -np 1 -ub 512 -fa on`, two
        // devices: 4 copies of ≈16 MiB of inputs and the 92 MiB MLP peak, ≈156 MiB.
        let dims = Dims::of(&model());
        let shape = SHAPE_8K;
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
        let rotated = Engine::LlamaCpp.rules().buffers(&dims, Shape { quantized_k: true, quantized_v: true, ..shape });
        let rotations = 4 * 4 * (128 * 128 + 64 * 64);
        assert_eq!((rotated.stage - b.stage, rotated.first - b.first), (rotations, rotations));
        // `-ctk q8_0` beside an f16 V rotates K alone, and `-ctv q8_0` V alone.
        let k_only = Engine::LlamaCpp.rules().buffers(&dims, Shape { quantized_k: true, ..shape });
        assert_eq!(k_only.stage - b.stage, 4 * 4 * 128 * 128);
        let v_only = Engine::LlamaCpp.rules().buffers(&dims, Shape { quantized_v: true, ..shape });
        assert_eq!(v_only.stage - b.stage, 4 * 4 * 64 * 64);
    }

    #[test]
    fn vllm_claims_its_share_and_generic_keeps_the_old_estimate() {
        assert_eq!(Engine::Vllm.rules().usable_fraction, 0.9);
        let dims = Dims::of(&model());
        let shape = SHAPE_8K;
        let g = Engine::Generic.rules().buffers(&dims, shape);
        assert_eq!(g.stage, 512 * (4096 + 14336) * 8);
        assert_eq!(g.last, 512 * 128_256 * 4);
        assert_eq!((g.first, g.single_saving), (0, 0));
    }
}
