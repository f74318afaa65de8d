"""``chatfmt serve --model x.gguf`` (and ``chat``) without ``--dialect``: the dialect is the one
the GGUF's chat template is written in, read from the file's header before the model loads; a
template chatfmt cannot tell is refused with the dialects to choose from, exit status 2.

The GGUF files here are written by the ``gguf`` package and hold metadata only (no weights):
the header is all detection reads, and no engine is started (``build_engine`` is replaced).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import chatfmt.cli.model_format as model_format
import chatfmt.cli.serve as serve
from chatfmt.cli import main
from chatfmt.dialects import get_dialect, list_dialects
from chatfmt.errors import ChatFmtError, TokenizerError
from chatfmt.tokenizers.gguf import read_gguf_metadata

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference"

#: A template of no format chatfmt renders (Phi-3's turns).
UNKNOWN = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + "
    "'<|end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)
PLAIN_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
#: A vocabulary's worth of strings before the template, as in a real GGUF.
TOKENS = [f"tok{i}" for i in range(5000)]


def write_gguf(path: Path, *, template: str | None = None, architecture: str = "llama") -> Path:
    """A GGUF holding only metadata: the architecture, a token list, a few other values and
    ``template`` as ``tokenizer.chat_template``."""
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_token_list(TOKENS)
    writer.add_token_scores([0.0] * len(TOKENS))
    writer.add_uint32("test.count", 7)
    writer.add_bool("test.flag", True)
    writer.add_array("test.nested", [[1, 2], [3]])
    if template is not None:
        writer.add_chat_template(template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


class EngineReached(ChatFmtError):
    """Raised by the stand-in ``build_engine``: detection let the command go on."""


@pytest.fixture
def engine_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def build_engine(model: str = "default", **kwargs: Any) -> Any:
        calls.append({"model": model, **kwargs})
        raise EngineReached("engine reached")

    monkeypatch.setattr(serve, "build_engine", build_engine)
    return calls


# ==== The header ====


def test_the_header_values_are_read_without_llama_cpp(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", template=PLAIN_CHATML, architecture="qwen3")
    keys = ["tokenizer.chat_template", "general.architecture", "test.count", "test.flag"]
    values = read_gguf_metadata(path, [*keys, "test.nested", "no.such.key"])
    assert values == {
        "tokenizer.chat_template": PLAIN_CHATML,
        "general.architecture": "qwen3",
        "test.count": 7,
        "test.flag": True,
    }


def test_a_file_that_is_not_a_gguf_is_a_tokenizer_error(tmp_path: Path) -> None:
    text = tmp_path / "tokenizer.json"
    text.write_text("{}")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    whole = write_gguf(tmp_path / "m.gguf", template=PLAIN_CHATML).read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) // 3])  # inside the token list
    for path in (text, empty, cut, tmp_path):
        with pytest.raises(TokenizerError):
            read_gguf_metadata(path, ["tokenizer.chat_template"])


# ==== The dialect of a model file ====


def test_the_dialect_comes_from_the_template(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "plain.gguf", template=PLAIN_CHATML)
    detection = model_format.detect_model_dialect(str(path))
    assert detection.name == "chatml" and "plain ChatML" in detection.reason
    qwen3 = REFERENCE / "templates" / "Qwen-Qwen3-0.6B.jinja"
    if qwen3.is_file():
        path = write_gguf(tmp_path / "qwen3.gguf", template=qwen3.read_text(encoding="utf-8"))
        assert model_format.default_dialect(str(path)).name == "qwen3"


def test_without_a_template_the_architecture_tells_where_it_can(tmp_path: Path) -> None:
    gemma = write_gguf(tmp_path / "gemma.gguf", architecture="gemma3")
    assert model_format.default_dialect(str(gemma)).name == "gemma3"
    llama = write_gguf(tmp_path / "llama.gguf", architecture="llama")
    with pytest.raises(ChatFmtError, match=r"no chat template .* \(llama\) does not tell"):
        model_format.default_dialect(str(llama))


def test_an_unknown_template_is_an_error_naming_the_choices(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "phi.gguf", template=UNKNOWN)
    with pytest.raises(ChatFmtError) as info:
        model_format.default_dialect(str(path))
    message = str(info.value)
    assert message.startswith(f"cannot tell the chat format of {path}: the chat template")
    assert "<|end|>" in message  # what it saw that no dialect writes
    assert f"--dialect NAME, one of: {', '.join(list_dialects())}" in message


def test_the_default_model_and_missing_files() -> None:
    assert model_format.default_dialect("default").name == "qwen2.5"
    with pytest.raises(ChatFmtError, match=r"there is no file /models/other\.gguf"):
        model_format.default_dialect("/models/other.gguf")


# ==== The commands ====


def test_serve_refuses_an_unknown_template_before_loading_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine_calls: list[dict[str, Any]]
) -> None:
    path = write_gguf(tmp_path / "phi.gguf", template=UNKNOWN)
    assert main(["serve", "--model", str(path), "--port", "1", "--no-store", "--no-web"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"chatfmt: error: cannot tell the chat format of {path}"), err
    assert "--dialect NAME, one of: " in err and "qwen2.5" in err
    assert engine_calls == []


def test_serve_as_a_user_runs_it(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "phi.gguf", template=UNKNOWN)
    command = [sys.executable, "-m", "chatfmt.cli", "serve", "--model", str(path), "--port", "1"]
    data = tmp_path / "data"  # where the default store would go
    env = {**os.environ, "XDG_DATA_HOME": str(data), "HOME": str(tmp_path)}
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2
    assert "cannot tell the chat format" in out.stderr and "--dialect NAME" in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert not data.exists()  # refused before the response store was opened


def test_serve_uses_the_detected_dialect_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine_calls: list[dict[str, Any]]
) -> None:
    path = write_gguf(tmp_path / "plain.gguf", template=PLAIN_CHATML)
    assert main(["serve", "--model", str(path), "--port", "1", "--no-store", "--no-web"]) == 2
    err = capsys.readouterr().err
    assert "chatfmt: dialect chatml: the chat template is plain ChatML" in err
    assert err.rstrip().endswith("engine reached")
    # The engine is built for the detected dialect, as if it had been named.
    assert engine_calls[0]["text_controls"] == get_dialect("chatml").text_controls


def test_a_named_dialect_is_checked_against_the_template_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine_calls: list[dict[str, Any]]
) -> None:
    path = write_gguf(tmp_path / "phi.gguf", template=UNKNOWN)
    argv = ["serve", "--model", str(path), "--dialect", "chatml", "--port", "1", "--no-store"]
    assert main([*argv, "--no-web"]) == 2
    err = capsys.readouterr().err
    assert "the chatml dialect does not render what the model's chat template renders" in err
    assert "template: '<|user|>' dialect: '<|im_start|>user'" in err  # one line
    assert "--no-template-check" in err and engine_calls == []
    # Chosen explicitly, it is served anyway, with the difference in the log.
    assert main([*argv, "--no-web", "--no-template-check"]) == 2
    err = capsys.readouterr().err
    assert "warning: the chatml dialect does not render" in err
    assert err.rstrip().endswith("engine reached") and len(engine_calls) == 1


def test_a_template_that_writes_no_tools_is_served_for_chat_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatfmt.engines.fake import FakeEngine
    from chatfmt.tokenizers import load_tokenizer

    apps: list[Any] = []

    def build_engine(model: str = "default", **options: Any) -> FakeEngine:
        return FakeEngine(load_tokenizer("qwen2.5"), ["Hello!<|im_end|>"])

    def configure(app: Any, engine: Any, dialect: Any) -> None:
        apps.append(app)
        raise EngineReached("configured")

    monkeypatch.setattr(serve, "build_engine", build_engine)
    path = write_gguf(tmp_path / "plain.gguf", template=PLAIN_CHATML)
    with pytest.raises(EngineReached):
        serve.run_server(str(path), port=1, configure=configure)
    assert "the template writes no tools: for chat only" in capsys.readouterr().err
    service = apps[0].state.service
    assert service.chat_only


def test_chat_detects_the_dialect_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatfmt.engines.fake import FakeEngine
    from chatfmt.tokenizers import load_tokenizer

    built: list[dict[str, Any]] = []

    def build_engine(model: str = "default", **options: Any) -> FakeEngine:
        built.append(options)
        return FakeEngine(load_tokenizer("qwen2.5"), ["Hello!<|im_end|>"])

    monkeypatch.setattr(serve, "build_engine", build_engine)
    path = write_gguf(tmp_path / "phi.gguf", template=UNKNOWN)
    assert main(["chat", "--model", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("chatfmt: error: cannot tell the chat format of")
    assert built == []  # told from the file's header, before any model loads
    # chat's engine is serve's by default (the managed llama-server), local on request.
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(""))
    assert main(["chat", "--dialect", "qwen2.5"]) == 0
    assert main(["chat", "--dialect", "qwen2.5", "--engine", "local"]) == 0
    assert [b["engine"] for b in built] == ["llama-server", "local"]


def test_chat_refuses_tools_for_a_model_whose_template_writes_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine_calls: list[dict[str, Any]]
) -> None:
    path = write_gguf(tmp_path / "plain.gguf", template=PLAIN_CHATML)
    tools = tmp_path / "tools.py"
    tools.write_text(
        "from chatfmt.tools import tool\n\n\n@tool\ndef add(a: int, b: int) -> int:\n"
        '    """Add."""\n    return a + b\n'
    )
    assert main(["chat", "--model", str(path), "--tools", str(tools)]) == 2
    err = capsys.readouterr().err
    assert "shows it no tools" in err and "without --tools" in err and engine_calls == []


def test_choose_dialect_says_how_the_model_is_served(tmp_path: Path) -> None:
    import io

    log = io.StringIO()
    plain = write_gguf(tmp_path / "plain.gguf", template=PLAIN_CHATML)
    chosen = model_format.choose_dialect(str(plain), None, template_check=True, log=log)
    assert chosen.dialect is not None and chosen.dialect.name == "chatml"
    assert chosen.description == "the chatml dialect, checked against the model's chat template"
    assert model_format.choose_dialect("default", None, template_check=True, log=log) == (
        None,
        False,
        None,
    )
    # No dialect fits, and a header-only file has no vocabulary to serve the template with.
    phi = write_gguf(tmp_path / "phi.gguf", template=UNKNOWN)
    with pytest.raises(ChatFmtError) as info:
        model_format.choose_dialect(str(phi), None, template_check=True, log=log)
    message = str(info.value)
    assert message.startswith(f"cannot tell the chat format of {phi}")
    assert "Nor can it be served through its own chat template: its vocabulary" in message
    with pytest.raises(ChatFmtError, match="--dialect template serves a GGUF file"):
        model_format.choose_dialect("default", "template", template_check=True, log=log)
