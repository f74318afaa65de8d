"""``chatfmt template FILE``: how ``serve`` would serve a model with a chat template — its
dialect checked, the template itself, or a refusal — for a template file, a
``tokenizer_config.json`` or a tokenizer given apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chatfmt.cli import main

ACME = Path(__file__).resolve().parents[1] / "template" / "jinja" / "acme-hermes.jinja"
REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "templates"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code = main(["template", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_template_a_dialect_renders_is_served_by_it(capsys: pytest.CaptureFixture[str]) -> None:
    path = REFERENCE / "Qwen-Qwen3-0.6B.jinja"
    if not path.is_file():
        pytest.skip("the reference templates are not beside the project")
    code, report = _run(capsys, str(path))
    assert code == 0 and report["detected"] == "qwen3"
    assert report["served"] == "the qwen3 dialect" and report["chat_only"] is False


def test_a_new_template_is_served_through_itself_given_its_vocabulary(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, qwen: object
) -> None:
    code, report = _run(capsys, str(ACME), "--tokenizer", "qwen2.5")
    assert code == 0 and report["detected"] is None
    assert report["served"] == (
        "the model's own chat template, calls as Hermes JSON in <tool_call> tags"
    )
    assert report["stops"] == ["<|im_end|>"]
    # Without a vocabulary there are no control tokens to stop at: refused, saying so.
    code, report = _run(capsys, str(ACME))
    assert code == 1 and "pass --tokenizer" in str(report["refused"])
    # A tokenizer_config.json brings its template, EOS and added tokens along.
    config = tmp_path / "tokenizer_config.json"
    added = {"151644": {"content": "<|im_start|>"}, "151645": {"content": "<|im_end|>"}}
    config.write_text(
        json.dumps(
            {
                "chat_template": ACME.read_text(encoding="utf-8"),
                "eos_token": "<|im_end|>",
                "added_tokens_decoder": added,
            }
        )
    )
    code, report = _run(capsys, str(config))
    assert code == 0 and report["stops"] == ["<|im_end|>"]


def test_bad_files_are_clear_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["template", str(tmp_path / "none.jinja")]) == 2
    assert "there is no file" in capsys.readouterr().err
    config = tmp_path / "tokenizer_config.json"
    config.write_text("{}")
    assert main(["template", str(config)]) == 2
    assert "has no chat_template" in capsys.readouterr().err
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}")
    assert main(["template", str(broken)]) == 2
    assert "does not compile" in capsys.readouterr().err
