"""A GGUF being written: metadata and tensors in ggml's dimension order, with random data
(for models llama.cpp runs) or none (`sparse`: models of real size that llama.cpp sizes)."""
import os

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter, TokenType


class Model:
    def __init__(self, path, arch, sparse=None, seed=11, types=None):
        """`sparse`: a GGML type name (e.g. "q8_0") for every matrix, and no data written;
        `types`: tensor name → GGML type name where a tensor differs (a file type's mix, as
        `llama-quantize --dry-run` prints it)."""
        self.path = path
        self.arch = arch
        self.w = GGUFWriter(path, arch)
        self.sparse = GGMLQuantizationType[sparse.upper()] if sparse else None
        self.types = {k: GGMLQuantizationType[v.upper()] for k, v in (types or {}).items()}
        self.rng = np.random.default_rng(seed)
        self.data_bytes = 0

    def key(self, name, value):
        """`{arch}.name` (or a `general.`/`tokenizer.` key as given) with a typed value:
        int → u32, float → f32, bool, str, or a list of one of those."""
        full = name if name.startswith(("general.", "tokenizer.")) else f"{self.arch}.{name}"
        w = self.w
        if isinstance(value, bool):
            w.add_bool(full, value)
        elif isinstance(value, int):
            w.add_uint32(full, value)
        elif isinstance(value, float):
            w.add_float32(full, value)
        elif isinstance(value, str):
            w.add_string(full, value)
        elif isinstance(value, (list, tuple)):
            w.add_array(full, list(value))
        else:
            raise TypeError(f"{name}: {value!r}")

    def vocab(self, size):
        """A SentencePiece-style vocabulary of `size` tokens: <unk>, <s>, </s>, the 256 byte
        tokens llama.cpp's tokenizer falls back to, then distinct pieces."""
        tokens, scores, types = vocabulary(size)
        w = self.w
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)

    def sizes(self, d):
        """The block count, context, embedding and feed-forward sizes of hyperparameters `d`."""
        self.key("block_count", d["layers"])
        self.key("context_length", d["context"])
        self.key("embedding_length", d["hidden"])
        self.key("feed_forward_length", d["ffn"])

    def heads(self, d, lengths=True):
        """Query and KV head counts, and (with `lengths`) the head size as key and value length."""
        self.key("attention.head_count", d["heads"])
        self.key("attention.head_count_kv", d["kv_heads"])
        if lengths:
            self.key("attention.key_length", d["head_dim"])
            self.key("attention.value_length", d["head_dim"])

    def attention(self, b, h, q, kv, bias=False):
        """Block `b`'s attention norm and Q, K, V (with biases), output projections."""
        self.tensor(b + "attn_norm.weight", h)
        for name, width in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
            self.tensor(b + name + ".weight", h, width)
            if bias:
                self.tensor(b + name + ".bias", width)
        self.tensor(b + "attn_output.weight", q, h)

    def ffn(self, b, h, ffn):
        """Block `b`'s FFN norm and gated MLP."""
        self.tensor(b + "ffn_norm.weight", h)
        self.tensor(b + "ffn_gate.weight", h, ffn)
        self.tensor(b + "ffn_up.weight", h, ffn)
        self.tensor(b + "ffn_down.weight", ffn, h)

    def experts(self, b, h, ffn, n):
        """Block `b`'s router (F32) and `n` routed experts of width `ffn`."""
        self.tensor(b + "ffn_gate_inp.weight", h, n, f32=True)
        self.tensor(b + "ffn_gate_exps.weight", h, ffn, n)
        self.tensor(b + "ffn_up_exps.weight", h, ffn, n)
        self.tensor(b + "ffn_down_exps.weight", ffn, h, n)

    def output(self, h, vocab=None):
        """The final norm, and the output matrix unless the embedding is tied (`vocab` None)."""
        self.tensor("output_norm.weight", h)
        if vocab is not None:
            self.tensor("output.weight", h, vocab)

    def tensor(self, name, *ne, f32=False):
        """A tensor of ggml dimensions `ne` (row length first). Norms, biases and 1-D tensors
        are F32 (as llama.cpp's converter writes them); `f32` forces F32 for a matrix."""
        f32 = f32 or len(ne) == 1
        if self.sparse is None:
            shape = tuple(reversed(ne))
            if f32:
                data = np.ones(shape, dtype=np.float32) if len(ne) == 1 else self._random(shape).astype(np.float32)
            else:
                data = self._random(shape).astype(np.float16)
            self.w.add_tensor(name, data)
            return
        ty = self.types.get(name, GGMLQuantizationType.F32 if f32 else self.sparse)
        block, size = GGML_QUANT_SIZES[ty]
        if ne[0] % block:
            ty, (block, size) = GGMLQuantizationType.F16, GGML_QUANT_SIZES[GGMLQuantizationType.F16]
        nbytes = int(np.prod(ne)) // block * size
        self.w.add_tensor_info(name, tuple(reversed(ne)), np.float32, nbytes, raw_dtype=ty)
        self.data_bytes += -(-nbytes // self.w.data_alignment) * self.w.data_alignment

    def _random(self, shape):
        return self.rng.standard_normal(shape, dtype=np.float32) * 0.02

    def finish(self):
        finish(self.w, self.path, self.sparse is not None, self.data_bytes)


def vocabulary(size):
    """<unk>, <s>, </s>, the 256 byte tokens, then distinct pieces up to `size`."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = ["\u2581"] + [c for c in letters] + ["\u2581" + c for c in letters]
    i = 0
    while len(pieces) + len(tokens) < size:
        a, b = divmod(i, 26)
        pieces.append("\u2581" + letters[a % 26] + letters[b] + ("" if a < 26 else str(a // 26)))
        i += 1
    pieces = pieces[: size - len(tokens)]
    tokens += pieces
    types += [TokenType.NORMAL] * len(pieces)
    scores = [0.0] * 259 + [-float(k) for k in range(len(pieces))]
    assert len(tokens) == size, (len(tokens), size)
    return tokens, scores, types


def finish(w, path, sparse, data_bytes):
    """Writes `w` to `path`: header, metadata, and the tensors' data; or when `sparse`, the
    tensor infos and a hole of `data_bytes` where the data would be."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    if not sparse:
        w.write_tensors_to_file()
        w.close()
        return
    w.write_ti_data_to_file()
    out = w.fout[0]
    w.write_padding(out, out.tell())
    out.flush()
    start = out.tell()
    w.close()
    os.truncate(path, start + data_bytes)
