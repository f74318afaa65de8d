"""What the commands share: the ``--dialect`` and ``--tokenizer`` help lists every name the
registries know, so that it cannot fall behind them."""

from __future__ import annotations

import contextlib
import io

import pytest

from chatfmt.cli.main import build_parser
from chatfmt.dialects import DIALECT_CONSTRUCTORS, list_dialects
from chatfmt.tokenizers import list_tokenizers


def _help(*command: str) -> str:
    """The help of ``chatfmt COMMAND``, with all white space taken out (argparse wraps lines,
    also at a hyphen inside a name)."""
    out = io.StringIO()
    with pytest.raises(SystemExit), contextlib.redirect_stdout(out):
        build_parser().parse_args([*command, "--help"])
    return "".join(out.getvalue().split())


@pytest.mark.parametrize(
    "command",
    [("serve",), ("chat",), ("render",), ("parse",), ("dataset", "build")],
)
def test_dialect_help_names_every_dialect(command: tuple[str, ...]) -> None:
    shown = _help(*command)
    names = list_dialects()
    assert len(names) >= 30
    for name in names:
        assert f"{name}," in shown or f"{name})" in shown, name


def test_dialect_help_lists_the_registry_in_its_order() -> None:
    listed = "".join(", ".join(DIALECT_CONSTRUCTORS).split())
    assert f"adialect({listed})" in _help("serve")


@pytest.mark.parametrize("command", [("render",), ("count",), ("dataset", "build")])
def test_tokenizer_help_names_every_tokenizer(command: tuple[str, ...]) -> None:
    shown = _help(*command)
    for name in list_tokenizers():
        assert f"{name}," in shown or f"{name})" in shown, name
