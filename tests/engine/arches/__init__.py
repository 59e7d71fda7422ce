"""One module per architecture family: what llama.cpp needs to load a model of that family.

Each module defines `ARCH` (llama.cpp's `general.architecture`), `REAL` and `SMALL` (the
hyperparameters of a published model and of a tiny one that loads in a second) and
`write(m, d)`, which adds the family's metadata and tensors to `m` (a `common.Model`) for
hyperparameters `d`. `write_arch.py` runs them.
"""
