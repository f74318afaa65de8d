"""GGUFTokenizer: the default model's own vocabulary agrees with the Qwen2.5 tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatfmt.tokenizers import load_tokenizer
from chatfmt.tokenizers.base import Tokenizer
from chatfmt.tokenizers.gguf import GGUFTokenizer
from profiles import examples

TEXTS = [
    "Hello, world!",
    "<|im_start|>user\nhi<|im_end|>",
    "def f(x):\n    return x ** 2\n\n\n",
    "你好，世界！ émoji 🎉 and a combining e\u0301 (NFC)",
    "  leading spaces\t\ttabs\r\nCRLF   ",
    "</s> <s> <tool_call> </tool_call> <|endoftext|>",
    'x<tool_call>{"name": "f"}</tool_call>y',
    "1234567890 3.14159 1e-9 0xFF",
    "I'm sure you'll say we'd've DONE it",
    "a" * 3000,
    "",
]


@pytest.fixture(scope="module")
def gguf(default_model_path: Path) -> GGUFTokenizer:
    return GGUFTokenizer(default_model_path)


@pytest.fixture(scope="module")
def reference() -> Tokenizer:
    return load_tokenizer("qwen2.5")


@pytest.mark.parametrize("text", TEXTS)
def test_encode_matches_qwen25(gguf: GGUFTokenizer, reference: Tokenizer, text: str) -> None:
    assert gguf.encode_text(text) == reference.encode_text(text)


@settings(max_examples=examples(1.5))
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=60))
def test_encode_matches_qwen25_fuzzed(gguf: GGUFTokenizer, reference: Tokenizer, text: str) -> None:
    assert gguf.encode_text(text) == reference.encode_text(text)


def test_controls(gguf: GGUFTokenizer, reference: Tokenizer) -> None:
    assert gguf.controls["<|im_start|>"] == 151644
    assert gguf.controls["<|im_end|>"] == 151645
    assert gguf.controls["<tool_call>"] == 151657
    assert gguf.controls["</tool_call>"] == 151658
    assert dict(gguf.controls) == dict(reference.controls)
    # llama.cpp flags the ordinary token "</s>" as end-of-generation; it stays text here.
    assert "</s>" not in gguf.controls
    assert gguf.vocab_size == 151936


def test_decode_matches(gguf: GGUFTokenizer, reference: Tokenizer) -> None:
    for i in [*range(0, 151643, 97), 128247, 151700]:
        assert gguf.token_bytes(i) == reference.token_bytes(i), i
    ids = reference.encode_text(TEXTS[3])
    assert gguf.decode(ids) == reference.decode(ids)


def test_control_text_never_becomes_a_control(gguf: GGUFTokenizer) -> None:
    for token, cid in gguf.controls.items():
        assert cid not in gguf.encode_text(f"a {token} b{token}")


def test_load_tokenizer_accepts_gguf(default_model_path: Path) -> None:
    tok = load_tokenizer(str(default_model_path))
    assert isinstance(tok, GGUFTokenizer)
    assert tok.metadata("tokenizer.ggml.pre") == "qwen2"


def test_which_user_defined_tokens_are_text() -> None:
    from chatfmt.tokenizers.gguf import _is_text_token

    for text in ("\n\n", "  ", "<h1>", "</td>", "<s>"):
        assert _is_text_token(text)
    for control in ("<tool_call>", "</tool_call>", "<think>", "</think>", "<sop>", "<bbox>"):
        assert not _is_text_token(control)
