//! Models from real files: GGUF (and split sets), safetensors (and sharded sets with their
//! `model.safetensors.index.json`), Hugging Face `config.json`.
//!
//! Only headers are read. A file's header states every tensor's name, shape, type and
//! offset, which gives exact bytes per layer without the weights: a 40 GB GGUF is planned
//! from its first few megabytes. Parsers take a byte prefix and answer either the header or
//! [`Parse::NeedMore`] with how many bytes from the start they need, so the browser can feed
//! `File.slice` reads and the CLI file reads, with no I/O here.
//!
//! Headers are untrusted input: every count and length is checked against the bytes a
//! well-formed file could hold before anything is allocated (see `reader.rs`), and errors
//! say where (byte offset or tensor name) and what.

mod arch;
pub mod files;
pub mod gguf;
pub mod names;
pub mod projector;
mod reader;
pub mod safetensors;
pub mod split;

use std::collections::BTreeMap;

pub use files::{FileEntry, ModelReader, ReadError, Step};
pub use projector::{ProjectorSize, gguf_projector};
pub use split::{split_name, split_part_name};

use crate::model::{Arch, HfConfig, Model, Moe, Place, Tensor, Transformer};
use gguf::GgufHeader;
use safetensors::{SafetensorsHeader, SafetensorsIndex};

/// A parser's answer on a prefix of a file.
#[derive(Clone, Debug, PartialEq)]
pub enum Parse<T> {
    Done(T),
    /// Read at least this many bytes from the start of the file and parse again.
    NeedMore(u64),
}

/// A file (or set of files) that does not describe a model we can plan.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ImportError {
    /// The bytes break the format.
    #[error("byte {offset}: {message}")]
    Malformed { offset: u64, message: String },
    /// One tensor breaks the format or the layout.
    #[error("tensor `{name}`: {message}")]
    Tensor { name: String, message: String },
    /// The files are well formed but do not make a model (missing keys, parts, shards).
    #[error("{0}")]
    Model(String),
}

/// What kind of model file a name and its first bytes suggest.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FileKind {
    Gguf,
    Safetensors,
    /// `model.safetensors.index.json`.
    SafetensorsIndex,
    /// A Hugging Face `config.json`.
    Config,
}

/// Recognises a model file by its magic bytes, then by its name.
pub fn detect(file_name: &str, prefix: &[u8]) -> Option<FileKind> {
    if prefix.starts_with(b"GGUF") {
        return Some(FileKind::Gguf);
    }
    if prefix.len() >= 9 && prefix[8] == b'{' {
        return Some(FileKind::Safetensors);
    }
    let lower = file_name.to_ascii_lowercase();
    if lower.ends_with(".gguf") {
        Some(FileKind::Gguf)
    } else if lower.ends_with(".safetensors") {
        Some(FileKind::Safetensors)
    } else if lower.ends_with(".index.json") || prefix.windows(12).any(|w| w == b"\"weight_map\"") {
        Some(FileKind::SafetensorsIndex)
    } else if lower.ends_with(".json") || prefix.first() == Some(&b'{') {
        Some(FileKind::Config)
    } else {
        None
    }
}

