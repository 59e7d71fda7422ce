#!/usr/bin/env python3
"""Writes a random-weight LLaVA vision projector (`--mmproj`, projector type `mlp`), so the
engine tests can measure what llama-server allocates for a vision encoder beside a text model.

    python3 tests/engine/write_mmproj.py OUT.gguf --text-hidden 4096 [--image 336 --patch 14 \
        --hidden 1024 --ffn 4096 --heads 16 --blocks 24 --proj 4096] [--type f16|f32] [--sparse]

CLIP ViT-L/14-336's shape by default: class embedding, pre-layernorm, B blocks (llava runs the
first B-1), no post-layernorm, then mm.0 (hidden → proj), GELU, mm.2 (proj → text hidden).
`--text-hidden` must equal the text model's hidden size, or llama.cpp refuses the pair. The
matrices and the patch kernel are `--type`; position and class embeddings, norms and biases
are F32, as convert_hf_to_gguf.py writes them. `--sparse` writes no data (a sparse file of
zero weights): fast at real size, and llama-server still loads and runs it. Uses `gguf`
(gguf-py, llama.cpp's own writer) through `arches.common`.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from arches.common import Model  # noqa: E402

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def write(out, text_hidden, image, patch, hidden, ffn, heads, blocks, proj, ty="f16", sparse=False):
    if image % patch or hidden % heads:
        raise ValueError("--image must be a multiple of --patch, --hidden of --heads")
    if ffn == hidden:
        raise ValueError("--ffn must differ from --hidden (llama.cpp would swap up and down)")
    f32 = ty == "f32"
    m = Model(out, "clip", sparse=ty if sparse else None)
    m.key("general.name", "stageplan-mmproj")
    m.key("general.file_type", 0 if f32 else 1)
    m.key("has_vision_encoder", True)
    m.key("has_llava_projector", True)
    m.key("projector_type", "mlp")
    m.key("use_gelu", False)  # CLIP's quick GELU
    m.key("vision.image_size", image)
    m.key("vision.patch_size", patch)
    m.key("vision.embedding_length", hidden)
    m.key("vision.feed_forward_length", ffn)
    m.key("vision.projection_dim", proj)
    m.key("vision.attention.head_count", heads)
    m.key("vision.attention.layer_norm_epsilon", 1e-5)
    m.key("vision.block_count", blocks)
    m.key("vision.image_mean", CLIP_MEAN)
    m.key("vision.image_std", CLIP_STD)

    e, n_pos = hidden, (image // patch) ** 2 + 1
    m.tensor("v.class_embd", e)
    m.tensor("v.patch_embd.weight", patch, patch, 3, e, f32=f32)
    m.tensor("v.position_embd.weight", e, n_pos, f32=True)
    m.tensor("v.pre_ln.weight", e)
    m.tensor("v.pre_ln.bias", e)
    for i in range(blocks):
        b = f"v.blk.{i}."
        for name in ("ln1", "ln2"):
            m.tensor(b + name + ".weight", e)
            m.tensor(b + name + ".bias", e)
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            m.tensor(b + name + ".weight", e, e, f32=f32)
            m.tensor(b + name + ".bias", e)
        m.tensor(b + "ffn_up.weight", e, ffn, f32=f32)
        m.tensor(b + "ffn_up.bias", ffn)
        m.tensor(b + "ffn_down.weight", ffn, e, f32=f32)
        m.tensor(b + "ffn_down.bias", e)
    m.tensor("mm.0.weight", e, proj, f32=f32)
    m.tensor("mm.0.bias", proj)
    m.tensor("mm.2.weight", proj, text_hidden, f32=f32)
    m.tensor("mm.2.bias", text_hidden)
    m.finish()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--text-hidden", type=int, required=True, help="the text model's hidden size")
    p.add_argument("--image", type=int, default=336, help="image side S (pixels)")
    p.add_argument("--patch", type=int, default=14, help="patch side P; (S/P)^2 tokens")
    p.add_argument("--hidden", type=int, default=1024, help="vision width E")
    p.add_argument("--ffn", type=int, default=4096, help="vision feed-forward width F")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--blocks", type=int, default=24, help="blocks in the file (llava runs B-1)")
    p.add_argument("--proj", type=int, default=4096, help="mm.0 width D")
    p.add_argument("--type", choices=("f16", "f32"), default="f16", help="the matrices' type")
    p.add_argument("--sparse", action="store_true", help="write no data (zero weights, sparse file)")
    a = p.parse_args()
    write(a.out, a.text_hidden, a.image, a.patch, a.hidden, a.ffn, a.heads, a.blocks, a.proj, a.type, a.sparse)


if __name__ == "__main__":
    main()
