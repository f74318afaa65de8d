"""A tiny GGUF for end-to-end tests: a real vocabulary, and weights that make the model a
deterministic bigram machine, so a real llama-server writes a scripted reply.

No small real model of the Qwen3 family is available offline; what the end-to-end tests need
from one is its vocabulary (the exact prompt ids, the ``<think>`` tokens coming back as ids)
and a reply we know. The model here has one layer whose attention and feed-forward outputs are
zero, so the residual stream is the last token's embedding; embeddings are one-hot in a few
dimensions and the output matrix maps each scripted token to its successor with a large logit.
Whatever the sampling settings, the reply follows the chains given (other tokens' probabilities
are about ``e**-40``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

_DIM = 16
_LOGIT = 10.0  # times sqrt(_DIM) after the final RMS norm: a logit of 40 for the successor
_NORMAL, _CONTROL, _USER_DEFINED, _UNUSED = 1, 3, 4, 5


def write_bigram_gguf(
    path: Path,
    tokenizer_json: Path,
    *,
    added: Mapping[str, int],
    chains: Sequence[Sequence[int]],
    eos_id: int,
    chat_template: str | None = None,
) -> Path:
    """Write a llama-architecture GGUF with the vocabulary of ``tokenizer_json`` (plus
    ``added`` tokens at the given ids, as in :func:`templates.hf_tokenizer_with`) whose greedy
    and sampled continuations follow ``chains``: after ``chain[k]`` comes ``chain[k + 1]``.
    A token may start several chains but must have one successor."""
    gguf = pytest.importorskip("gguf")
    np = pytest.importorskip("numpy")
    data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    vocab: dict[str, int] = dict(data["model"]["vocab"])
    for token, token_id in added.items():
        for old in [k for k, v in vocab.items() if v == token_id]:
            del vocab[old]
        vocab[token] = token_id
    specials = {t["content"]: bool(t["special"]) for t in data["added_tokens"]}
    specials.update({t: False for t in added})
    n_vocab = max(vocab.values()) + 1
    tokens = [""] * n_vocab
    types = [_UNUSED] * n_vocab
    for token, token_id in vocab.items():
        tokens[token_id] = token
        if token in specials:
            types[token_id] = _CONTROL if specials[token] else _USER_DEFINED
        elif token.startswith("[PAD"):
            types[token_id] = _UNUSED
        else:
            types[token_id] = _NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]

    successor: dict[int, int] = {}
    for chain in chains:
        for a, b in itertools.pairwise(chain):
            if successor.get(a, b) != b:
                raise ValueError(f"token {a} would have two successors: {successor[a]} and {b}")
            successor[a] = b
    slots = {t: i for i, t in enumerate(successor)}
    if len(slots) > _DIM:
        raise ValueError(f"at most {_DIM} tokens may have a successor")
    embed = np.zeros((n_vocab, _DIM), dtype=np.float32)
    output = np.zeros((n_vocab, _DIM), dtype=np.float32)
    for token, slot in slots.items():
        embed[token, slot] = 1.0
        output[successor[token], slot] = _LOGIT

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("chatfmt test bigram model")
    w.add_context_length(4096)
    w.add_embedding_length(_DIM)
    w.add_block_count(1)
    w.add_feed_forward_length(_DIM)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_rope_dimension_count(_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(0)  # all F32
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(eos_id)
    w.add_pad_token_id(eos_id)
    w.add_add_bos_token(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    ones = np.ones(_DIM, dtype=np.float32)
    square = np.zeros((_DIM, _DIM), dtype=np.float32)
    tensors: dict[str, Any] = {
        "token_embd.weight": embed,
        "output_norm.weight": ones,
        "output.weight": output,
        "blk.0.attn_norm.weight": ones,
        "blk.0.attn_q.weight": square,
        "blk.0.attn_k.weight": square,
        "blk.0.attn_v.weight": square,
        "blk.0.attn_output.weight": square,  # zero: attention adds nothing
        "blk.0.ffn_norm.weight": ones,
        "blk.0.ffn_gate.weight": square,
        "blk.0.ffn_up.weight": square,
        "blk.0.ffn_down.weight": square,  # zero: the feed-forward adds nothing
    }
    for name, array in tensors.items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
