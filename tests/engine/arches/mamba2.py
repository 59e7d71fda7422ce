"""Mamba-2 (`mamba2`): a pure state-space model, no attention and no KV cache; each layer keeps
a per-sequence recurrent state (conv state r and SSM state s, both F32).

REAL is state-spaces/mamba2-2.7b. Its config.json: d_model 2560, n_layer 64, vocab_size 50277
(pad_vocab_size_multiple 16 -> 50288), ssm_cfg {"layer": "Mamba2"}, tie_embeddings true; the
Mamba2 block takes mamba_ssm's defaults d_state 128, d_conv 4, expand 2 (d_inner 5120),
headdim 64 (80 heads), ngroups 1. Keys as llama.cpp's converter writes them
(conversion/mamba.py Mamba2Model.set_gguf_parameters): context_length 2**20, feed_forward_length 0,
head_count 0, ssm.time_step_rank = d_inner / headdim (the number of SSM heads).
"""
ARCH = "mamba2"
REAL = dict(layers=64, hidden=2560, d_inner=5120, d_state=128, d_conv=4, n_group=1, ssm_heads=80,
            vocab=50288, context=1048576, tied=True)
SMALL = dict(layers=3, hidden=128, d_inner=256, d_state=16, d_conv=4, n_group=2, ssm_heads=8,
             vocab=1024, context=4096, tied=False)


def write(m, d):
    # generic keys (src/llama-model.cpp load_hparams) and mamba2's own (src/models/mamba2.cpp:4-10)
    m.key("context_length", d["context"])
    m.key("embedding_length", d["hidden"])
    m.key("feed_forward_length", 0)
    m.key("attention.head_count", 0)  # no attention: n_head() == 0 -> no head sizes
    m.key("block_count", d["layers"])
    m.key("ssm.conv_kernel", d["d_conv"])
    m.key("ssm.inner_size", d["d_inner"])
    m.key("ssm.state_size", d["d_state"])
    m.key("ssm.time_step_rank", d["ssm_heads"])
    m.key("ssm.group_count", d["n_group"])
    m.key("attention.layer_norm_rms_epsilon", 1e-5)
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])

    h, di, ds, ng, nh, dc = d["hidden"], d["d_inner"], d["d_state"], d["n_group"], d["ssm_heads"], d["d_conv"]
    conv_dim = di + 2 * ng * ds
    d_in_proj = di + conv_dim + nh  # z, xBC, dt
    m.tensor("token_embd.weight", h, d["vocab"])
    m.tensor("output_norm.weight", h)
    if not d["tied"]:
        m.tensor("output.weight", h, d["vocab"])
    for i in range(d["layers"]):
        b = f"blk.{i}."
        m.tensor(b + "attn_norm.weight", h)
        m.tensor(b + "ssm_in.weight", h, d_in_proj)
        m.tensor(b + "ssm_conv1d.weight", dc, conv_dim, f32=True)  # converter keeps conv1d in F32
        m.tensor(b + "ssm_conv1d.bias", conv_dim)
        m.tensor(b + "ssm_dt.bias", nh)
        m.tensor(b + "ssm_a", 1, nh, f32=True)
        m.tensor(b + "ssm_d", 1, nh, f32=True)
        m.tensor(b + "ssm_norm.weight", di // ng, ng, f32=True)
        m.tensor(b + "ssm_out.weight", di, h)
