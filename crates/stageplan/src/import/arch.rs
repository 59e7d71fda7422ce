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
use crate::model::Arch;

/// The memory a model's layers keep, per layer.
#[derive(Debug)]
pub(super) struct LayerMemory {
    /// K and V elements per token of context.
    pub kv_elements: Vec<u64>,
    /// The V part of each layer's `kv_elements`.
    pub v_elements: Vec<u64>,
    /// Recurrent state elements (f32) per sequence.
    pub state_elements: Vec<u64>,
    /// V elements per token added without flash attention (padding to the widest layer).
    pub v_pad_elements: Vec<u64>,
    pub windows: Vec<Option<u64>>,
    /// The layer whose cache each layer reads instead of its own (empty: each its own).
    pub kv_from: Vec<Option<u64>>,
}

/// Architectures whose recurrent layers llama.cpp sizes as the table below does, with their
/// GGUF names.
const RECURRENT: [(Arch, &str); 8] = [
    (Arch::Mamba, "mamba"),
    (Arch::Mamba2, "mamba2"),
    (Arch::FalconH1, "falcon-h1"),
    (Arch::GraniteHybrid, "granitehybrid"),
    (Arch::Lfm2, "lfm2"),
    (Arch::Qwen3Next, "qwen3next"),
    (Arch::Qwen35, "qwen35"),
    (Arch::Qwen35Moe, "qwen35moe"),
];

/// Whether llama.cpp sizes `family`'s recurrent state as this module does.
fn sized_recurrent(family: Arch) -> bool {
    debug_assert_eq!(RECURRENT.iter().any(|&(a, _)| a == family), family.has_recurrent_layers());
    family.has_recurrent_layers()
}

/// Key groups that mean state llama.cpp sizes per architecture.
const STATE_KEYS: [&str; 4] = ["ssm.", "shortconv.", "wkv.", "attention.indexer"];

/// Gemma 3n: only the first 20 layers have a cache of their own; the rest reuse layer 18's
/// (sliding) or 19's (full) (`src/models/gemma3n.cpp`: `n_layer_kv_from_start = 20`, not
/// read from the file; `src/llama-model.cpp`'s `reuse`).
const GEMMA3N_KV_LAYERS: usize = 20;

/// Llama 4's chunked attention: chunks of 8,192 tokens whatever the file says, unless its
/// window is 0 (`src/models/llama4.cpp`).
const LLAMA4_CHUNK: u64 = 8192;

