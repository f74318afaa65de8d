"""The published chat templates as test oracles, rendered the way ``transformers`` does, and
generated conversations for the reasoning families (system prompts, several turns, tools, calls
with arguments, results, reasoning on earlier turns).

Templates are read in place from the shared reference folder beside the project (never copied
into it); a test that needs one skips when it is absent.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from chatfmt.messages import Conversation

TESTS = Path(__file__).resolve().parent.parent
TEMPLATES = TESTS.parent.parent / "shared" / "reference" / "templates"


class TemplateError(Exception):
    """The template itself refused the conversation (its ``raise_exception``)."""


def _raise(message: str) -> None:
    raise TemplateError(message)


def load_template(name: str, *, mutable: bool = False) -> Any:
    """The template file ``name`` compiled as ``transformers`` compiles chat templates: a
    sandboxed environment with ``trim_blocks`` and ``lstrip_blocks``, the loop-controls
    extension, a ``tojson`` that is ``json.dumps(..., ensure_ascii=False)`` (with ``indent``
    honoured), ``raise_exception`` and ``strftime_now``.

    ``mutable``: jinja2's plain sandbox instead of the immutable one, for templates that
    change lists as they go (the Kimi K2 templates ``append`` and ``pop`` call ids, which
    transformers' immutable sandbox refuses; llama.cpp's engine runs them)."""
    path = TEMPLATES / name
    if not path.is_file():
        pytest.skip(f"reference template {name} not found beside the project")
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

    kind = SandboxedEnvironment if mutable else ImmutableSandboxedEnvironment
    env = kind(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, **_: Any) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(path.read_text(encoding="utf-8"))


def reference_messages(
    conv: Conversation, *, none_content: str | None = None, string_arguments: bool = False
) -> list[dict[str, Any]]:
    """``conv`` as the message dicts a client passes to ``apply_chat_template``: reasoning as
    ``reasoning_content``, call arguments as objects (``string_arguments``: as the JSON
    string), ``observation`` as ``tool``; a missing content becomes ``none_content``."""
    out: list[dict[str, Any]] = []
    for m in conv.messages:
        d: dict[str, Any] = {
            "role": "tool" if m.role == "observation" else m.role,
            "content": m.content if m.content is not None else none_content,
        }
        if m.reasoning is not None:
            d["reasoning_content"] = m.reasoning
        if m.tool_calls:
            d["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": c.arguments if string_arguments else json.loads(c.arguments),
                    },
                }
                for c in m.tool_calls
            ]
        if m.tool_call_id is not None:
            d["tool_call_id"] = m.tool_call_id
        out.append(d)
    return out


def render_reference(
    template: Any,
    conv: Conversation,
    *,
    add_generation_prompt: bool = True,
    none_content: str | None = None,
    string_arguments: bool = False,
    **kwargs: Any,
) -> str:
    """What ``apply_chat_template(..., tokenize=False)`` returns for ``conv``."""
    tools = [t.definition for t in conv.tools] or None
    text: str = template.render(
        messages=reference_messages(
            conv, none_content=none_content, string_arguments=string_arguments
        ),
        tools=tools,
        add_generation_prompt=add_generation_prompt,
        **kwargs,
    )
    return text


def hf_tokenizer_with(tokenizer_json: Path, added: dict[str, int]) -> Any:
    """A Hugging Face tokenizer from ``tokenizer_json`` with ``added`` (token → id) among its
    added tokens (a later vocabulary built on an earlier one, as Qwen3's is on Qwen2.5's)."""
    tokenizers = pytest.importorskip("tokenizers")
    data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    for token, token_id in added.items():
        # The id may hold a padding entry of the earlier vocabulary: the new token replaces it.
        for old in [k for k, v in vocab.items() if v == token_id]:
            del vocab[old]
        vocab[token] = token_id
        data["added_tokens"].append(
            {
                "id": token_id,
                "content": token,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": False,
            }
        )
    return tokenizers.Tokenizer.from_str(json.dumps(data))


# ==== Generated conversations ====

# Text that exercises what templates do with whitespace (strip('\n'), lstrip, trim) and with
# non-ASCII, kept free of the tags the templates split on (tested by hand instead).
_ALPHABET = st.sampled_from([*"ab xyz\n\t.,:;{}[]\"'\\é北京😀-_", "\n\n", "  "])
text = st.lists(_ALPHABET, max_size=24).map("".join)
words = st.lists(
    st.sampled_from(["alpha", "beta", "gamma", "Δ", "42"]), min_size=1, max_size=4
).map(" ".join)
names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**9), 10**9)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | text
)
json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=6,
)
arguments = st.dictionaries(names, json_values, max_size=3)
tool_defs = st.lists(
    st.builds(
        lambda name, desc, props: {
            "type": "function",
            "function": {
                "name": name,
                "description": desc,
                "parameters": {"type": "object", "properties": props},
            },
        },
        names,
        words,
        st.dictionaries(names, st.sampled_from([{"type": "string"}, {"type": "integer"}])),
    ),
    max_size=2,
    unique_by=lambda t: t["function"]["name"],
)


@st.composite
def conversations(
    draw: Any, *, reasoning: bool = True, results_need_ids: bool = True
) -> dict[str, Any]:
    """An OpenAI-shaped ``{"messages", "tools"}`` body: an optional system prompt, then turns
    of a user query and an answer, some answers calling tools (results follow, then a final
    answer), some with reasoning. Ends with a user message or an assistant answer."""
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(text)})
    call_no = 0
    for _ in range(draw(st.integers(1, 3))):
        msgs.append({"role": "user", "content": draw(text)})
        if draw(st.integers(0, 3)) == 0:
            continue  # a user turn with no answer yet (only valid last: fixed below)
        for _ in range(draw(st.integers(0, 2))):  # tool rounds
            calls = []
            for _ in range(draw(st.integers(1, 2))):
                call_no += 1
                calls.append(
                    {
                        "id": f"call_{call_no}",
                        "type": "function",
                        "function": {
                            "name": draw(names),
                            "arguments": json.dumps(draw(arguments), ensure_ascii=False),
                        },
                    }
                )
            m: dict[str, Any] = {"role": "assistant", "content": draw(text), "tool_calls": calls}
            if reasoning and draw(st.booleans()):
                m["reasoning_content"] = draw(text)
            msgs.append(m)
            for c in calls:
                result: dict[str, Any] = {"role": "tool", "content": draw(text)}
                if results_need_ids:
                    result["tool_call_id"] = c["id"]
                msgs.append(result)
        answer: dict[str, Any] = {"role": "assistant", "content": draw(text)}
        if reasoning and draw(st.booleans()):
            answer["reasoning_content"] = draw(text)
        msgs.append(answer)
    # A user message with no answer may only be the last; merge the others into a query.
    cleaned: list[dict[str, Any]] = []
    for m in msgs:
        if cleaned and m["role"] == "user" and cleaned[-1]["role"] == "user":
            cleaned[-1] = {"role": "user", "content": cleaned[-1]["content"] + m["content"]}
        else:
            cleaned.append(m)
    if draw(st.booleans()) and cleaned[-1]["role"] != "user":
        cleaned.append({"role": "user", "content": draw(text)})
    return {"messages": cleaned, "tools": draw(tool_defs)}
