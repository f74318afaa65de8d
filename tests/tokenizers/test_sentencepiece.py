"""SentencePiece with the ChatGLM3 layout, on the real tokenizer.model and a small trained one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatfmt.errors import TokenizerError
from chatfmt.tokenizers import load_tokenizer
from chatfmt.tokenizers.sentencepiece import CHATGLM3_SPECIALS


def test_chatglm3_facts(glm) -> None:  # type: ignore[no-untyped-def]
    expected = dict(zip(CHATGLM3_SPECIALS, range(64789, 64798), strict=True))
    for token, i in expected.items():
        assert glm.control_id(token) == i
    assert glm.control_id("</s>") == 2
    assert glm.encode_text("\n")[-1] == 13
    assert glm.processor.piece_to_id("\u2581") == 30910
    assert glm.vocab_size == 64798


@pytest.mark.parametrize("text", [*CHATGLM3_SPECIALS, "<s>", "</s>", "<unk>", "<|user|>x"])
def test_specials_never_from_text(glm, text: str) -> None:  # type: ignore[no-untyped-def]
    ids = glm.encode_text(text)
    assert all(i < 64789 and i not in (1, 2) for i in ids)


@given(text=st.text(max_size=120))
def test_no_control_ids_from_any_text(glm, text: str) -> None:  # type: ignore[no-untyped-def]
    assert not set(glm.encode_text(text)) & set(glm.controls.values())


def test_run_start_space_is_dropped_like_official_decode(glm) -> None:  # type: ignore[no-untyped-def]
    ids = [glm.control_id("<|assistant|>"), *glm.encode_text("Hello world"), 2]
    assert glm.decode(ids) == "<|assistant|>Hello world</s>"
    assert glm.processor.decode(glm.encode_text("Hello world")) == "Hello world"


def test_split_chinese_bytes(glm) -> None:  # type: ignore[no-untyped-def]
    text = "今天北京的天气怎么样？🌤"
    ids = glm.encode_text(text)
    dec = glm.decoder()
    pieces = [p for i in ids for p in dec.feed(i)] + dec.flush()
    assert all("\ufffd" not in p for p in pieces if isinstance(p, str))
    assert "".join(p for p in pieces if isinstance(p, str)) == text


def test_small_trained_model_layout(small_glm) -> None:  # type: ignore[no-untyped-def]
    n = small_glm.processor.get_piece_size()
    assert small_glm.control_id("[gMASK]") == n + 1
    assert small_glm.control_id("<|observation|>") == n + 8
    assert small_glm.decode(small_glm.encode_text("Hello 世界")) == "Hello 世界"


def test_bad_model_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "tokenizer.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(TokenizerError, match="cannot load SentencePiece model"):
        load_tokenizer(str(bad))
