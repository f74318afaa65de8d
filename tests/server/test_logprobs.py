"""Token log-probabilities as the APIs write them: text and bytes from the vocabulary, control
tokens by name, part of a character, ids the vocabulary lacks, and numbers JSON cannot hold."""

from __future__ import annotations

import math

from chatfmt.engines.base import TokenLogprob
from chatfmt.server.chat.logprobs import VERY_UNLIKELY, LogprobWriter, Token
from chatfmt.tokenizers import Tokenizer

IM_END = 151645


def test_text_bytes_and_alternatives(qwen: Tokenizer) -> None:
    writer = LogprobWriter(qwen)
    hello = qwen.encode_text("Hello")[0]
    (entry,) = writer.entries([TokenLogprob(hello, -0.5, ((hello, -0.5), (IM_END, -2.0)))])
    assert entry.token == Token("Hello", list(b"Hello"), -0.5)
    assert entry.top == [Token("Hello", list(b"Hello"), -0.5),
                         Token("<|im_end|>", list(b"<|im_end|>"), -2.0)]  # fmt: skip


def test_part_of_a_character(qwen: Tokenizer) -> None:
    writer = LogprobWriter(qwen)
    first, second = qwen.encode_text("龘")  # two tokens, neither a whole character
    entries = writer.entries([TokenLogprob(first, -1.0), TokenLogprob(second, -0.25)])
    assert "\ufffd" in entries[0].token.token  # its text cannot say it; its bytes do
    joined = bytes(entries[0].token.bytes or []) + bytes(entries[1].token.bytes or [])
    assert joined.decode() == "龘"
    # An entry that stands for a whole character (llama-server's) says so with its bytes.
    (whole,) = writer.entries([TokenLogprob(second, -0.25, text="龘".encode())])
    assert whole.token == Token("龘", list("龘".encode()), -0.25)


def test_unknown_ids_and_infinities(qwen: Tokenizer) -> None:
    writer = LogprobWriter(qwen)
    # A padded vocabulary's rows past the real one stand for no text.
    (entry,) = writer.entries([TokenLogprob(10**9, -math.inf, ((151900, math.nan),))])
    assert entry.token.token == "" and not entry.token.bytes
    assert entry.token.logprob == VERY_UNLIKELY
    assert [(t.token, t.logprob) for t in entry.top] == [("", VERY_UNLIKELY)]
    chat = writer.chat([TokenLogprob(IM_END, -math.inf)])
    assert chat.model_dump()["content"][0]["logprob"] == VERY_UNLIKELY
