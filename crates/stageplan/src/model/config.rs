//! Hugging Face `config.json`: the transformer hyperparameters a model card ships with.
//!
//! Real configs carry dozens of fields we do not need, so unknown fields are ignored here
//! (unlike the scenario, where an unknown field is a typo). Fields that decide the size of
//! a model are validated: a zero or missing dimension is an error that names the field.

use serde::{Deserialize, Serialize};

use super::Arch;
use crate::error::ModelError;

/// The fields of a Hugging Face `config.json` that decide a decoder-only transformer's size.
///
/// Defaults follow `transformers`: `num_key_value_heads` defaults to `num_attention_heads`,
/// `head_dim` to `hidden_size / num_attention_heads`, `tie_word_embeddings` to false.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HfConfig {
    pub model_type: Option<String>,
    pub architectures: Option<Vec<String>>,
    pub hidden_size: Option<u64>,
    pub intermediate_size: Option<u64>,
    pub num_hidden_layers: Option<u64>,
    pub num_attention_heads: Option<u64>,
    pub num_key_value_heads: Option<u64>,
    pub head_dim: Option<u64>,
    pub vocab_size: Option<u64>,
    pub tie_word_embeddings: Option<bool>,
    /// Bias on the q, k, v (and for Llama o) projections. Qwen2 has q/k/v bias without
    /// stating it; see [`HfConfig::qkv_bias`].
    pub attention_bias: Option<bool>,
    pub mlp_bias: Option<bool>,
    pub sliding_window: Option<u64>,
    /// Qwen2 configs set a `sliding_window` but switch it off here.
    pub use_sliding_window: Option<bool>,
    /// Per-layer attention kind (`"sliding_attention"` or `"full_attention"`), newer configs.
    pub layer_types: Option<Vec<String>>,
    /// Gemma 3: every `sliding_window_pattern`-th layer is global, the rest slide.
    pub sliding_window_pattern: Option<u64>,
    pub max_position_embeddings: Option<u64>,
    /// Mixtral, GPT-OSS.
    pub num_local_experts: Option<u64>,
    /// Qwen-MoE, OLMoE.
    pub num_experts: Option<u64>,
    pub num_experts_per_tok: Option<u64>,
    /// Qwen-MoE: the width of one routed expert (Mixtral uses `intermediate_size`).
    pub moe_intermediate_size: Option<u64>,
    /// Qwen2-MoE: the width of the always-on shared expert.
    pub shared_expert_intermediate_size: Option<u64>,
    /// Qwen-MoE: layers that keep a dense MLP.
    pub mlp_only_layers: Option<Vec<u64>>,
    /// Qwen-MoE: every `decoder_sparse_step`-th layer is sparse.
    pub decoder_sparse_step: Option<u64>,
    pub torch_dtype: Option<String>,
    /// Multimodal configs nest the language model here.
    pub text_config: Option<Box<HfConfig>>,
    /// DeepSeek-V2/V3 and Kimi's multi-head latent attention: the compressed KV row…
    pub kv_lora_rank: Option<u64>,
    /// …the compressed query (absent: a full query projection, as in DeepSeek-V2-Lite)…
    pub q_lora_rank: Option<u64>,
    /// …and each head's widths: the part without position, the rotary part, the value.
    pub qk_nope_head_dim: Option<u64>,
    pub qk_rope_head_dim: Option<u64>,
    pub v_head_dim: Option<u64>,
    /// DeepSeek, Kimi, GLM-4.5: routed experts, and shared experts of the same width.
    pub n_routed_experts: Option<u64>,
    pub n_shared_experts: Option<u64>,
    /// DeepSeek, Kimi, GLM-4.5: the first `k` layers are dense.
    pub first_k_dense_replace: Option<u64>,
    /// DeepSeek: every `moe_layer_freq`-th layer after those is sparse.
    pub moe_layer_freq: Option<u64>,
    /// Llama 4: every `interleave_moe_layer_step`-th layer is sparse…
    pub interleave_moe_layer_step: Option<u64>,
    /// …and its dense layers are this wide (`intermediate_size` is an expert's width).
    pub intermediate_size_mlp: Option<u64>,
    /// Llama 4's chunked attention.
    pub attention_chunk_size: Option<u64>,
    /// GLM-4.5: per-head q/k norms.
    pub use_qk_norm: Option<bool>,
    /// Multi-token-prediction layers after the blocks (DeepSeek-V3, GLM-4.5).
    pub num_nextn_predict_layers: Option<u64>,
}

