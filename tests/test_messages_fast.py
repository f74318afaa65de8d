"""message_from_openai_fast builds the message from_openai validates, or leaves it to it."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import chatfmt
from chatfmt.messages import Message, conversation_of, from_openai, message_from_openai_fast

SCALARS = st.one_of(
    st.none(),
    st.text(max_size=6),
    st.sampled_from(["", "\ud800", "x\udfffy", "{}", '{"a": 1}', "[1]", "NaN", '{"a": NaN}']),
    st.integers(-2, 2),
    st.booleans(),
    st.floats(allow_nan=True),
)
ARGUMENTS = st.one_of(SCALARS, st.dictionaries(st.text(max_size=3), SCALARS, max_size=2))
FUNCTION = st.dictionaries(
    st.sampled_from(["name", "arguments", "extra"]), st.one_of(SCALARS, ARGUMENTS), max_size=3
)
CALL = st.one_of(
    st.dictionaries(
        st.sampled_from(["id", "type", "function", "index"]),
        st.one_of(SCALARS, FUNCTION),
        max_size=4,
    ),
    SCALARS,
)
CONTENT = st.one_of(
    SCALARS,
    st.lists(
        st.one_of(
            st.text(max_size=4), st.fixed_dictionaries({"type": st.just("text"), "text": SCALARS})
        ),
        max_size=2,
    ),
)
MESSAGE = st.dictionaries(
    st.sampled_from(
        ["role", "content", "tool_calls", "tool_call_id", "name", "refusal", "metadata", "other"]
    ),
    st.one_of(
        st.sampled_from(["user", "assistant", "system", "tool", "developer", "robot"]),
        CONTENT,
        st.lists(CALL, max_size=2),
    ),
    max_size=5,
)


def _validated(raw: Any) -> Message | str:
    try:
        return from_openai([raw])[0]
    except chatfmt.ValidationError as exc:
        return str(exc)


@given(MESSAGE)
def test_fast_message_equals_the_validated_one(raw: dict[str, Any]) -> None:
    fast = message_from_openai_fast(raw)
    if fast is None:
        return  # the validating path decides
    slow = Message.model_validate(raw)
    assert fast == slow
    assert fast.model_fields_set == slow.model_fields_set
    for mine, theirs in zip(fast.tool_calls or (), slow.tool_calls or (), strict=True):
        assert mine.model_fields_set == theirs.model_fields_set
    assert fast.model_dump() == slow.model_dump()


@given(MESSAGE)
def test_from_openai_accepts_and_rejects_as_before(raw: dict[str, Any]) -> None:
    outcome = _validated(raw)
    if isinstance(outcome, str):
        assert message_from_openai_fast(raw) is None
    else:
        assert outcome == Message.model_validate(
            {k: v for k, v in raw.items() if k != "refusal"} | {"role": outcome.role}
        )


def test_a_call_without_an_id_is_left_to_the_validating_path() -> None:
    raw = {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}
    assert message_from_openai_fast(raw) is None
    assert from_openai([raw])[0].tool_calls[0].id.startswith("call_")  # type: ignore[index]


def test_conversation_of_equals_the_validated_conversation() -> None:
    msgs = tuple(from_openai([{"role": "user", "content": "hi"}]))
    assert conversation_of(msgs) == chatfmt.Conversation(messages=msgs)
