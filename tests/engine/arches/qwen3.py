"""Qwen3 (`qwen3`): full attention in every layer, GQA, RMS norm on Q and K per head,
explicit head size; Qwen3 8B's shape.

REAL = Qwen/Qwen3-8B config.json: hidden_size 4096, intermediate_size 12288,
num_hidden_layers 36, num_attention_heads 32, num_key_value_heads 8, head_dim 128,
vocab_size 151936, max_position_embeddings 40960, rope_theta 1e6, rms_norm_eps 1e-6,
tie_word_embeddings false, use_sliding_window false.

SMALL uses a head size (128) different from embedding_length/head_count (64), as
Qwen3-0.6B and Qwen3-30B-A3B do, so Q/O are head_count*key_length wide
(src/models/qwen3.cpp load_arch_tensors).
"""
ARCH = "qwen3"
REAL = dict(layers=36, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=12288, vocab=151936, context=40960)
SMALL = dict(layers=4, hidden=256, heads=4, kv_heads=2, head_dim=128, ffn=512, vocab=1024, context=4096)


def write(m, d):
    m.sizes(d)
    m.heads(d)
    m.key("rope.freq_base", 1000000.0)
    m.key("attention.layer_norm_rms_epsilon", 1e-6)
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])
    h, hd = d["hidden"], d["head_dim"]
    q, kv = d["heads"] * hd, d["kv_heads"] * hd
    m.tensor("token_embd.weight", h, d["vocab"])
    for i in range(d["layers"]):
        b = f"blk.{i}."
        m.attention(b, h, q, kv)
        m.tensor(b + "attn_q_norm.weight", hd)
        m.tensor(b + "attn_k_norm.weight", hd)
        m.ffn(b, h, d["ffn"])
    m.output(h, d["vocab"])
