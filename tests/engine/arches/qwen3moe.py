"""Qwen3 MoE (`qwen3moe`): full attention in every layer, GQA, Q/K norm, head size
independent of the width; every layer a routed MoE (no shared expert, no dense layer);
Qwen3 30B-A3B's shape.

REAL = Qwen/Qwen3-30B-A3B config.json: hidden_size 2048, intermediate_size 6144,
moe_intermediate_size 768, num_hidden_layers 48, num_attention_heads 32,
num_key_value_heads 4, head_dim 128 (not 2048/32 = 64), num_experts 128,
num_experts_per_tok 8, decoder_sparse_step 1, mlp_only_layers [], vocab_size 151936,
max_position_embeddings 40960, rope_theta 1e6, rms_norm_eps 1e-6, tie_word_embeddings false.

llama.cpp (src/models/qwen3moe.cpp) reads expert_feed_forward_length (scalar or per-layer
array; without it n_ff/n_expert_used) plus the common expert_count / expert_used_count.
"""
ARCH = "qwen3moe"
REAL = dict(layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128, ffn=6144, ffn_exp=768,
            experts=128, experts_used=8, vocab=151936, context=40960)
SMALL = dict(layers=4, hidden=256, heads=4, kv_heads=2, head_dim=128, ffn=512, ffn_exp=128,
             experts=8, experts_used=2, vocab=1024, context=4096)


def write(m, d):
    m.sizes(d)
    m.key("expert_feed_forward_length", d["ffn_exp"])
    m.key("expert_count", d["experts"])
    m.key("expert_used_count", d["experts_used"])
    m.heads(d)
    m.key("rope.freq_base", 1000000.0)
    m.key("attention.layer_norm_rms_epsilon", 1e-6)
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])
    h, hd, fe, ne = d["hidden"], d["head_dim"], d["ffn_exp"], d["experts"]
    q, kv = d["heads"] * hd, d["kv_heads"] * hd
    m.tensor("token_embd.weight", h, d["vocab"])
    for i in range(d["layers"]):
        b = f"blk.{i}."
        m.attention(b, h, q, kv)
        m.tensor(b + "attn_q_norm.weight", hd)
        m.tensor(b + "attn_k_norm.weight", hd)
        m.tensor(b + "ffn_norm.weight", h)
        m.experts(b, h, fe, ne)
    m.output(h, d["vocab"])
