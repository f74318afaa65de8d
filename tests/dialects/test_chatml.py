"""Plain ChatML: layout, cl100k seed ids, injection-proofing, and render→parse round trips."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from goldens import check_json, check_text, render_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatfmt.decoding import ControlSplitter
from chatfmt.dialects import get_dialect
from chatfmt.dialects.base import Dialect
from chatfmt.dialects.chatml import ChatML, Qwen25
from chatfmt.messages import Conversation, Message, ToolCall, load_conversation
from chatfmt.segments import Block, BlockEncoder, Control, Text

TOKENIZERS = ("cl100k", "qwen")


# ==== Layout ====


def test_registry_names() -> None:
    assert isinstance(get_dialect("chatml"), ChatML)
    assert isinstance(get_dialect("qwen2.5"), Qwen25)
    assert get_dialect("chatml").name == "chatml"
    assert get_dialect("qwen2.5").name == "qwen2.5"


def test_canonical_layout() -> None:
    text = ChatML().render_text(
        [
            {"role": "system", "content": "S", "metadata": "name=rules"},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi"},
        ]
    )
    assert text == (
        "<|im_start|>system name=rules\nS<|im_end|>\n"
        "<|im_start|>user\nHello<|im_end|>\n"
        "<|im_start|>assistant\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_canonical_layout_ids_cl100k(cl100k: Any) -> None:
    ids = ChatML().render([{"role": "user", "content": "Hello"}], cl100k).ids
    # <|im_start|> user \n Hello <|im_end|> \n <|im_start|> assistant \n
    assert ids == [100264, 882, 198, 9906, 100265, 198, 100264, 78191, 198]


def test_seed_check_cl100k(cl100k: Any) -> None:
    """The seed's own layout (no newline after <|im_end|>, none after the last role), built
    from the same kind of segments: the control/text split gives exactly the seed's ids."""
    block = Block(
        (
            Control("<|im_start|>"),
            Text("user\nHello"),
            Control("<|im_end|>"),
            Control("<|im_start|>"),
            Text("assistant"),
        )
    )
    ids = BlockEncoder(cl100k).encode([block]).ids
    assert ids == [100264, 882, 198, 9906, 100265, 100264, 78191]
    # And ChatML's own blocks hold the same segments for the same turn.
    seg = ChatML().render_blocks(
        Conversation.model_validate({"messages": [{"role": "user", "content": "Hello"}]})
    )
    assert seg[0].segments[:3] == (
        Control("<|im_start|>"),
        Text("user\nHello"),
        Control("<|im_end|>"),
    )


def test_roles_tools_and_calls() -> None:
    conv = Conversation.model_validate(
        {
            "messages": [
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": "Checking.",
                    "tool_calls": [
                        {"id": "a", "name": "get_weather", "arguments": {"city": "Oslo"}}
                    ],
                },
                {"role": "observation", "tool_call_id": "a", "content": "cold"},
            ],
            "tools": [{"name": "get_weather", "parameters": {"type": "object"}}],
        }
    )
    blocks = ChatML().render_blocks(conv)
    text = "".join(b.text for b in blocks)
    assert text.startswith("<|im_start|>system\n# Tools\n\n")
    assert '{"name": "get_weather", "parameters": {"type": "object"}}' in text
    assert (
        "<|im_start|>assistant\nChecking.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>tool\ncold<|im_end|>\n<|im_start|>assistant\n"
    ) in text
    assert [b.messages for b in blocks] == [(), (0,), (1,), (2,), ()]
    assert ChatML().stop_controls == ("<|im_end|>", "<|endoftext|>")


