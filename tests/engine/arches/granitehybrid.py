"""Granite 4.0 hybrid (`granitehybrid`): Mamba-2 layers plus a few full-attention (GQA, NoPE)
layers, MoE FFN with a shared expert in every layer. A layer is recurrent iff its
attention.head_count_kv entry is 0 (src/models/granite-hybrid.cpp:22-25): recurrent layers keep a
per-sequence F32 state (r, s), attention layers a KV cache over the context.

REAL is ibm-granite/granite-4.0-h-tiny. Its config.json: hidden_size 1536, num_hidden_layers 40,
layer_types "attention" at 5, 15, 25, 35 and "mamba" elsewhere, num_attention_heads 12,
num_key_value_heads 4 (head dim 1536/12 = 128), num_local_experts 64, num_experts_per_tok 6,
intermediate_size 512 (per expert), shared_intermediate_size 1024, mamba_d_state 128,
mamba_n_groups 1, mamba_n_heads 48, mamba_d_head 64, mamba_expand 2 (d_inner 3072),
mamba_d_conv 4, mamba_conv_bias true, position_embedding_type "nope", vocab_size 100352,
tie_word_embeddings true, max_position_embeddings 131072, embedding_multiplier 12,
attention_multiplier 0.0078125, residual_multiplier 0.22, logits_scaling 6.
Keys as conversion/granite.py GraniteHybridModel writes them: head_count_kv as a per-layer array
(0 on Mamba layers), rope.scaling.finetuned false (NoPE) and context_length 2**20 for NoPE models,
ssm.time_step_rank = mamba_n_heads, ssm.inner_size = expand * hidden.
"""
ARCH = "granitehybrid"
REAL = dict(layers=40, attn_layers=[5, 15, 25, 35], hidden=1536, heads=12, kv_heads=4,
            experts=64, experts_used=6, ffn=512, shexp_ffn=1024,
            d_state=128, d_conv=4, n_group=1, ssm_heads=48, vocab=100352, context=1048576)
SMALL = dict(layers=4, attn_layers=[1], hidden=128, heads=4, kv_heads=2,
             experts=4, experts_used=2, ffn=64, shexp_ffn=128,
             d_state=16, d_conv=4, n_group=2, ssm_heads=8, vocab=1024, context=4096)


def write(m, d):
    n, h = d["layers"], d["hidden"]
    attn = set(d["attn_layers"])
    head_dim = h // d["heads"]
    di = 2 * h  # llama.cpp asserts d_inner == 2 * n_embd (granite-hybrid.cpp:53)
    ds, ng, nh, dc = d["d_state"], d["n_group"], d["ssm_heads"], d["d_conv"]
    m.key("context_length", d["context"])
    m.key("embedding_length", h)
    m.key("block_count", n)
    m.key("feed_forward_length", d["ffn"])  # the per-expert width (n_ff) for this arch
    m.key("attention.head_count", d["heads"])
    # per layer: 0 marks a Mamba-2 (recurrent) layer
    m.key("attention.head_count_kv", [d["kv_heads"] if i in attn else 0 for i in range(n)])
    m.key("rope.scaling.finetuned", False)  # NoPE: no rope on attention layers
    m.key("rope.freq_base", 10000.0)
    m.key("attention.layer_norm_rms_epsilon", 1e-5)
    m.key("expert_count", d["experts"])
    m.key("expert_used_count", d["experts_used"])
    m.key("expert_shared_feed_forward_length", d["shexp_ffn"])
    m.key("embedding_scale", 12.0)
    m.key("residual_scale", 0.22)
    m.key("attention.scale", 0.0078125)
    m.key("logit_scale", 6.0)
    m.key("ssm.conv_kernel", dc)
    m.key("ssm.state_size", ds)
    m.key("ssm.group_count", ng)
    m.key("ssm.inner_size", di)
    m.key("ssm.time_step_rank", nh)
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])

    conv_dim = di + 2 * ng * ds
    d_in_proj = 2 * di + 2 * ng * ds + nh
    q, kv = d["heads"] * head_dim, d["kv_heads"] * head_dim
    m.tensor("token_embd.weight", h, d["vocab"])  # tied: no output.weight
    m.tensor("output_norm.weight", h)
    for i in range(n):
        b = f"blk.{i}."
        m.tensor(b + "attn_norm.weight", h)
        if i in attn:
            m.tensor(b + "attn_q.weight", h, q)
            m.tensor(b + "attn_k.weight", h, kv)
            m.tensor(b + "attn_v.weight", h, kv)
            m.tensor(b + "attn_output.weight", q, h)
        else:
            m.tensor(b + "ssm_in.weight", h, d_in_proj)
            m.tensor(b + "ssm_conv1d.weight", dc, conv_dim, f32=True)
            m.tensor(b + "ssm_conv1d.bias", conv_dim)
            m.tensor(b + "ssm_dt.bias", nh)
            m.tensor(b + "ssm_a", 1, nh, f32=True)
            m.tensor(b + "ssm_d", 1, nh, f32=True)
            m.tensor(b + "ssm_norm.weight", di // ng, ng, f32=True)
            m.tensor(b + "ssm_out.weight", di, h)
        m.tensor(b + "ffn_norm.weight", h)
        m.tensor(b + "ffn_gate_inp.weight", h, d["experts"], f32=True)
        m.tensor(b + "ffn_gate_exps.weight", h, d["ffn"], d["experts"])
        m.tensor(b + "ffn_up_exps.weight", h, d["ffn"], d["experts"])
        m.tensor(b + "ffn_down_exps.weight", d["ffn"], h, d["experts"])
        m.tensor(b + "ffn_gate_shexp.weight", h, d["shexp_ffn"])
        m.tensor(b + "ffn_up_shexp.weight", h, d["shexp_ffn"])
        m.tensor(b + "ffn_down_shexp.weight", d["shexp_ffn"], h)
