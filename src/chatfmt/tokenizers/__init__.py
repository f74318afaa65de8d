"""Tokenizers: look one up by name or path with :func:`load_tokenizer`."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from ..errors import TokenizerError
from .base import Piece, SpecialTokenPolicy, StreamDecoder, Tokenizer

__all__ = [
    "Piece",
    "SpecialTokenPolicy",
    "StreamDecoder",
    "Tokenizer",
    "list_tokenizers",
    "load_tokenizer",
]


def _cl100k() -> Tokenizer:
    from .tiktoken import cl100k_base

    return cl100k_base()


def _o200k() -> Tokenizer:
    from .tiktoken import o200k_base

    return o200k_base()


def _qwen25() -> Tokenizer:
    from .tiktoken import qwen25

    return qwen25()


def _qwen3() -> Tokenizer:
    from .tiktoken import qwen3

    return qwen3()


def _qwen35() -> Tokenizer:
    from .tiktoken import qwen35

    return qwen35()


#: Named tokenizers: name → constructor (as :data:`chatfmt.dialects.DIALECT_CONSTRUCTORS`).
def _o200k_harmony() -> Tokenizer:
    from .tiktoken import o200k_harmony

    return o200k_harmony()


def _deepseek_v3() -> Tokenizer:
    from .deepseek import deepseek_v3

    return deepseek_v3()


def _deepseek_v4() -> Tokenizer:
    from .deepseek import deepseek_v4

    return deepseek_v4()


def _llama4() -> Tokenizer:
    from .tiktoken import llama4

    return llama4()


TOKENIZER_CONSTRUCTORS: dict[str, Callable[[], Tokenizer]] = {
    "cl100k_base": _cl100k,
    "o200k_base": _o200k,
    "o200k_harmony": _o200k_harmony,
    "qwen2.5": _qwen25,
    "qwen3": _qwen3,
    "qwen3.5": _qwen35,
    "deepseek-v3": _deepseek_v3,
    "deepseek-v4": _deepseek_v4,
    "llama4": _llama4,
}


def list_tokenizers() -> list[str]:
    """Names :func:`load_tokenizer` accepts besides file paths."""
    return sorted(TOKENIZER_CONSTRUCTORS)


@functools.lru_cache(maxsize=16)
def load_tokenizer(name_or_path: str) -> Tokenizer:
    """A tokenizer by name (:data:`TOKENIZER_CONSTRUCTORS`, :func:`list_tokenizers`) or by
    path.

    Paths: ``tokenizer.model`` (SentencePiece, ChatGLM3 layout; or, as Meta ships Llama 3's,
    a tiktoken rank file), ``tokenizer.json`` (Hugging Face), ``*.tiktoken`` (rank file),
    ``*.gguf`` (the model's own vocabulary, via llama.cpp), or a model directory holding one of
    these. A file's kind is told by its content, its name only when the content does not say.
    Loaded tokenizers are cached.
    """
    if name_or_path in TOKENIZER_CONSTRUCTORS:
        return TOKENIZER_CONSTRUCTORS[name_or_path]()
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        for candidate in ("tokenizer.model", "tokenizer.json"):
            if (path / candidate).is_file():
                path = path / candidate
                break
        else:
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) == 1:
                path = ggufs[0]
    if not path.is_file():
        raise TokenizerError(
            f"unknown tokenizer {name_or_path!r}; available: {', '.join(list_tokenizers())}, "
            "or a path to tokenizer.model, tokenizer.json, *.tiktoken or *.gguf"
        )
    kind = file_kind(path)
    if kind == "sentencepiece":
        from .sentencepiece import SentencePieceTokenizer

        return SentencePieceTokenizer(path)
    if kind == "json" and "tekken" in path.name.lower():
        from .tekken import load_tekken

        return load_tekken(path)
    if kind == "json":
        from .hf import HFTokenizer

        return HFTokenizer(path)
    if kind == "tiktoken":
        from .tiktoken import from_rank_file

        return from_rank_file(path)
    if kind == "gguf":
        from .gguf import GGUFTokenizer

        return GGUFTokenizer(path)
    raise TokenizerError(
        f"cannot tell the tokenizer type of {str(path)!r}: expected tokenizer.model, "
        "tokenizer.json, *.tiktoken or *.gguf"
    )


TokenizerFile = Literal["gguf", "json", "tiktoken", "sentencepiece"]
# A tiktoken rank file's first line: a base64 token, a space, its rank.
_RANK_LINE = re.compile(rb"[A-Za-z0-9+/]+=* [0-9]+\r?\n")
_SUFFIX_KINDS: dict[str, TokenizerFile] = {
    ".model": "sentencepiece",
    ".json": "json",
    ".tiktoken": "tiktoken",
    ".gguf": "gguf",
}


def file_kind(path: Path) -> TokenizerFile | None:
    """What a tokenizer file holds, told by its first bytes: ``tokenizer.model`` is a
    SentencePiece protobuf for most models but a tiktoken rank file for Meta's Llama 3. The
    suffix decides only when the content does not (``None``: neither does)."""
    try:
        with path.open("rb") as f:
            head = f.read(256)
    except OSError as exc:
        raise TokenizerError(f"cannot read tokenizer file {str(path)!r}: {exc}") from None
    if head.startswith(b"GGUF"):
        return "gguf"
    if _RANK_LINE.match(head):
        return "tiktoken"
    if head.lstrip(b" \t\r\n\xef\xbb\xbf").startswith(b"{"):
        return "json"
    return _SUFFIX_KINDS.get(path.suffix.lower())