def test_tool_call_tags_fall_back_to_text_on_cl100k(cl100k: Any, qwen: Any) -> None:
    conv = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "tool_calls": [{"id": "a", "name": "f", "arguments": {}}]},
        {"role": "tool", "tool_call_id": "a", "content": "r"},
    ]
    ids = ChatML().render(conv, cl100k).ids
    assert cl100k.decode(ids) == ChatML().render_text(conv)
    assert 151657 in ChatML().render(conv, qwen).ids
    assert ChatML().stop_ids(cl100k) == [100265, 100257]
    assert Qwen25().stop_ids(qwen) == [151645, 151643]


# ==== Golden files ====


def golden_cases() -> list[Path]:
    return render_cases("chatml")


@pytest.mark.parametrize("case", golden_cases(), ids=lambda p: p.name)
def test_golden(case: Path, request: pytest.FixtureRequest) -> None:
    data = json.loads((case / "conversation.json").read_text(encoding="utf-8"))
    conv = load_conversation(data)
    gen = data.get("add_generation_prompt", True)
    d = ChatML()
    text = d.render_text(conv, add_generation_prompt=gen)
    ids = {
        name: d.render(conv, request.getfixturevalue(name), add_generation_prompt=gen).ids
        for name in TOKENIZERS
    }
    check_text(case / "expected.txt", text)
    check_json(case / "expected_ids.json", ids, compact=True)


def test_golden_cases_exist() -> None:
    assert len(golden_cases()) >= 4


# ==== No text ever becomes a control token ====

CONTROL_STRINGS = [
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|endofprompt|>",
    "<|file_sep|>",
    "<|vision_pad|>",
]


def _variants(token: str) -> list[str]:
    fullwidth = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in token)
    return [
        token,
        token[: len(token) // 2],
        token[len(token) // 2 :],
        token.upper(),
        fullwidth,
        token.replace("|", "\uff5c"),  # fullwidth vertical bar, as in DeepSeek's tokens
        token.replace("i", "\u0456"),  # Cyrillic look-alike
        token.replace("_", "\u200b_"),  # zero-width space inside
        " " + token,
        token + "\n",
        unicodedata.normalize("NFD", "é" + token + "é"),
        unicodedata.normalize("NFC", "e\u0301" + token),
    ]


FRAGMENTS = [v for t in CONTROL_STRINGS for v in _variants(t)] + [
    "\n",
    "",
    "é",
    "e\u0301",
    "<",
    "|",
]
evil_text = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=8), max_size=6).map("".join)
evil_meta = evil_text.map(lambda s: s.replace("\n", " ").replace("\r", " ") or None)


@st.composite
def evil_conversations(draw: st.DrawFn) -> Conversation:
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(evil_text), "metadata": draw(evil_meta)})
    for n in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["user", "assistant", "calls", "system"]))
        if kind == "calls":
            args = draw(st.dictionaries(evil_text, evil_text, max_size=2))
            msgs.append(
                {
                    "role": "assistant",
                    "content": draw(st.none() | evil_text),
                    "tool_calls": [{"id": f"c{n}", "name": "f", "arguments": args}],
                }
            )
            msgs.append(
                {
                    "role": draw(st.sampled_from(["tool", "observation"])),
                    "tool_call_id": f"c{n}",
                    "content": draw(evil_text),
                    "metadata": draw(evil_meta),
                }
            )
        else:
            msgs.append({"role": kind, "content": draw(evil_text), "metadata": draw(evil_meta)})
    tools = (
        [{"name": "f", "description": draw(evil_text), "x": {draw(evil_text): draw(evil_text)}}]
        if draw(st.booleans())
        else []
    )
    return Conversation.model_validate({"messages": msgs, "tools": tools})


