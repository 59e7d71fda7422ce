"""Snowflake Arctic (`arctic`): a dense residual MLP beside the routed experts in every layer
(`src/models/arctic.cpp`: `ffn_gate/up/down` of the hidden size's width, then a second norm and
128 experts). The export's `-ot` moves the dense MLP with the experts; the plan counts both.

REAL is Snowflake/snowflake-arctic-instruct: hidden_size 7168, num_hidden_layers 35,
num_attention_heads 56, num_key_value_heads 8, intermediate_size 4864, num_local_experts 128,
num_experts_per_tok 2, vocab_size 32000, max_position_embeddings 4096, rope_theta 10000.
"""
ARCH = "arctic"
REAL = dict(layers=35, hidden=7168, heads=56, kv_heads=8, head_dim=128, ffn=4864, experts=128,
            experts_used=2, vocab=32000, context=4096)
SMALL = dict(layers=4, hidden=256, heads=4, kv_heads=2, head_dim=64, ffn=128, experts=4,
             experts_used=2, vocab=1024, context=4096)


def write(m, d):
    m.sizes(d)
    m.heads(d)
    m.key("rope.dimension_count", d["head_dim"])
    m.key("rope.freq_base", 10000.0)
    m.key("attention.layer_norm_rms_epsilon", 1e-5)
    m.key("expert_count", d["experts"])
    m.key("expert_used_count", d["experts_used"])
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])
    h, q, kv = d["hidden"], d["heads"] * d["head_dim"], d["kv_heads"] * d["head_dim"]
    m.tensor("token_embd.weight", h, d["vocab"])
    for i in range(d["layers"]):
        b = f"blk.{i}."
        m.attention(b, h, q, kv)
        m.ffn(b, h, h)  # the residual MLP: the hidden size's width
        m.tensor(b + "ffn_norm_exps.weight", h)
        m.experts(b, h, d["ffn"], d["experts"])
    m.output(h, d["vocab"])
