"""The llama4 dialect against Meta's reference encoder (``llama-models``: the Llama 4
``ChatFormat`` with ``python_list`` calls and the ``tokenizer.model`` it ships): render goldens
and generated conversations, id for id."""

from __future__ import annotations

import itertools
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from goldens import check_json, check_text, read_text, render_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from templates import conversations as template_conversations

from chatfmt import get_dialect
from chatfmt.dialects.llama4 import TOOLS_HEAD, TOOLS_TAIL, Llama4, encoder_domain
from chatfmt.errors import TokenizerError, ValidationError
from chatfmt.messages import Conversation, load_conversation
from chatfmt.pycall import parse_tool_call
from chatfmt.tokenizers import load_tokenizer
from chatfmt.tokenizers.base import Tokenizer
from chatfmt.tokenizers.tiktoken import llama4_from_file
from profiles import examples

pytest.importorskip(
    "llama_models", reason="llama-models (the Llama 4 reference encoder) is not installed"
)


def _stub(name: str, **attrs: Any) -> None:
    """An empty module for ``name`` when it is not installed: the encoder imports ``torch``
    and ``PIL`` at module level but uses them only for images, which no test renders."""
    if name in sys.modules:
        return
    try:
        __import__(name)
    except ImportError:
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        sys.modules[name] = module


_stub("torch", Tensor=object)
_stub("PIL.Image", Image=object)
_stub("PIL", Image=sys.modules["PIL.Image"])
if "torchvision" not in sys.modules:  # the image transforms: torchvision, for images only
    try:
        __import__("torchvision")
    except ImportError:
        _stub(
            "llama_models.llama4.preprocess",
            ResizeNormalizeImageTransform=object,
            VariableSizeImageTransform=object,
        )
try:
    from llama_models.datatypes import RawMessage, StopReason, ToolPromptFormat
    from llama_models.datatypes import ToolCall as RefToolCall
    from llama_models.llama4.chat_format import ChatFormat
    from llama_models.llama4.tokenizer import Tokenizer as RefTokenizer
except ImportError as exc:  # a module the stubs do not cover
    pytest.skip(f"the Llama 4 reference encoder cannot be imported: {exc}", allow_module_level=True)

# The generated conversations cover 500 per family in the full profile: two properties of
# half each.
EXAMPLES = examples(1.25)
DIALECT = Llama4()
BUILTINS = ("brave_search", "wolfram_alpha", "photogen", "code_interpreter")


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return load_tokenizer("llama4")


@pytest.fixture(scope="module")
def ref() -> ChatFormat:
    return ChatFormat(RefTokenizer.get_instance())


# ==== The reference's input: chatfmt messages as llama-models' RawMessage ====


def reference_messages(conv: Conversation) -> list[RawMessage]:
    """The conversation as the encoder's messages; the tool prompt (which the encoder does not
    write) as Meta's document gives it, from the dialect's two constants."""
    msgs = list(conv.messages)
    out: list[RawMessage] = []
    if conv.tools:
        listing = json.dumps([t.function for t in conv.tools], indent=4, ensure_ascii=False)
        system = TOOLS_HEAD + listing + TOOLS_TAIL
        if msgs and msgs[0].role == "system":
            system = msgs.pop(0).text + "\n\n" + system
        out.append(RawMessage(role="system", content=system))
    for m in msgs:
        calls = [
            RefToolCall(call_id=c.id, tool_name=c.name, arguments=c.arguments_dict())
            for c in m.tool_calls or ()
        ]
        role = "tool" if m.role in ("tool", "observation") else m.role
        stop = StopReason.end_of_message if calls else StopReason.end_of_turn
        out.append(RawMessage(role=role, content=m.text, tool_calls=calls, stop_reason=stop))
    return out


def reference_ids(ref: ChatFormat, conv: Conversation) -> list[int]:
    """Ids of the reference encoder (which always ends with the assistant header)."""
    prompt = ref.encode_dialog_prompt(reference_messages(conv), ToolPromptFormat.python_list)
    tokens: list[int] = prompt.tokens
    return tokens


def assert_matches_reference(
    conv: Conversation, tok: Tokenizer, ref: ChatFormat, *, gen: bool = True
) -> list[int]:
    ids = DIALECT.render(conv, tok, add_generation_prompt=gen).ids
    header = [] if gen else DIALECT.render([{"role": "user"}], tok, strict=False).ids[-4:]
    assert ids + header == reference_ids(ref, conv)
    return ids


# ==== Render goldens ====


