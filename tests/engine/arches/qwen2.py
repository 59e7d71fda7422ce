"""Qwen2 (`qwen2`): full attention in every layer, GQA, biases on Q/K/V; Qwen2.5 7B's shape.

REAL = Qwen/Qwen2.5-7B config.json: hidden_size 3584, intermediate_size 18944,
num_hidden_layers 28, num_attention_heads 28, num_key_value_heads 4 (no head_dim key:
head_dim = 3584/28 = 128), vocab_size 152064, max_position_embeddings 131072,
rope_theta 1e6, rms_norm_eps 1e-6, tie_word_embeddings false, use_sliding_window false.

llama.cpp (src/models/qwen2.cpp) reads only the common keys plus
attention.layer_norm_rms_epsilon; the head size defaults to embedding_length/head_count
(src/llama-model.cpp load_hparams), which is what the converter relies on (it writes no
key_length for Qwen2), so none is written here. `attention.sliding_window` is not read
for qwen2: the KV cache is full-size in every layer.
"""
ARCH = "qwen2"
REAL = dict(layers=28, hidden=3584, heads=28, kv_heads=4, ffn=18944, vocab=152064, context=131072)
SMALL = dict(layers=4, hidden=256, heads=4, kv_heads=2, ffn=512, vocab=1024, context=4096)


def write(m, d):
    m.sizes(d)
    m.heads(d, lengths=False)
    m.key("rope.freq_base", 1000000.0)
    m.key("attention.layer_norm_rms_epsilon", 1e-6)
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])
    h = d["hidden"]
    head_dim = h // d["heads"]
    kv = d["kv_heads"] * head_dim
    m.tensor("token_embd.weight", h, d["vocab"])
    for i in range(d["layers"]):
        b = f"blk.{i}."
        m.attention(b, h, h, kv, bias=True)
        m.ffn(b, h, d["ffn"])
    m.output(h, d["vocab"])
