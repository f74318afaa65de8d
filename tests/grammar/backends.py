"""vLLM's grammar backends, xgrammar and llguidance, as judges: ``backend_judge.py`` runs in
vLLM's own environment (the ``grammar_backends`` fixture; xgrammar imports torch, which
chatfmt keeps out of its own), so the versions are the ones vLLM runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

JUDGE = Path(__file__).resolve().parent / "backend_judge.py"


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
