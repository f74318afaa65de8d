"""The default prompts and the upload note (``chatfmt.prompts``); how well they work with the
default model is measured in ``tests/test_agent_real_model.py``."""

from __future__ import annotations

from chatfmt.prompts import (
    INTERPRETER_PROMPT,
    TOOLS_PROMPT,
    default_system_prompt,
    upload_note,
)


def test_each_mode_has_its_prompt() -> None:
    assert default_system_prompt("chat") is None
    assert default_system_prompt("tools") == TOOLS_PROMPT
    assert default_system_prompt("interpreter") == INTERPRETER_PROMPT
    assert "```python" in INTERPRETER_PROMPT  # the run request a fence-reading agent takes


def test_the_upload_note_names_a_reader_by_the_files_kind() -> None:
    assert upload_note("/w/sales.csv") == (
        "Uploaded file: /w/sales.csv (read it with Python, e.g. pandas.read_csv)"
    )
    assert upload_note("/w/Book.XLSX").endswith("e.g. pandas.read_excel)")
    assert upload_note("/w/data.tsv").endswith("pandas.read_csv with sep='\\t')")
    for plain in ("/w/notes.txt", "/w/README", "/w/a.d/README"):
        assert upload_note(plain) == f"Uploaded file: {plain} (read it with Python)"
