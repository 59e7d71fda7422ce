//! What llama.cpp keeps per layer besides weights, by architecture: KV cache, its window,
//! and recurrent state — read from a GGUF's metadata the way llama.cpp's loader reads it.
//!
//! The file states the sizes (head counts per layer, key and value lengths, the window,
//! the SSM dimensions); llama.cpp's per-architecture code (`src/models/<arch>.cpp`,
//! `load_arch_hparams`) decides what they mean: whether a window applies at all and to which
//! layers, which layers are recurrent, which share another's cache. Those decisions are the
//! table below, each checked against llama.cpp's own projection by the engine test
//! (`crates/stageplan-cli/tests/engine/arch.rs`). An architecture with recurrent or
//! compressed state this table does not know is refused; any other is sized with full
//! attention on every layer, which llama.cpp never exceeds.

use super::ImportError;
use super::gguf::{self, GgufHeader};

/// The memory a model's layers keep, per layer.
pub(super) struct LayerMemory {
    /// K and V elements per token of context.
    pub kv_elements: Vec<u64>,
    /// Recurrent state elements (f32) per sequence.
    pub state_elements: Vec<u64>,
    /// V elements per token added without flash attention (padding to the widest layer).
    pub v_pad_elements: Vec<u64>,
    pub windows: Vec<Option<u64>>,
    /// The layer whose cache each layer reads instead of its own (empty: each its own).
    pub kv_from: Vec<Option<u64>>,
}

/// Architectures whose recurrent layers llama.cpp sizes as the table below does.
const RECURRENT: [&str; 6] = ["mamba", "mamba2", "falcon-h1", "granitehybrid", "lfm2", "qwen3next"];

/// Key groups that mean state llama.cpp sizes per architecture.
const STATE_KEYS: [&str; 4] = ["ssm.", "shortconv.", "wkv.", "attention.indexer"];

/// Gemma 3n: only the first 20 layers have a cache of their own; the rest reuse layer 18's
/// (sliding) or 19's (full) (`src/models/gemma3n.cpp`: `n_layer_kv_from_start = 20`, not
/// read from the file; `src/llama-model.cpp`'s `reuse`).
const GEMMA3N_KV_LAYERS: usize = 20;

/// Llama 4's chunked attention: chunks of 8,192 tokens whatever the file says, unless its
/// window is 0 (`src/models/llama4.cpp`).
const LLAMA4_CHUNK: u64 = 8192;

/// The layers' memory of a model of `arch` with `n` layers, `hidden` wide, `heads_kv` KV
/// heads per layer.
pub(super) fn layer_memory(
    arch: &str,
    h: &GgufHeader,
    n: usize,
    hidden: u64,
    max_heads: u64,
    heads_kv: &[u64],
) -> Result<LayerMemory, ImportError> {
    let key = |k: &str| h.get(&format!("{arch}.{k}"));
    let scalar = |k: &str| key(k).and_then(gguf::Value::as_u64);
    let stateful = h.metadata.iter().find(|(k, _)| {
        k.strip_prefix(arch)
            .and_then(|k| k.strip_prefix('.'))
            .is_some_and(|k| STATE_KEYS.iter().any(|p| k.starts_with(p)))
    });
    if let Some((k, _)) = stateful
        && !RECURRENT.contains(&arch)
    {
        return Err(ImportError::Model(format!(
            "`{arch}` keeps state llama.cpp sizes its own way (`{k}`), which stageplan does not size yet; architectures with recurrent state it sizes: {}",
            RECURRENT.join(", ")
        )));
    }

    // K and V per token. MLA (DeepSeek-V2/V3, Kimi) caches one compressed row per token and
    // no V (`llama-kv-cache.cpp`): its `key_length` is the row.
    let key_len = scalar("attention.key_length").unwrap_or(hidden / max_heads.max(1));
    let value_len = scalar("attention.value_length").unwrap_or(key_len);
    let mla = scalar("attention.key_length_mla").is_some() && scalar("attention.value_length_mla").is_some();
    let recurrent = recurrent_layers(arch, h, n, heads_kv);
    let has_kv = |i: usize| {
        let attends = arch == "falcon-h1" || !recurrent[i];
        let own = arch != "gemma3n" || i < GEMMA3N_KV_LAYERS;
        attends && own && heads_kv[i] > 0
    };
    let v = |i: usize| if mla || !has_kv(i) { 0 } else { heads_kv[i].saturating_mul(value_len) };
    let kv_elements =
        (0..n).map(|i| if has_kv(i) { heads_kv[i].saturating_mul(key_len).saturating_add(v(i)) } else { 0 }).collect();
    // Without flash attention llama.cpp stores V transposed at the widest layer's width.
    let widest = (0..n).map(v).max().unwrap_or(0);
    let v_pad_elements = if (0..n).filter(|&i| has_kv(i)).any(|i| v(i) != widest) {
        (0..n).map(|i| if has_kv(i) { widest - v(i) } else { 0 }).collect()
    } else {
        Vec::new()
    };

    let state = state_per_layer(arch, h, hidden)?;
    let state_elements = if recurrent.iter().any(|&r| r) {
        recurrent.iter().map(|&r| if r { state } else { 0 }).collect()
    } else {
        Vec::new()
    };
    let windows = windows(arch, h, n, &recurrent);
    let kv_from = if arch == "gemma3n" {
        let last = GEMMA3N_KV_LAYERS as u64;
        (0..n).map(|i| (i >= GEMMA3N_KV_LAYERS).then(|| last - if windows[i].is_some() { 2 } else { 1 })).collect()
    } else {
        Vec::new()
    };
    Ok(LayerMemory { kv_elements, state_elements, v_pad_elements, windows, kv_from })
}