/// A model from the headers of a GGUF file or of every part of a split set.
///
/// # Errors
/// Parts missing, out of their places (`split.no`), tensors counted wrongly, or
/// architecture keys absent.
pub fn gguf_model(name: &str, parts: &[GgufHeader]) -> Result<Model, ImportError> {
    let first = parts.first().ok_or_else(|| ImportError::Model("no GGUF header given".into()))?;
    let count = split::split_count(first)?.max(1);
    if u64::from(count) != parts.len() as u64 {
        return Err(ImportError::Model(format!(
            "the split set has {count} parts (`split.count`) but {} were read; give every part",
            parts.len()
        )));
    }
    if count > 1 {
        // Each part in its place, as llama.cpp checks: the parts come in their names' order.
        for (place, part) in (0..count).zip(parts) {
            let number = split::split_no(part, count)?;
            if number != place {
                return Err(ImportError::Model(format!(
                    "part {} of the set has `split.no` {number}; llama.cpp wants {place} there: give the parts as `llama-gguf-split` wrote them",
                    place + 1
                )));
            }
        }
    }
    let mut tensors: Vec<Tensor> = Vec::new();
    let mut names = std::collections::HashSet::new();
    for part in parts {
        for t in &part.tensors {
            if !names.insert(t.name.as_str()) {
                return Err(ImportError::Tensor { name: t.name.clone(), message: "appears in two parts".into() });
            }
            let (place, expert) = names::gguf(&t.name).map_err(|e| past_limit(&t.name, e))?;
            tensors.push(Tensor::new(t.name.clone(), t.dims.clone(), t.ty, t.bytes, place, expert));
        }
    }
    if let Some(expected) = first.get("split.tensors.count").and_then(gguf::Value::as_u64)
        && expected != tensors.len() as u64
    {
        return Err(ImportError::Model(format!(
            "`split.tensors.count` says {expected} tensors but the parts hold {}",
            tensors.len()
        )));
    }
    // llama.cpp loads no multi-token-prediction (NextN) layer unless it drafts with one
    // (`--spec-type draft-mtp`): those layers hold no memory of a plan.
    let trunk = trunk_layers(first)?;
    if let Some(trunk) = trunk {
        tensors.retain(|t| !matches!(t.place, Place::Layer(i) if u64::from(i) >= trunk));
    }
    let arch = gguf_transformer(first, &tensors)?;
    let title = first.get("general.name").and_then(gguf::Value::as_str).unwrap_or(name);
    Ok(Model {
        name: title.to_owned(),
        weights: "gguf".to_owned(),
        head_shares_embedding: !tensors.iter().any(|t| t.name == "output.weight"),
        arch,
        tensors,
    })
}

/// `block_count − nextn_predict_layers`, when the file has NextN layers.
///
/// # Errors
/// NextN layers as many as the blocks, or more: no block would be left to run.
fn trunk_layers(h: &GgufHeader) -> Result<Option<u64>, ImportError> {
    let Some(arch) = h.get("general.architecture").and_then(gguf::Value::as_str) else { return Ok(None) };
    let count = |k: &str| h.get(&format!("{arch}.{k}")).and_then(gguf::Value::as_u64);
    let (Some(nextn), Some(blocks)) = (count("nextn_predict_layers").filter(|&n| n > 0), count("block_count")) else {
        return Ok(None);
    };
    if nextn >= blocks {
        return Err(ImportError::Model(format!(
            "`{arch}.nextn_predict_layers` is {nextn}, but `{arch}.block_count` is {blocks}: the multi-token-prediction layers come after the model's own blocks, so there must be fewer of them"
        )));
    }
    Ok(Some(blocks - nextn))
}

/// Layers the tensors fill: one past the highest `blk.N` / `layers.N` index (each below
/// [`MAX_LAYERS`](crate::limits::MAX_LAYERS): [`names`] refused the rest, naming the tensor,
/// before anything is sized by them).
fn layer_count(tensors: &[Tensor]) -> u64 {
    let layer = |t: &Tensor| if let Place::Layer(i) = t.place { Some(u64::from(i) + 1) } else { None };
    tensors.iter().filter_map(layer).max().unwrap_or(0)
}

/// A tensor whose block index is past the limit, named.
fn past_limit(name: &str, index: names::PastLimit<'_>) -> ImportError {
    ImportError::Tensor { name: name.to_owned(), message: index.to_string() }
}

/// Which layers hold expert tensors, in one pass over the tensors.
fn expert_layers(tensors: &[Tensor], n: usize) -> Vec<bool> {
    let mut sparse = vec![false; n];
    for t in tensors.iter().filter(|t| t.expert) {
        if let Place::Layer(i) = t.place
            && let Some(slot) = sparse.get_mut(i as usize)
        {
            *slot = true;
        }
    }
    sparse
}

