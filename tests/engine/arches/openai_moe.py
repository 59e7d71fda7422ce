"""gpt-oss (`gpt-oss`, llama.cpp's LLM_ARCH_OPENAI_MOE): every layer a mixture of experts
(no dense FFN), attention with per-head sinks and biases, sliding-window attention on the
even layers (layer 0 sliding, layer 1 full, ...; `load_swa_pattern(ml, 2)`), head_dim
(64) not hidden/heads (2880/64 = 45), so key_length/value_length are required.

REAL = openai/gpt-oss-20b (config.json: num_hidden_layers 24, hidden_size 2880,
intermediate_size 2880, num_attention_heads 64, num_key_value_heads 8, head_dim 64,
num_local_experts 32, experts_per_token 4, sliding_window 128, layer_types alternating
sliding/full, vocab_size 201088, max_position_embeddings 131072, rope_theta 150000,
rope_scaling yarn factor 32 over initial_context_length 4096, rms_norm_eps 1e-5,
tie_word_embeddings false). Its expert matrices ship as MXFP4 (GGML type 39: blocks of
32 weights in 17 bytes); with `--sparse` the experts here are declared MXFP4 as in the
published GGUF and every other matrix in the sparse type.
"""
from gguf import GGMLQuantizationType

ARCH = "gpt-oss"
REAL = dict(layers=24, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn_exp=2880, experts=32,
            experts_used=4, swa=128, vocab=201088, context=131072)
SMALL = dict(layers=4, hidden=256, heads=4, kv_heads=2, head_dim=64, ffn_exp=256, experts=4,
             experts_used=2, swa=128, vocab=1024, context=4096)


def _experts(m, name, *ne):
    """An expert stack: MXFP4 when the file is sparse (as the published GGUF), else f16."""
    if m.sparse is None:
        m.tensor(name, *ne)
        return
    saved, m.sparse = m.sparse, GGMLQuantizationType.MXFP4
    try:
        m.tensor(name, *ne)
    finally:
        m.sparse = saved


def write(m, d):
    m.key("block_count", d["layers"])
    m.key("context_length", d["context"])
    m.key("embedding_length", d["hidden"])
    m.key("feed_forward_length", d["ffn_exp"])
    m.key("expert_feed_forward_length", d["ffn_exp"])
    m.key("expert_count", d["experts"])
    m.key("expert_used_count", d["experts_used"])
    m.heads(d)
    m.key("attention.sliding_window", d["swa"])
    m.key("attention.layer_norm_rms_epsilon", 1e-5)
    m.key("rope.freq_base", 150000.0)
    m.key("rope.scaling.type", "yarn")
    m.key("rope.scaling.factor", 32.0)
    m.key("rope.scaling.original_context_length", 4096)
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])
    h, n_e, f = d["hidden"], d["experts"], d["ffn_exp"]
    q, kv = d["heads"] * d["head_dim"], d["kv_heads"] * d["head_dim"]
    m.tensor("token_embd.weight", h, d["vocab"])
    for i in range(d["layers"]):
        b = f"blk.{i}."
        m.attention(b, h, q, kv, bias=True)
        m.tensor(b + "attn_output.bias", h)
        m.tensor(b + "attn_sinks.weight", d["heads"])
        m.tensor(b + "post_attention_norm.weight", h)
        m.tensor(b + "ffn_gate_inp.weight", h, n_e, f32=True)  # routers stay F32 (llama-quant)
        m.tensor(b + "ffn_gate_inp.bias", n_e)
        _experts(m, b + "ffn_gate_exps.weight", h, f, n_e)
        _experts(m, b + "ffn_up_exps.weight", h, f, n_e)
        _experts(m, b + "ffn_down_exps.weight", f, h, n_e)
        m.tensor(b + "ffn_gate_exps.bias", f, n_e, f32=True)
        m.tensor(b + "ffn_up_exps.bias", f, n_e, f32=True)
        m.tensor(b + "ffn_down_exps.bias", h, n_e, f32=True)
    m.output(h, d["vocab"])
