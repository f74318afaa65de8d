"""Writes one section of docs/benchmarks.md, leaving the other sections as they are."""

from __future__ import annotations

import platform
import re
import time
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADER = (
    "# Benchmarks\n\n"
    "Ratios are measured in one run against the named peer on the same machine; absolute times\n"
    "depend on the machine. Each section names the command that produced it.\n"
)


def write_section(title: str, body: str, command: str) -> None:
    """Replace (or append) the section ``## title`` of docs/benchmarks.md."""
    text = DOC.read_text(encoding="utf-8") if DOC.is_file() else HEADER
    stamp = time.strftime("%Y-%m-%d")
    machine = (
        f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}"
    )
    section = f"## {title}\n\n`.venv/bin/python {command}` ({stamp}, {machine})\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _m: section + "\n", text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
