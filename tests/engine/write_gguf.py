#!/usr/bin/env python3
"""Writes a small Llama GGUF with random weights that llama.cpp loads and generates from.

    python3 tests/engine/write_gguf.py OUT.gguf --layers 8 --hidden 512 --heads 8 \
        --kv-heads 4 --ffn 1408 --vocab 4096 [--tied] [--experts 4 --experts-used 2]

F16 weights (llama-quantize makes the quantized ones), a SentencePiece-style vocabulary
with the 256 byte tokens llama.cpp's tokenizer falls back to, and the hyperparameters the
llama architecture requires. With `--experts`, each layer's MLP is a Mixtral-style mixture
(llama.cpp's llama architecture with `expert_count`: a router `ffn_gate_inp` and stacked
`ffn_{gate,up,down}_exps`, each expert `--ffn` wide). Uses `gguf` (gguf-py, llama.cpp's own writer).

With `--sparse TYPE` (e.g. `q8_0`) the file declares every matrix in TYPE and holds no data:
the header is written and the file extended to its full size as a sparse file, so models of
real size (tens of GB) cost no disk. llama.cpp can size such a file (`llama-fit-params`,
which loads with `no_alloc`) but not run it.
"""
import argparse
import os
import sys

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter, LlamaFileType

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from arches.common import finish, vocabulary  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=0, help="default: hidden / heads")
    p.add_argument("--ffn", type=int, default=1408)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--context", type=int, default=8192)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--experts", type=int, default=0, help="routed experts per layer; 0: a dense MLP")
    p.add_argument("--experts-used", type=int, default=2)
    p.add_argument("--name", default="stageplan-test")
    p.add_argument("--sparse", metavar="TYPE", help="declare matrices in TYPE (e.g. q8_0), write no data")
    a = p.parse_args()
    sparse = GGMLQuantizationType[a.sparse.upper()] if a.sparse else None

    rng = np.random.default_rng(11)
    head_dim = a.head_dim or a.hidden // a.heads

    def weight(*shape):
        if sparse is not None:
            return (shape, sparse)
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    def norm(n):
        if sparse is not None:
            return ((n,), GGMLQuantizationType.F32)
        return np.ones(n, dtype=np.float32)

    w = GGUFWriter(a.out, "llama")
    data_bytes = 0

    def add_tensor(name, value):
        """A tensor with data, or with `--sparse` its declaration: (numpy shape, type)."""
        nonlocal data_bytes
        if isinstance(value, np.ndarray):
            w.add_tensor(name, value)
            return
        shape, ty = value
        block, size = GGML_QUANT_SIZES[ty]
        elements = int(np.prod(shape))
        assert shape[-1] % block == 0, (name, shape, ty)
        nbytes = elements // block * size
        w.add_tensor_info(name, shape, np.float32, nbytes, raw_dtype=ty)
        data_bytes += -(-nbytes // w.data_alignment) * w.data_alignment

    w.add_name(a.name)
    w.add_file_type(LlamaFileType[f"MOSTLY_{sparse.name}"] if sparse is not None else LlamaFileType.MOSTLY_F16)
    w.add_block_count(a.layers)
    w.add_context_length(a.context)
    w.add_embedding_length(a.hidden)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(a.vocab)
    if a.experts:
        w.add_expert_count(a.experts)
        w.add_expert_used_count(a.experts_used)
    tokens, scores, types = vocabulary(a.vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)

    add_tensor("token_embd.weight", weight(a.vocab, a.hidden))
    for i in range(a.layers):
        add_tensor(f"blk.{i}.attn_norm.weight", norm(a.hidden))
        add_tensor(f"blk.{i}.attn_q.weight", weight(a.heads * head_dim, a.hidden))
        add_tensor(f"blk.{i}.attn_k.weight", weight(a.kv_heads * head_dim, a.hidden))
        add_tensor(f"blk.{i}.attn_v.weight", weight(a.kv_heads * head_dim, a.hidden))
        add_tensor(f"blk.{i}.attn_output.weight", weight(a.hidden, a.heads * head_dim))
        add_tensor(f"blk.{i}.ffn_norm.weight", norm(a.hidden))
        if a.experts:
            # numpy shapes are ggml's reversed: ggml's {n_embd, n_ff, n_expert}.
            router = weight(a.experts, a.hidden)
            if sparse is None:
                router = router.astype(np.float32)
            else:
                router = (router[0], GGMLQuantizationType.F32)
            add_tensor(f"blk.{i}.ffn_gate_inp.weight", router)
            add_tensor(f"blk.{i}.ffn_gate_exps.weight", weight(a.experts, a.ffn, a.hidden))
            add_tensor(f"blk.{i}.ffn_up_exps.weight", weight(a.experts, a.ffn, a.hidden))
            add_tensor(f"blk.{i}.ffn_down_exps.weight", weight(a.experts, a.hidden, a.ffn))
        else:
            add_tensor(f"blk.{i}.ffn_gate.weight", weight(a.ffn, a.hidden))
            add_tensor(f"blk.{i}.ffn_up.weight", weight(a.ffn, a.hidden))
            add_tensor(f"blk.{i}.ffn_down.weight", weight(a.hidden, a.ffn))
    add_tensor("output_norm.weight", norm(a.hidden))
    if not a.tied:
        add_tensor("output.weight", weight(a.vocab, a.hidden))
    finish(w, a.out, sparse is not None, data_bytes)


if __name__ == "__main__":
    main()
