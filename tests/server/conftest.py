"""Fixtures for server tests: a FakeEngine app over ASGI, helpers to read SSE, and the warm
real-model server the real-model modules share."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra (chatfmt[server]) is not installed")

from server_helpers import ServerThread

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


@pytest.fixture(scope="session", params=["local", "llama-server"])
def real_server(request: pytest.FixtureRequest, default_model_path: Path) -> Iterator[ServerThread]:
    """The default model behind a real uvicorn server on loopback, on each embedded engine:
    the model in this process (``local``) and llama.cpp's own server as a managed child
    (``llama-server``). One warm server per engine for the whole session, shared by the
    real-model modules (tests/server/test_real_model.py, test_sampling_real.py)."""
    from chatfmt.dialects import get_dialect
    from chatfmt.engines.base import Engine
    from chatfmt.engines.default_model import DEFAULT_MODEL_NAME
    from chatfmt.server import create_app

    # One llama.cpp thread: its threads spin at barriers, so on a small or busy machine a
    # second thread competing with the server and the clients slows decoding down a lot.
    threads = int(os.environ.get("CHATFMT_TEST_THREADS", "1"))
    engine: Engine
    if request.param == "local":
        from chatfmt.engines.local import LocalEngine

        engine = LocalEngine(default_model_path, n_threads=threads)
    else:
        from chatfmt.engines.llama_server import LlamaServerEngine

        engine = LlamaServerEngine(default_model_path, parallel=4, n_threads=threads, n_ctx=4096)
    app = create_app(engine, get_dialect("qwen2.5"), model_name=DEFAULT_MODEL_NAME)
    with ServerThread(app, startup=getattr(engine, "connect", None)) as srv:
        yield srv
        srv.call(engine.aclose())  # on the loop that started it (the child belongs to it)
