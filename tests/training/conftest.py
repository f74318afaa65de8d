"""Tokenizers per dialect for the training tests: the vocabularies the dialect tests use where
one is available offline, else a stand-in that carries the dialect's control tokens."""

from __future__ import annotations

from typing import Any

import pytest

from chatfmt.dialects.base import Dialect
from chatfmt.tokenizers.base import Tokenizer

#: The fixture (tests/conftest.py) of each dialect's own vocabulary; the rest use a stand-in.
VOCABULARIES = {
    "chatml": "cl100k",
    "qwen2.5": "qwen",
    "qwen3": "qwen3_tok",
    "qwq": "qwen3_tok",
    "qwen3-coder": "qwen3_tok",
    "chatglm3": "glm",
    "glm4": "glm4_standin",
    "llama3": "llama3_tok",
    "mistral-v3": "mistral_v3_tok",
    "mistral-v11": "mistral_v11_tok",
    "harmony": "harmony_tok",
}


def standin(dialect: Dialect) -> Tokenizer:
    """cl100k_base's ranks with the dialect's control tokens after them: for the dialects whose
    vocabulary is not available offline (or only in the slow tier)."""
    from chatfmt.tokenizers import load_tokenizer
    from chatfmt.tokenizers.tiktoken import TiktokenTokenizer

    enc: Any = load_tokenizer("cl100k_base").encoding  # type: ignore[attr-defined]
    first = enc.max_token_value + 1
    names = list(dict.fromkeys([*dialect.controls, *dialect.stop_controls]))
    return TiktokenTokenizer(
        f"{dialect.name}-standin",
        pat_str=enc._pat_str,
        mergeable_ranks=enc._mergeable_ranks,
        controls={t: first + i for i, t in enumerate(names)},
    )


@pytest.fixture(scope="session")
def vocabulary(request: pytest.FixtureRequest) -> Any:
    """``vocabulary(dialect)``: the tokenizer the training tests use for it."""
    cache: dict[str, Tokenizer] = {}

    def get(dialect: Dialect) -> Tokenizer:
        if dialect.name not in cache:
            fixture = VOCABULARIES.get(dialect.name)
            cache[dialect.name] = request.getfixturevalue(fixture) if fixture else standin(dialect)
        return cache[dialect.name]

    return get