/// The widest attention head (or latent attention's cached row) a config may give.
const MAX_HEAD_DIM: u64 = 1 << 14;

/// Validated transformer hyperparameters: every dimension present and non-zero.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Transformer {
    /// The architecture's name as the file or config wrote it: a label, never compared
    /// (decisions read [`Transformer::family`]).
    pub model_type: String,
    /// The family that name resolves to, once, at import.
    #[serde(default)]
    pub family: Arch,
    pub hidden_size: u64,
    pub intermediate_size: u64,
    pub num_layers: u64,
    pub num_heads: u64,
    pub num_kv_heads: u64,
    pub head_dim: u64,
    pub vocab_size: u64,
    pub tied_embeddings: bool,
    pub qkv_bias: bool,
    pub o_bias: bool,
    pub mlp_bias: bool,
    /// Extra norms per layer beyond the two every decoder has (Gemma 2/3: two more).
    pub extra_norms: u64,
    /// Per-head q/k norms (Qwen3).
    pub qk_norm: bool,
    /// The attention window of each layer; `None` attends to the whole context.
    pub windows: Vec<Option<u64>>,
    /// KV-cache elements per token of each layer: K and V together (`2 × kv_heads × head_dim`
    /// for a config; from each layer's own head counts and key/value lengths for a file).
    pub kv_elements: Vec<u64>,
    /// The V part of each layer's `kv_elements`, which llama.cpp may store in another format
    /// (`-ctv`): half of them for ordinary attention, none for MLA, whose V is a view of its
    /// cached row. Missing entries (JSON from before it was kept) read as half.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub v_elements: Vec<u64>,
    /// Recurrent state of each layer per sequence, in f32 elements, whatever the context:
    /// llama.cpp's `r` and `s` states (a Mamba layer's convolution and SSM states, a
    /// gated delta-net's, an LFM2 short convolution's). Empty when no layer is recurrent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state_elements: Vec<u64>,
    /// V elements per token a layer adds without flash attention: llama.cpp then stores V
    /// transposed at the widest layer's width (OpenELM's layers differ). Empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub v_pad_elements: Vec<u64>,
    /// The earlier layer whose KV cache each layer attends over instead of its own (Gemma
    /// 3n's layers from 20 on read layer 18's or 19's). Empty: every layer its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kv_from: Vec<Option<u64>>,
    /// Multi-token-prediction (NextN) layers the file holds after the blocks: llama.cpp
    /// loads none of them unless it drafts with them, but `-ngl` counts them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nextn_layers: u64,
    pub max_context: Option<u64>,
    pub moe: Option<Moe>,
    /// Multi-head latent attention's widths; `None` for ordinary attention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mla: Option<Mla>,
}

/// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): K and V are projected up from one
/// compressed row per token, which is all llama.cpp caches (`kv_lora_rank + qk_rope_head_dim`
/// elements, no V: `llama-kv-cache.cpp`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mla {
    /// The compressed query's width; `None`: a full query projection.
    pub q_lora_rank: Option<u64>,
    pub kv_lora_rank: u64,
    pub qk_nope_head_dim: u64,
    pub qk_rope_head_dim: u64,
    pub v_head_dim: u64,
}

/// Mixture-of-experts shape: all experts' weights are stored, `active` of them run per token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Moe {
    pub experts: u64,
    pub active: u64,
    /// Width of one routed expert's MLP.
    pub expert_intermediate: u64,
    /// Width of the always-on shared expert, if any.
    pub shared_intermediate: Option<u64>,
    /// Which layers are sparse (the rest keep the dense MLP).
    pub sparse_layers: Vec<bool>,
}

impl HfConfig {
    /// Reads a `config.json` text.
    ///
    /// # Errors
    /// When the text is not JSON or a field has the wrong type.
    pub fn from_json(text: &str) -> Result<HfConfig, ModelError> {
        crate::json::from_str(text).map_err(|(path, e)| ModelError::Config {
            field: if path.is_empty() { ".".to_owned() } else { path },
            message: e.to_string(),
        })
    }

