"""Llama (`llama`): full attention in every layer, GQA; Llama 3.1 8B's shape."""
ARCH = "llama"
REAL = dict(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, vocab=128256, context=131072)
SMALL = dict(layers=4, hidden=256, heads=4, kv_heads=2, head_dim=64, ffn=512, vocab=1024, context=4096)


def write(m, d):
    m.sizes(d)
    m.heads(d)
    m.key("rope.dimension_count", d["head_dim"])
    m.key("rope.freq_base", 500000.0)
    m.key("attention.layer_norm_rms_epsilon", 1e-5)
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])
    h, q, kv = d["hidden"], d["heads"] * d["head_dim"], d["kv_heads"] * d["head_dim"]
    m.tensor("token_embd.weight", h, d["vocab"])
    for i in range(d["layers"]):
        b = f"blk.{i}."
        m.attention(b, h, q, kv)
        m.ffn(b, h, d["ffn"])
    m.output(h, d["vocab"])
