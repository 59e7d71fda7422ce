"""OpenELM (`openelm`): layer-wise scaling; every layer has its own query/KV head count and
FFN width, written as arrays (`attention.head_count`, `attention.head_count_kv`,
`feed_forward_length`; read by get_key_or_arr in src/llama-model.cpp load_hparams). Head size
is `attention.key_length` (= value_length), independent of n_embd / n_head. Fused QKV,
per-head Q/K norms, output tied to token_embd (src/models/openelm.cpp:18-43).

REAL: apple/OpenELM-3B (config: num_transformer_layers 36, model_dim 3072, head_dim 128,
num_gqa_groups 4, qkv_multipliers (0.5, 1.0), ffn_multipliers (0.5, 4.0), ffn_dim_divisor 256,
max_context_length 2048, rope_freq_constant 10000, vocab_size 32000). The per-layer lists
below are what its config.json holds (num_query_heads / num_kv_heads) and what
conversion/openelm.py derives for the FFN widths; checked against a published copy of the
"openelm-xl" (3B) table and the 3.04B parameter count.
"""
ARCH = "openelm"
REAL = dict(
    layers=36, hidden=3072, head_dim=128, vocab=32000, context=2048,
    heads=[12] * 4 + [16] * 14 + [20] * 12 + [24] * 6,
    kv_heads=[3] * 4 + [4] * 14 + [5] * 12 + [6] * 6,
    ffn=[1536, 1792, 2048, 2560, 2816, 3072, 3328, 3584, 4096, 4352, 4608, 4864, 5120, 5632,
         5888, 6144, 6400, 6656, 7168, 7424, 7680, 7936, 8192, 8704, 8960, 9216, 9472, 9728,
         10240, 10496, 10752, 11008, 11264, 11776, 12032, 12288],
)
SMALL = dict(layers=4, hidden=256, head_dim=32, vocab=1024, context=4096,
             heads=[4, 4, 8, 8], kv_heads=[1, 1, 2, 2], ffn=[256, 384, 512, 640])


def write(m, d):
    n, h, hd = d["layers"], d["hidden"], d["head_dim"]
    m.key("block_count", n)
    m.key("context_length", d["context"])
    m.key("embedding_length", h)
    m.key("feed_forward_length", list(d["ffn"]))
    m.key("attention.head_count", list(d["heads"]))
    m.key("attention.head_count_kv", list(d["kv_heads"]))
    m.key("rope.freq_base", 10000.0)
    m.key("attention.layer_norm_rms_epsilon", 1e-6)
    m.key("rope.dimension_count", hd)
    m.key("attention.key_length", hd)
    m.key("attention.value_length", hd)
    m.vocab(d["vocab"])
    m.tensor("token_embd.weight", h, d["vocab"])
    for i in range(n):
        b = f"blk.{i}."
        nh, nkv, ff = d["heads"][i], d["kv_heads"][i], d["ffn"][i]
        m.tensor(b + "attn_norm.weight", h)
        m.tensor(b + "attn_qkv.weight", h, (nh + 2 * nkv) * hd)
        m.tensor(b + "attn_q_norm.weight", hd)
        m.tensor(b + "attn_k_norm.weight", hd)
        m.tensor(b + "attn_output.weight", nh * hd, h)
        m.ffn(b, h, ff)
    m.tensor("output_norm.weight", h)
