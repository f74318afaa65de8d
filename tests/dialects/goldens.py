"""Golden files: one helper for render and parse goldens of every dialect.

Layout: ``tests/golden/<dialect>/<case>/`` holds a render case (``conversation.json`` in,
``expected.txt`` and ``expected_ids.json`` out); ``tests/golden/<dialect>/parse/<case>/`` a
parse case (``output.txt`` in, ``expected_events.jsonl`` and ``expected_message.json`` out).
``CHATFMT_UPDATE_GOLDEN=1`` rewrites the expected files from what the code produces now; read
the diff before committing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
UPDATE = os.environ.get("CHATFMT_UPDATE_GOLDEN") == "1"


def render_cases(dialect: str) -> list[Path]:
    """Render cases of ``dialect`` (folders with a ``conversation.json``)."""
    root = GOLDEN / dialect
    return sorted(p.parent for p in root.glob("*/conversation.json"))


def parse_cases(dialect: str) -> list[Path]:
    """Parse cases of ``dialect`` (folders with an ``output.txt``)."""
    root = GOLDEN / dialect / "parse"
    return sorted(p.parent for p in root.glob("*/output.txt"))


def read_text(path: Path) -> str:
    # Bytes, not read_text: no newline translation may touch a golden.
    return path.read_bytes().decode("utf-8")


def check_text(path: Path, actual: str) -> None:
    """``actual`` equals the golden text at ``path`` (rewritten first when updating)."""
    if UPDATE:
        path.write_bytes(actual.encode("utf-8"))
    expected = read_text(path)
    assert actual == expected, f"{path} differs:\n got:  {actual!r}\n want: {expected!r}"


def check_json(path: Path, actual: Any, *, compact: bool = False) -> None:
    """``actual`` equals the golden JSON value at ``path``; ``compact`` files (token ids) are
    written on one line, others indented."""
    if UPDATE:
        text = json.dumps(actual, ensure_ascii=False, indent=None if compact else 1)
        path.write_text(text + "\n", encoding="utf-8")
    assert actual == json.loads(read_text(path)), f"{path} differs"


def check_jsonl(path: Path, actual: list[Any]) -> None:
    """``actual`` equals the golden JSON lines at ``path``, one value per line."""
    if UPDATE:
        lines = "".join(json.dumps(v, ensure_ascii=False) + "\n" for v in actual)
        path.write_text(lines, encoding="utf-8")
    expected = [json.loads(line) for line in read_text(path).splitlines() if line]
    for k, (got, want) in enumerate(zip(actual, expected, strict=False)):
        assert got == want, f"{path}: line {k + 1} differs:\n got:  {got}\n want: {want}"
    assert len(actual) == len(expected), f"{path}: {len(actual)} lines, expected {len(expected)}"
