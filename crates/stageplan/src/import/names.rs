//! Where a tensor lives, from its name: a layer, the embedding (first stage) or the head
//! (last stage); and whether it holds routed experts.
//!
//! GGUF names are llama.cpp's (`blk.7.attn_q.weight`, `token_embd.weight`, `output.weight`,
//! `blk.3.ffn_up_exps.weight`). Hugging Face names vary by family (`model.layers.7.…`,
//! `transformer.h.7.…`, `model.language_model.layers.7.…`, `…block_sparse_moe.experts.3.…`).
//! Tensors outside any block go to the head when they are the LM head or the final norm,
//! and to the embedding otherwise (embeddings, rope tables, vision towers): every byte lands
//! in exactly one place.

use crate::model::Place;

/// A tensor's block index at or past the last layer a model can have
/// ([`MAX_LAYERS`](crate::limits::MAX_LAYERS)): the index as the name writes it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PastLimit<'a>(pub &'a str);

impl std::fmt::Display for PastLimit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "puts a layer at index {}; a model has at most {} layers", self.0, crate::limits::MAX_LAYERS)
    }
}

/// The block index `digits` names: `None` when they are not a number (ASCII digits only, so
/// not a block index), else the layer, or [`PastLimit`] for one at or past the limit. Read
/// into a u64 with checked arithmetic, never through `usize` (32 bits on wasm32) nor a
/// narrower parse that would make `blk.4294967296.…` no block at all: every surface gives
/// the one verdict.
fn block_index(digits: &str) -> Option<Result<u32, PastLimit<'_>>> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value = digits.bytes().try_fold(0u64, |n, b| n.checked_mul(10)?.checked_add(u64::from(b - b'0')));
    let below_limit = |&v: &u64| v < crate::limits::MAX_LAYERS as u64;
    Some(value.filter(below_limit).and_then(|v| u32::try_from(v).ok()).ok_or(PastLimit(digits)))
}

/// Place and expert flag of a GGUF tensor.
///
/// # Errors
/// A block index at or past the limit.
pub fn gguf(name: &str) -> Result<(Place, bool), PastLimit<'_>> {
    if let Some(rest) = name.strip_prefix("blk.")
        && let Some((index, tail)) = rest.split_once('.')
        && let Some(layer) = block_index(index)
    {
        return Ok((Place::Layer(layer?), tail.contains("_exps")));
    }
    // llama.cpp's input layer (`LLM_TENSOR_LAYER_INPUT` in `llama-arch.cpp`) stays with
    // the embedding on the first stage's host; every other tensor outside the blocks is the
    // output layer's (Gemma 3n's AltUp projections, a final norm), on the last stage.
    const INPUT: [&str; 5] = ["token_embd.", "position_embd.", "token_types.", "per_layer_token_embd.", "masked_embd"];
    let input = INPUT.iter().any(|p| name.starts_with(p));
    // Gemma 3n's per-layer input projection is a "repeating" tensor outside the blocks,
    // which llama.cpp keeps with the first layer.
    if name.starts_with("per_layer_model_proj.") || name.starts_with("per_layer_proj_norm.") {
        return Ok((Place::Layer(0), false));
    }
    Ok((if input { Place::Embedding } else { Place::Head }, false))
}

/// Place and expert flag of a Hugging Face (safetensors) tensor.
///
/// # Errors
/// A block index at or past the limit.
pub fn hugging_face(name: &str) -> Result<(Place, bool), PastLimit<'_>> {
    const BLOCKS: [&str; 4] = ["layers.", "h.", "blocks.", "layer."];
    // Vision and audio towers feed the first stage, whatever their own block structure.
    const TOWERS: [&str; 6] = ["vision", "visual", "multi_modal", "mm_projector", "audio", "image"];
    let tower = name.split('.').take(2).any(|part| TOWERS.iter().any(|t| part.starts_with(t)));
    if tower {
        return Ok((Place::Embedding, false));
    }
    let expert = name.contains(".experts.") && !name.contains("shared_expert");
    let mut rest = name;
    while !rest.is_empty() {
        for block in BLOCKS {
            if let Some(after) = rest.strip_prefix(block)
                && let Some((index, _)) = after.split_once('.')
                && let Some(layer) = block_index(index)
            {
                return Ok((Place::Layer(layer?), expert));
            }
        }
        rest = match rest.split_once('.') {
            Some((_, tail)) => tail,
            None => "",
        };
    }
    let last = name.rsplit('.').nth(1).unwrap_or(name);
    let head = name.contains("lm_head")
        || name.contains("embed_out")
        || last == "norm"
        || last == "ln_f"
        || last.contains("final_layer")
        || last == "final_layernorm";
    Ok((if head { Place::Head } else { Place::Embedding }, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_names() {
        assert_eq!(gguf("blk.12.attn_v.weight"), Ok((Place::Layer(12), false)));
        assert_eq!(gguf("blk.3.ffn_down_exps.weight"), Ok((Place::Layer(3), true)));
        assert_eq!(gguf("blk.3.ffn_down_shexp.weight"), Ok((Place::Layer(3), false)));
        assert_eq!(gguf("token_embd.weight"), Ok((Place::Embedding, false)));
        assert_eq!(gguf("per_layer_token_embd.weight"), Ok((Place::Embedding, false)));
        // Outside the blocks and not an input: the output layer's.
        assert_eq!(gguf("rope_freqs.weight"), Ok((Place::Head, false)));
        assert_eq!(gguf("altup_proj.weight"), Ok((Place::Head, false)));
        assert_eq!(gguf("output_norm.weight"), Ok((Place::Head, false)));
        assert_eq!(gguf("output.weight"), Ok((Place::Head, false)));
        assert_eq!(gguf("blk.9999.attn_v.weight"), Ok((Place::Layer(9999), false)));
        assert_eq!(gguf("blk.+5.attn_v.weight"), Ok((Place::Head, false)));
        for index in ["10000", "4294967295", "4294967296", "18446744073709551616"] {
            assert_eq!(gguf(&format!("blk.{index}.attn_v.weight")), Err(PastLimit(index)));
        }
    }

    #[test]
    fn hugging_face_names() {
        let cases = [
            ("model.layers.5.self_attn.q_proj.weight", Place::Layer(5), false),
            ("model.layers.5.block_sparse_moe.experts.7.w1.weight", Place::Layer(5), true),
            ("model.layers.5.mlp.experts.7.gate_proj.weight", Place::Layer(5), true),
            ("model.layers.5.mlp.shared_experts.gate_proj.weight", Place::Layer(5), false),
            ("model.layers.5.mlp.gate.weight", Place::Layer(5), false),
            ("model.language_model.layers.9.mlp.up_proj.weight", Place::Layer(9), false),
            ("transformer.h.2.attn.c_attn.weight", Place::Layer(2), false),
            ("model.embed_tokens.weight", Place::Embedding, false),
            ("vision_tower.encoder.layers.3.mlp.fc1.weight", Place::Embedding, false),
            ("model.visual.blocks.3.mlp.fc1.weight", Place::Embedding, false),
            ("lm_head.weight", Place::Head, false),
            ("model.norm.weight", Place::Head, false),
            ("transformer.ln_f.weight", Place::Head, false),
        ];
        for (name, place, expert) in cases {
            assert_eq!(hugging_face(name), Ok((place, expert)), "{name}");
        }
    }
}
