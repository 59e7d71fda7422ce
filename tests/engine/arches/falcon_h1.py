"""Falcon-H1 (`falcon-h1`): every layer runs GQA attention and a Mamba-2 mixer in parallel,
then an MLP. So every layer has both a KV cache and a recurrent state
(src/llama-model.cpp create_memory: filter_attn = filter_recr = true for LLM_ARCH_FALCON_H1).
Mamba-2 sizes from `ssm.*` keys (src/models/falcon-h1.cpp:8-12): conv state
(conv_kernel - 1) * (inner_size + 2 * group_count * state_size), ssm state
state_size * inner_size, both f32 per sequence (src/llama-hparams.cpp:229, 257).

REAL: tiiuae/Falcon-H1-1.5B-Deep (transformers FalconH1 table: 66 layers, hidden 1280,
6 attention heads, 2 KV heads, head_dim 128, 24 Mamba heads of 64 (mamba_d_ssm 1536),
d_state 256, 128K context; config.json also: mamba_d_conv 4, mamba_n_groups 1,
intermediate_size 3072, vocab_size 65537, rope_theta 1e11, rms_norm_eps 1e-5,
max_position_embeddings 131072, untied lm_head). The config.json itself was not reachable
here: intermediate_size and vocab_size are from memory of it (they reproduce the published
1.55B parameter count); the memory-deciding values are all in the transformers table.
"""
ARCH = "falcon-h1"
REAL = dict(layers=66, hidden=1280, heads=6, kv_heads=2, head_dim=128, ffn=3072, vocab=65537,
            context=131072, d_conv=4, d_inner=1536, d_state=256, ssm_heads=24, groups=1)
SMALL = dict(layers=4, hidden=256, heads=4, kv_heads=2, head_dim=64, ffn=512, vocab=1024,
             context=4096, d_conv=4, d_inner=256, d_state=16, ssm_heads=8, groups=1)


def write(m, d):
    n, h, hd = d["layers"], d["hidden"], d["head_dim"]
    m.key("block_count", n)
    m.key("context_length", d["context"])
    m.key("embedding_length", h)
    m.key("feed_forward_length", d["ffn"])
    m.heads(d, lengths=False)
    m.key("attention.key_length", hd)
    m.key("attention.value_length", hd)
    m.key("rope.freq_base", 1e11)
    m.key("attention.layer_norm_rms_epsilon", 1e-5)
    m.key("ssm.conv_kernel", d["d_conv"])
    m.key("ssm.inner_size", d["d_inner"])
    m.key("ssm.state_size", d["d_state"])
    m.key("ssm.time_step_rank", d["ssm_heads"])  # number of Mamba-2 heads
    m.key("ssm.group_count", d["groups"])
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])
    di, ds, ng, nh = d["d_inner"], d["d_state"], d["groups"], d["ssm_heads"]
    conv_dim = di + 2 * ng * ds
    q, kv = d["heads"] * hd, d["kv_heads"] * hd
    m.tensor("token_embd.weight", h, d["vocab"])
    for i in range(n):
        b = f"blk.{i}."
        m.tensor(b + "attn_norm.weight", h)
        # Mamba-2 mixer (src/models/falcon-h1.cpp:73-85)
        m.tensor(b + "ssm_in.weight", h, di + conv_dim + nh)
        m.tensor(b + "ssm_conv1d.weight", d["d_conv"], conv_dim, f32=True)  # ssm_conv wants F32
        m.tensor(b + "ssm_conv1d.bias", conv_dim)
        m.tensor(b + "ssm_dt.bias", nh)
        m.tensor(f"blk.{i}.ssm_a", 1, nh, f32=True)
        m.tensor(f"blk.{i}.ssm_d", 1, nh, f32=True)
        m.tensor(b + "ssm_norm.weight", di // ng, ng, f32=True)
        m.tensor(b + "ssm_out.weight", di, h)
        # attention (src/models/falcon-h1.cpp:89-92)
        m.tensor(b + "attn_q.weight", h, q)
        m.tensor(b + "attn_k.weight", h, kv)
        m.tensor(b + "attn_v.weight", h, kv)
        m.tensor(b + "attn_output.weight", q, h)
        # MLP; the norm has no ".weight" suffix (tn(LLM_TENSOR_FFN_NORM, i), falcon-h1.cpp:96)
        m.tensor(f"blk.{i}.ffn_norm", h)
        m.tensor(b + "ffn_gate.weight", h, d["ffn"])
        m.tensor(b + "ffn_up.weight", h, d["ffn"])
        m.tensor(b + "ffn_down.weight", d["ffn"], h)
    m.output(h, d["vocab"])