    /// Reads a `config.json` written inside a scenario (`model.config`). An error names the
    /// field and no line: a line would count from the config's start, not the scenario's.
    ///
    /// # Errors
    /// When the text is not JSON or a field has the wrong type.
    pub fn from_inline(text: &str) -> Result<HfConfig, ModelError> {
        Self::from_json(text).map_err(|e| match e {
            ModelError::Config { field, mut message } => {
                if let Some(at) = message.rfind(" at line ") {
                    message.truncate(at);
                }
                ModelError::Config { field, message }
            }
            other => other,
        })
    }

    /// Whether q, k and v carry a bias: stated by `attention_bias`, implied by Qwen2.
    pub fn qkv_bias(&self) -> bool {
        self.attention_bias.unwrap_or(self.family().qkv_bias_by_default())
    }

    /// The family its `model_type` names (Llama when it names none).
    fn family(&self) -> Arch {
        self.model_type.as_deref().map_or(Arch::Llama, Arch::of_model_type)
    }

    /// The language model's own config: `text_config` for multimodal models, else `self`.
    fn language_model(&self) -> &HfConfig {
        match &self.text_config {
            Some(text) if self.hidden_size.is_none() => text.language_model(),
            _ => self,
        }
    }

    /// Checks the config and fills in the defaults `transformers` would.
    ///
    /// # Errors
    /// A missing or zero dimension, heads that do not divide evenly, or an attention kind
    /// this cost model does not describe (DeepSeek's latent attention).
    pub fn transformer(&self) -> Result<Transformer, ModelError> {
        let c = self.language_model();
        let model_type = c.model_type.clone().unwrap_or_else(|| "llama".to_owned());
        let family = c.family();
        let required = |value: Option<u64>, field: &'static str| -> Result<u64, ModelError> {
            match value {
                Some(0) => Err(ModelError::invalid(field, "is 0; it must be at least 1")),
                Some(v) => Ok(v),
                None => Err(ModelError::invalid(field, "is missing; copy it from the model's config.json")),
            }
        };
        let hidden_size = required(c.hidden_size, "hidden_size")?;
        let num_layers = required(c.num_hidden_layers, "num_hidden_layers")?;
        let num_heads = required(c.num_attention_heads, "num_attention_heads")?;
        // Gemma 3's configs leave out `Gemma3TextConfig`'s default vocabulary.
        let vocab_size = required(c.vocab_size.or((family == Arch::Gemma3).then_some(262_208)), "vocab_size")?;
        let num_kv_heads = match c.num_key_value_heads {
            // One compressed row per token, as llama.cpp's converter writes it.
            _ if c.kv_lora_rank.is_some() => 1,
            None => num_heads,
            Some(kv) => required(Some(kv), "num_key_value_heads")?,
        };
        if num_heads % num_kv_heads != 0 {
            return Err(ModelError::invalid(
                "num_key_value_heads",
                &format!("is {num_kv_heads}, which does not divide num_attention_heads ({num_heads})"),
            ));
        }
        let mla = c.mla(family)?;
        let head_dim = match (&mla, c.head_dim) {
            // What llama.cpp caches per token, as a GGUF of the model states it.
            (Some(m), _) => m.kv_lora_rank + m.qk_rope_head_dim,
            (None, Some(d)) => required(Some(d), "head_dim")?,
            (None, None) if hidden_size % num_heads == 0 => hidden_size / num_heads,
            (None, None) => {
                return Err(ModelError::invalid(
                    "head_dim",
                    &format!(
                        "is missing and hidden_size ({hidden_size}) is not a multiple of num_attention_heads ({num_heads}); set head_dim"
                    ),
                ));
            }
        };
        // Far beyond any published model: a typo, and a size that would overflow arithmetic.
        // Latent attention caches `kv_lora_rank + qk_rope_head_dim` per token: the file has
        // no `head_dim` to name.
        if let Some(m) = &mla
            && head_dim > MAX_HEAD_DIM
        {
            return Err(ModelError::invalid(
                "kv_lora_rank",
                &format!(
                    "is {}; with qk_rope_head_dim ({}) the cached row is {head_dim}, beyond any published model (at most {MAX_HEAD_DIM}); check it",
                    m.kv_lora_rank, m.qk_rope_head_dim
                ),
            ));
        }
        for (value, field, limit) in [
            (num_layers, "num_hidden_layers", crate::limits::MAX_LAYERS as u64),
            (hidden_size, "hidden_size", 1 << 20),
            (vocab_size, "vocab_size", 1 << 24),
            (num_heads, "num_attention_heads", 1 << 14),
            (head_dim, "head_dim", MAX_HEAD_DIM),
        ] {
            if value > limit {
                return Err(ModelError::invalid(
                    field,
                    &format!("is {value}, beyond any published model (at most {limit}); check it"),
                ));
            }
        }

