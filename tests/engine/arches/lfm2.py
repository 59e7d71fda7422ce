"""LFM2 (`lfm2`): hybrid of gated short-convolution blocks and GQA attention blocks.

Which layers are attention is told only by `attention.head_count_kv`, an array with 0 for
the convolution layers (src/models/lfm2.cpp:11-13, `is_recr = n_head_kv(il) == 0`). The
convolution layers keep a recurrent "r" state of (shortconv.l_cache - 1) * n_embd f32 values
per sequence (src/llama-hparams.cpp:214-217) and no KV; the attention layers cache K and V of
n_head_kv * (n_embd / n_head) per token. An optional `attention.sliding_window` makes every
attention layer sliding-window (src/models/lfm2.cpp:26-31; hybrid-iswa memory).

REAL: LiquidAI/LFM2-1.2B (config.json: hidden_size 2048, num_hidden_layers 16,
num_attention_heads 32, num_key_value_heads 8, block_ff_dim 12288 with
block_auto_adjust_ff_dim true, block_multiple_of 256 -> feed_forward_length 8192
(conversion/lfm2.py:21-33), conv_L_cache 3, full_attn_idxs [2, 5, 8, 10, 12, 14],
max_position_embeddings 128000, rope_theta 1e6, norm_eps 1e-5, vocab_size 65536, tied
embeddings). The published config.json was not reachable here; these values reproduce the
model card's parameter count exactly (1,170,340,608) and the 10 conv + 6 attention split.
"""
ARCH = "lfm2"
REAL = dict(layers=16, hidden=2048, heads=32, kv_heads=8, ffn=8192, vocab=65536, context=128000,
            l_cache=3, attn_layers=[2, 5, 8, 10, 12, 14], swa=0)
SMALL = dict(layers=6, hidden=256, heads=4, kv_heads=2, ffn=512, vocab=1024, context=4096,
             l_cache=3, attn_layers=[2, 5], swa=0)


def write(m, d):
    n = d["layers"]
    attn = set(d["attn_layers"])
    m.key("block_count", n)
    m.key("context_length", d["context"])
    m.key("embedding_length", d["hidden"])
    m.key("feed_forward_length", d["ffn"])
    m.key("attention.head_count", d["heads"])
    # 0 kv heads marks a short-convolution layer
    m.key("attention.head_count_kv", [d["kv_heads"] if i in attn else 0 for i in range(n)])
    m.key("rope.freq_base", 1000000.0)
    m.key("attention.layer_norm_rms_epsilon", 1e-5)
    m.key("vocab_size", d["vocab"])
    m.key("shortconv.l_cache", d["l_cache"])
    if d.get("swa"):
        m.key("attention.sliding_window", d["swa"])
    m.vocab(d["vocab"])
    h = d["hidden"]
    head_dim = h // d["heads"]  # no key_length: n_embd / n_head (src/llama-model.cpp load_hparams)
    kv = d["kv_heads"] * head_dim
    m.tensor("token_embd.weight", h, d["vocab"])
    m.tensor("token_embd_norm.weight", h)  # the output norm (LLM_TENSOR_OUTPUT_NORM_LFM2)
    for i in range(n):
        b = f"blk.{i}."
        m.tensor(b + "attn_norm.weight", h)
        if i in attn:
            m.tensor(b + "attn_q_norm.weight", head_dim)
            m.tensor(b + "attn_k_norm.weight", head_dim)
            m.tensor(b + "attn_q.weight", h, h)
            m.tensor(b + "attn_k.weight", h, kv)
            m.tensor(b + "attn_v.weight", h, kv)
            m.tensor(b + "attn_output.weight", h, h)
        else:
            m.tensor(b + "shortconv.conv.weight", d["l_cache"], h, f32=True)  # ssm_conv wants F32
            m.tensor(b + "shortconv.in_proj.weight", h, 3 * h)
            m.tensor(b + "shortconv.out_proj.weight", h, h)
        m.ffn(b, h, d["ffn"])
    # output.weight is optional: tied to token_embd (src/models/lfm2.cpp:40-44)