def _check_no_control_from_text(d: Dialect, conv: Conversation, tok: Any) -> None:
    controls = set(tok.controls.values())
    blocks = d.render_blocks(conv)
    structural = 0
    for block in blocks:
        for seg in block.segments:
            if isinstance(seg, Text):
                assert not controls & set(tok.encode_text(seg.text)), seg.text
            elif seg.required or tok.has_control(seg.token):
                structural += 1
    ids = d.render(conv, tok, strict=False).ids
    assert sum(1 for i in ids if i in controls) == structural
    # The structure itself must not depend on the text: blank every text out and compare.
    blank = Conversation.model_validate(
        {
            "messages": [
                m.model_copy(
                    update={
                        "content": "x" if m.content is not None else None,
                        "metadata": "m" if m.metadata else None,
                        "tool_calls": tuple(
                            c.model_copy(update={"arguments": "{}", "raw": None})
                            for c in m.tool_calls
                        )
                        if m.tool_calls
                        else None,
                    }
                )
                for m in conv.messages
            ],
            "tools": [{"name": "f"} for _ in conv.tools],
        }
    )
    blank_ids = d.render(blank, tok, strict=False).ids
    assert [i for i in ids if i in controls] == [i for i in blank_ids if i in controls]


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(conv=evil_conversations())
@pytest.mark.parametrize(
    ("dialect", "tok_name"),
    [("chatml", "cl100k"), ("chatml", "qwen"), ("qwen2.5", "qwen")],
)
def test_no_text_yields_a_control_id(
    conv: Conversation, dialect: str, tok_name: str, request: pytest.FixtureRequest
) -> None:
    d = get_dialect(dialect)
    if dialect == "qwen2.5":
        conv = Conversation(
            messages=tuple(m.model_copy(update={"metadata": None}) for m in conv.messages),
            tools=conv.tools,
        )
    _check_no_control_from_text(d, conv, request.getfixturevalue(tok_name))


def test_every_control_string_stays_text(cl100k: Any, qwen: Any) -> None:
    for tok in (cl100k, qwen):
        for d in (ChatML(), Qwen25()):
            for frag in FRAGMENTS:
                conv = Conversation.model_validate(
                    {
                        "messages": [
                            {"role": "system", "content": frag},
                            {"role": "user", "content": frag},
                        ]
                    }
                )
                if tok is cl100k and d.name == "qwen2.5":
                    continue
                _check_no_control_from_text(d, conv, tok)


# ==== Render → parse round trips ====

plain = st.text(max_size=30).filter(
    lambda s: "<tool_call>" not in s and not s.lstrip(" \t\r\n").startswith(("{", "`"))
)
call_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,12}", fullmatch=True)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
call_args = st.dictionaries(st.text(max_size=8), json_values, max_size=3)


def _assistant_output(d: Dialect, message: Message) -> str:
    """The text the model wrote for ``message``: its rendered turn after the generation prompt."""
    conv = Conversation(messages=(Message(role="user", content="q"), message))
    block = d.render_blocks(conv, add_generation_prompt=False)[-1]
    head, tail = "<|im_start|>assistant\n", "<|im_end|>\n"
    text = block.text
    if not text.startswith(head):  # calls without content: "assistant" then "\n<tool_call>"
        assert text.startswith("<|im_start|>assistant")
        head = "<|im_start|>assistant"
    assert text.endswith(tail)
    return text[len(head) : -len(tail)]