        let moe = c.moe(hidden_size, num_layers)?;
        let intermediate_size = match (&moe, c.intermediate_size_mlp.or(c.intermediate_size)) {
            (_, Some(i)) => required(Some(i), "intermediate_size")?,
            (Some(m), None) => m.expert_intermediate,
            (None, None) => required(None, "intermediate_size")?,
        };
        let expert_sizes =
            moe.as_ref().map_or((0, 0), |m| (m.expert_intermediate.max(m.shared_intermediate.unwrap_or(0)), m.experts));
        for (value, field, limit) in [
            (intermediate_size, "intermediate_size", 1u64 << 22),
            (expert_sizes.0, "moe_intermediate_size", 1 << 22),
            (expert_sizes.1, "num_local_experts", 1 << 12),
        ] {
            if value > limit {
                return Err(ModelError::invalid(
                    field,
                    &format!("is {value}, beyond any published model (at most {limit}); check it"),
                ));
            }
        }
        c.attention_only(family, &model_type)?;
        let windows = c.windows(family, num_layers)?;
        Ok(Transformer {
            hidden_size,
            intermediate_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size,
            // Gemma ties its embeddings without always saying so.
            tied_embeddings: c.tie_word_embeddings.unwrap_or(family.is_gemma()),
            qkv_bias: c.qkv_bias(),
            o_bias: c.attention_bias.unwrap_or(false) && !family.output_bias_ignored(),
            mlp_bias: c.mlp_bias.unwrap_or(false),
            extra_norms: family.extra_norms(),
            qk_norm: family.qk_norm(c.use_qk_norm),
            windows,
            kv_elements: vec![if mla.is_some() { head_dim } else { 2 * num_kv_heads * head_dim }; num_layers as usize],
            v_elements: vec![if mla.is_some() { 0 } else { num_kv_heads * head_dim }; num_layers as usize],
            state_elements: Vec::new(),
            v_pad_elements: Vec::new(),
            kv_from: Vec::new(),
            nextn_layers: c.num_nextn_predict_layers.unwrap_or(0).min(crate::limits::MAX_LAYERS as u64),
            max_context: c.max_position_embeddings,
            moe,
            mla,
            model_type,
            family,
        })
    }

    fn mla(&self, family: Arch) -> Result<Option<Mla>, ModelError> {
        let Some(kv_lora_rank) = self.kv_lora_rank else {
            if family.needs_latent_attention() {
                return Err(ModelError::invalid(
                    "kv_lora_rank",
                    "is missing in a DeepSeek config; copy it from config.json",
                ));
            }
            return Ok(None);
        };
        let dim = |value: Option<u64>, field: &'static str| match value {
            Some(v @ 1..=65536) => Ok(v),
            Some(v) => Err(ModelError::invalid(field, &format!("is {v}; it must be between 1 and 65536"))),
            None => {
                Err(ModelError::invalid(field, "is missing in a latent-attention config; copy it from config.json"))
            }
        };
        Ok(Some(Mla {
            q_lora_rank: self.q_lora_rank.map(|q| dim(Some(q), "q_lora_rank")).transpose()?,
            kv_lora_rank: dim(Some(kv_lora_rank), "kv_lora_rank")?,
            qk_nope_head_dim: dim(self.qk_nope_head_dim, "qk_nope_head_dim")?,
            qk_rope_head_dim: dim(self.qk_rope_head_dim, "qk_rope_head_dim")?,
            v_head_dim: dim(self.v_head_dim, "v_head_dim")?,
        }))
    }

    fn moe(&self, hidden_size: u64, num_layers: u64) -> Result<Option<Moe>, ModelError> {
        let (experts, field) = match (self.num_local_experts, self.num_experts, self.n_routed_experts) {
            (Some(e), _, _) => (e, "num_local_experts"),
            (None, Some(e), _) => (e, "num_experts"),
            (None, None, Some(e)) => (e, "n_routed_experts"),
            (None, None, None) => return Ok(None),
        };
        if experts <= 1 {
            return Ok(None);
        }
        let active = self.num_experts_per_tok.ok_or_else(|| {
            ModelError::invalid(
                "num_experts_per_tok",
                "is missing in a mixture-of-experts config; copy it from config.json",
            )
        })?;
        if active == 0 || active > experts {
            return Err(ModelError::invalid(
                "num_experts_per_tok",
                &format!("is {active}; it must be between 1 and {field} ({experts})"),
            ));
        }
        let expert_intermediate =
            self.moe_intermediate_size.or(self.intermediate_size).filter(|&i| i > 0).ok_or_else(|| {
                ModelError::invalid("moe_intermediate_size", "is missing or 0; copy it from config.json")
            })?;
        // A mask, not a list search: `mlp_only_layers` may be as long as the file allows.
        let mut dense = vec![false; num_layers as usize];
        for &layer in self.mlp_only_layers.iter().flatten() {
            if let Some(slot) = usize::try_from(layer).ok().and_then(|l| dense.get_mut(l)) {
                *slot = true;
            }
        }
        let first_sparse = self.first_k_dense_replace.unwrap_or(0);
        let sparse_layers = (0..num_layers)
            .map(|i| {
                let sparse = match (self.moe_layer_freq, self.interleave_moe_layer_step) {
                    // DeepSeek counts from 0, Qwen and Llama 4 from 1.
                    (Some(freq), _) => i % freq.max(1) == 0,
                    (None, Some(step)) => (i + 1) % step.max(1) == 0,
                    (None, None) => (i + 1) % self.decoder_sparse_step.unwrap_or(1).max(1) == 0,
                };
                sparse && i >= first_sparse && !dense[i as usize]
            })
            .collect();
        let _ = hidden_size;
        // Llama 4's shared expert is as wide as a routed one; DeepSeek's are `n` of them.
        let shared = match (self.shared_expert_intermediate_size, self.n_shared_experts) {
            (Some(s), _) => s,
            (None, Some(n)) => n.saturating_mul(expert_intermediate),
            (None, None) if self.interleave_moe_layer_step.is_some() => expert_intermediate,
            (None, None) => 0,
        };
        Ok(Some(Moe {
            experts,
            active,
            expert_intermediate,
            shared_intermediate: Some(shared).filter(|&s| s > 0),
            sparse_layers,
        }))
    }

    /// Refuses a config whose layers are not all attention: a Gated DeltaNet's linear
    /// attention, Mamba, a short convolution keep recurrent state, with weights of their own,
    /// that config.json does not size the way llama.cpp does (a GGUF file says it: its
    /// `ssm.*` keys and tensors). Sized as attention they would be wrong without a word.
    fn attention_only(&self, family: Arch, model_type: &str) -> Result<(), ModelError> {
        let fix = "stageplan sizes such layers from the model's GGUF file: plan with `model.file` (the CLI and the page read its header)";
        let attention = |kind: &str| kind.ends_with("attention") && !kind.contains("linear");
        if let Some((i, kind)) = self.layer_types.iter().flatten().enumerate().find(|(_, k)| !attention(k)) {
            return Err(ModelError::invalid(
                "layer_types",
                &format!(
                    "has {kind:?} layers (layer {i} the first), which keep recurrent state, not a KV cache; {fix}"
                ),
            ));
        }
        if family.has_recurrent_layers() {
            return Err(ModelError::invalid(
                "model_type",
                &format!("is {model_type:?}, a model with recurrent layers beside or instead of attention; {fix}"),
            ));
        }
        Ok(())
    }

    fn windows(&self, family: Arch, num_layers: u64) -> Result<Vec<Option<u64>>, ModelError> {
        let window = match (self.sliding_window, self.use_sliding_window) {
            (Some(w), Some(true) | None) if w > 0 => Some(w),
            _ => None,
        };
        let n = num_layers as usize;
        if let Some(kinds) = &self.layer_types {
            if kinds.len() != n {
                return Err(ModelError::invalid(
                    "layer_types",
                    &format!("has {} entries for {n} layers; give one per layer", kinds.len()),
                ));
            }
            return Ok(kinds.iter().map(|kind| if kind.contains("sliding") { window } else { None }).collect());
        }
        Ok((0..n)
            .map(|i| match family {
                // Llama 4 attends in chunks on three layers of four (`src/models/llama4.cpp`).
                Arch::Llama4 => self.attention_chunk_size.filter(|&c| c > 0 && (i + 1) % 4 != 0),
                // Gemma 2 alternates: even layers slide, odd layers see everything.
                Arch::Gemma2 => window.filter(|_| i % 2 == 0),
                Arch::Gemma3 | Arch::Gemma3n => {
                    // In u64: on 32-bit wasm a pattern of 2^32 would become 0 as `usize`.
                    let pattern = self.sliding_window_pattern.unwrap_or(6).max(1);
                    window.filter(|_| !(i as u64 + 1).is_multiple_of(pattern))
                }
                // Everything else attends to the whole context in llama.cpp, whatever the
                // config says: Mistral runs as its `llama`, Phi-3's window is switched off
                // (`src/models/phi3.cpp`). Full attention is never under what it keeps.
                _ => None,
            })
            .collect())
    }
}

