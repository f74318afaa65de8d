"""The documentation runs: module docstring examples and the README quick start."""

from __future__ import annotations

import doctest
import re
import subprocess
import sys
from pathlib import Path

import pytest

import chatfmt
import chatfmt.tools

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.mark.parametrize("module", [chatfmt, chatfmt.tools], ids=lambda m: m.__name__)
def test_docstring_examples(module: object) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)  # type: ignore[arg-type]
    assert result.attempted > 0 and result.failed == 0


def test_readme_quick_start(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    block = text.split("## Quick start", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "quick_start.py"
    script.write_text(block, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )
    # Each print line's trailing comment in the README states what it prints.
    expected = [
        m.group(1).split(":")[0].strip()
        for m in re.finditer(r"^print\(.*?#\s*(.+)$", block, re.M)
        if not m.group(1).startswith("exact")
    ]
    printed = out.stdout.splitlines()
    assert printed[0] == expected[0] == "3"
    assert printed[1] == 'get_weather {"city": "Beijing"}'
    assert int(printed[2]) > 0
    assert printed[3:] == ["calling get_weather", "True tool_calls"]
