"""Qwen3-Next (`qwen3next`): gated delta-net (linear attention) layers with a per-sequence F32
recurrent state, a gated full-attention layer every `full_attention_interval` layers (or as
`attention.recurrent_layers` lists), MoE with a gated shared expert in every layer, and an
optional trailing MTP block (`nextn_predict_layers`; not loaded and given no cache by default).

REAL is Qwen/Qwen3-Next-80B-A3B-Instruct. Its config.json: hidden_size 2048, num_hidden_layers 48,
full_attention_interval 4, num_attention_heads 16, num_key_value_heads 2, head_dim 256,
partial_rotary_factor 0.25 (rope dim 64), rope_theta 10000000, intermediate_size 5120,
num_experts 512, num_experts_per_tok 10, moe_intermediate_size 512,
shared_expert_intermediate_size 512, linear_conv_kernel_dim 4, linear_key_head_dim 128,
linear_value_head_dim 128, linear_num_key_heads 16, linear_num_value_heads 32,
max_position_embeddings 262144, rms_norm_eps 1e-6, vocab_size 151936, tie_word_embeddings false;
the checkpoint carries one MTP layer (mtp.*), which conversion/qwen.py appends as block 48 with
nextn_predict_layers 1. Keys as conversion/qwen.py Qwen3NextModel writes them:
ssm.state_size = linear_key_head_dim, ssm.group_count = linear_num_key_heads,
ssm.time_step_rank = linear_num_value_heads, ssm.inner_size = value_head_dim * num_value_heads.
"""
ARCH = "qwen3next"
REAL = dict(layers=48, nextn=1, interval=4, recurrent=None, hidden=2048, heads=16, kv_heads=2,
            head_dim=256, rope_dim=64, ffn=5120, experts=512, experts_used=10, expert_ffn=512,
            shexp_ffn=512, d_conv=4, k_head_dim=128, k_heads=16, v_heads=32, vocab=151936,
            context=262144)
# SMALL lists its recurrent layers explicitly (attention.recurrent_layers, an irregular pattern)
SMALL = dict(layers=4, nextn=1, interval=None, recurrent=[True, True, False, True], hidden=128,
             heads=2, kv_heads=1, head_dim=64, rope_dim=16, ffn=256, experts=4, experts_used=2,
             expert_ffn=64, shexp_ffn=64, d_conv=4, k_head_dim=32, k_heads=2, v_heads=4,
             vocab=1024, context=4096)


def write(m, d, qwen35=False):
    """`qwen35`: Qwen3.5's layout of the same layers (`src/models/qwen35moe.cpp`): required
    `rope.dimension_sections`, separate `ssm_beta` and `ssm_alpha` where Qwen3-Next has one
    `ssm_ba`, and no dense `feed_forward_length`."""
    n, n_all, h = d["layers"], d["layers"] + d["nextn"], d["hidden"]
    if d["recurrent"] is not None:
        recr = list(d["recurrent"]) + [False] * d["nextn"]
    else:  # src/models/qwen3next.cpp:17-23
        recr = [i < n and (i + 1) % d["interval"] != 0 for i in range(n_all)]
    m.key("context_length", d["context"])
    m.key("embedding_length", h)
    m.key("block_count", n_all)
    if d["nextn"]:
        m.key("nextn_predict_layers", d["nextn"])
    if not qwen35:
        m.key("feed_forward_length", d["ffn"])
    m.heads(d)
    m.key("rope.dimension_count", d["rope_dim"])
    if qwen35:
        m.key("rope.dimension_sections", d["sections"])
    m.key("rope.freq_base", 10000000.0)
    m.key("attention.layer_norm_rms_epsilon", 1e-6)
    m.key("expert_count", d["experts"])
    m.key("expert_used_count", d["experts_used"])
    m.key("expert_feed_forward_length", d["expert_ffn"])
    m.key("expert_shared_feed_forward_length", d["shexp_ffn"])
    m.key("ssm.conv_kernel", d["d_conv"])
    m.key("ssm.state_size", d["k_head_dim"])
    m.key("ssm.group_count", d["k_heads"])
    m.key("ssm.time_step_rank", d["v_heads"])
    m.key("ssm.inner_size", d["k_head_dim"] * d["v_heads"])
    if d["recurrent"] is not None:
        m.key("attention.recurrent_layers", recr)
    else:
        m.key("full_attention_interval", d["interval"])
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])

    hd = d["head_dim"]
    q, kv = d["heads"] * hd, d["kv_heads"] * hd
    key_dim = d["k_head_dim"] * d["k_heads"]
    value_dim = d["k_head_dim"] * d["v_heads"]
    conv_dim = 2 * key_dim + value_dim
    ne, ff, sh = d["experts"], d["expert_ffn"], d["shexp_ffn"]
    m.tensor("token_embd.weight", h, d["vocab"])
    m.output(h, d["vocab"])
    for i in range(n_all):
        b = f"blk.{i}."
        m.tensor(b + "attn_norm.weight", h)
        m.tensor(b + "post_attention_norm.weight", h)
        if not recr[i]:  # gated full attention: Q carries a gate of the same width
            m.tensor(b + "attn_q.weight", h, 2 * q)
            m.tensor(b + "attn_k.weight", h, kv)
            m.tensor(b + "attn_v.weight", h, kv)
            m.tensor(b + "attn_output.weight", q, h)
            m.tensor(b + "attn_q_norm.weight", hd)
            m.tensor(b + "attn_k_norm.weight", hd)
        else:  # gated delta net
            m.tensor(b + "attn_qkv.weight", h, conv_dim)
            m.tensor(b + "attn_gate.weight", h, value_dim)
            m.tensor(b + "ssm_conv1d.weight", d["d_conv"], conv_dim, f32=True)
            m.tensor(b + "ssm_dt.bias", d["v_heads"])
            m.tensor(b + "ssm_a", d["v_heads"])
            if qwen35:
                m.tensor(b + "ssm_beta.weight", h, d["v_heads"])
                m.tensor(b + "ssm_alpha.weight", h, d["v_heads"])
            else:
                m.tensor(b + "ssm_ba.weight", h, 2 * d["v_heads"])
            m.tensor(b + "ssm_norm.weight", d["k_head_dim"])
            m.tensor(b + "ssm_out.weight", value_dim, h)
        m.experts(b, h, ff, ne)
        m.tensor(b + "ffn_gate_inp_shexp.weight", h)
        m.tensor(b + "ffn_gate_shexp.weight", h, sh)
        m.tensor(b + "ffn_up_shexp.weight", h, sh)
        m.tensor(b + "ffn_down_shexp.weight", sh, h)
        if i >= n:  # MTP block (src/models/qwen3next.cpp load_block_mtp)
            m.tensor(b + "nextn.eh_proj.weight", 2 * h, h)
            m.tensor(b + "nextn.enorm.weight", h)
            m.tensor(b + "nextn.hnorm.weight", h)
            m.tensor(b + "nextn.shared_head_norm.weight", h)
