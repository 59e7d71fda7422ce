//! A model as the planner sees it: tensors placed in layers, the embedding and the head.
//!
//! Whatever a model comes from — a Hugging Face `config.json` with a weight format, or
//! (later) the header of a real file — it becomes a [`Model`]: a list of tensors, each
//! with a shape, a storage type, exact bytes and a [`Place`]. Everything the planner needs
//! per layer (bytes, parameters, parameters active per token) is summed from that list,
//! so every byte lands in exactly one layer, the embedding or the head.

mod arch;
mod config;
mod weights;

pub use arch::Arch;
pub use config::{HfConfig, Mla, Moe, Transformer};
pub use weights::{FileType, WeightFormat};

use serde::{Deserialize, Serialize};

use crate::tensor_type::TensorType;

/// Where a tensor lives in the pipeline.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Place {
    /// Token embedding: on the first stage.
    Embedding,
    /// A transformer block.
    Layer(u32),
    /// Final norm and LM head: on the last stage.
    Head,
}

/// One weight tensor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tensor {
    /// GGUF-style name (`blk.3.attn_v.weight`).
    pub name: String,
    /// Dimensions in GGML order: the row length `ne[0]` first.
    pub shape: Vec<u64>,
    pub ty: TensorType,
    pub bytes: u64,
    pub place: Place,
    /// A routed expert's weights: stored in full, read for the active experts only.
    pub expert: bool,
    /// A dense FFN matrix or its bias, not an expert's ([`is_ffn_matrix`] of the name): what
    /// moves to RAM with the layer's FFN. Decided once, where the tensor is read: every cost
    /// model sums its layers' parts, once per plan a capacity search makes.
    pub ffn: bool,
}

impl Tensor {
    /// A tensor read by `name`, its role in the layer ([`Tensor::ffn`]) decided from it.
    pub fn new(name: String, shape: Vec<u64>, ty: TensorType, bytes: u64, place: Place, expert: bool) -> Tensor {
        let ffn = !expert && is_ffn_matrix(&name);
        Tensor { name, shape, ty, bytes, place, expert, ffn }
    }

    /// Number of elements (saturating: shapes from files are untrusted).
    pub fn elements(&self) -> u64 {
        self.shape.iter().fold(1u64, |acc, &d| acc.saturating_mul(d))
    }
}

/// A model ready to plan: hyperparameters plus every tensor with its exact size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub name: String,
    /// The weight format, as a label (`q4_k_m`, `bf16`, or `file` for an imported file).
    pub weights: String,
    pub arch: Transformer,
    pub tensors: Vec<Tensor>,
    /// The LM head reuses the token embedding (tied embeddings). A pipeline whose first and
    /// last stages differ keeps a copy on each, as llama.cpp and vLLM do.
    pub head_shares_embedding: bool,
}

/// Per-layer totals, summed from the tensors.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LayerWeights {
    /// Bytes of every tensor in the layer.
    pub bytes: u64,
    /// The part of `bytes` in routed experts.
    pub expert_bytes: u64,
    pub params: u64,
    pub expert_params: u64,
    /// The part of `bytes` a machine may keep in host RAM apart from the layer's attention:
    /// its routed experts and dense FFN matrices, which the export's one `-ot` pattern moves
    /// together (`--n-cpu-moe` moves the experts alone, `--n-cpu-ffn` a dense FFN).
    pub ffn_bytes: u64,
    pub ffn_params: u64,
}

impl Model {
    /// Builds the tensor list of a transformer from its config and a weight format.
    pub fn from_transformer(name: &str, arch: Transformer, weights: WeightFormat) -> Model {
        let tensors = weights.assign(&arch, tensor_shapes(&arch));
        Model {
            name: name.to_owned(),
            weights: weights.to_string(),
            head_shares_embedding: arch.tied_embeddings,
            arch,
            tensors,
        }
    }

    /// Number of transformer blocks.
    pub fn num_layers(&self) -> usize {
        self.arch.num_layers as usize
    }

    /// Total parameters; a tied embedding counts once.
    pub fn params(&self) -> u64 {
        self.tensors.iter().map(Tensor::elements).fold(0, u64::saturating_add)
    }

