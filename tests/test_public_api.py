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


def test_public_classes_keep_their_source() -> None:
    # Reprs say where a class lives, and inspect/IDEs can open its source.
    import inspect

    for name in chatfmt.__all__:
        obj = getattr(chatfmt, name)
        if isinstance(obj, type):
            assert obj.__module__.startswith("chatfmt.")
            assert inspect.getsource(obj).lstrip().startswith(("class", "@"))


def test_registries_follow_one_convention() -> None:
    assert "qwen2.5" in chatfmt.list_dialects() and "qwen2.5" in chatfmt.list_tokenizers()
    for lookup, kind in ((chatfmt.get_dialect, "dialect"), (chatfmt.load_tokenizer, "tokenizer")):
        try:
            lookup("no-such-name")
        except chatfmt.ChatFmtError as exc:
            assert str(exc).startswith(f"unknown {kind} 'no-such-name'; available: ")
        else:
            raise AssertionError(f"{kind} lookup accepted an unknown name")


def test_bad_message_raises_chatfmts_own_error() -> None:
    import pytest

    with pytest.raises(chatfmt.ValidationError, match="role"):
        chatfmt.Message(role="bogus", content="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError):  # also a ValueError, as bad input is
        chatfmt.ToolCall(name="f", arguments="[1]")
