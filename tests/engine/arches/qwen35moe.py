"""Qwen3.5 / Qwen3.6 MoE (`qwen35moe`): Qwen3-Next's layers (gated delta-net layers with a
per-sequence F32 recurrent state, gated full attention every `full_attention_interval` layers or as
`attention.recurrent_layers` lists, MoE with a gated shared expert), with separate `ssm_beta` and
`ssm_alpha` projections where Qwen3-Next has one `ssm_ba`, multi-section rope
(`rope.dimension_sections`, required), and an optional trailing MTP block.

REAL is Qwen/Qwen3.5-35B-A3B (transformers' Qwen3_5MoeTextConfig defaults, documented as this
shape): hidden_size 2048, num_hidden_layers 40, full attention every 4th layer, 16 heads, 2 KV heads,
head_dim 256, partial_rotary_factor 0.25 (rope dim 64, sections [11, 11, 10, 0]), rope_theta
10000000, num_experts 256, num_experts_per_tok 8, moe_intermediate_size 512,
shared_expert_intermediate_size 512, linear_conv_kernel_dim 4, linear_key_head_dim 128,
linear_value_head_dim 128, linear_num_key_heads 16, linear_num_value_heads 32, vocab_size 248320,
tie_word_embeddings false; conversion/qwen.py appends the MTP layer as block 40
(nextn_predict_layers 1). Tensors as src/models/qwen35moe.cpp creates them.
"""
from . import qwen3next

ARCH = "qwen35moe"
REAL = dict(layers=40, nextn=1, interval=4, recurrent=None, hidden=2048, heads=16, kv_heads=2,
            head_dim=256, rope_dim=64, sections=[11, 11, 10, 0], experts=256, experts_used=8,
            expert_ffn=512, shexp_ffn=512, d_conv=4, k_head_dim=128, k_heads=16, v_heads=32,
            vocab=248320, context=262144)
# SMALL takes the interval's pattern with its MTP block, where qwen3next's lists its layers.
SMALL = dict(layers=4, nextn=1, interval=2, recurrent=None, hidden=128, heads=2, kv_heads=1,
             head_dim=64, rope_dim=16, sections=[3, 3, 2, 0], experts=4, experts_used=2,
             expert_ffn=64, shexp_ffn=64, d_conv=4, k_head_dim=32, k_heads=2, v_heads=4,
             vocab=1024, context=4096)


def write(m, d):
    qwen3next.write(m, d, qwen35=True)
