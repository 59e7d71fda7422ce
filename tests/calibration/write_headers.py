#!/usr/bin/env python3
"""Writes the GGUF headers `offload_published.rs` plans published runs of file-only models
from (`tests/calibration/models/*.gguf`): the family's published shape
(`tests/engine/arches/`), each tensor typed as the file type's mix, and the header alone —
no data, and a 300-token vocabulary list (the planner reads the vocabulary's size from the
embedding's shape), so a 35B model is a 60 KB fixture.

    python3 tests/calibration/write_headers.py LLAMA_CPP_BIN_DIR

The types come from llama.cpp's own `llama-quantize --dry-run` on an F16 file of the shape
(written sparse, then deleted). Uses `gguf` (gguf-py, llama.cpp's own writer).
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "engine"))
import write_arch  # noqa: E402
from arches import common  # noqa: E402

# (fixture name, family, file type): Qwen3.5-35B-A3B at Q4_K_M and Q8_0, as the RTX 5080
# runs of offload.csv used them.
HEADERS = [
    ("qwen3.5-35b-a3b-q4_k_m", "qwen35moe", "Q4_K_M"),
    ("qwen3.5-35b-a3b-q8_0", "qwen35moe", "Q8_0"),
]


def header_only(path, data_bytes):
    """Cuts a sparse file to its header: everything before the tensors' data."""
    os.truncate(path, os.path.getsize(path) - data_bytes)


def main():
    bin_dir = sys.argv[1]
    out_dir = os.path.join(HERE, "models")
    os.makedirs(out_dir, exist_ok=True)
    for name, family, ftype in HEADERS:
        with tempfile.TemporaryDirectory() as tmp:
            f16 = os.path.join(tmp, "f16.gguf")
            write_arch.write(family, f16, real=True, sparse="f16")
            dry = subprocess.run([os.path.join(bin_dir, "llama-quantize"), "--dry-run", f16, ftype],
                                 capture_output=True, text=True, check=True)
            types = os.path.join(tmp, "types.txt")
            with open(types, "w", encoding="utf-8") as f:
                f.write(dry.stdout + dry.stderr)
            out = os.path.join(out_dir, f"{name}.gguf")
            vocab = common.Model.vocab
            common.Model.vocab = lambda self, size: vocab(self, 300)
            try:
                m = write_arch.write(family, out, real=True, sparse="f16", types=types)
            finally:
                common.Model.vocab = vocab
            header_only(out, m.data_bytes)
            print(f"{out}: {os.path.getsize(out)} bytes")


if __name__ == "__main__":
    main()
