use super::*;
use crate::presets::ModelPreset;

fn preset(name: &str, weights: &str) -> Model {
    ModelPreset::find(name).unwrap().model(weights.parse().unwrap()).unwrap()
}

#[test]
fn every_byte_lands_in_one_place() {
    let model = preset("mixtral-8x7b", "q4_k_m");
    let per_layer: u64 = model.layers().iter().map(|l| l.bytes).sum();
    let total = per_layer + model.bytes_at(Place::Embedding) + model.bytes_at(Place::Head);
    assert_eq!(total, model.weight_bytes());
    assert!(model.layers().iter().all(|l| l.expert_bytes > l.bytes / 2));
}

#[test]
fn q4_k_m_mix_follows_llama_quantize() {
    let model = preset("llama-3.1-8b", "q4_k_m");
    let ty = |name: &str| model.tensors.iter().find(|t| t.name == name).unwrap().ty;
    assert_eq!(ty("output.weight"), TensorType::Q6_K);
    assert_eq!(ty("token_embd.weight"), TensorType::Q4_K);
    assert_eq!(ty("blk.0.attn_v.weight"), TensorType::Q6_K);
    assert_eq!(ty("blk.4.attn_v.weight"), TensorType::Q4_K);
    assert_eq!(ty("blk.6.ffn_down.weight"), TensorType::Q6_K);
    assert_eq!(ty("blk.7.ffn_down.weight"), TensorType::Q4_K);
    assert_eq!(ty("blk.7.attn_q.weight"), TensorType::Q4_K);
    assert_eq!(ty("blk.7.attn_norm.weight"), TensorType::F32);
    // Tied embeddings take the output's type.
    let tied = preset("llama-3.2-1b", "q4_k_m");
    assert_eq!(tied.tensors.iter().find(|t| t.name == "token_embd.weight").unwrap().ty, TensorType::Q6_K);
    // The 70B rule raises attn_v to q5_k where q4_k_m would leave q4_k.
    let big = preset("llama-3.1-70b", "q4_k_m");
    assert_eq!(big.tensors.iter().find(|t| t.name == "blk.40.attn_v.weight").unwrap().ty, TensorType::Q5_K);
    // Mixtral: 8 experts raise attn_v and attn_k to q8_0.
    let moe = preset("mixtral-8x7b", "q4_k_m");
    assert_eq!(moe.tensors.iter().find(|t| t.name == "blk.9.attn_k.weight").unwrap().ty, TensorType::Q8_0);
}

/// File sizes of published llama.cpp quantizations (bartowski's Meta-Llama-3.1-8B-Instruct
/// GGUFs): the tensor bytes we compute must land within 1% (the files add metadata and
/// alignment, a few MB).
#[test]
fn quantized_sizes_match_published_files() {
    let cases = [
        ("q8_0", 8.54e9),
        ("q6_k", 6.60e9),
        ("q5_k_m", 5.73e9),
        ("q4_k_m", 4.92e9),
        ("q3_k_m", 4.02e9),
        ("q2_k", 3.18e9),
    ];
    for (format, published) in cases {
        let bytes = preset("llama-3.1-8b", format).weight_bytes() as f64;
        let error = (bytes - published) / published;
        assert!(error.abs() < 0.01, "{format}: {bytes:.4e} vs {published:.4e} ({:+.2}%)", error * 100.0);
    }
}

#[test]
fn mixture_of_experts_counts_all_experts_for_memory() {
    let model = preset("mixtral-8x7b", "bf16");
    let layer = &model.layers()[0];
    assert_eq!(layer.expert_params, 8 * 3 * 4096 * 14336);
    // 46.7 B stored, about 12.9 B active per token.
    let active: u64 = model.layers().iter().map(|l| l.params - l.expert_params + l.expert_params * 2 / 8).sum::<u64>()
        + model
            .tensors
            .iter()
            .filter(|t| t.place != Place::Layer(0) && !matches!(t.place, Place::Layer(_)))
            .map(Tensor::elements)
            .sum::<u64>();
    assert!((active as f64 / 12.9e9 - 1.0).abs() < 0.01, "{active}");
}

#[test]
fn qwen2_carries_qkv_bias() {
    let model = preset("qwen2.5-7b", "bf16");
    assert!(model.tensors.iter().any(|t| t.name == "blk.0.attn_k.bias" && t.shape == vec![512]));
    assert!(!model.tensors.iter().any(|t| t.name == "blk.0.attn_output.bias"));
}

#[test]
fn a_dense_ffn_beside_experts_moves_with_them() {
    // Snowflake Arctic's layers: a residual dense MLP beside the routed experts. The
    // export's `-ot blk\.N\.ffn_(up|down|gate|gate_up)(_(ch|)exps|\.)` moves both, so the
    // layer's FFN part counts both (#45); shared experts and the router stay.
    let mut model = preset("qwen3-30b-a3b", "q8_0");
    let dense = |name: &str| {
        let name = format!("blk.0.{name}.weight");
        Tensor::new(name, vec![2048, 4864], TensorType::Q8_0, 2048 * 4864 * 34 / 32, Place::Layer(0), false)
    };
    let before = model.layers()[0].clone();
    model.tensors.extend(["ffn_up", "ffn_gate", "ffn_down", "ffn_up_shexp"].map(dense));
    let after = &model.layers()[0];
    assert_eq!(
        after.ffn_bytes - before.ffn_bytes,
        3 * 2048 * 4864 * 34 / 32,
        "three dense matrices, not the shared expert"
    );
    assert_eq!(before.ffn_bytes, before.expert_bytes);
    assert_eq!(after.expert_bytes, before.expert_bytes);
}

/// [`is_ffn_matrix`] as its rule reads: substrings of the name.
fn ffn_matrix_by_substrings(name: &str) -> bool {
    let gguf = [".ffn_up.", ".ffn_down.", ".ffn_gate.", ".ffn_gate_up."];
    let hf = [
        "up_proj.",
        "down_proj.",
        "gate_proj.",
        "gate_up_proj.",
        "fc1.",
        "fc2.",
        "c_fc.",
        "c_proj.",
        "w1.",
        "w2.",
        "w3.",
        "dense_h_to_4h.",
        "dense_4h_to_h.",
    ];
    gguf.iter().any(|p| name.contains(p))
        || (name.contains(".mlp.") || name.contains(".feed_forward.")) && hf.iter().any(|p| name.contains(p))
}

proptest::proptest! {
    /// The parts-wise rule names the tensors the substring rule does, on names made of the
    /// pieces both look for (and pieces near them).
    #[test]
    fn ffn_matrices_by_parts_are_those_by_substrings(
        pieces in proptest::collection::vec(proptest::sample::select(vec![
            "blk", "3", "ffn_up", "ffn_down", "ffn_gate", "ffn_gate_up", "ffn_gate_inp", "ffn_up_exps",
            "mlp", "feed_forward", "model", "layers", "up_proj", "gate_up_proj", "xup_proj", "up_proj_x",
            "fc1", "w3", "dense_4h_to_h", "weight", "bias", "", "attn_q",
        ]), 0..7),
    ) {
        let name = pieces.join(".");
        proptest::prop_assert_eq!(is_ffn_matrix(&name), ffn_matrix_by_substrings(&name), "{}", name);
    }
}
