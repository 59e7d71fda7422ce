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

/// Place and expert flag of a GGUF tensor.
pub fn gguf(name: &str) -> (Place, bool) {
    if let Some(rest) = name.strip_prefix("blk.")
        && let Some((index, tail)) = rest.split_once('.')
        && let Ok(layer) = index.parse::<u32>()
    {
        return (Place::Layer(layer), tail.contains("_exps"));
    }
    let head = name.starts_with("output") || name.starts_with("cls") || name == "lm_head.weight";
    (if head { Place::Head } else { Place::Embedding }, false)
}

/// Place and expert flag of a Hugging Face (safetensors) tensor.
pub fn hugging_face(name: &str) -> (Place, bool) {
    const BLOCKS: [&str; 4] = ["layers.", "h.", "blocks.", "layer."];
    // Vision and audio towers feed the first stage, whatever their own block structure.
    const TOWERS: [&str; 6] = ["vision", "visual", "multi_modal", "mm_projector", "audio", "image"];
    let tower = name.split('.').take(2).any(|part| TOWERS.iter().any(|t| part.starts_with(t)));
    if tower {
        return (Place::Embedding, false);
    }
    let expert = name.contains(".experts.") && !name.contains("shared_expert");
    let mut rest = name;
    while !rest.is_empty() {
        for block in BLOCKS {
            if let Some(after) = rest.strip_prefix(block)
                && let Some((index, _)) = after.split_once('.')
                && let Ok(layer) = index.parse::<u32>()
            {
                return (Place::Layer(layer), expert);
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
    (if head { Place::Head } else { Place::Embedding }, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_names() {
        assert_eq!(gguf("blk.12.attn_v.weight"), (Place::Layer(12), false));
        assert_eq!(gguf("blk.3.ffn_down_exps.weight"), (Place::Layer(3), true));
        assert_eq!(gguf("blk.3.ffn_down_shexp.weight"), (Place::Layer(3), false));
        assert_eq!(gguf("token_embd.weight"), (Place::Embedding, false));
        assert_eq!(gguf("rope_freqs.weight"), (Place::Embedding, false));
        assert_eq!(gguf("output_norm.weight"), (Place::Head, false));
        assert_eq!(gguf("output.weight"), (Place::Head, false));
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
            assert_eq!(hugging_face(name), (place, expert), "{name}");
        }
    }
}
