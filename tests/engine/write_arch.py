#!/usr/bin/env python3
"""Writes a random-weight GGUF of one architecture family (`tests/engine/arches/FAMILY.py`).

    python3 tests/engine/write_arch.py FAMILY OUT.gguf [--real] [--sparse TYPE]
    python3 tests/engine/write_arch.py --all DIR     # DIR/FAMILY.gguf, small, every family

Small by default (loads and generates in llama.cpp in about a second); `--real` takes the
shape of the published model the family module names; `--sparse TYPE` declares every
matrix in TYPE and writes no data (a sparse file llama.cpp sizes with `llama-fit-params`
but cannot run). Uses `gguf` (gguf-py, llama.cpp's own writer).
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


def write(name, out, real=False, sparse=None):
    family = importlib.import_module(f"arches.{name}")
    m = Model(out, family.ARCH, sparse=sparse)
    m.key("general.name", f"stageplan-{name}")
    family.write(m, family.REAL if real else family.SMALL)
    m.finish()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("family", nargs="?")
    p.add_argument("out", nargs="?")
    p.add_argument("--all", metavar="DIR", help="write DIR/FAMILY.gguf (small) for every family")
    p.add_argument("--real", action="store_true", help="the published model's shape")
    p.add_argument("--sparse", metavar="TYPE", help="declare matrices in TYPE (e.g. q8_0), write no data")
    a = p.parse_args()
    if a.all:
        os.makedirs(a.all, exist_ok=True)
        for name in families():
            write(name, os.path.join(a.all, f"{name}.gguf"))
    elif a.family and a.out:
        write(a.family, a.out, a.real, a.sparse)
    else:
        p.error("give FAMILY OUT, or --all DIR")


if __name__ == "__main__":
    main()
