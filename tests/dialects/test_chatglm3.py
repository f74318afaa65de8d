"""ChatGLM3 rendering and validation, checked id for id against the official algorithm.

The reference below is an independent transcription of ``build_single_message`` and
``build_chat_input`` from THUDM/chatglm3-6b ``tokenization_chatglm.py``, calling the
SentencePiece processor directly. Golden cases are the PROMPT.md examples; regenerate them with
``CHATFMT_UPDATE_GOLDEN=1``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from goldens import GOLDEN as GOLDEN_ROOT
from goldens import UPDATE, check_json, check_text
from hypothesis import given
from hypothesis import strategies as st

from chatfmt.dialects import get_dialect
from chatfmt.dialects.chatglm3 import TOOL_PROMPT, ChatGLM3
from chatfmt.errors import ValidationError
from chatfmt.messages import Conversation, Message, Tool, ToolCall, load_conversation
from chatfmt.segments import Control, Text
from chatfmt.tokenizers.sentencepiece import SentencePieceTokenizer

GOLDEN = GOLDEN_ROOT / "chatglm3"

# ==== The official algorithm (reference) ====

ROLE_IDS = {"system": 64794, "user": 64795, "assistant": 64796, "observation": 64797}
PREFIX = [64790, 64792]  # [gMASK], sop
ASSISTANT_ID = 64796


def build_single_message(sp: Any, role: str, metadata: str, message: str) -> list[int]:
    """``[role id] + encode(f"{metadata}\\n") + encode(message)``."""
    assert role in ROLE_IDS, role
    return [ROLE_IDS[role], *sp.encode(f"{metadata}\n"), *sp.encode(message)]


def build_chat_input(
    sp: Any, query: str, history: list[dict[str, Any]] | None = None, role: str = "user"
) -> list[int]:
    """``build_chat_input`` plus the ``[gMASK] sop`` prefix ``batch_encode_plus`` adds."""
    input_ids: list[int] = []
    for item in history or []:
        content = item["content"]
        if item["role"] == "system" and "tools" in item:
            content = content + "\n" + json.dumps(item["tools"], indent=4, ensure_ascii=False)
        input_ids.extend(build_single_message(sp, item["role"], item.get("metadata", ""), content))
    input_ids.extend(build_single_message(sp, role, "", query))
    input_ids.extend([ASSISTANT_ID])
    return PREFIX + input_ids


# ==== PROMPT.md cases ====

EN_SYSTEM = (
    "You are ChatGLM3, a large language model trained by Zhipu.AI. Follow the user's "
    "instructions carefully. Respond using markdown."
)
WEATHER = {
    "name": "get_current_weather",
    "description": "Get the current weather in a given location",
    "parameters": {
        "type": "object",
        "properties": {
            "location": {
                "type": "string",
                "description": "The city and state, e.g. San Francisco, CA",
            },
            "unit": {"type": "string"},
        },
        "required": ["location"],
    },
}
CI_SYSTEM = (
    "你是一位智能AI助手，你叫ChatGLM3，你连接着一台电脑，但请注意不能联网。在使用Python解决任务时，"
    "你可以运行代码并得到结果，如果运行结果有错误，你需要尽可能对代码进行改进。你可以处理用户上传到电脑上"
    "的文件，文件默认存储路径是/mnt/data/。"
)
CI_USER = (
    "#File: /mnt/data/metadata.jsonl\n#Size: 35380\n#File uploaded\n文件中是否存在缺失值或异常值？"
)
CI_TEXT1 = (
    "首先，我将读取您提供的文件，并查看其内容以确定是否存在缺失值或异常值。\n\n我们从加载文件开始："
)
CI_CODE1 = (
    "import json\n\n# Load the uploaded file\ndata = []\n"
    "with open(\"/mnt/data/metadata.jsonl\", 'r') as file:\n    for line in file:\n"
    "        data.append(json.loads(line))\n\n"
    "# Display the first few records to get a sense of the data\ndata[:5]"
)
CI_RESULT1 = (
    "```result\n[{'file_name': 'aceinthehole.png',\n  'name': 'Ace in the Hole',\n"
    "  'type': 'survivor',\n"
    "  'description': 'Lady Luck always seems to be throwing something good your way.'},\n"
    " {'file_name': 'adrenaline.png',\n  'name': 'Adrenaline',\n  'type': 'survivor',\n"
    "  'description': 'You are fuelled by unexpected energy when on the verge of escape.'}]\n```"
)
CI_TEXT2 = (
    "该文件看起来包含有关某些条目的元数据，每个条目有以下字段：\n\n\n- `file_name`: 文件名称\n"
    '- `name`: 名称\n- `type`: 类型（例如 "survivor" 或 "killer"）\n- `description`: 描述\n\n'
    "接下来，我将检查这些字段是否存在缺失值。"
)
CI_CODE2 = (
    "# Check for missing values in each column\n"
    "missing_values = {key: sum(1 for item in data if key not in item) "
    "for key in data[0].keys()}\n\nmissing_values"
)
CI_RESULT2 = "```result\n{'file_name': 0, 'name': 0, 'type': 0, 'description': 0}\n```"
CI_TEXT3 = "每个字段都没有缺失值。这意味着每个条目都完整。"
CI_USER2 = "帮我画一个爱心"
CI_CODE3 = (
    "import numpy as np\nimport matplotlib.pyplot as plt\n\n# 爱心形状的参数方程\n"
    "def heart(t):\n    x = 16 * np.sin(t) ** 3\n"
    "    y = 13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t)\n"
    "    return x, y\n\nt = np.linspace(0, 2 * np.pi, 1000)\nx, y = heart(t)\n\n"
    "plt.figure(figsize=(6, 6))\nplt.plot(x, y, color='red')\nplt.axis('equal')\n"
    "plt.axis('off')\nplt.show()"
)
CI_RESULT3 = "```result\n[Image]\n```"


def fence(code: str) -> str:
    return f"```python\n{code}\n```"


def interp(call_id: str, code: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "interpreter", "arguments": json.dumps({"code": code})},
    }


def fn_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
    }


# Each case: the chatfmt conversation file, and the official history + final query/role.
CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]], str, str]] = {
    "multi_turn": (
        {
            "messages": [
                {"role": "system", "content": EN_SYSTEM},
                {"role": "user", "content": "Hello"},
                {
                    "role": "assistant",
                    "content": "Hello, I'm ChatGLM3. What can I assist you today?",
                },
                {"role": "user", "content": "What can you do?"},
            ]
        },
        [
            {"role": "system", "content": EN_SYSTEM},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hello, I'm ChatGLM3. What can I assist you today?"},
        ],
        "What can you do?",
        "user",
    ),
    "tool_calling": (
        {
            "messages": [
                {"role": "user", "content": "今天北京的天气怎么样？"},
                {
                    "role": "assistant",
                    "content": "好的，让我们来查看今天的天气",
                    "tool_calls": [
                        fn_call(
                            "call_w",
                            "get_current_weather",
                            {"location": "beijing", "unit": "celsius"},
                        )
                    ],
                },
                {"role": "tool", "tool_call_id": "call_w", "content": '{"temperature": 22}'},
            ],
            "tools": [{"type": "function", "function": WEATHER}],
        },
        [
            {"role": "system", "content": TOOL_PROMPT, "tools": [WEATHER]},
            {"role": "user", "content": "今天北京的天气怎么样？"},
            {"role": "assistant", "metadata": "", "content": "好的，让我们来查看今天的天气"},
            {
                "role": "assistant",
                "metadata": "get_current_weather",
                "content": fence('tool_call(location="beijing", unit="celsius")'),
            },
        ],
        '{"temperature": 22}',
        "observation",
    ),
    "tool_calling_with_system": (
        {
            "messages": [
                {"role": "system", "content": TOOL_PROMPT},
                {"role": "user", "content": "What's the weather in Beijing today?"},
                {
                    "role": "assistant",
                    "content": "Okay, let's look up the weather in Bejing today.",
                },
                {
                    "role": "assistant",
                    "metadata": "get_current_weather",
                    "content": fence('tool_call(location="beijing", unit="celsius")'),
                },
                {"role": "observation", "content": '{"temperature": 22}'},
                {
                    "role": "assistant",
                    "content": "According to the query results, the temperature in Beijing "
                    "today is 22 degrees Celsius.",
                },
                {"role": "user", "content": "Thanks!"},
            ],
            "tools": [WEATHER],
        },
        [
            {"role": "system", "content": TOOL_PROMPT, "tools": [WEATHER]},
            {"role": "user", "content": "What's the weather in Beijing today?"},
            {"role": "assistant", "content": "Okay, let's look up the weather in Bejing today."},
            {
                "role": "assistant",
                "metadata": "get_current_weather",
                "content": fence('tool_call(location="beijing", unit="celsius")'),
            },
            {"role": "observation", "content": '{"temperature": 22}'},
            {
                "role": "assistant",
                "content": "According to the query results, the temperature in Beijing today "
                "is 22 degrees Celsius.",
            },
        ],
        "Thanks!",
        "user",
    ),
    "two_calls_interleaved": (
        {
            "messages": [
                {"role": "user", "content": "Weather in Beijing and Shanghai?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        fn_call("c1", "get_current_weather", {"location": "北京", "days": [1, -2]}),
                        fn_call(
                            "c2", "get_current_weather", {"location": "上海", "ok": True, "x": None}
                        ),
                    ],
                },
                {"role": "tool", "tool_call_id": "c2", "content": '{"temperature": 25}'},
                {"role": "tool", "tool_call_id": "c1", "content": '{"temperature": 22}'},
            ],
            "tools": [WEATHER],
        },
        [
            {"role": "system", "content": TOOL_PROMPT, "tools": [WEATHER]},
            {"role": "user", "content": "Weather in Beijing and Shanghai?"},
            {
                "role": "assistant",
                "metadata": "get_current_weather",
                "content": fence('tool_call(location="北京", days=[1, -2])'),
            },
            {"role": "observation", "content": '{"temperature": 22}'},
            {
                "role": "assistant",
                "metadata": "get_current_weather",
                "content": fence('tool_call(location="上海", ok=True, x=None)'),
            },
        ],
        '{"temperature": 25}',
        "observation",
    ),
    "code_interpreter": (
        {
            "messages": [
                {"role": "system", "content": CI_SYSTEM},
                {"role": "user", "content": CI_USER},
                {"role": "assistant", "content": CI_TEXT1, "tool_calls": [interp("i1", CI_CODE1)]},
                {"role": "tool", "tool_call_id": "i1", "content": CI_RESULT1},
                {"role": "assistant", "content": CI_TEXT2, "tool_calls": [interp("i2", CI_CODE2)]},
                {"role": "tool", "tool_call_id": "i2", "content": CI_RESULT2},
                {"role": "assistant", "content": CI_TEXT3},
                {"role": "user", "content": CI_USER2},
                {"role": "assistant", "content": None, "tool_calls": [interp("i3", CI_CODE3)]},
                {"role": "tool", "tool_call_id": "i3", "content": CI_RESULT3},
            ]
        },
        [
            {"role": "system", "content": CI_SYSTEM},
            {"role": "user", "content": CI_USER},
            {"role": "assistant", "metadata": "", "content": CI_TEXT1},
            {"role": "assistant", "metadata": "interpreter", "content": fence(CI_CODE1)},
            {"role": "observation", "content": CI_RESULT1},
            {"role": "assistant", "metadata": "", "content": CI_TEXT2},
            {"role": "assistant", "metadata": "interpreter", "content": fence(CI_CODE2)},
            {"role": "observation", "content": CI_RESULT2},
            {"role": "assistant", "metadata": "", "content": CI_TEXT3},
            {"role": "user", "content": CI_USER2},
            {"role": "assistant", "metadata": "interpreter", "content": fence(CI_CODE3)},
        ],
        CI_RESULT3,
        "observation",
    ),
    "code_interpreter_history_form": (
        {
            "messages": [
                {"role": "system", "content": CI_SYSTEM},
                {"role": "user", "content": CI_USER2},
                {"role": "assistant", "metadata": "interpreter", "content": fence(CI_CODE3)},
                {"role": "observation", "content": CI_RESULT3},
            ]
        },
        [
            {"role": "system", "content": CI_SYSTEM},
            {"role": "user", "content": CI_USER2},
            {"role": "assistant", "metadata": "interpreter", "content": fence(CI_CODE3)},
        ],
        CI_RESULT3,
        "observation",
    ),
}


def _case_dir(name: str) -> Path:
    return GOLDEN / name


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_matches_official(case: str, glm: SentencePieceTokenizer) -> None:
    conv_data, history, query, role = CASES[case]
    reference = build_chat_input(glm.processor, query, history, role)
    d = _case_dir(case)
    dialect = get_dialect("chatglm3")
    if UPDATE:
        d.mkdir(parents=True, exist_ok=True)
        (d / "conversation.json").write_text(
            json.dumps(conv_data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    conv = load_conversation(json.loads((d / "conversation.json").read_text(encoding="utf-8")))
    rendered = dialect.render(conv, glm)
    text = dialect.render_text(conv)
    assert rendered.ids == reference, _diff(glm, rendered.ids, reference)
    check_json(d / "expected_ids.json", rendered.ids, compact=True)
    check_text(d / "expected.txt", text)


def _diff(tok: SentencePieceTokenizer, got: list[int], want: list[int]) -> str:
    n = next(
        (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
        min(len(got), len(want)),
    )
    return (
        f"first difference at {n}:\n got:  {tok.decode(got[n : n + 20])!r}\n"
        f" want: {tok.decode(want[n : n + 20])!r}"
    )


def test_golden_files_match_cases() -> None:
    """The stored conversations are the cases above (so the reference checks them)."""
    for name, (conv_data, *_rest) in CASES.items():
        path = _case_dir(name) / "conversation.json"
        assert json.loads(path.read_text(encoding="utf-8")) == conv_data, name


# ==== Facts ====


def test_glm_facts(glm: SentencePieceTokenizer) -> None:
    assert glm.encode_text("\n") == [30910, 13]
    assert glm.processor.id_to_piece(13) == "<0x0A>"
    names = ["[MASK]", "[gMASK]", "[sMASK]", "sop", "eop"]
    names += ["<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"]
    assert [glm.control_id(t) for t in names] == list(range(64789, 64798))
    dialect = ChatGLM3()
    assert set(dialect.stop_ids(glm)) == {2, 64795, 64797}
    assert ASSISTANT_ID not in dialect.stop_ids(glm)
    assert dialect.stop_strings() == ["<|user|>", "<|observation|>"]
    assert get_dialect("chatglm3").name == "chatglm3"


def test_layout_segments() -> None:
    conv = Conversation(messages=(Message(role="user", content="Hi"),))
    blocks = ChatGLM3().render_blocks(conv)
    segs = [s for b in blocks for s in b.segments]
    assert [repr(s) for s in segs] == [
        "Control(token='[gMASK]', required=True)",
        "Control(token='sop', required=True)",
        "Control(token='<|user|>', required=True)",
        "Text(text='\\n')",
        "Text(text='Hi')",
        "Control(token='<|assistant|>', required=True)",
    ]
    assert blocks[1].messages == (0,)
    no_prompt = ChatGLM3().render_blocks(conv, add_generation_prompt=False)
    assert no_prompt[-1].segments[-1] == Text("Hi")


def test_no_generation_prompt(glm: SentencePieceTokenizer) -> None:
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    ids = ChatGLM3().render(msgs, glm, add_generation_prompt=False).ids
    sp = glm.processor
    want = PREFIX + build_single_message(sp, "user", "", "Hi")
    want += build_single_message(sp, "assistant", "", "Hello")
    assert ids == want


def test_tools_append_to_existing_system(glm: SentencePieceTokenizer) -> None:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    ids = ChatGLM3().render(msgs, glm, tools=[WEATHER]).ids
    history = [{"role": "system", "content": "Be brief.", "tools": [WEATHER]}]
    assert ids == build_chat_input(glm.processor, "Hi", history)


def test_interpreter_and_raw_calls(glm: SentencePieceTokenizer) -> None:
    raw = "```python\ntool_call(location='beijing')  # as written\n```"
    msgs = [
        Message(role="user", content="go"),
        Message(
            role="assistant",
            tool_calls=(ToolCall(id="a", name="get_current_weather", raw=raw, arguments="{}"),),
        ),
        Message(role="tool", tool_call_id="a", content="22"),
        Message(
            role="assistant",
            tool_calls=(ToolCall(id="b", name="interpreter", arguments={"code": "1 + 1"}),),
        ),
        Message(role="tool", tool_call_id="b", content="```result\n2\n```"),
    ]
    ids = ChatGLM3().render(msgs, glm).ids
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "metadata": "get_current_weather", "content": raw},
        {"role": "observation", "content": "22"},
        {"role": "assistant", "metadata": "interpreter", "content": fence("1 + 1")},
    ]
    assert ids == build_chat_input(glm.processor, "```result\n2\n```", history, "observation")


def test_nested_argument_literals() -> None:
    call = ToolCall(
        name="f",
        arguments={"s": 'a"b\n', "n": -3, "f": 2.5, "l": [1, [True, None]], "d": {"k": "v"}},
    )
    msgs = [Message(role="user", content="x"), Message(role="assistant", tool_calls=(call,))]
    text = ChatGLM3().render_text(msgs, add_generation_prompt=False, strict=False)
    assert text.endswith(
        '<|assistant|>f\n```python\ntool_call(s="a\\"b\\n", n=-3, f=2.5, l=[1, [True, None]], '
        'd={"k": "v"})\n```'
    )


# ==== Hypothesis: any history renders like the reference ====

SPECIAL_TEXT = st.sampled_from(
    [
        "<|user|>",
        "<|assistant|>",
        "<|system|>",
        "<|observation|>",
        "[gMASK]",
        "sop",
        "eop",
        "[MASK]",
        "[sMASK]",
        "<s>",
        "</s>",
        "<unk>",
        "<|user",
        "|>",
        "<|",
        "＜|user|＞",  # fullwidth look-alikes
        "<\u200b|user|>",
        "<|ᴜser|>",
        "▁",
        "\n",
        " ",
        "```python\n",
        "tool_call(",
    ]
)
TEXT = st.lists(st.one_of(SPECIAL_TEXT, st.text(max_size=12)), max_size=6).map("".join)
META = st.one_of(
    st.just(""),
    st.sampled_from(["interpreter", "get_current_weather", " sop", "<|user|>"]),
    TEXT.map(lambda s: s.replace("\n", "").replace("\r", "")),
)


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[dict[str, Any]], str, str, list[dict[str, Any]]]:
    history: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    if draw(st.booleans()):
        item: dict[str, Any] = {"role": "system", "content": draw(TEXT)}
        if draw(st.booleans()):
            tools = [WEATHER, {"name": draw(TEXT) or "t", "description": draw(TEXT)}]
            item["tools"] = tools
        history.append(item)
    for _ in range(draw(st.integers(0, 5))):
        role = draw(st.sampled_from(["user", "assistant", "observation"]))
        history.append({"role": role, "metadata": draw(META), "content": draw(TEXT)})
    role = draw(st.sampled_from(["user", "observation"]))
    return history, draw(TEXT), role, tools


@given(histories())
def test_any_history_matches_reference(
    glm: SentencePieceTokenizer,
    case: tuple[list[dict[str, Any]], str, str, list[dict[str, Any]]],
) -> None:
    history, query, role, tools = case
    messages = [
        Message(role=h["role"], metadata=h.get("metadata") or None, content=h["content"])
        for h in history
    ]
    messages.append(Message(role=role, content=query))  # type: ignore[arg-type]
    conv = Conversation(messages=tuple(messages), tools=tuple(Tool.of(t) for t in tools))
    ids = ChatGLM3().render(conv, glm, strict=False).ids
    assert ids == build_chat_input(glm.processor, query, history, role)


# ==== No injection ====


def _control_positions(tok: SentencePieceTokenizer, conv: Conversation) -> list[int]:
    blocks = ChatGLM3().render_blocks(conv)
    return [tok.control_id(s.token) for b in blocks for s in b.segments if isinstance(s, Control)]


def _assert_no_injection(tok: SentencePieceTokenizer, text: str, meta: str) -> None:
    conv = Conversation(
        messages=(
            Message(role="system", content=text, metadata=meta or None),
            Message(role="user", content=text, metadata=meta or None),
            Message(role="assistant", content=text, metadata=meta or None),
            Message(role="observation", content=text),
        ),
        tools=(Tool.of({"name": text or "t", "description": text}),),
    )
    ids = ChatGLM3().render(conv, tok, strict=False).ids
    first_control = min(set(tok.controls.values()) - {1, 2})
    special = [i for i in ids if i >= first_control or i in (1, 2)]
    assert special == _control_positions(tok, conv)


@given(text=TEXT, meta=META)
def test_text_never_becomes_control(glm: SentencePieceTokenizer, text: str, meta: str) -> None:
    _assert_no_injection(glm, text, meta)


@given(text=TEXT, meta=META)
def test_text_never_becomes_control_small(
    small_glm: SentencePieceTokenizer, text: str, meta: str
) -> None:
    _assert_no_injection(small_glm, text, meta)


# ==== Validation ====


def _conv(*messages: dict[str, Any]) -> Conversation:
    return load_conversation({"messages": list(messages)})


U = {"role": "user", "content": "u"}
A = {"role": "assistant", "content": "a"}
S = {"role": "system", "content": "s"}
CALL = {"role": "assistant", "content": None, "tool_calls": [fn_call("c1", "f", {"x": 1})]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "r"}


@pytest.mark.parametrize(
    ("messages", "rule", "index"),
    [
        ([U, S], "system-first", 1),
        ([U, U], "user-repeat", 1),
        ([S, A], "assistant-after-user", 1),
        ([U, {"role": "observation", "content": "r"}], "observation-order", 1),
        ([U, A, {"role": "observation", "content": "r"}], "observation-order", 2),
        ([U, CALL, RESULT, {"role": "observation", "content": "r2"}], "observation-order", 3),
        ([U, CALL, U], "tool-pairing", 2),
        (
            [{"role": "user", "content": "u", "tool_calls": CALL["tool_calls"]}],
            "tool-calls-role",
            0,
        ),
    ],
)
def test_strict_rules(messages: list[dict[str, Any]], rule: str, index: int) -> None:
    with pytest.raises(ValidationError) as info:
        ChatGLM3().validate(_conv(*messages))
    assert info.value.rule == rule
    assert info.value.index == index


def test_valid_conversations_pass() -> None:
    dialect = ChatGLM3()
    for data, *_rest in CASES.values():
        dialect.validate(load_conversation(data))
    dialect.validate(_conv(U, CALL, RESULT, A, U))
    dialect.validate(
        _conv(
            S,
            U,
            {"role": "assistant", "metadata": "interpreter", "content": "x"},
            {"role": "observation", "content": "r"},
        )
    )


def test_empty_conversation() -> None:
    with pytest.raises(ValidationError, match="no messages"):
        ChatGLM3().validate(Conversation(messages=()))
    ChatGLM3().validate(Conversation(messages=()), strict=False)


def test_lenient_allows_any_order(glm: SentencePieceTokenizer) -> None:
    conv = _conv(A, U, U, {"role": "observation", "content": "r"}, S)
    ChatGLM3().render(conv, glm, strict=False)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (fn_call("c", "f", {"a-b": 1}), "Python"),
        (fn_call("c", "f", {"class": 1}), "Python"),
        (fn_call("c", "f", {"ﬁ": 1}), "Python"),
        (fn_call("c", "interpreter", {"source": "x"}), "interpreter"),
        (fn_call("c", "bad\nname", {}), "one non-empty line"),
    ],
)
def test_unwritable_calls_rejected_even_lenient(call: dict[str, Any], match: str) -> None:
    conv = _conv(U, {"role": "assistant", "content": None, "tool_calls": [call]})
    with pytest.raises(ValidationError, match=match) as info:
        ChatGLM3().validate(conv, strict=False)
    assert info.value.index == 1


def test_non_finite_argument_rejected() -> None:
    # Refused where the call is made, for every dialect (JSON numbers are finite).
    with pytest.raises(ValidationError, match="finite"):
        ToolCall(name="f", arguments='{"x": NaN}')


def test_interleave_blocks_and_unmatched_results(glm: SentencePieceTokenizer) -> None:
    calls = [fn_call("c1", "f", {"x": 1}), fn_call("c2", "f", {"x": 2})]
    conv = _conv(
        U,
        {"role": "assistant", "content": "two calls", "tool_calls": calls},
        {"role": "tool", "content": "first, no id"},
        {"role": "tool", "tool_call_id": "nope", "content": "second, unknown id"},
        {"role": "tool", "content": "extra"},
    )
    blocks = ChatGLM3().render_blocks(conv)
    assert [b.messages for b in blocks] == [(), (0,), (1,), (2,), (1,), (3,), (4,), ()]
    sp = glm.processor
    history = [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "two calls"},
        {"role": "assistant", "metadata": "f", "content": fence("tool_call(x=1)")},
        {"role": "observation", "content": "first, no id"},
        {"role": "assistant", "metadata": "f", "content": fence("tool_call(x=2)")},
        {"role": "observation", "content": "second, unknown id"},
    ]
    ids = ChatGLM3().render(conv, glm, strict=False).ids
    assert ids == build_chat_input(sp, "extra", history, "observation")


def test_text_parse_splits_only_role_tokens() -> None:
    pieces = ChatGLM3().pieces("isopropyl sop [gMASK]<|assistant|>x", None)
    assert pieces == ["isopropyl sop [gMASK]", Control("<|assistant|>"), "x"]
    assert ChatGLM3().parse("\nisopropyl sop<|user|>ignored").content == "isopropyl sop"