    /// Bytes of every tensor (a tied embedding counted once).
    pub fn weight_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.bytes).fold(0, u64::saturating_add)
    }

    /// Per-block totals, in layer order.
    pub fn layers(&self) -> Vec<LayerWeights> {
        let mut layers = vec![LayerWeights::default(); self.num_layers()];
        for t in &self.tensors {
            if let Place::Layer(i) = t.place {
                // Builders only place tensors in layers below `num_layers`.
                let Some(layer) = layers.get_mut(i as usize) else { continue };
                layer.bytes = layer.bytes.saturating_add(t.bytes);
                layer.params = layer.params.saturating_add(t.elements());
                if t.expert {
                    layer.expert_bytes = layer.expert_bytes.saturating_add(t.bytes);
                    layer.expert_params = layer.expert_params.saturating_add(t.elements());
                } else if t.ffn {
                    layer.ffn_bytes = layer.ffn_bytes.saturating_add(t.bytes);
                    layer.ffn_params = layer.ffn_params.saturating_add(t.elements());
                }
            }
        }
        for layer in &mut layers {
            // A layer with routed experts moves them with any dense FFN beside them (Snowflake
            // Arctic's residual MLP: the export's `-ot` names both), and keeps its shared
            // experts and router.
            layer.ffn_bytes = layer.ffn_bytes.saturating_add(layer.expert_bytes);
            layer.ffn_params = layer.ffn_params.saturating_add(layer.expert_params);
        }
        layers
    }

    /// Bytes of the tensors in `place`.
    pub fn bytes_at(&self, place: Place) -> u64 {
        self.tensors.iter().filter(|t| t.place == place).map(|t| t.bytes).fold(0, u64::saturating_add)
    }

    /// Bytes the last stage holds for the head: the final norm and the LM head, or a copy of
    /// the tied embedding.
    pub fn head_bytes(&self) -> u64 {
        let own = self.bytes_at(Place::Head);
        if self.head_shares_embedding { own.saturating_add(self.token_embedding_bytes()) } else { own }
    }

    /// Bytes of the token embedding matrix (`hidden × vocab`): what a tied head copies. The
    /// first stage's other tensors (Gemma 3n's per-layer embeddings, a vision tower) are not
    /// part of the copy; without such a matrix, everything placed with the embedding.
    fn token_embedding_bytes(&self) -> u64 {
        let (hidden, vocab) = (self.arch.hidden_size, self.arch.vocab_size);
        self.tensors
            .iter()
            .filter(|t| t.place == Place::Embedding && t.shape == [hidden, vocab])
            .map(|t| t.bytes)
            .max()
            .unwrap_or_else(|| self.bytes_at(Place::Embedding))
    }

    /// Bytes of one embedding row: what the first stage reads per token.
    pub fn embedding_row_bytes(&self) -> f64 {
        self.bytes_at(Place::Embedding) as f64 / self.arch.vocab_size.max(1) as f64
    }

    /// Tensor types and their total bytes, largest first.
    pub fn type_mix(&self) -> Vec<(TensorType, u64)> {
        let mut mix: Vec<(TensorType, u64)> = Vec::new();
        for t in &self.tensors {
            match mix.iter_mut().find(|(ty, _)| *ty == t.ty) {
                Some((_, bytes)) => *bytes = bytes.saturating_add(t.bytes),
                None => mix.push((t.ty, t.bytes)),
            }
        }
        mix.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        mix
    }
}

/// Is `name` a dense FFN matrix (or its bias)? GGUF: `blk.N.ffn_up|down|gate|gate_up.*`
/// (not the experts' `_exps`, the shared experts' `_shexp`, the router `ffn_gate_inp` nor the
/// norm); Hugging Face: a projection under `.mlp.` or `.feed_forward.`.
///
/// By the name's dot-separated parts rather than substrings; read once a tensor
/// ([`Tensor::new`]).
pub fn is_ffn_matrix(name: &str) -> bool {
    const GGUF: [&str; 4] = ["ffn_up", "ffn_down", "ffn_gate", "ffn_gate_up"];
    const MLP: [&str; 2] = ["mlp", "feed_forward"];
    const HF: [&str; 13] = [
        "up_proj",
        "down_proj",
        "gate_proj",
        "gate_up_proj",
        "fc1",
        "fc2",
        "c_fc",
        "c_proj",
        "w1",
        "w2",
        "w3",
        "dense_h_to_4h",
        "dense_4h_to_h",
    ];
    // The parts a dot follows; past the first, a dot precedes them too.
    let Some((followed, _)) = name.rsplit_once('.') else { return false };
    let between = |names: &[&str]| followed.split('.').skip(1).any(|part| names.contains(&part));
    between(&GGUF) || between(&MLP) && followed.split('.').any(|part| HF.iter().any(|suffix| part.ends_with(suffix)))
}

