"""Gemma 3n text (`gemma3n`): per-layer sliding-window pattern (bool array, as the converter
writes it from `layer_types`), KV cache only in the first 20 layers (hard-coded
`n_layer_kv_from_start = 20`, src/models/gemma3n.cpp:7; layers >= 20 reuse the cache of layer
18 (SWA) or 19 (full), src/llama-model.cpp:2780-2788), per-layer token embeddings
(`per_layer_token_embd`, n_vocab rows of 256 x n_layer, kept with the input layer on the
host), AltUp (4 streams) and LAuReL (rank 64) blocks. 256 / 4 / 64 / 20 are constants in
llama.cpp (src/llama-hparams.h:264-267, gemma3n.cpp:7): the `altup.*`,
`embedding_length_per_layer_input` and `attention.shared_kv_layers` keys the converter writes
are not read for this arch (written here anyway, as a converted file has them).

REAL: google/gemma-3n-E4B (config.json text_config: hidden_size 2048, num_hidden_layers 35,
num_attention_heads 8, num_key_value_heads 2, head_dim 256, intermediate_size 16384,
vocab_size 262400 (per-layer embeddings 262144, padded to 262400 by the converter),
hidden_size_per_layer_input 256, max_position_embeddings 32768, sliding_window 512,
layer_types (4 x sliding_attention, full_attention) x 7, num_kv_shared_layers 15,
altup_num_inputs 4, altup_active_idx 0, laurel_rank 64, rope_theta 1000000,
rope_local_base_freq 10000, final_logit_softcapping 30.0, rms_norm_eps 1e-6,
activation_sparsity_pattern [0.95] x 10 + [0.0] x 25)."""
from gguf import GGMLQuantizationType

ARCH = "gemma3n"
REAL = dict(layers=35, hidden=2048, heads=8, kv_heads=2, head_dim=256, ffn=16384, vocab=262400,
            context=32768, swa=512, shared_kv=15)
# 21 layers: more than the 20 that own a KV cache, so layer 20 exercises the reuse path.
SMALL = dict(layers=21, hidden=128, heads=2, kv_heads=1, head_dim=64, ffn=256, vocab=512,
             context=4096, swa=128, shared_kv=1)

N_ALTUP, LAUREL_RANK, N_EMBD_ALTUP = 4, 64, 256  # llama-hparams.h:264-267 (not read from GGUF)


def _keep_f16(m, name, *ne):
    """llama-quantize keeps altup/laurel/per_layer_model_proj tensors unquantized
    (src/llama-quant.cpp:312-316): declare them F16 in a sparse file."""
    saved = m.sparse
    if saved is not None:
        m.sparse = GGMLQuantizationType.F16
    m.tensor(name, *ne)
    m.sparse = saved


def write(m, d):
    n = d["layers"]
    m.key("block_count", n)
    m.key("context_length", d["context"])
    m.key("embedding_length", d["hidden"])
    m.key("feed_forward_length", [d["ffn"]] * n)
    m.heads(d)
    m.key("attention.layer_norm_rms_epsilon", 1e-6)
    m.key("attention.sliding_window", d["swa"])  # required (gemma3n.cpp:11)
    # per-layer bool array (llama-model.cpp:3435): true = SWA; (4 SWA, 1 full) repeated
    m.key("attention.sliding_window_pattern", [(i % 5) < 4 for i in range(n)])
    m.key("attention.shared_kv_layers", d["shared_kv"])  # not read by llama.cpp for gemma3n
    m.key("rope.freq_base", 1000000.0)
    m.key("rope.freq_base_swa", 10000.0)
    m.key("final_logit_softcapping", 30.0)
    m.key("altup.active_idx", 0)
    m.key("altup.num_inputs", N_ALTUP)
    m.key("embedding_length_per_layer_input", N_EMBD_ALTUP)
    m.key("activation_sparsity_scale", [1.6448533535003662] * min(10, n) + [0.0] * max(0, n - 10))
    m.key("vocab_size", d["vocab"])
    m.vocab(d["vocab"])
    h, q, kv, hd, ff = d["hidden"], d["heads"] * d["head_dim"], d["kv_heads"] * d["head_dim"], d["head_dim"], d["ffn"]
    m.tensor("token_embd.weight", h, d["vocab"])  # output.weight absent: tied
    m.tensor("per_layer_token_embd.weight", N_EMBD_ALTUP * n, d["vocab"])
    _keep_f16(m, "per_layer_model_proj.weight", h, N_EMBD_ALTUP * n)
    m.tensor("per_layer_proj_norm.weight", N_EMBD_ALTUP)
    _keep_f16(m, "altup_proj.weight", h, h, N_ALTUP - 1)
    _keep_f16(m, "altup_unembd_proj.weight", h, h, N_ALTUP - 1)
    for i in range(n):
        b = f"blk.{i}."
        m.tensor(b + "attn_norm.weight", h)
        # every layer has K/V projections, also the layers that reuse an earlier cache
        m.tensor(b + "attn_q.weight", h, q)
        m.tensor(b + "attn_k.weight", h, kv)
        m.tensor(b + "attn_v.weight", h, kv)
        m.tensor(b + "attn_output.weight", q, h)
        m.tensor(b + "attn_q_norm.weight", hd)
        m.tensor(b + "attn_k_norm.weight", hd)
        m.tensor(b + "post_attention_norm.weight", h)
        m.ffn(b, h, ff)
        m.tensor(b + "post_ffw_norm.weight", h)
        _keep_f16(m, b + "inp_gate.weight", h, N_EMBD_ALTUP)
        _keep_f16(m, b + "proj.weight", N_EMBD_ALTUP, h)
        m.tensor(b + "post_norm.weight", h)
        _keep_f16(m, b + "altup_correct_coef.weight", N_ALTUP, N_ALTUP)
        m.tensor(b + "altup_correct_scale.weight", h)
        _keep_f16(m, b + "altup_predict_coef.weight", N_ALTUP, N_ALTUP * N_ALTUP)
        _keep_f16(m, b + "altup_router.weight", h, N_ALTUP)
        m.tensor(b + "altup_router_norm.weight", h)
        _keep_f16(m, b + "laurel_l.weight", h, LAUREL_RANK)
        _keep_f16(m, b + "laurel_r.weight", LAUREL_RANK, h)
        m.tensor(b + "laurel_post_norm.weight", h)
    m.tensor("output_norm.weight", h)
