"""Llama (`llama`): full attention in every layer, GQA; Llama 3.1 8B's shape."""
ARCH = "llama"
REAL = dict(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, vocab=128256, context=131072)
SMALL = dict(layers=4, hidden=256, heads=4, kv_heads=2, head_dim=64, ffn=512, vocab=1024, context=4096)


def write(m, d):
    m.key("block_count", d["layers"])
    m.key("context_length", d["context"])
    m.key("embedding_length", d["hidden"])
    m.key("feed_forward_length", d["ffn"])
    m.key("attention.head_count", d["heads"])
    m.key("attention.head_count_kv", d["kv_heads"])
    m.key("attention.key_length", d["head_dim"])
    m.key("attention.value_length", d["head_dim"])
    m.key("rope.dimension_count", d["head_dim"])
    m.key("rope.freq_base", 500000.0)
    m.key("attention.layer_norm_rms_epsilon", 1e-5)
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])
    h, q, kv = d["hidden"], d["heads"] * d["head_dim"], d["kv_heads"] * d["head_dim"]
    m.tensor("token_embd.weight", h, d["vocab"])
    for i in range(d["layers"]):
        b = f"blk.{i}."
        m.tensor(b + "attn_norm.weight", h)
        m.tensor(b + "attn_q.weight", h, q)
        m.tensor(b + "attn_k.weight", h, kv)
        m.tensor(b + "attn_v.weight", h, kv)
        m.tensor(b + "attn_output.weight", q, h)
        m.tensor(b + "ffn_norm.weight", h)
        m.tensor(b + "ffn_gate.weight", h, d["ffn"])
        m.tensor(b + "ffn_up.weight", h, d["ffn"])
        m.tensor(b + "ffn_down.weight", d["ffn"], h)
    m.tensor("output_norm.weight", h)
    m.tensor("output.weight", h, d["vocab"])
