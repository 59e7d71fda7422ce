"""Gemma 3 text (`gemma3`): 5 sliding-window layers then 1 full layer (src/models/gemma3.cpp:7
`load_swa_pattern(ml, 6)`, only when `attention.sliding_window` is present and > 0, :4-12;
without it every layer is full attention), GQA with head_dim 256, q/k RMS norms, separate
rope base for SWA layers, linear RoPE scaling on the full layers.

REAL: google/gemma-3-12b-it, text model (config.json text_config: hidden_size 3840,
num_hidden_layers 48, num_attention_heads 16, num_key_value_heads 8, head_dim 256,
intermediate_size 15360, vocab_size 262208, max_position_embeddings 131072,
sliding_window 1024, sliding_window_pattern 6, rope_theta 1000000, rope_local_base_freq 10000,
rope_scaling {linear, factor 8}, rms_norm_eps 1e-6)."""
ARCH = "gemma3"
REAL = dict(layers=48, hidden=3840, heads=16, kv_heads=8, head_dim=256, ffn=15360, vocab=262208,
            context=131072, swa=1024)
SMALL = dict(layers=7, hidden=256, heads=4, kv_heads=2, head_dim=64, ffn=512, vocab=1024,
             context=4096, swa=128)


def write(m, d):
    m.sizes(d)
    m.heads(d)
    m.key("attention.layer_norm_rms_epsilon", 1e-6)
    # SWA window (gemma3.cpp:4); pattern 6 by default (optional
    # `attention.sliding_window_pattern`, u32 or per-layer bool array, llama-model.cpp:3435-3439).
    m.key("attention.sliding_window", d["swa"])
    m.key("rope.freq_base", 1000000.0)
    m.key("rope.freq_base_swa", 10000.0)
    m.key("rope.scaling.type", "linear")
    m.key("rope.scaling.factor", 8.0)
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])
    h, q, kv, hd = d["hidden"], d["heads"] * d["head_dim"], d["kv_heads"] * d["head_dim"], d["head_dim"]
    m.tensor("token_embd.weight", h, d["vocab"])  # output.weight absent: tied (TENSOR_DUPLICATED)
    for i in range(d["layers"]):
        b = f"blk.{i}."
        m.attention(b, h, q, kv)
        m.tensor(b + "post_attention_norm.weight", h)
        m.tensor(b + "attn_q_norm.weight", hd)
        m.tensor(b + "attn_k_norm.weight", hd)
        m.ffn(b, h, d["ffn"])
        m.tensor(b + "post_ffw_norm.weight", h)
    m.tensor("output_norm.weight", h)