/// The layers' memory of a model of `family`, whose keys start with `arch`, with `n`
/// layers, `hidden` wide, `heads_kv` KV heads per layer.
pub(super) fn layer_memory(
    arch: &str,
    family: Arch,
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
        && !sized_recurrent(family)
    {
        let sized: Vec<&str> = RECURRENT.iter().map(|&(_, name)| name).collect();
        return Err(ImportError::Model(format!(
            "`{arch}` keeps state llama.cpp sizes its own way (`{k}`), which stageplan does not size yet; architectures with recurrent state it sizes: {}",
            sized.join(", ")
        )));
    }

    // K and V per token. MLA (DeepSeek-V2/V3, Kimi) caches one compressed row per token and
    // no V (`llama-kv-cache.cpp`): its `key_length` is the row.
    let key_len = scalar("attention.key_length").unwrap_or(hidden / max_heads.max(1));
    let value_len = scalar("attention.value_length").unwrap_or(key_len);
    let mla = scalar("attention.key_length_mla").is_some() && scalar("attention.value_length_mla").is_some();
    let recurrent = recurrent_layers(arch, family, h, n, heads_kv);
    let has_kv = |i: usize| {
        let attends = family == Arch::FalconH1 || !recurrent[i];
        let own = family != Arch::Gemma3n || i < GEMMA3N_KV_LAYERS;
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

    let state = state_per_layer(arch, family, h, hidden)?;
    let state_elements = if recurrent.iter().any(|&r| r) {
        recurrent.iter().map(|&r| if r { state } else { 0 }).collect()
    } else {
        Vec::new()
    };
    let windows = windows(arch, family, h, n, &recurrent);
    let kv_from = if family == Arch::Gemma3n {
        let last = GEMMA3N_KV_LAYERS as u64;
        (0..n).map(|i| (i >= GEMMA3N_KV_LAYERS).then(|| last - if windows[i].is_some() { 2 } else { 1 })).collect()
    } else {
        Vec::new()
    };
    let v_elements = (0..n).map(v).collect();
    Ok(LayerMemory { kv_elements, v_elements, state_elements, v_pad_elements, windows, kv_from })
}

/// Which layers keep recurrent state instead of (or, in Falcon-H1, beside) a KV cache.
fn recurrent_layers(arch: &str, family: Arch, h: &GgufHeader, n: usize, heads_kv: &[u64]) -> Vec<bool> {
    let key = |k: &str| h.get(&format!("{arch}.{k}"));
    match family {
        Arch::Mamba | Arch::Mamba2 | Arch::FalconH1 => vec![true; n],
        // A layer without KV heads is a Mamba-2 or short-convolution layer.
        Arch::GraniteHybrid | Arch::Lfm2 => heads_kv.iter().map(|&k| k == 0).collect(),
        // Qwen3.5's layers are Qwen3-Next's (`src/models/qwen35moe.cpp:20-26`).
        Arch::Qwen3Next | Arch::Qwen35 | Arch::Qwen35Moe => {
            match key("attention.recurrent_layers").and_then(gguf::Value::as_bools) {
                Some(flags) => (0..n).map(|i| flags.get(i).copied().unwrap_or(false)).collect(),
                None => {
                    let every = key("full_attention_interval").and_then(gguf::Value::as_u64).unwrap_or(4).max(1);
                    (0..n).map(|i| !(i as u64 + 1).is_multiple_of(every)).collect()
                }
            }
        }
        _ => vec![false; n],
    }
}

/// One recurrent layer's state per sequence, in f32 elements (`llama-hparams.cpp`:
/// `n_embd_r() + n_embd_s()`): a short convolution's `(l_cache − 1)·hidden`, or an SSM's
/// convolution `(conv − 1)·(inner + 2·groups·state)` and its state `state·inner`.
fn state_per_layer(arch: &str, family: Arch, h: &GgufHeader, hidden: u64) -> Result<u64, ImportError> {
    let scalar = |k: &str| h.get(&format!("{arch}.{k}")).and_then(gguf::Value::as_u64);
    if !sized_recurrent(family) {
        return Ok(0);
    }
    if family == Arch::Lfm2 {
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

/// Each layer's attention window, as llama.cpp's code for `family` decides it.
fn windows(arch: &str, family: Arch, h: &GgufHeader, n: usize, recurrent: &[bool]) -> Vec<Option<u64>> {
    let key = |k: &str| h.get(&format!("{arch}.{k}"));
    let window = key("attention.sliding_window").and_then(gguf::Value::as_u64);
    let positive = window.filter(|&w| w > 0);
    // (window, default pattern, dense first): a layer `i` slides when `i % p < p − 1`, or
    // with dense first when `i % p != 0`; a pattern of 0 slides every layer.
    let (window, pattern, dense_first) = match family {
        Arch::Gemma2 => (Some(window.unwrap_or(4096)), 2, false),
        Arch::Gemma3 => (positive, 6, false),
        Arch::Afmoe | Arch::Olmo2 => (positive, 4, false),
        Arch::Gemma3n => (window, 5, false),
        Arch::GptOss => (window, 2, false),
        Arch::Cohere2 => (window, 4, false),
        Arch::Cohere2Moe => (window, 4, true),
        Arch::Llama4 => (if window == Some(0) { None } else { Some(LLAMA4_CHUNK) }, 4, false),
        // LFM2 slides every attention layer when the file gives a window.
        Arch::Lfm2 => return (0..n).map(|i| positive.filter(|_| !recurrent[i])).collect(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use gguf::Value;

    /// A header of `arch` with `pairs` under its own keys (`{arch}.{key}`).
    fn header(arch: &str, pairs: &[(&str, Value)]) -> GgufHeader {
        GgufHeader {
            version: 3,
            alignment: 32,
            metadata: pairs.iter().map(|(k, v)| (format!("{arch}.{k}"), v.clone())).collect(),
            tensors: Vec::new(),
            data_offset: 0,
        }
    }

    fn bools(flags: &[bool]) -> Value {
        Value::Array { item: 7, len: flags.len() as u64, items: Some(flags.iter().map(|&b| Value::Bool(b)).collect()) }
    }

    /// Layer memory of `n` layers of `arch`, 64 wide with 4 heads of 16 and `heads_kv` KV heads.
    fn memory(arch: &str, pairs: &[(&str, Value)], heads_kv: &[u64]) -> Result<LayerMemory, ImportError> {
        layer_memory(arch, Arch::named(arch), &header(arch, pairs), heads_kv.len(), 64, 4, heads_kv)
    }

    const KV: u64 = 2 * 2 * 16;

    #[test]
    fn full_attention_families_cache_every_layer_and_slide_none() {
        // A window in the file is switched off where llama.cpp's code does (Phi-3, Mistral as `llama`).
        for arch in ["llama", "qwen3", "phi3", "deepseek2", "glm4moe", "openelm"] {
            let m = memory(arch, &[("attention.sliding_window", Value::U32(512))], &[2; 4]).unwrap();
            assert_eq!(m.kv_elements, vec![KV; 4], "{arch}");
            assert_eq!(m.windows, vec![None; 4], "{arch}");
            assert!(m.state_elements.is_empty() && m.kv_from.is_empty() && m.v_pad_elements.is_empty(), "{arch}");
        }
    }

    #[test]
    fn sliding_families_follow_their_patterns() {
        let w = Some(128);
        let window = [("attention.sliding_window", Value::U32(128))];
        // Gemma 2 alternates (and slides at 4,096 when the file says nothing).
        assert_eq!(memory("gemma2", &window, &[2; 4]).unwrap().windows, [w, None, w, None]);
        assert_eq!(memory("gemma2", &[], &[2; 2]).unwrap().windows, [Some(4096), None]);
        // Gemma 3: five sliding layers, then a full one; a pattern in the file wins.
        assert_eq!(memory("gemma3", &window, &[2; 7]).unwrap().windows, [w, w, w, w, w, None, w]);
        let given = [window[0].clone(), ("attention.sliding_window_pattern", Value::U32(2))];
        assert_eq!(memory("gemma3", &given, &[2; 4]).unwrap().windows, [w, None, w, None]);
        let flags = [window[0].clone(), ("attention.sliding_window_pattern", bools(&[false, true, true]))];
        assert_eq!(memory("gemma3", &flags, &[2; 3]).unwrap().windows, [None, w, w]);
        // gpt-oss alternates; Cohere 2 and OLMo 2 slide three of four; Cohere 2 MoE's first is full.
        assert_eq!(memory("gpt-oss", &window, &[2; 4]).unwrap().windows, [w, None, w, None]);
        assert_eq!(memory("cohere2", &window, &[2; 4]).unwrap().windows, [w, w, w, None]);
        assert_eq!(memory("olmo2", &window, &[2; 4]).unwrap().windows, [w, w, w, None]);
        assert_eq!(memory("cohere2moe", &window, &[2; 4]).unwrap().windows, [None, w, w, w]);
        // Llama 4 chunks at 8,192 whatever the file says, unless it says 0.
        assert_eq!(memory("llama4", &window, &[2; 4]).unwrap().windows, [Some(8192), Some(8192), Some(8192), None]);
        let off = [("attention.sliding_window", Value::U32(0))];
        assert_eq!(memory("llama4", &off, &[2; 4]).unwrap().windows, [None; 4]);
        // Gemma 3 without a positive window attends fully.
        assert_eq!(memory("gemma3", &off, &[2; 2]).unwrap().windows, [None; 2]);
    }

    #[test]
    fn gemma3n_shares_the_caches_of_layers_18_and_19() {
        let window = [("attention.sliding_window", Value::U32(512))];
        let m = memory("gemma3n", &window, &[2; 25]).unwrap();
        assert_eq!(m.kv_elements[..20], [KV; 20]);
        assert_eq!(m.kv_elements[20..], [0; 5], "no cache of their own");
        // Four sliding layers, then a full one; sliding readers read 18's, full ones 19's.
        assert_eq!((m.windows[18], m.windows[19]), (Some(512), None));
        assert_eq!(m.kv_from[..20], [None; 20]);
        assert_eq!(m.kv_from[20..], [Some(18), Some(18), Some(18), Some(18), Some(19)]);
    }

    #[test]
    fn recurrent_families_keep_their_state() {
        let ssm = [
            ("ssm.conv_kernel", Value::U32(4)),
            ("ssm.inner_size", Value::U32(128)),
            ("ssm.state_size", Value::U32(16)),
            ("ssm.group_count", Value::U32(1)),
        ];
        // (conv − 1)·(inner + 2·groups·state) + state·inner.
        let state = 3 * (128 + 2 * 16) + 16 * 128;
        let m = memory("mamba2", &ssm, &[0; 3]).unwrap();
        assert_eq!((m.state_elements, m.kv_elements), (vec![state; 3], vec![0; 3]));
        // Falcon-H1: attention beside the SSM in every layer.
        let m = memory("falcon-h1", &ssm, &[2; 2]).unwrap();
        assert_eq!((m.state_elements, m.kv_elements), (vec![state; 2], vec![KV; 2]));
        // Granite 4.0: a layer without KV heads is recurrent.
        let m = memory("granitehybrid", &ssm, &[0, 2, 0]).unwrap();
        assert_eq!((m.state_elements, m.kv_elements), (vec![state, 0, state], vec![0, KV, 0]));
        // Qwen3-Next: three gated delta-net layers, then full attention, or as flagged.
        let m = memory("qwen3next", &ssm, &[2; 4]).unwrap();
        assert_eq!(m.kv_elements, [0, 0, 0, KV]);
        let flagged = [ssm.to_vec(), vec![("attention.recurrent_layers", bools(&[false, true]))]].concat();
        assert_eq!(memory("qwen3next", &flagged, &[2; 2]).unwrap().kv_elements, [KV, 0]);
        // Qwen3.5 / 3.6 (dense and MoE) are laid out and sized as Qwen3-Next.
        for arch in ["qwen35", "qwen35moe"] {
            let m = memory(arch, &ssm, &[2; 8]).unwrap();
            assert_eq!(m.kv_elements, [0, 0, 0, KV, 0, 0, 0, KV], "{arch}");
            assert_eq!(m.state_elements, [state, state, state, 0, state, state, state, 0], "{arch}");
        }
        // LFM2: a short convolution of `l_cache − 1` hidden rows; its attention layers slide.
        let conv = [("shortconv.l_cache", Value::U32(3)), ("attention.sliding_window", Value::U32(64))];
        let m = memory("lfm2", &conv, &[0, 2]).unwrap();
        assert_eq!((m.state_elements, m.windows), (vec![2 * 64, 0], vec![None, Some(64)]));
        assert!(memory("lfm2", &[], &[0, 2]).unwrap_err().to_string().contains("shortconv.l_cache"));
        assert!(memory("mamba2", &ssm[1..], &[0]).unwrap_err().to_string().contains("ssm.conv_kernel"));
    }

    #[test]
    fn state_of_an_unsized_family_is_refused_by_name() {
        let error = memory("rwkv7", &[("wkv.head_size", Value::U32(64))], &[0; 2]).unwrap_err().to_string();
        assert!(error.contains("`rwkv7` keeps state") && error.contains("rwkv7.wkv.head_size"), "{error}");
        assert!(error.contains("mamba2, falcon-h1"), "{error}");
    }

    #[test]
    fn latent_attention_caches_one_row_and_uneven_layers_pad_v() {
        // MLA: `key_length` is the compressed row, and there is no V.
        let mla = [
            ("attention.key_length", Value::U32(576)),
            ("attention.key_length_mla", Value::U32(192)),
            ("attention.value_length_mla", Value::U32(128)),
        ];
        assert_eq!(memory("deepseek2", &mla, &[1; 2]).unwrap().kv_elements, [576, 576]);
        // OpenELM's layers have their own KV heads; without flash attention V is padded to the widest.
        let m = memory("openelm", &[], &[1, 2, 4]).unwrap();
        assert_eq!(m.kv_elements, [2 * 16, 4 * 16, 8 * 16]);
        assert_eq!(m.v_pad_elements, [3 * 16, 2 * 16, 0]);
    }
}
