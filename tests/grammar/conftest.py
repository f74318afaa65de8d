"""The judge of every grammar in these tests: llama.cpp's grammar engine (see oracle.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle import GrammarOracle, oracle


@pytest.fixture(scope="session")
def judge(default_model_path: Path) -> GrammarOracle:
    return oracle(default_model_path)
