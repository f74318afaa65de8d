"""The public surface: small, sorted, and free of heavy imports."""

from __future__ import annotations

import subprocess
import sys

import chatfmt


def test_all_is_sorted_and_complete() -> None:
    assert chatfmt.__all__ == sorted(chatfmt.__all__, key=str)
    for name in chatfmt.__all__:
        assert hasattr(chatfmt, name)


def test_import_pulls_in_no_heavy_parts() -> None:
    code = (
        "import sys, chatfmt, chatfmt.cli;"
        "heavy = {'fastapi', 'starlette', 'uvicorn', 'jupyter_client', 'llama_cpp', 'torch',"
        " 'transformers', 'tiktoken', 'sentencepiece', 'tokenizers'};"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
