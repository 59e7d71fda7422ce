"""DeepSeek-V2 (`deepseek2`): multi-head latent attention (MLA), a dense leading block, then
MoE blocks with shared experts. Written the way this tree's converter writes DeepSeek-V2
(conversion/deepseek.py `DeepseekV2Model`): head_count_kv = 1, key_length = kv_lora_rank +
rope dim, value_length = kv_lora_rank, key/value_length_mla = the per-head decompressed
sizes, and kv_b split into attn_k_b / attn_v_b, so llama.cpp takes its MLA path
(`hparams.is_mla()`, src/llama-hparams.cpp:298) and caches one 576-wide K row per token
and no V (src/llama-kv-cache.cpp:231).

REAL: deepseek-ai/DeepSeek-V2-Lite, config.json: hidden_size 2048, intermediate_size 10944,
num_hidden_layers 27, num_attention_heads 16 (num_key_value_heads 16 in the HF config; the
converter writes 1), q_lora_rank null, kv_lora_rank 512, qk_nope_head_dim 128,
qk_rope_head_dim 64, v_head_dim 128, first_k_dense_replace 1, moe_intermediate_size 1408,
n_routed_experts 64, num_experts_per_tok 6, n_shared_experts 2, n_group 1, topk_group 1,
scoring_func softmax, norm_topk_prob false, routed_scaling_factor 1.0, vocab_size 102400,
max_position_embeddings 163840, rope_theta 10000, rms_norm_eps 1e-6, rope_scaling yarn
(factor 40, original_max_position_embeddings 4096, beta_fast 32, beta_slow 1,
mscale 0.707, mscale_all_dim 0.707), tie_word_embeddings false.

SMALL uses a query LoRA (q_lora_rank > 0: attn_q_a / attn_q_a_norm / attn_q_b, as the full
DeepSeek-V2 / V3 write it) so that the loader's non-lite path is exercised too; REAL is the
lite layout (attn_q, no q_lora_rank key: llama.cpp only reads it when n_layer is not 26/27,
src/models/deepseek2.cpp:8-14).
"""
ARCH = "deepseek2"
REAL = dict(layers=27, dense_lead=1, hidden=2048, heads=16, q_lora=0, kv_lora=512,
            qk_nope=128, qk_rope=64, v_head=128, ffn=10944, ffn_exp=1408, experts=64,
            experts_used=6, shared=2, vocab=102400, context=163840)
SMALL = dict(layers=4, dense_lead=1, hidden=256, heads=4, q_lora=96, kv_lora=128,
             qk_nope=64, qk_rope=32, v_head=64, ffn=512, ffn_exp=128, experts=8,
             experts_used=2, shared=2, vocab=1024, context=4096)


def write(m, d):
    h, nh = d["hidden"], d["heads"]
    kv_lora, nope, rope, v_head = d["kv_lora"], d["qk_nope"], d["qk_rope"], d["v_head"]
    k_mla = nope + rope
    m.key("block_count", d["layers"])
    m.key("context_length", d["context"])
    m.key("embedding_length", h)
    m.key("feed_forward_length", d["ffn"])
    m.key("attention.head_count", nh)
    m.key("attention.head_count_kv", 1)  # MLA as MQA: the converter forces 1
    m.key("rope.freq_base", 10000.0)
    m.key("rope.scaling.type", "yarn")
    m.key("rope.scaling.factor", 40.0)
    m.key("rope.scaling.original_context_length", 4096)
    m.key("rope.scaling.yarn_beta_fast", 32.0)
    m.key("rope.scaling.yarn_beta_slow", 1.0)
    m.key("attention.layer_norm_rms_epsilon", 1e-6)
    m.key("expert_count", d["experts"])
    m.key("expert_used_count", d["experts_used"])
    m.key("expert_group_count", 1)
    m.key("expert_group_used_count", 1)
    m.key("expert_gating_func", 1)  # softmax
    m.key("leading_dense_block_count", d["dense_lead"])
    m.key("vocab_size", d["vocab"])
    if d["q_lora"]:
        m.key("attention.q_lora_rank", d["q_lora"])
    m.key("attention.kv_lora_rank", kv_lora)
    m.key("attention.key_length", kv_lora + rope)     # the cached K row: latent + rope part
    m.key("attention.value_length", kv_lora)          # V = the latent (a view of K)
    m.key("attention.key_length_mla", k_mla)          # decompressed per-head K
    m.key("attention.value_length_mla", v_head)       # decompressed per-head V
    m.key("expert_feed_forward_length", d["ffn_exp"])
    m.key("expert_shared_count", d["shared"])
    m.key("expert_weights_scale", 1.0)
    m.key("rope.dimension_count", rope)
    m.key("rope.scaling.yarn_log_multiplier", 0.1 * 0.707)
    m.vocab(d["vocab"])

    m.tensor("token_embd.weight", h, d["vocab"])
    for i in range(d["layers"]):
        b = f"blk.{i}."
        m.tensor(b + "attn_norm.weight", h)
        if d["q_lora"]:
            m.tensor(b + "attn_q_a.weight", h, d["q_lora"])
            m.tensor(b + "attn_q_a_norm.weight", d["q_lora"])
            m.tensor(b + "attn_q_b.weight", d["q_lora"], nh * k_mla)
        else:
            m.tensor(b + "attn_q.weight", h, nh * k_mla)
        m.tensor(b + "attn_kv_a_mqa.weight", h, kv_lora + rope)
        m.tensor(b + "attn_kv_a_norm.weight", kv_lora)
        m.tensor(b + "attn_k_b.weight", nope, kv_lora, nh)
        m.tensor(b + "attn_v_b.weight", kv_lora, v_head, nh)
        m.tensor(b + "attn_output.weight", nh * v_head, h)
        m.tensor(b + "ffn_norm.weight", h)
        if i < d["dense_lead"]:
            m.tensor(b + "ffn_gate.weight", h, d["ffn"])
            m.tensor(b + "ffn_up.weight", h, d["ffn"])
            m.tensor(b + "ffn_down.weight", d["ffn"], h)
        else:
            fe, ne, sh = d["ffn_exp"], d["experts"], d["ffn_exp"] * d["shared"]
            m.experts(b, h, fe, ne)
            m.tensor(b + "ffn_gate_shexp.weight", h, sh)
            m.tensor(b + "ffn_up_shexp.weight", h, sh)
            m.tensor(b + "ffn_down_shexp.weight", sh, h)
    m.output(h, d["vocab"])