/// Hyperparameters from GGUF metadata (`{arch}.block_count`, `…embedding_length`, …).
fn gguf_transformer(h: &GgufHeader, tensors: &[Tensor]) -> Result<Transformer, ImportError> {
    let arch = h
        .get("general.architecture")
        .and_then(gguf::Value::as_str)
        .ok_or_else(|| {
            ImportError::Model("`general.architecture` is missing; this GGUF does not describe a model".into())
        })?
        .to_owned();
    let key = |k: &str| h.get(&format!("{arch}.{k}"));
    let scalar = |k: &str| key(k).and_then(gguf::Value::as_u64);
    let per_layer = |k: &str| key(k).and_then(gguf::Value::as_u64s);
    let missing = |k: &str| ImportError::Model(format!("`{arch}.{k}` is missing"));

    // The tensors decide how many layers there are; metadata that claims more is an error
    // (and never sizes an allocation: it is a number from the file).
    let num_layers = layer_count(tensors);
    if num_layers == 0 {
        return Err(ImportError::Model("no `blk.N.*` tensors: the file holds no transformer layers".into()));
    }
    let nextn = scalar("nextn_predict_layers").unwrap_or(0);
    if nextn > crate::limits::MAX_LAYERS as u64 {
        return Err(ImportError::Model(format!(
            "`{arch}.nextn_predict_layers` is {nextn}; no model has over {} layers",
            crate::limits::MAX_LAYERS
        )));
    }
    if let Some(claimed) = scalar("block_count").map(|c| c.saturating_sub(nextn))
        && claimed > num_layers
    {
        return Err(ImportError::Model(format!(
            "`{arch}.block_count` is {claimed} but the tensors fill only {num_layers} layers"
        )));
    }
    let n = num_layers as usize;
    let embedding = tensors.iter().find(|t| t.name == "token_embd.weight");
    let hidden = scalar("embedding_length")
        .or_else(|| embedding.map(|t| t.shape[0]))
        .ok_or_else(|| missing("embedding_length"))?;
    let vocab = embedding
        .and_then(|t| t.shape.get(1).copied())
        .or_else(|| {
            h.get("tokenizer.ggml.tokens")
                .and_then(|v| if let gguf::Value::Array { len, .. } = v { Some(*len) } else { None })
        })
        .unwrap_or(0);
    let expand = |values: Vec<u64>, default: u64| -> Vec<u64> {
        match values.len() {
            0 => vec![default; n],
            1 => vec![values[0]; n],
            _ => (0..n).map(|i| values.get(i).copied().unwrap_or(default)).collect(),
        }
    };
    // A model of recurrent layers only (Mamba) may have no attention heads at all.
    let heads = match per_layer("attention.head_count") {
        Some(heads) => expand(heads, 0),
        None if scalar("ssm.state_size").is_some() => vec![0; n],
        None => return Err(missing("attention.head_count")),
    };
    let max_heads = heads.iter().copied().max().unwrap_or(0).max(1);
    let heads_kv = expand(per_layer("attention.head_count_kv").unwrap_or_default(), max_heads);
    let key_len = scalar("attention.key_length").unwrap_or(hidden / max_heads);
    let ffn = per_layer("feed_forward_length").and_then(|v| v.into_iter().max()).unwrap_or(0);
    let family = Arch::named(&arch);
    let memory = arch::layer_memory(&arch, family, h, n, hidden, max_heads, &heads_kv)?;
    let experts = scalar("expert_count").unwrap_or(0);
    let moe = (experts > 1).then(|| Moe {
        experts,
        active: scalar("expert_used_count").unwrap_or(experts).clamp(1, experts),
        expert_intermediate: scalar("expert_feed_forward_length").unwrap_or(ffn),
        shared_intermediate: scalar("expert_shared_feed_forward_length"),
        sparse_layers: expert_layers(tensors, n),
    });
    Ok(Transformer {
        family,
        model_type: arch.clone(),
        hidden_size: hidden,
        intermediate_size: ffn,
        num_layers,
        num_heads: max_heads,
        num_kv_heads: heads_kv.iter().copied().max().unwrap_or(max_heads),
        head_dim: key_len,
        vocab_size: vocab,
        tied_embeddings: !tensors.iter().any(|t| t.name == "output.weight"),
        qkv_bias: tensors.iter().any(|t| t.name.ends_with("attn_k.bias")),
        o_bias: false,
        mlp_bias: false,
        extra_norms: 0,
        qk_norm: false,
        kv_elements: memory.kv_elements,
        v_elements: memory.v_elements,
        state_elements: memory.state_elements,
        v_pad_elements: memory.v_pad_elements,
        kv_from: memory.kv_from,
        nextn_layers: nextn,
        mla: None,
        windows: memory.windows,
        max_context: scalar("context_length"),
        moe,
    })
}

