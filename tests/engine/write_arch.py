#!/usr/bin/env python3
"""Writes a random-weight GGUF of one architecture family (`tests/engine/arches/FAMILY.py`).

    python3 tests/engine/write_arch.py FAMILY OUT.gguf [--real] [--sparse TYPE [--types DRY_RUN]]
    python3 tests/engine/write_arch.py --all DIR     # DIR/FAMILY.gguf, small, every family

Small by default (loads and generates in llama.cpp in about a second); `--real` takes the
shape of the published model the family module names; `--sparse TYPE` declares every
matrix in TYPE and writes no data (a sparse file llama.cpp sizes with `llama-fit-params`
but cannot run); `--types` takes each tensor's type from what `llama-quantize --dry-run` printed
for a file type (its own rule: `Q4_K_M`'s mix of q4_K, q6_K and f32). Uses `gguf` (gguf-py,
llama.cpp's own writer).
"""
import argparse
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from arches.common import Model  # noqa: E402


FAMILIES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "arches")


def families():
    """Every family module, by name: the files of `arches/` but the package's own."""
    names = (f[:-3] for f in os.listdir(FAMILIES_DIR) if f.endswith(".py"))
    return sorted(n for n in names if n not in ("__init__", "common"))


def dry_run_types(path):
    """Tensor name → type from `llama-quantize --dry-run` lines: `[ i/ n] NAME - [...], type =
    f16, size = … -> … (q4_K)`; a line without `->` keeps its type."""
    types = {}
    for line in open(path, encoding="utf-8"):
        parts = line.split()
        if len(parts) < 3 or not line.startswith("[") or " type = " not in line:
            continue
        name = line.split("]", 1)[1].split(" - ", 1)[0].strip()
        if "->" in line:
            types[name] = line.rsplit("(", 1)[1].split(")", 1)[0]
        else:
            types[name] = line.split(" type = ", 1)[1].split(",", 1)[0].strip()
    return types


def write(name, out, real=False, sparse=None, types=None):
    family = importlib.import_module(f"arches.{name}")
    m = Model(out, family.ARCH, sparse=sparse, types=dry_run_types(types) if types else None)
    m.key("general.name", f"stageplan-{name}")
    family.write(m, family.REAL if real else family.SMALL)
    m.finish()
    return m


def main():
    p = argparse.ArgumentParser()
    p.add_argument("family", nargs="?")
    p.add_argument("out", nargs="?")
    p.add_argument("--all", metavar="DIR", help="write DIR/FAMILY.gguf (small) for every family")
    p.add_argument("--real", action="store_true", help="the published model's shape")
    p.add_argument("--sparse", metavar="TYPE", help="declare matrices in TYPE (e.g. q8_0), write no data")
    p.add_argument("--types", metavar="DRY_RUN", help="each tensor's type from llama-quantize --dry-run's output")
    a = p.parse_args()
    if a.all:
        os.makedirs(a.all, exist_ok=True)
        for name in families():
            write(name, os.path.join(a.all, f"{name}.gguf"))
    elif a.family and a.out:
        write(a.family, a.out, a.real, a.sparse, a.types)
    else:
        p.error("give FAMILY OUT, or --all DIR")


if __name__ == "__main__":
    main()
