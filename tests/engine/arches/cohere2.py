"""Command R7B (`cohere2`): sliding-window attention on 3 of every 4 layers (layers 3, 7,
... are full, `load_swa_pattern(ml, 4)`), LayerNorm (eps key `attention.layer_norm_epsilon`),
logit scale, output tied to the token embedding (no `output.weight`).

REAL = CohereForAI/c4ai-command-r7b-12-2024 (config.json: num_hidden_layers 32,
hidden_size 4096, intermediate_size 14336, num_attention_heads 32, num_key_value_heads 8
(head_dim 128), sliding_window 4096, sliding_window_pattern 4, vocab_size 256000,
max_position_embeddings 132096, rope_theta 50000, layer_norm_eps 1e-5, logit_scale 0.25,
tied embeddings).
"""
ARCH = "cohere2"
REAL = dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, swa=4096, vocab=256000, context=132096)
SMALL = dict(layers=4, hidden=256, heads=4, kv_heads=2, ffn=512, swa=64, vocab=1024, context=4096)


def write(m, d):
    head_dim = d["hidden"] // d["heads"]
    m.sizes(d)
    m.heads(d, lengths=False)
    m.key("attention.sliding_window", d["swa"])
    m.key("attention.layer_norm_epsilon", 1e-5)
    m.key("logit_scale", 0.25)
    m.key("rope.dimension_count", head_dim)
    m.key("rope.freq_base", 50000.0)
    m.key("rope.scaling.type", "none")
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])
    h, kv = d["hidden"], d["kv_heads"] * head_dim
    m.tensor("token_embd.weight", h, d["vocab"])
    for i in range(d["layers"]):
        b = f"blk.{i}."
        m.attention(b, h, h, kv)
        m.tensor(b + "ffn_gate.weight", h, d["ffn"])
        m.tensor(b + "ffn_up.weight", h, d["ffn"])
        m.tensor(b + "ffn_down.weight", d["ffn"], h)
    m.tensor("output_norm.weight", h)
