"""Fixtures for server tests: a FakeEngine app over ASGI, and helpers to read SSE."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra (chatfmt[server]) is not installed")

from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.tokenizers import Tokenizer


@pytest.fixture
def make_fake(qwen: Tokenizer) -> Callable[..., FakeEngine]:
    def make(script: Any = ("Hello there!<|im_end|>",), **kwargs: Any) -> FakeEngine:
        return FakeEngine(qwen, script, **kwargs)

    return make


@pytest.fixture
def qwen_dialect():  # type: ignore[no-untyped-def]
    return get_dialect("qwen2.5")