/// A model from safetensors headers (one file, or every shard of a set with its index),
/// with hyperparameters from `config` when given and inferred from shapes otherwise.
///
/// # Errors
/// Shards that disagree with the index, a config that disagrees with the tensors, or
/// attention shapes that cannot be found without a config.
pub fn safetensors_model(
    name: &str,
    shards: &[(String, SafetensorsHeader)],
    index: Option<&SafetensorsIndex>,
    config: Option<&HfConfig>,
) -> Result<Model, ImportError> {
    let mut tensors: Vec<Tensor> = Vec::new();
    let mut holder: BTreeMap<&str, &str> = BTreeMap::new();
    for (file, header) in shards {
        for t in &header.tensors {
            if holder.insert(&t.name, file).is_some() {
                return Err(ImportError::Tensor { name: t.name.clone(), message: "appears in two shards".into() });
            }
            let (place, expert) = names::hugging_face(&t.name).map_err(|e| past_limit(&t.name, e))?;
            let mut shape: Vec<u64> = t.shape.iter().rev().copied().collect();
            if shape.is_empty() {
                shape.push(1);
            }
            tensors.push(Tensor::new(t.name.clone(), shape, t.ty, t.bytes(), place, expert));
        }
    }
    if let Some(index) = index {
        for (tensor, shard) in &index.weight_map {
            match holder.get(tensor.as_str()) {
                Some(file) if file == shard => {}
                Some(file) => {
                    return Err(ImportError::Tensor {
                        name: tensor.clone(),
                        message: format!("the index puts it in `{shard}` but `{file}` holds it"),
                    });
                }
                None => {
                    return Err(ImportError::Tensor {
                        name: tensor.clone(),
                        message: format!("the index lists it in `{shard}`, which does not hold it"),
                    });
                }
            }
        }
        if let Some(extra) = holder.keys().find(|t| !index.weight_map.contains_key(**t)) {
            return Err(ImportError::Tensor {
                name: (*extra).to_owned(),
                message: "is in a shard but not in the index".into(),
            });
        }
        let total: u64 = tensors.iter().map(|t| t.bytes).fold(0, u64::saturating_add);
        if let Some(stated) = index.total_size
            && stated != total
        {
            return Err(ImportError::Model(format!(
                "the index's `total_size` is {stated} bytes but the shards hold {total}"
            )));
        }
    }
    let has_head =
        tensors.iter().any(|t| t.place == Place::Head && (t.name.contains("lm_head") || t.name.contains("embed_out")));
    let arch = match config {
        Some(config) => {
            let arch = config.transformer().map_err(|e| ImportError::Model(format!("config.json: {e}")))?;
            let named = layer_count(&tensors);
            // Multi-token-prediction layers follow the blocks; llama.cpp's converter drops
            // DeepSeek's and its loader skips GLM's, so they are not part of the plan.
            if arch.nextn_layers > 0 && named == arch.num_layers.saturating_add(arch.nextn_layers) {
                let trunk = arch.num_layers;
                tensors.retain(|t| !matches!(t.place, Place::Layer(i) if u64::from(i) >= trunk));
            } else if named != arch.num_layers {
                return Err(ImportError::Model(format!(
                    "config.json has {} layers (`num_hidden_layers`) but the tensors fill {named}",
                    arch.num_layers
                )));
            }
            arch
        }
        None => inferred_transformer(&tensors, has_head)?,
    };
    Ok(Model {
        name: name.to_owned(),
        weights: "safetensors".to_owned(),
        head_shares_embedding: !has_head,
        arch,
        tensors,
    })
}