/// What `stageplan model` reports: sizes per layer, parameters, the type mix, KV per token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct ModelSummary {
    pub name: String,
    pub weights: String,
    /// Total parameters (a tied embedding counted once).
    pub params: u64,
    /// Bytes of every tensor.
    pub weight_bytes: u64,
    pub embedding_bytes: u64,
    /// Final norm and LM head (a tied head counts its copy of the embedding).
    pub head_bytes: u64,
    pub tied_embeddings: bool,
    /// KV-cache bytes per token of context, all layers: K in `kv_format`, V in
    /// `kv_v_format` where given (sliding windows cap some layers' cache; this is the
    /// per-token rate below the window).
    pub kv_bytes_per_token: u64,
    pub kv_format: TensorType,
    /// The V cache's format where it differs from K's (llama.cpp's `-ctv`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_v_format: Option<TensorType>,
    pub hidden_size: u64,
    pub max_context: Option<u64>,
    pub layers: Vec<LayerSummary>,
    /// Bytes per storage type, largest first.
    pub type_mix: Vec<TypeBytes>,
}

/// One block in a [`ModelSummary`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct LayerSummary {
    pub index: usize,
    pub bytes: u64,
    pub params: u64,
    /// The attention window, when the layer slides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
}

/// Bytes stored in one tensor type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct TypeBytes {
    #[serde(rename = "type")]
    pub ty: TensorType,
    pub bytes: u64,
}

impl Model {
    /// Whether this model can cache K in `kv` and V in `kv_v`: latent attention keeps V
    /// inside K's cached row, which llama.cpp stores in one type.
    ///
    /// # Errors
    /// The refusal in words, for the caller to place on the field that gave `kv_v`.
    pub fn cache_formats(&self, kv: TensorType, kv_v: TensorType) -> Result<(), String> {
        if self.arch.mla.is_some() && kv_v != kv {
            return Err(format!(
                "is `{kv_v}` beside a `{kv}` K cache; this model's latent attention keeps V inside K's cache (llama.cpp refuses two types): give V the K cache's format"
            ));
        }
        Ok(())
    }

    /// The summary `stageplan model` prints, with KV per token in `kv` for K and `kv_v` for
    /// V (a pair [`Model::cache_formats`] accepts).
    pub fn summary(&self, kv: TensorType, kv_v: TensorType) -> ModelSummary {
        let kv_bytes = |i: usize| crate::tensor_type::kv_bytes((kv, kv_v), self.arch.k_and_v_elements(i));
        ModelSummary {
            name: self.name.clone(),
            weights: self.weights.clone(),
            params: self.params(),
            weight_bytes: self.weight_bytes(),
            embedding_bytes: self.bytes_at(Place::Embedding),
            head_bytes: self.head_bytes(),
            tied_embeddings: self.head_shares_embedding,
            kv_bytes_per_token: (0..self.arch.kv_elements.len()).map(kv_bytes).fold(0, u64::saturating_add),
            kv_format: kv,
            kv_v_format: (kv_v != kv).then_some(kv_v),
            hidden_size: self.arch.hidden_size,
            max_context: self.arch.max_context,
            layers: self
                .layers()
                .into_iter()
                .enumerate()
                .map(|(index, l)| LayerSummary {
                    index,
                    bytes: l.bytes,
                    params: l.params,
                    window: self.arch.windows.get(index).copied().flatten(),
                })
                .collect(),
            type_mix: self.type_mix().into_iter().map(|(ty, bytes)| TypeBytes { ty, bytes }).collect(),
        }
    }
}

/// A tensor before it has a storage type: name, GGML shape, place and whether it is an expert.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TensorShape {
    pub name: String,
    pub shape: Vec<u64>,
    pub place: Place,
    pub expert: bool,
}