@pytest.mark.parametrize("case", render_cases("llama4"), ids=lambda p: p.name)
def test_golden(case: Path, tok: Tokenizer, ref: ChatFormat) -> None:
    data = json.loads(read_text(case / "conversation.json"))
    conv = load_conversation(data)
    gen = data.get("add_generation_prompt", True)
    check_text(case / "expected.txt", DIALECT.render_text(conv, add_generation_prompt=gen))
    ids = DIALECT.render(conv, tok, add_generation_prompt=gen).ids
    if all(encoder_domain(c.arguments_dict()) for m in conv.messages for c in m.tool_calls or ()):
        assert_matches_reference(conv, tok, ref, gen=gen)
    check_json(case / "expected_ids.json", ids, compact=True)


def test_golden_cases_exist() -> None:
    assert len(render_cases("llama4")) >= 6


# ==== The tokenizer ====


def test_tokenizer_matches_the_reference(tok: Tokenizer) -> None:
    reference = RefTokenizer.get_instance()
    assert dict(tok.controls) == reference.special_tokens
    assert tok.vocab_size == reference.n_words == 202048
    assert tok.control_id("<|eot|>") == 200008 and tok.control_id("<|eom|>") == 200007
    for text in ("x" * 30_001 + " " * 26_000 + "é1234", "ab " * 9_000, "<|eot|> 12345 It's"):
        assert tok.encode_text(text) == reference.encode(text, bos=False, eos=False)


def test_tokenizer_file_checks(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.model"
    bad.write_text("IQ== 0\n", encoding="utf-8")
    with pytest.raises(TokenizerError, match="200000"):
        llama4_from_file(bad)


# ==== Generated conversations against the reference ====

CONTROLS = ["<|begin_of_text|>", "<|header_start|>", "<|header_end|>", "<|eot|>", "<|eom|>",
            "<|python_start|>", "<|python_end|>", "<|end_of_text|>"]  # fmt: skip
TRAPS = [*CONTROLS, "<|eo", "t|>", "<|", "|>", "\n\n", "\n", " ", "\r\n", "é", "e\u0301",
         "🙂", "你好", "{", "}", "[", "]", "(", ")", "'", "=", "12345", "ipython",
         "assistant"]  # fmt: skip
short = st.text(max_size=12)
trap_text = st.lists(st.sampled_from(TRAPS) | short, max_size=8).map("".join)
long_text = st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=8), st.integers(50, 400))
any_text = st.just("") | short | trap_text | long_text
#: Strings the encoder writes so that they read back: no quote, backslash or line break.
safe_text = any_text.map(lambda t: "".join(c for c in t if encoder_domain(c)))
primitive = (
    st.none()
    | st.booleans()
    | st.integers()
    | safe_text
    | st.floats(allow_nan=False, allow_infinity=False)
)
value = primitive | st.lists(primitive, max_size=3)
arg_name = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda n: n not in ("None", "True", "False") and not __import__("keyword").iskeyword(n)
)
arguments = st.dictionaries(arg_name, value, max_size=4)
builtin_call = st.one_of(
    st.tuples(
        st.sampled_from(["brave_search", "wolfram_alpha", "photogen"]),
        st.fixed_dictionaries({"query": safe_text}),
    ),
    st.tuples(st.just("code_interpreter"), st.fixed_dictionaries({"code": any_text})),
)
custom_name = arg_name.filter(lambda n: n not in BUILTINS)
custom_calls = st.lists(st.tuples(custom_name, arguments), min_size=1, max_size=3)
tools = st.lists(
    st.builds(
        lambda n, d: {"type": "function", "function": {"name": n, "description": d}},
        custom_name,
        any_text,
    ),
    max_size=2,
)


@st.composite
def conversations(draw: st.DrawFn) -> Conversation:
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(any_text)})
    counter = itertools.count()
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["user", "assistant", "calls", "builtin", "system"]))
        if kind in ("calls", "builtin"):
            drawn = [draw(builtin_call)] if kind == "builtin" else draw(custom_calls)
            calls = [{"id": f"c{next(counter)}", "name": n, "arguments": a} for n, a in drawn]
            content = draw(st.none() | any_text)
            msgs.append({"role": "assistant", "content": content, "tool_calls": calls})
            for c in calls:
                role = draw(st.sampled_from(["tool", "observation"]))
                msgs.append({"role": role, "tool_call_id": c["id"], "content": draw(any_text)})
        else:
            msgs.append({"role": kind, "content": draw(st.none() | any_text)})
    return Conversation.model_validate({"messages": msgs, "tools": draw(tools)})


SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@SETTINGS
@given(conv=conversations(), gen=st.booleans())
def test_generated_conversations_match_the_reference(
    conv: Conversation, gen: bool, tok: Tokenizer, ref: ChatFormat
) -> None:
    ids = assert_matches_reference(conv, tok, ref, gen=gen)
    # Only the layout makes control ids (3 a turn): typed control strings stay text.
    msgs = conv.messages
    turns = len(msgs) - (1 if conv.tools and msgs[0].role == "system" else 0)
    turns += 1 if conv.tools else 0
    assert sum(1 for i in ids if i >= 200000) == 1 + 3 * turns + (2 if gen else 0)


@SETTINGS
@given(body=template_conversations(reasoning=False), gen=st.booleans())
def test_template_conversations_match_the_reference(
    body: dict[str, Any], gen: bool, tok: Tokenizer, ref: ChatFormat
) -> None:
    """The shared generator's conversations (queries, tool rounds, results, final answers),
    their calls' arguments where the encoder writes them so that they read back."""
    conv = Conversation.model_validate(body)
    calls = [c for m in conv.messages for c in m.tool_calls or ()]
    if not all(c.name.isidentifier() and c.name not in BUILTINS for c in calls):
        return  # names the format cannot write as name(...)
    if not all(
        encoder_domain(c.arguments_dict()) and all(k.isidentifier() for k in c.arguments_dict())
        for c in calls
    ):
        return
    assert_matches_reference(conv, tok, ref, gen=gen)


# ==== Where the encoder's calls would not read back ====

loose_text = any_text | st.text(st.sampled_from("ab\"\\\n\r'{}=,"), max_size=8)
loose_primitive = (
    st.none()
    | st.booleans()
    | st.integers()
    | loose_text
    | st.floats(allow_nan=False, allow_infinity=False)
)
loose_value = st.recursive(
    loose_primitive,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(loose_text, inner, max_size=3),
    max_leaves=6,
)


@given(name=custom_name, args=st.dictionaries(arg_name, loose_value, max_size=4))
def test_every_call_reads_back(name: str, args: dict[str, Any]) -> None:
    """Quotes, backslashes and line breaks in strings, and dicts, are written as Python
    literals: the call renders as one list and its arguments read back unchanged."""
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "tool_calls": [{"id": "a", "name": name, "arguments": args}]},
    ]
    text = DIALECT.render_text(msgs, add_generation_prompt=False)
    call = text[text.rindex("<|header_end|>\n\n") + 16 : -len("<|eom|>")]
    assert call.startswith("[") and call.endswith("]")
    assert parse_tool_call(call[1:-1], function=name) == args
    if any(c in call for c in CONTROLS):
        return  # text that spells a control token cannot be told from it (the parse tests)
    parsed = DIALECT.parse(call + "<|eom|>").tool_calls
    assert [(c.name, c.arguments_dict()) for c in parsed] == [(name, args)]


def test_where_chatfmt_differs_from_the_encoder() -> None:
    """The encoder pastes strings as they are and writes dicts as {k=v}: not Python."""
    args = {"q": 'say "hi"\n', "d": {"k": [1, None]}}
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "tool_calls": [{"id": "a", "name": "f", "arguments": args}]},
    ]
    text = DIALECT.render_text(msgs, add_generation_prompt=False)
    assert '[f(q="say \\"hi\\"\\n", d={"k": [1, None]})]<|eom|>' in text


def test_validation_rules() -> None:
    def fails(rule: str, messages: list[dict[str, Any]]) -> None:
        with pytest.raises(ValidationError) as info:
            DIALECT.validate(Conversation.model_validate({"messages": messages}))
        assert info.value.rule == rule

    user = {"role": "user", "content": "hi"}
    result = {"role": "tool", "tool_call_id": "a"}

    def call(name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
        c = {"id": "a", "name": name, "arguments": args}
        return [user, {"role": "assistant", "tool_calls": [c]}, result]

    fails("tool-call-name", call("get-weather", {}))
    fails("tool-call-arguments", call("f", {"not a name": 1}))
    fails("tool-call-arguments", call("f", {"class": 1}))
    fails("builtin-tool-call", call("brave_search", {"q": "x"}))
    fails("metadata", [{"role": "user", "content": "hi", "metadata": "x"}])
    # Not strict: written as the encoder writes it.
    conv = Conversation.model_validate({"messages": call("get-weather", {"a b": 1})})
    assert "[get-weather(a b=1)]" in DIALECT.render_text(conv, strict=False)


def test_registered() -> None:
    assert isinstance(get_dialect("llama4"), Llama4)
    assert get_dialect("llama4").stop_controls == ("<|eot|>", "<|eom|>", "<|end_of_text|>")