/// Hyperparameters read off the tensor shapes, for a safetensors file without a config:
/// hidden size and vocabulary from the embedding, K and V widths per layer from the
/// projections. Sliding windows and the context length need the config.
fn inferred_transformer(tensors: &[Tensor], has_head: bool) -> Result<Transformer, ImportError> {
    let need_config =
        |what: &str| ImportError::Model(format!("{what}; put the model's config.json next to the file to describe it"));
    let embedding = tensors
        .iter()
        .filter(|t| t.place == Place::Embedding && t.shape.len() == 2)
        .max_by_key(|t| t.shape[1])
        .ok_or_else(|| need_config("no token embedding found"))?;
    let (hidden, vocab) = (embedding.shape[0], embedding.shape[1]);
    let n = layer_count(tensors) as usize;
    // Each layer's tensors, gathered once: linear in the tensors, whatever the layer count.
    let mut by_layer: Vec<Vec<&Tensor>> = vec![Vec::new(); n];
    for t in tensors {
        if let Place::Layer(i) = t.place
            && let Some(list) = by_layer.get_mut(i as usize)
        {
            list.push(t);
        }
    }
    let width = |layer: usize, suffixes: &[&str]| {
        by_layer[layer]
            .iter()
            .find(|t| suffixes.iter().any(|s| t.name.ends_with(s)))
            .and_then(|t| t.shape.get(1).copied())
    };
    let mut kv_elements = Vec::with_capacity(n);
    let mut v_elements = Vec::with_capacity(n);
    let mut q_width = 0;
    for layer in 0..n {
        let k = width(layer, &["k_proj.weight", "attn.k_proj.weight", "key.weight"]);
        let v = width(layer, &["v_proj.weight", "attn.v_proj.weight", "value.weight"]);
        match (k, v) {
            (Some(k), Some(v)) => {
                kv_elements.push(k.saturating_add(v));
                v_elements.push(v);
            }
            _ => return Err(need_config(&format!("layer {layer} has no separate k_proj/v_proj weights"))),
        }
        q_width = q_width.max(width(layer, &["q_proj.weight", "query.weight"]).unwrap_or(hidden));
    }
    let k_width = kv_elements.iter().copied().max().unwrap_or(0) / 2;
    let head_dim =
        [256u64, 128, 64, 32, 16, 8, 4, 2, 1].into_iter().find(|d| q_width % d == 0 && k_width % d == 0).unwrap_or(1);
    let expert_ids: std::collections::BTreeSet<&str> = tensors
        .iter()
        .filter(|t| t.expert && t.place == Place::Layer(0))
        .filter_map(|t| t.name.split(".experts.").nth(1).and_then(|rest| rest.split('.').next()))
        .collect();
    let experts = expert_ids.len() as u64;
    let moe = (experts > 1).then(|| Moe {
        experts,
        // Without a config the number routed per token is unknown: count all of them
        // (an upper bound on compute and bytes read).
        active: experts,
        expert_intermediate: 0,
        shared_intermediate: None,
        sparse_layers: expert_layers(tensors, n),
    });
    Ok(Transformer {
        model_type: "safetensors".to_owned(),
        family: Arch::Other,
        hidden_size: hidden,
        intermediate_size: 0,
        num_layers: n as u64,
        num_heads: (q_width / head_dim).max(1),
        num_kv_heads: (k_width / head_dim).max(1),
        head_dim,
        vocab_size: vocab,
        tied_embeddings: !has_head,
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        extra_norms: 0,
        qk_norm: false,
        windows: vec![None; n],
        kv_elements,
        v_elements,
        state_elements: Vec::new(),
        v_pad_elements: Vec::new(),
        kv_from: Vec::new(),
        nextn_layers: 0,
        mla: None,
        max_context: None,
        moe,
    })
}

#[cfg(test)]
mod tests;
