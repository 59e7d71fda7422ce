"""GLM-4.5 MoE (`glm4moe`): GQA attention with Q/K/V biases and partial RoPE, a dense
leading block, MoE blocks with a shared expert and a routing bias (exp_probs_b), and a
NextN/MTP block appended after the trunk. Written the way this tree's converter writes it
(conversion/glm.py `Glm4MoeModel`): block_count = num_hidden_layers + num_nextn_predict_layers
and `nextn_predict_layers` = 1; the last block carries the full layer plus nextn.* tensors.
llama.cpp skips that block's weights unless MTP speculative decoding is asked for
(`--spec-type draft-mtp` → load_mtp; src/models/glm4-moe.cpp:38-40) and gives it no KV cell
in the main context (src/llama-model.cpp:2798-2803).

REAL: zai-org/GLM-4.5-Air, config.json: hidden_size 4096, num_hidden_layers 46,
num_attention_heads 96, num_key_value_heads 8, head_dim 128, partial_rotary_factor 0.5,
attention_bias true, use_qk_norm false, intermediate_size 10944, first_k_dense_replace 1,
moe_intermediate_size 1408, n_routed_experts 128, num_experts_per_tok 8, n_shared_experts 1,
n_group 1, topk_group 1, norm_topk_prob true, routed_scaling_factor 1.0,
num_nextn_predict_layers 1, vocab_size 151552, max_position_embeddings 131072,
rope_theta 1000000, rms_norm_eps 1e-5, tie_word_embeddings false.
"""
ARCH = "glm4moe"
REAL = dict(layers=46, nextn=1, dense_lead=1, hidden=4096, heads=96, kv_heads=8,
            head_dim=128, ffn=10944, ffn_exp=1408, experts=128, experts_used=8, shared=1,
            vocab=151552, context=131072, qk_norm=False)
SMALL = dict(layers=3, nextn=1, dense_lead=1, hidden=256, heads=4, kv_heads=2, head_dim=64,
             ffn=512, ffn_exp=128, experts=8, experts_used=2, shared=1, vocab=1024,
             context=4096, qk_norm=True)


def write(m, d):
    h, hd = d["hidden"], d["head_dim"]
    q, kv = d["heads"] * hd, d["kv_heads"] * hd
    n_all = d["layers"] + d["nextn"]
    m.key("block_count", n_all)                 # trunk + NextN blocks
    m.key("context_length", d["context"])
    m.key("embedding_length", h)
    m.key("feed_forward_length", d["ffn"])
    m.heads(d, lengths=False)
    m.key("rope.freq_base", 1000000.0)
    m.key("attention.layer_norm_rms_epsilon", 1e-5)
    m.key("expert_count", d["experts"])
    m.key("expert_used_count", d["experts_used"])
    m.key("expert_group_count", 1)
    m.key("expert_group_used_count", 1)
    m.key("attention.key_length", hd)
    m.key("attention.value_length", hd)
    m.key("rope.dimension_count", hd // 2)      # partial_rotary_factor 0.5
    m.key("expert_feed_forward_length", d["ffn_exp"])
    m.key("expert_shared_count", d["shared"])
    m.key("leading_dense_block_count", d["dense_lead"])
    m.key("expert_gating_func", 2)              # sigmoid
    m.key("expert_weights_scale", 1.0)
    m.key("expert_weights_norm", True)
    m.key("nextn_predict_layers", d["nextn"])
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])

    m.tensor("token_embd.weight", h, d["vocab"])
    for i in range(n_all):
        b = f"blk.{i}."
        m.tensor(b + "attn_norm.weight", h)
        m.tensor(b + "attn_q.weight", h, q)
        m.tensor(b + "attn_k.weight", h, kv)
        m.tensor(b + "attn_v.weight", h, kv)
        m.tensor(b + "attn_q.bias", q)
        m.tensor(b + "attn_k.bias", kv)
        m.tensor(b + "attn_v.bias", kv)
        m.tensor(b + "attn_output.weight", q, h)
        if d["qk_norm"]:  # GLM-4.5 (355B) has them, GLM-4.5-Air does not
            m.tensor(b + "attn_q_norm.weight", hd)
            m.tensor(b + "attn_k_norm.weight", hd)
        m.tensor(b + "post_attention_norm.weight", h)
        if i < d["dense_lead"]:
            m.tensor(b + "ffn_gate.weight", h, d["ffn"])
            m.tensor(b + "ffn_up.weight", h, d["ffn"])
            m.tensor(b + "ffn_down.weight", d["ffn"], h)
        else:
            fe, ne, sh = d["ffn_exp"], d["experts"], d["ffn_exp"] * d["shared"]
            m.tensor(b + "ffn_gate_inp.weight", h, ne, f32=True)
            m.tensor(b + "exp_probs_b.bias", ne)
            m.tensor(b + "ffn_gate_exps.weight", h, fe, ne)
            m.tensor(b + "ffn_up_exps.weight", h, fe, ne)
            m.tensor(b + "ffn_down_exps.weight", fe, h, ne)
            m.tensor(b + "ffn_gate_shexp.weight", h, sh)
            m.tensor(b + "ffn_up_shexp.weight", h, sh)
            m.tensor(b + "ffn_down_shexp.weight", sh, h)
        if i >= d["layers"]:  # NextN/MTP block (GLM-4.5 ships no nextn embed/head copies)
            m.tensor(b + "nextn.eh_proj.weight", 2 * h, h)
            m.tensor(b + "nextn.enorm.weight", h)
            m.tensor(b + "nextn.hnorm.weight", h)
            m.tensor(b + "nextn.shared_head_norm.weight", h)
    m.output(h, d["vocab"])
