"""Gemma 2 (`gemma2`): interleaved sliding-window / full attention (even layers SWA by
default, src/models/gemma2.cpp:5 `load_swa_pattern(ml, 2)`), GQA with head_dim 256 (not
hidden/heads), attention and final logit soft-capping, output tied to token_embd.

REAL: google/gemma-2-9b (config.json: hidden_size 3584, num_hidden_layers 42,
num_attention_heads 16, num_key_value_heads 8, head_dim 256, intermediate_size 14336,
vocab_size 256000, max_position_embeddings 8192, sliding_window 4096, rope_theta 10000,
rms_norm_eps 1e-6, attn_logit_softcapping 50.0, final_logit_softcapping 30.0)."""
ARCH = "gemma2"
REAL = dict(layers=42, hidden=3584, heads=16, kv_heads=8, head_dim=256, ffn=14336, vocab=256000,
            context=8192, swa=4096)
SMALL = dict(layers=4, hidden=256, heads=4, kv_heads=2, head_dim=64, ffn=512, vocab=1024,
             context=4096, swa=128)


def write(m, d):
    m.sizes(d)
    m.heads(d)
    m.key("attention.layer_norm_rms_epsilon", 1e-6)
    # SWA: window read at gemma2.cpp:12 (default 4096 at :5); the pattern (every 2nd layer
    # full, `attention.sliding_window_pattern` optional) comes from load_swa_pattern(ml, 2).
    m.key("attention.sliding_window", d["swa"])
    m.key("attn_logit_softcapping", 50.0)
    m.key("final_logit_softcapping", 30.0)
    m.key("rope.freq_base", 10000.0)
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])
    h, q, kv = d["hidden"], d["heads"] * d["head_dim"], d["kv_heads"] * d["head_dim"]
    m.tensor("token_embd.weight", h, d["vocab"])  # also the output matrix (TENSOR_DUPLICATED)
    for i in range(d["layers"]):
        b = f"blk.{i}."
        m.attention(b, h, q, kv)
        m.tensor(b + "post_attention_norm.weight", h)
        m.ffn(b, h, d["ffn"])
        m.tensor(b + "post_ffw_norm.weight", h)
    m.tensor("output_norm.weight", h)