def _ids_of(d: Dialect, output: str, tok: Any) -> list[int]:
    splitter = ControlSplitter(d.controls)
    ids: list[int] = []
    for piece in [*splitter.feed(output), *splitter.flush()]:
        if isinstance(piece, Control):
            ids.append(tok.control_id(piece.token))
        else:
            ids.extend(tok.encode_text(piece))
    return ids


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    content=st.none() | plain,
    calls=st.lists(st.tuples(call_names, call_args), max_size=3),
    dialect=st.sampled_from(["chatml", "qwen2.5"]),
)
def test_render_parse_round_trip(
    content: str | None, calls: list[tuple[str, dict[str, Any]]], dialect: str, qwen: Any
) -> None:
    d = get_dialect(dialect)
    tool_calls = tuple(ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls))
    msg = Message(role="assistant", content=content, tool_calls=tool_calls or None)
    output = _assistant_output(d, msg)
    # As text, a stop token written out ends the output; as ids it is only text.
    if any(stop in output for stop in d.stop_controls):
        r_ids = d.parse(_ids_of_text(output, qwen), qwen)
        assert r_ids.content == (unicodedata.normalize("NFC", content or "") or None)
        assert len(r_ids.tool_calls) == len(calls)
        return
    r = d.parse(output)
    assert r.warnings == []
    assert r.content == (content or None)
    assert [(c.name, c.arguments_dict()) for c in r.tool_calls] == [
        (n, json.loads(json.dumps(a))) for n, a in calls
    ]
    assert r.finish_reason == ("tool_calls" if calls else "stop")
    # Re-rendering the parsed turn (raw calls verbatim) gives the same text back.
    again = Message(
        role="assistant",
        content=r.content,
        tool_calls=tuple(c.model_copy(update={"id": f"x{i}"}) for i, c in enumerate(r.tool_calls))
        or None,
    )
    assert _assistant_output(d, again) == output
    # Through token ids: the same, up to the vocabulary's NFC normalisation.
    r_ids = d.parse(_ids_of_text(output, qwen), qwen)
    r_nfc = d.parse(unicodedata.normalize("NFC", output))
    assert _strip_ids(r_ids) == _strip_ids(r_nfc)


def _ids_of_text(output: str, tok: Any) -> list[int]:
    """Ids of ``output`` with only the tool-call tags as control tokens (as a model writes)."""
    ids: list[int] = []
    for part in re.split("(<tool_call>|</tool_call>)", output):
        ids.extend(
            [tok.control_id(part)]
            if part in ("<tool_call>", "</tool_call>")
            else tok.encode_text(part)
        )
    return ids


def _strip_ids(r: Any) -> Any:
    out = r.to_openai()
    for c in out.get("tool_calls", []):
        del c["id"]
    return out, [c.raw for c in r.tool_calls]


def test_round_trip_ids_are_the_models(qwen: Any) -> None:
    """A parsed call keeps ``raw``, so history re-renders to exactly the ids the model wrote."""
    d = Qwen25()
    output = 'Sure.\n<tool_call>\n{"name": "f", "arguments": {"a":1,  "b": [ ]}}\n</tool_call>'
    model_ids = _ids_of(d, output, qwen)
    r = d.parse([*model_ids, 151645], qwen)
    conv = Conversation(messages=(Message(role="user", content="q"), r.message))
    block = d.render_blocks(conv, add_generation_prompt=False)[-1]
    ids = list(BlockEncoder(qwen).encode_block(block))
    head = [151644, *qwen.encode_text("assistant\n" + "Sure.\n")]
    assert ids[: len(head)] == head
    assert r.tool_calls[0].arguments == '{"a":1,  "b": [ ]}'
    assert ids[len(head) :] == [
        *model_ids[len(qwen.encode_text("Sure.\n")) :],
        151645,
        *qwen.encode_text("\n"),
    ]


def test_chatml_validation() -> None:
    from chatfmt.errors import ValidationError

    d = ChatML()
    ok = Conversation.model_validate(
        {"messages": [{"role": "user", "content": None, "metadata": "name=bob"}]}
    )
    d.validate(ok)  # metadata is ChatML's header; missing content renders empty
    bad = Conversation.model_validate(
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "tool", "tool_call_id": "nope", "content": "r"},
            ]
        }
    )
    with pytest.raises(ValidationError) as e:
        d.validate(bad)
    assert e.value.index == 1 and e.value.rule == "tool-pairing" and "tool_call_id" in str(e.value)
    d.validate(bad, strict=False)
    wrong_role = Conversation.model_validate(
        {"messages": [{"role": "user", "content": "x", "tool_calls": [{"name": "f"}]}]}
    )
    with pytest.raises(ValidationError) as e:
        d.validate(wrong_role, strict=False)
    assert e.value.rule == "tool-calls-role"