/// The tensors of a decoder-only transformer, named as llama.cpp's GGUF converter names them.
pub(crate) fn tensor_shapes(arch: &Transformer) -> Vec<TensorShape> {
    let h = arch.hidden_size;
    let mut out = Vec::new();
    let mut push = |name: String, shape: Vec<u64>, place: Place, expert: bool| {
        out.push(TensorShape { name, shape, place, expert });
    };
    push("token_embd.weight".into(), vec![h, arch.vocab_size], Place::Embedding, false);
    let gpt_oss = arch.family.sinks_and_expert_biases();
    let routing_bias = arch.family.routing_bias();
    for i in 0..arch.num_layers {
        let place = Place::Layer(i as u32);
        let blk = |suffix: &str| format!("blk.{i}.{suffix}");
        push(blk("attn_norm.weight"), vec![h], place, false);
        if let Some(mla) = &arch.mla {
            latent_attention(&mut push, &blk, arch, mla, place);
        } else {
            push(blk("attn_q.weight"), vec![h, arch.q_width()], place, false);
            push(blk("attn_k.weight"), vec![h, arch.kv_width()], place, false);
            push(blk("attn_v.weight"), vec![h, arch.kv_width()], place, false);
        }
        if gpt_oss {
            push(blk("attn_sinks.weight"), vec![arch.num_heads], place, false);
        }
        if arch.qkv_bias {
            push(blk("attn_q.bias"), vec![arch.q_width()], place, false);
            push(blk("attn_k.bias"), vec![arch.kv_width()], place, false);
            push(blk("attn_v.bias"), vec![arch.kv_width()], place, false);
        }
        if arch.qk_norm {
            push(blk("attn_q_norm.weight"), vec![arch.head_dim], place, false);
            push(blk("attn_k_norm.weight"), vec![arch.head_dim], place, false);
        }
        if arch.mla.is_none() {
            push(blk("attn_output.weight"), vec![arch.q_width(), h], place, false);
        }
        if arch.o_bias {
            push(blk("attn_output.bias"), vec![h], place, false);
        }
        if arch.extra_norms > 0 {
            push(blk("post_attention_norm.weight"), vec![h], place, false);
            push(blk("post_ffw_norm.weight"), vec![h], place, false);
        }
        push(blk("ffn_norm.weight"), vec![h], place, false);
        let sparse = arch.moe.as_ref().filter(|m| m.sparse_layers.get(i as usize).copied().unwrap_or(true));
        match sparse {
            Some(moe) => {
                let (e, w) = (moe.experts, moe.expert_intermediate);
                push(blk("ffn_gate_inp.weight"), vec![h, e], place, false);
                push(blk("ffn_gate_exps.weight"), vec![h, w, e], place, true);
                push(blk("ffn_up_exps.weight"), vec![h, w, e], place, true);
                push(blk("ffn_down_exps.weight"), vec![w, h, e], place, true);
                if gpt_oss {
                    push(blk("ffn_gate_inp.bias"), vec![e], place, false);
                    push(blk("ffn_gate_exps.bias"), vec![w, e], place, true);
                    push(blk("ffn_up_exps.bias"), vec![w, e], place, true);
                    push(blk("ffn_down_exps.bias"), vec![h, e], place, true);
                }
                if routing_bias {
                    push(blk("exp_probs_b.bias"), vec![e], place, false);
                }
                if let Some(s) = moe.shared_intermediate {
                    // Only Qwen's shared expert has a gate of its own.
                    if arch.family.is_qwen() {
                        push(blk("ffn_gate_inp_shexp.weight"), vec![h], place, false);
                    }
                    push(blk("ffn_gate_shexp.weight"), vec![h, s], place, false);
                    push(blk("ffn_up_shexp.weight"), vec![h, s], place, false);
                    push(blk("ffn_down_shexp.weight"), vec![s, h], place, false);
                }
            }
            None => {
                let w = arch.intermediate_size;
                push(blk("ffn_gate.weight"), vec![h, w], place, false);
                push(blk("ffn_up.weight"), vec![h, w], place, false);
                push(blk("ffn_down.weight"), vec![w, h], place, false);
                if arch.mlp_bias {
                    push(blk("ffn_gate.bias"), vec![w], place, false);
                    push(blk("ffn_up.bias"), vec![w], place, false);
                    push(blk("ffn_down.bias"), vec![h], place, false);
                }
            }
        }
    }
    push("output_norm.weight".into(), vec![h], Place::Head, false);
    if !arch.tied_embeddings {
        push("output.weight".into(), vec![h, arch.vocab_size], Place::Head, false);
    }
    out
}

/// Multi-head latent attention's tensors, as llama.cpp's converter writes them: the query
/// (compressed or full), the compressed KV row with its rotary part, K and V projected up
/// per head, and the output.
fn latent_attention(
    push: &mut impl FnMut(String, Vec<u64>, Place, bool),
    blk: &impl Fn(&str) -> String,
    arch: &Transformer,
    mla: &Mla,
    place: Place,
) {
    let (h, heads) = (arch.hidden_size, arch.num_heads);
    let q_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
    match mla.q_lora_rank {
        Some(q) => {
            push(blk("attn_q_a.weight"), vec![h, q], place, false);
            push(blk("attn_q_a_norm.weight"), vec![q], place, false);
            push(blk("attn_q_b.weight"), vec![q, heads * q_head], place, false);
        }
        None => push(blk("attn_q.weight"), vec![h, heads * q_head], place, false),
    }
    let kv = mla.kv_lora_rank;
    push(blk("attn_kv_a_mqa.weight"), vec![h, kv + mla.qk_rope_head_dim], place, false);
    push(blk("attn_kv_a_norm.weight"), vec![kv], place, false);
    push(blk("attn_k_b.weight"), vec![mla.qk_nope_head_dim, kv, heads], place, false);
    push(blk("attn_v_b.weight"), vec![kv, mla.v_head_dim, heads], place, false);
    push(blk("attn_output.weight"), vec![heads * mla.v_head_dim, h], place, false);
}

#[cfg(test)]
mod tests;