/// Which layers keep recurrent state instead of (or, in Falcon-H1, beside) a KV cache.
fn recurrent_layers(arch: &str, h: &GgufHeader, n: usize, heads_kv: &[u64]) -> Vec<bool> {
    let key = |k: &str| h.get(&format!("{arch}.{k}"));
    match arch {
        "mamba" | "mamba2" | "falcon-h1" => vec![true; n],
        // A layer without KV heads is a Mamba-2 or short-convolution layer.
        "granitehybrid" | "lfm2" => heads_kv.iter().map(|&k| k == 0).collect(),
        "qwen3next" => match key("attention.recurrent_layers").and_then(gguf::Value::as_bools) {
            Some(flags) => (0..n).map(|i| flags.get(i).copied().unwrap_or(false)).collect(),
            None => {
                let every = key("full_attention_interval").and_then(gguf::Value::as_u64).unwrap_or(4).max(1);
                (0..n).map(|i| !(i as u64 + 1).is_multiple_of(every)).collect()
            }
        },
        _ => vec![false; n],
    }
}

/// One recurrent layer's state per sequence, in f32 elements (`llama-hparams.cpp`:
/// `n_embd_r() + n_embd_s()`): a short convolution's `(l_cache − 1)·hidden`, or an SSM's
/// convolution `(conv − 1)·(inner + 2·groups·state)` and its state `state·inner`.
fn state_per_layer(arch: &str, h: &GgufHeader, hidden: u64) -> Result<u64, ImportError> {
    let scalar = |k: &str| h.get(&format!("{arch}.{k}")).and_then(gguf::Value::as_u64);
    if !RECURRENT.contains(&arch) {
        return Ok(0);
    }
    if arch == "lfm2" {
        let cache = scalar("shortconv.l_cache")
            .ok_or_else(|| ImportError::Model(format!("`{arch}.shortconv.l_cache` is missing")))?;
        return Ok(cache.saturating_sub(1).saturating_mul(hidden));
    }
    let required = |k: &str| scalar(k).ok_or_else(|| ImportError::Model(format!("`{arch}.{k}` is missing")));
    let (conv, inner, state) = (required("ssm.conv_kernel")?, required("ssm.inner_size")?, required("ssm.state_size")?);
    let groups = scalar("ssm.group_count").unwrap_or(0);
    let convolution =
        conv.saturating_sub(1).saturating_mul(inner.saturating_add(groups.saturating_mul(state).saturating_mul(2)));
    Ok(convolution.saturating_add(state.saturating_mul(inner)))
}

/// Each layer's attention window, as llama.cpp's code for `arch` decides it.
fn windows(arch: &str, h: &GgufHeader, n: usize, recurrent: &[bool]) -> Vec<Option<u64>> {
    let key = |k: &str| h.get(&format!("{arch}.{k}"));
    let window = key("attention.sliding_window").and_then(gguf::Value::as_u64);
    let positive = window.filter(|&w| w > 0);
    // (window, default pattern, dense first): a layer `i` slides when `i % p < p − 1`, or
    // with dense first when `i % p != 0`; a pattern of 0 slides every layer.
    let (window, pattern, dense_first) = match arch {
        "gemma2" => (Some(window.unwrap_or(4096)), 2, false),
        "gemma3" | "afmoe" | "olmo2" => (positive, if arch == "gemma3" { 6 } else { 4 }, false),
        "gemma3n" => (window, 5, false),
        "gpt-oss" => (window, 2, false),
        "cohere2" => (window, 4, false),
        "cohere2moe" => (window, 4, true),
        "llama4" => (if window == Some(0) { None } else { Some(LLAMA4_CHUNK) }, 4, false),
        // LFM2 slides every attention layer when the file gives a window.
        "lfm2" => return (0..n).map(|i| positive.filter(|_| !recurrent[i])).collect(),
        // Everything else attends to the whole context, whatever the file says (Phi-3's
        // converter writes a window llama.cpp switches off; Mistral runs as `llama`).
        _ => return vec![None; n],
    };
    let Some(window) = window.filter(|&w| w > 0) else { return vec![None; n] };
    let given = key("attention.sliding_window_pattern");
    if let Some(flags) =
        given.and_then(gguf::Value::as_bools).filter(|_| matches!(given, Some(gguf::Value::Array { .. })))
    {
        return (0..n).map(|i| flags.get(i).copied().unwrap_or(false).then_some(window)).collect();
    }
    let p = given.and_then(gguf::Value::as_u64).unwrap_or(pattern);
    (0..n)
        .map(|i| {
            let i = i as u64;
            let slides = p == 0 || if dense_first { !i.is_multiple_of(p) } else { i % p < p - 1 };
            slides.then_some(window)
        })
        .collect()
}
