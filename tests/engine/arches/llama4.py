"""Llama 4 (`llama4`): chunked attention (iRoPE) on 3 of every 4 layers, the 4th full
attention without RoPE (`load_swa_pattern(ml, 4)`, `n_no_rope_layer_step` = 4); the chunk
is fixed at 8192 by llama.cpp whatever the GGUF says (only `attention.sliding_window` = 0
turns chunking off). Mixture-of-experts layers every `interleave_moe_layer_step` layers,
each with one shared expert of the expert width; the other layers a dense FFN of
`feed_forward_length`.

REAL = meta-llama/Llama-4-Scout-17B-16E (text_config: num_hidden_layers 48,
hidden_size 5120, intermediate_size 8192 (experts), intermediate_size_mlp 16384 (dense),
num_attention_heads 40, num_key_value_heads 8, head_dim 128, num_local_experts 16,
num_experts_per_tok 1, interleave_moe_layer_step 1 (every layer MoE), attention_chunk_size
8192, no_rope_layer_interval 4, vocab_size 202048, max_position_embeddings 10485760,
rope_theta 500000, rope_scaling llama3 factor 16 (rope_freqs tensor), rms_norm_eps 1e-5,
use_qk_norm true). SMALL interleaves (step 2: layers 1 and 3 MoE) as Maverick does.
"""
ARCH = "llama4"
REAL = dict(layers=48, hidden=5120, heads=40, kv_heads=8, head_dim=128, ffn=16384, ffn_exp=8192,
            experts=16, experts_used=1, moe_step=1, vocab=202048, context=10485760)
SMALL = dict(layers=4, hidden=256, heads=4, kv_heads=2, head_dim=64, ffn=512, ffn_exp=256,
             experts=4, experts_used=1, moe_step=2, vocab=1024, context=4096)


def write(m, d):
    m.sizes(d)
    m.key("expert_feed_forward_length", d["ffn_exp"])
    m.key("expert_count", d["experts"])
    m.key("expert_used_count", d["experts_used"])
    m.key("interleave_moe_layer_step", d["moe_step"])
    m.heads(d)
    m.key("rope.dimension_count", d["head_dim"])
    m.key("rope.freq_base", 500000.0)
    m.key("attention.layer_norm_rms_epsilon", 1e-5)
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])
    h, q, kv = d["hidden"], d["heads"] * d["head_dim"], d["kv_heads"] * d["head_dim"]
    f, fe, n_e = d["ffn"], d["ffn_exp"], d["experts"]
    m.tensor("token_embd.weight", h, d["vocab"])
    m.tensor("rope_freqs.weight", d["head_dim"] // 2)
    for i in range(d["layers"]):
        b = f"blk.{i}."
        m.attention(b, h, q, kv)
        m.tensor(b + "ffn_norm.weight", h)
        if (i + 1) % d["moe_step"] == 0:
            m.tensor(b + "ffn_gate_inp.weight", h, n_e, f32=True)  # routers stay F32 (llama-quant)
            m.tensor(b + "ffn_gate_exps.weight", h, fe, n_e)
            m.tensor(b + "ffn_up_exps.weight", h, fe, n_e)
            m.tensor(b + "ffn_down_exps.weight", fe, h, n_e)
            m.tensor(b + "ffn_gate_shexp.weight", h, fe)
            m.tensor(b + "ffn_up_shexp.weight", h, fe)
            m.tensor(b + "ffn_down_shexp.weight", fe, h)
        else:
            m.tensor(b + "ffn_gate.weight", h, f)
            m.tensor(b + "ffn_up.weight", h, f)
            m.tensor(b + "ffn_down.weight", f, h)
    m.output(h, d["vocab"])
