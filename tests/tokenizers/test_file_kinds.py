"""Tokenizer files told apart by content: Meta's Llama 3 ``tokenizer.model`` is a tiktoken
rank file, not SentencePiece (``could not parse ModelProto`` before), and the CLI reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatfmt import get_dialect
from chatfmt.errors import TokenizerError
from chatfmt.tokenizers import file_kind, load_tokenizer
from chatfmt.tokenizers.tiktoken import Llama3Tokenizer


@pytest.fixture(scope="module")
def meta_tokenizer_model() -> Path:
    """Meta's own tokenizer.model, as the llama-models package ships it."""
    llama_models = pytest.importorskip(
        "llama_models", reason="llama-models (Meta's reference, its tokenizer.model) is missing"
    )
    path = Path(os.path.dirname(llama_models.__file__)) / "llama3" / "tokenizer.model"
    assert path.is_file(), f"llama-models ships no {path}"
    return path


def test_meta_tokenizer_model_is_a_rank_file(meta_tokenizer_model: Path) -> None:
    assert file_kind(meta_tokenizer_model) == "tiktoken"
    tok = load_tokenizer(str(meta_tokenizer_model))
    assert isinstance(tok, Llama3Tokenizer)
    assert tok.control_id("<|begin_of_text|>") == 128000
    assert tok.control_id("<|eot_id|>") == 128009
    # The reference's ids of a short text (Meta's own encoder gives these).
    from llama_models.llama3.tokenizer import Tokenizer as MetaTokenizer

    meta = MetaTokenizer(meta_tokenizer_model)
    text = "Hello, world! 12345 naïve 🙂"
    assert tok.encode_text(text) == meta.encode(text, bos=False, eos=False)


def test_chatfmt_render_reads_it(meta_tokenizer_model: Path, tmp_path: Path) -> None:
    conv = tmp_path / "conv.json"
    conv.write_text(json.dumps([{"role": "user", "content": "Hi"}]), encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "chatfmt.cli", "render", str(conv), "--dialect", "llama3",
         "--tokenizer", str(meta_tokenizer_model), "--output", "ids"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    expected = get_dialect("llama3").render(
        [{"role": "user", "content": "Hi"}], load_tokenizer(str(meta_tokenizer_model))
    )
    assert json.loads(out.stdout) == expected.ids
    assert expected.ids[0] == 128000


def test_kinds_by_content_then_suffix(tmp_path: Path) -> None:
    cases = {
        "a.model": b"IQ== 0\nIg== 1\n",  # a rank file, whatever its name
        "b.bin": b"GGUF\x03\x00\x00\x00",
        "c.model": b"\x0a\x05\x0a\x01a\x15\x00\x00\x00\x00",  # protobuf: SentencePiece
        "tokenizer.json": b' {"model": {}}',
        "d.tiktoken": b"",
        "e.txt": b"hello",
    }
    kinds = {}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        kinds[name] = file_kind(tmp_path / name)
    assert kinds == {
        "a.model": "tiktoken",
        "b.bin": "gguf",
        "c.model": "sentencepiece",
        "tokenizer.json": "json",
        "d.tiktoken": "tiktoken",
        "e.txt": None,
    }
    with pytest.raises(TokenizerError, match="cannot tell the tokenizer type"):
        load_tokenizer(str(tmp_path / "e.txt"))
