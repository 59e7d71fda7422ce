"""Phi-3 (`phi3`): full attention in every layer, fused QKV and fused gate+up FFN;
Phi-3-mini-4k-instruct's shape.

REAL = microsoft/Phi-3-mini-4k-instruct config.json: hidden_size 3072,
intermediate_size 8192, num_hidden_layers 32, num_attention_heads 32,
num_key_value_heads 32 (head size 3072/32 = 96), vocab_size 32064,
max_position_embeddings 4096, original_max_position_embeddings 4096, rope_theta 10000,
rms_norm_eps 1e-5, sliding_window 2047, rope_scaling null, tie_word_embeddings false.

The converter (conversion/phi.py Phi3MiniModel.set_gguf_parameters) writes
attention.sliding_window (2047 here; 0 for Phi-4). llama.cpp reads it and then DISABLES
SWA (src/models/phi3.cpp:13-24: swa_type NONE, n_swa 0, pattern 1), so the cache is
full-size in every layer. The key is written here so the sizer sees the same metadata.
No rope factor tensors: the 4k model has no rope_scaling (the 128k variants add
rope_factors_long/short, n_rot/2 F32 each, shared by all layers).
"""
from gguf import TokenType

from .common import Model

ARCH = "phi3"
REAL = dict(layers=32, hidden=3072, heads=32, kv_heads=32, ffn=8192, vocab=32064, context=4096, swa=2047)
SMALL = dict(layers=4, hidden=256, heads=4, kv_heads=4, ffn=512, vocab=1024, context=4096, swa=63)


def write(m, d):
    h = d["hidden"]
    head_dim = h // d["heads"]
    m.key("block_count", d["layers"])
    m.key("context_length", d["context"])
    m.key("rope.scaling.original_context_length", d["context"])
    m.key("embedding_length", h)
    m.key("feed_forward_length", d["ffn"])
    m.heads(d, lengths=False)
    m.key("attention.layer_norm_rms_epsilon", 1e-5)
    m.key("rope.dimension_count", head_dim)
    m.key("rope.freq_base", 10000.0)
    m.key("attention.sliding_window", d["swa"])
    m.key("vocab_size", d["vocab"])
    vocab(m, d["vocab"])
    kv = d["kv_heads"] * head_dim
    m.tensor("token_embd.weight", h, d["vocab"])
    for i in range(d["layers"]):
        b = f"blk.{i}."
        m.tensor(b + "attn_norm.weight", h)
        m.tensor(b + "attn_qkv.weight", h, h + 2 * kv)
        m.tensor(b + "attn_output.weight", h, h)
        m.tensor(b + "ffn_norm.weight", h)
        m.tensor(b + "ffn_up.weight", h, 2 * d["ffn"])
        m.tensor(b + "ffn_down.weight", d["ffn"], h)
    m.output(h, d["vocab"])


def vocab(m, size):
    """The common SentencePiece-style vocabulary (`Model.vocab`) with Phi-3's added control
    tokens as its last entries. llama.cpp needs `<|endoftext|>` whenever general.name
    contains "phi3" (src/llama-vocab.cpp:3118-3127 looks it up with token_to_id.at), as
    "stageplan-phi3" does."""
    added = ["<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>"]
    base = _Capture()
    Model.vocab(base, size - len(added))
    w = m.w
    w.add_tokenizer_model("llama")
    w.add_token_list(base.tokens + added)
    w.add_token_scores(base.scores + [0.0] * len(added))
    w.add_token_types(base.types + [TokenType.CONTROL] * len(added))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)


class _Capture:
    """Stands in for a Model in `Model.vocab`, keeping the lists it would write."""

    def __init__(self):
        self.w = self

    def add_token_list(self, v):
        self.tokens = list(v)

    def add_token_scores(self, v):
        self.scores = list(v)

    def add_token_types(self, v):
        self.types = list(v)

    def __getattr__(self, name):
        return lambda *a, **k: None
