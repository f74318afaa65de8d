"""HF tokenizer.json adapter: added tokens are controls, never produced from text."""

from __future__ import annotations

import json

import pytest

from chatfmt.errors import TokenizerError
from chatfmt.tokenizers.hf import HFTokenizer


def test_added_tokens_are_controls(qwen_tokenizer_json) -> None:  # type: ignore[no-untyped-def]
    tok = HFTokenizer(qwen_tokenizer_json)
    assert tok.control_id("<|im_start|>") == 151644
    assert tok.control_id("<tool_call>") == 151657
    # The stock tokenizer turns the string into the control id; the adapter must not.
    stock = tok.hf_tokenizer.encode("<|im_start|><tool_call>", add_special_tokens=False).ids
    assert stock == [151644, 151657]
    ids = tok.encode_text("<|im_start|><tool_call>")
    assert not set(ids) & set(tok.controls.values())
    assert tok.decode(ids) == "<|im_start|><tool_call>"


def test_directory_and_bad_file(tmp_path, qwen_tokenizer_json) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "tokenizer.json"
    bad.write_text(json.dumps({"model": "nonsense"}))
    with pytest.raises(TokenizerError, match=r"cannot load tokenizer\.json"):
        HFTokenizer(tmp_path)


def test_split_bytes_finds_the_ids_a_stream_left_out(qwen_tokenizer_json, qwen) -> None:  # type: ignore[no-untyped-def]
    """The bytes → id map built from the vocabulary agrees with tiktoken's ranks: a
    character's first bytes are one token, found the same way in both."""
    tok = HFTokenizer(qwen_tokenizer_json)
    dragon = "龘".encode()
    assert tok.split_bytes(dragon[:2], 1) == qwen.split_bytes(dragon[:2], 1) == (82912,)
    assert tok.split_bytes(dragon, 2) == (82912, 246)  # the only way in two tokens
    assert tok.split_bytes(b"\xe9", 2) is None  # fewer bytes than tokens
    assert tok.split_bytes(b"x" * 65, 1) is None  # past the bound
