"""Dialects from other packages: an entry point in ``chatfmt.dialects`` or
:func:`~chatfmt.dialects.register_dialect`, listed, accepted by ``get_dialect`` and the CLI.

The plugin is a real distribution as ``importlib.metadata`` finds one: a ``*.dist-info`` folder
with an ``entry_points.txt``, in a directory put on ``sys.path`` (the module it names,
``tests/dialects/plugin/tiny_chat_dialect.py``, is on the path too).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import chatfmt
import chatfmt.dialects as registry
from chatfmt.cli.main import build_parser, main
from chatfmt.dialects import DialectPluginError, register_dialect

PLUGIN_DIR = Path(__file__).resolve().parent / "plugin"
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
)


def _distribution(root: Path, entry_points: str) -> None:
    info = root / "tiny_chat_dialect-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: tiny-chat-dialect\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(entry_points, encoding="utf-8")


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry as a new process has it (built-ins only, plugins not yet loaded); what a
    test registers is gone afterwards."""
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    monkeypatch.setattr(registry, "DIALECT_CONSTRUCTORS", dict(registry.DIALECT_CONSTRUCTORS))
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    yield


@pytest.fixture
def installed(tmp_path: Path, fresh_registry: None, monkeypatch: pytest.MonkeyPatch) -> None:
    _distribution(tmp_path, "[chatfmt.dialects]\ntiny = tiny_chat_dialect:make\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_an_installed_plugin_is_listed_and_renders(installed: None) -> None:
    assert "tiny" in chatfmt.list_dialects()
    assert {"chatml", "llama3", "harmony"} <= set(chatfmt.list_dialects())
    dialect = chatfmt.get_dialect("tiny")
    text = dialect.render_text([{"role": "user", "content": "Hi"}])
    assert text == "<<user>> Hi\n<<assistant>> "
    assert dialect.parse("Hello").content == "Hello"


def test_the_cli_accepts_a_plugin_dialect(
    installed: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conv = tmp_path / "conv.json"
    conv.write_text(json.dumps([{"role": "user", "content": "Hi"}]), encoding="utf-8")
    assert main(["render", str(conv), "--dialect", "tiny"]) == 0
    assert capsys.readouterr().out == "<<user>> Hi\n<<assistant>> \n"
    # chatfmt serve takes the same option: any registered name, no closed list.
    args = build_parser().parse_args(["serve", "--dialect", "tiny"])
    assert args.dialect == "tiny"


def test_the_cli_refuses_an_unknown_dialect_naming_the_plugins(
    installed: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["render", "x.json", "--dialect", "nope"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown dialect 'nope'" in err and "tiny" in err and "chatml" in err


def test_a_plugin_that_fails_to_load_is_named(
    tmp_path: Path, fresh_registry: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _distribution(tmp_path, "[chatfmt.dialects]\nghost = tiny_chat_dialect_missing:make\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(DialectPluginError, match=r"dialect plugin 'ghost'.*failed to load"):
        chatfmt.list_dialects()


def test_a_plugin_cannot_take_a_built_in_name(
    tmp_path: Path, fresh_registry: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _distribution(tmp_path, "[chatfmt.dialects]\nchatml = tiny_chat_dialect:make\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(DialectPluginError, match="'chatml': it is a built-in dialect"):
        chatfmt.get_dialect("chatml")


def test_register_dialect_at_run_time(fresh_registry: None) -> None:
    from tiny_chat_dialect import make

    register_dialect("tiny-too", make)
    assert "tiny-too" in chatfmt.list_dialects()
    assert chatfmt.get_dialect("tiny-too").parse("ok").content == "ok"
    with pytest.raises(DialectPluginError, match="already registered"):
        register_dialect("tiny-too", make)
    with pytest.raises(DialectPluginError, match="built-in"):
        register_dialect("qwen2.5", make)
    register_dialect("not-a-dialect", lambda: object())  # type: ignore[arg-type,return-value]
    with pytest.raises(DialectPluginError, match="not a Dialect"):
        chatfmt.get_dialect("not-a-dialect")


# ==== A plugin declares itself: detected from its template, trained by its own end rule ====


def test_an_installed_plugin_is_detected_from_its_own_template(installed: None) -> None:
    from chatfmt.dialects.detect import detect_dialect

    template = (PLUGIN_DIR / "tiny_chat_template.jinja").read_text(encoding="utf-8")
    detection = detect_dialect(template, None)
    assert detection.name == "tiny", detection.message
    assert "Tiny chat" in detection.reason
    # Built-in formats are still theirs: the plugin's fingerprint does not fit them.
    chatml = CHATML_TEMPLATE
    assert detect_dialect(chatml, None).name == "chatml"


def test_a_subclass_of_a_built_in_does_not_inherit_its_fingerprint(fresh_registry: None) -> None:
    """A plugin built on a family's class is another format until it declares what its
    template writes: it is never detected for the parent's models."""
    from chatfmt.dialects.chatml import ChatML
    from chatfmt.dialects.detect import detect_dialect

    class Derived(ChatML):
        name = "derived-chatml"

    register_dialect("derived-chatml", Derived)
    chatml = CHATML_TEMPLATE
    detection = detect_dialect(chatml, None)
    assert detection.name == "chatml"
    assert "derived-chatml" not in detection.reason


def test_a_plugin_is_trained_by_its_own_end_rule(installed: None) -> None:
    from chatfmt.tokenizers import load_tokenizer
    from chatfmt.training import IGNORE_INDEX, TrainingRenderer

    tokenizer = load_tokenizer("qwen2.5")
    dialect = chatfmt.get_dialect("tiny")
    conv = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    example = TrainingRenderer(dialect, tokenizer).render(conv)
    endoftext, im_end = tokenizer.control_id("<|endoftext|>"), tokenizer.control_id("<|im_end|>")
    # The declared rule closes the reply with <|endoftext|>, trained; the generic rule (the
    # last stop token) would have written <|im_end|>.
    assert example.input_ids[-1] == endoftext and im_end not in example.input_ids
    assert example.labels[-1] == endoftext
    pairs = zip(example.input_ids, example.labels, strict=True)
    trained = [t for t, label in pairs if label != IGNORE_INDEX]
    assert tokenizer.decode(trained[:-1]).startswith("Hello")


def test_a_dialect_that_overrides_render_blocks_still_renders() -> None:
    """Dialects written before ``write`` override ``render_blocks``; one that does neither
    says so when it renders."""
    from chatfmt.dialects.parsers.plain import PlainParser
    from chatfmt.messages import Conversation, Message
    from chatfmt.segments import Block, Text

    class Old(chatfmt.Dialect):
        name = "old-style"

        def render_blocks(
            self, conversation: Conversation, *, add_generation_prompt: bool = True
        ) -> list[Block]:
            return [Block((Text(m.text),), (i,)) for i, m in enumerate(conversation.messages)]

        def stream_parser(self, *, id_factory=None):  # type: ignore[no-untyped-def]
            return PlainParser(id_factory=id_factory)

    class Neither(Old):
        name = "neither"
        render_blocks = chatfmt.Dialect.render_blocks

    conv = Conversation(messages=[Message(role="user", content="hi")])
    assert Old().render_text(conv) == "hi"
    with pytest.raises(NotImplementedError, match="'neither' implements neither write"):
        Neither().render_text(conv)
