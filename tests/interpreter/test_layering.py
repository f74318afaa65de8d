"""The interpreter package sits below its consumers: it never imports the agent loop, the
server or the web chat (issue 20); the agent takes its CodeRunner from here."""

from __future__ import annotations

import ast
from pathlib import Path

import chatfmt.interpreter

PACKAGE = Path(chatfmt.interpreter.__file__).parent
CONSUMERS = ("agent", "server", "web", "cli")


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            dots = "." * node.level
            found.add(dots + (node.module or ""))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_the_interpreter_package_imports_none_of_its_consumers() -> None:
    bad = {}
    for path in sorted(PACKAGE.glob("*.py")):
        for name in _imports(path):
            parts = name.lstrip(".").split(".")
            absolute = name.startswith("chatfmt.") and parts[1] in CONSUMERS
            upward = name.startswith("..") and parts[0] in CONSUMERS
            if absolute or upward:
                bad[path.name] = name
    assert bad == {}


def test_the_agent_uses_the_interpreters_own_code_runner() -> None:
    from chatfmt.agent import CodeRunner
    from chatfmt.interpreter.runner import CodeRunner as Own

    assert CodeRunner is Own