impl Transformer {
    /// Layer `i`'s KV-cache elements per token, K's and V's.
    pub fn k_and_v_elements(&self, i: usize) -> (u64, u64) {
        let kv = self.kv_elements.get(i).copied().unwrap_or(0);
        let v = self.v_elements.get(i).map_or(kv / 2, |&v| v.min(kv));
        (kv - v, v)
    }

    /// Query width: heads × head_dim.
    pub fn q_width(&self) -> u64 {
        self.num_heads * self.head_dim
    }

    /// Key (and value) width: kv heads × head_dim.
    pub fn kv_width(&self) -> u64 {
        self.num_kv_heads * self.head_dim
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes fields by reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_transformers_defaults() {
        let config = HfConfig::from_json(
            r#"{"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                "num_attention_heads": 32, "vocab_size": 32000, "rope_theta": 10000.0}"#,
        )
        .unwrap();
        let t = config.transformer().unwrap();
        assert_eq!(t.num_kv_heads, 32);
        assert_eq!(t.head_dim, 128);
        assert!(!t.tied_embeddings);
        assert!(!t.qkv_bias);
        assert_eq!(t.windows, vec![None; 32]);
    }

    #[test]
    fn names_the_bad_field() {
        let cases = [
            (r#"{"hidden_size": 0}"#, "`hidden_size` is 0"),
            (r#"{"hidden_size": 64}"#, "`num_hidden_layers` is missing"),
            (r#"{"hidden_size": "big"}"#, "`hidden_size`"),
            (
                r#"{"hidden_size": 64, "intermediate_size": 1, "num_hidden_layers": 1, "num_attention_heads": 6, "num_key_value_heads": 4, "vocab_size": 1}"#,
                "`num_key_value_heads` is 4, which does not divide",
            ),
            (
                r#"{"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 1, "intermediate_size": 1, "kv_lora_rank": 32, "qk_rope_head_dim": 8}"#,
                "`qk_nope_head_dim` is missing in a latent-attention config",
            ),
            (
                r#"{"model_type": "deepseek_v2", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 1, "intermediate_size": 1}"#,
                "`kv_lora_rank` is missing",
            ),
            (
                // The field the file has, not `head_dim`, which it does not (#45).
                r#"{"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 1, "intermediate_size": 1, "kv_lora_rank": 65536, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 8}"#,
                "`kv_lora_rank` is 65536; with qk_rope_head_dim (8) the cached row is 65544",
            ),
        ];
        for (json, expected) in cases {
            let err = HfConfig::from_json(json).and_then(|c| c.transformer()).unwrap_err();
            assert!(err.to_string().contains(expected), "{json}: {err}");
        }
    }

    #[test]
    fn sliding_windows_follow_each_family() {
        let base = r#""hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
                       "num_attention_heads": 4, "vocab_size": 100, "sliding_window": 16"#;
        let windows =
            |extra: &str| HfConfig::from_json(&format!("{{{base}{extra}}}")).unwrap().transformer().unwrap().windows;
        // llama.cpp runs Mistral as `llama`, without a window.
        assert_eq!(windows(r#", "model_type": "mistral""#), vec![None; 4]);
        assert_eq!(windows(r#", "model_type": "qwen2", "use_sliding_window": false"#), vec![None; 4]);
        assert_eq!(windows(r#", "model_type": "gemma2""#), vec![Some(16), None, Some(16), None]);
        assert_eq!(
            windows(
                r#", "layer_types": ["full_attention", "sliding_attention", "full_attention", "sliding_attention"]"#
            ),
            vec![None, Some(16), None, Some(16)]
        );
    }

    #[test]
    fn layers_that_are_not_attention_are_refused_naming_their_kind() {
        // Qwen3.5's and Qwen3-Next's Gated DeltaNet layers, LFM2's convolutions, Mamba
        // hybrids: sized as attention they were wrong without a word (#45).
        let base = r#""hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
                       "num_attention_heads": 4, "vocab_size": 100"#;
        let error =
            |extra: &str| HfConfig::from_json(&format!("{{{base}{extra}}}")).unwrap().transformer().unwrap_err();
        let linear = error(
            r#", "model_type": "qwen3_5_moe_text", "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"]"#,
        );
        assert!(
            matches!(&linear, ModelError::Invalid { field, problem } if field == "layer_types" && problem.contains("\"linear_attention\" layers (layer 0 the first)") && problem.contains("model.file")),
            "{linear}"
        );
        let conv = error(r#", "model_type": "lfm2", "layer_types": ["conv", "conv", "full_attention", "conv"]"#);
        assert!(conv.to_string().contains("\"conv\""), "{conv}");
        for model_type in ["qwen3_next", "falcon_h1", "mamba2", "granitemoehybrid"] {
            let e = error(&format!(r#", "model_type": "{model_type}""#));
            assert!(matches!(&e, ModelError::Invalid { field, .. } if field == "model_type"), "{model_type}: {e}");
        }
    }

    #[test]
    fn latent_attention_caches_one_compressed_row() {
        let deepseek = crate::presets::ModelPreset::find("deepseek-v3").unwrap().config().transformer().unwrap();
        // `kv_lora_rank + qk_rope_head_dim`, as llama.cpp's GGUF of the model states it.
        assert_eq!(deepseek.kv_elements, vec![576; 61]);
        assert_eq!((deepseek.num_kv_heads, deepseek.head_dim), (1, 576));
        let moe = deepseek.moe.as_ref().unwrap();
        assert_eq!(moe.sparse_layers.iter().position(|&s| s), Some(3), "first_k_dense_replace");
        assert_eq!(moe.shared_intermediate, Some(2048));
        assert_eq!(deepseek.nextn_layers, 1);
    }

    #[test]
    fn sparse_layers_and_windows_of_2026_configs() {
        let arch = |name: &str| crate::presets::ModelPreset::find(name).unwrap().config().transformer().unwrap();
        let maverick = arch("llama-4-maverick");
        let sparse: Vec<bool> = maverick.moe.as_ref().unwrap().sparse_layers.clone();
        assert_eq!(&sparse[..4], &[false, true, false, true], "interleave_moe_layer_step 2 counts from 1");
        assert_eq!((maverick.intermediate_size, maverick.moe.unwrap().shared_intermediate), (16384, Some(8192)));
        assert_eq!(&arch("llama-4-scout").windows[..4], &[Some(8192), Some(8192), Some(8192), None]);
        assert_eq!(&arch("gpt-oss-20b").windows[..2], &[Some(128), None]);
        let gemma = arch("gemma-3-27b");
        assert_eq!((gemma.vocab_size, gemma.tied_embeddings), (262_208, true), "Gemma3TextConfig's defaults");
        assert_eq!(gemma.windows.iter().filter(|w| w.is_none()).count(), 10, "every sixth of 62 layers is global");
        let air = arch("glm-4.5-air");
        assert!(!air.qk_norm && air.qkv_bias && !air.o_bias);
        assert_eq!(air.moe.unwrap().sparse_layers.iter().filter(|&&s| !s).count(), 1);
    }

    #[test]
    fn reads_nested_text_config() {
        let config = HfConfig::from_json(
            r#"{"model_type": "llava", "text_config": {"hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}}"#,
        )
        .unwrap();
        assert_eq!(config.transformer().unwrap().num_layers, 2);
    }
}
