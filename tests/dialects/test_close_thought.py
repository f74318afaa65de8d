"""``Dialect.close_thought``: how each reasoning family closes an open thought (what a thinking
budget appends). Goldens per family (segments, text, and ids on the family's own vocabulary
where one ships offline in the unit tier), and, where a family's history shows a kept thought,
the closing checked against it: the reasoning, the closing, then the answer."""

from __future__ import annotations

from typing import Any

import pytest
from goldens import GOLDEN, check_json

from chatfmt.dialects import get_dialect, list_dialects
from chatfmt.messages import as_conversation, from_openai
from chatfmt.segments import Block, BlockEncoder, Control, Segment
from chatfmt.tokenizers import Tokenizer, load_tokenizer

REASONING = [n for n in list_dialects() if get_dialect(n).reasoning != "never"]
#: Families whose history drops the thought of a final answer (their closing is checked by its
#: golden, and by the budget tests that parse it: tests/server/test_thinking_budget.py).
HISTORY_DROPS = {
    "deepseek-r1", "deepseek-v3.1", "gemma4", "harmony", "kimi-k2-thinking", "nemotron-nano2",
    "qwq",
}  # fmt: skip


def _vocabulary(name: str) -> Tokenizer | None:
    """The family's own vocabulary, where the unit tier has it."""
    if name in ("qwen3", "qwq"):
        return load_tokenizer("qwen3")
    if name == "harmony":
        from chatfmt.tokenizers.tiktoken import o200k_harmony

        return o200k_harmony()
    return None


def _text(segments: tuple[Segment, ...]) -> str:
    return "".join(s.token if isinstance(s, Control) else s.text for s in segments)


def test_every_reasoning_family_says_how_its_thought_closes() -> None:
    for name in list_dialects():
        dialect = get_dialect(name)
        closing = dialect.close_thought()
        if dialect.reasoning == "never":
            assert closing is None, name
        else:
            assert closing, name


@pytest.mark.parametrize("name", REASONING)
def test_closing_golden(name: str) -> None:
    closing = get_dialect(name).close_thought()
    assert closing is not None
    tok = _vocabulary(name)
    ids = None if tok is None else list(BlockEncoder(tok).encode_block(Block(closing)))
    actual: dict[str, Any] = {
        "segments": [
            ["control", s.token] if isinstance(s, Control) else ["text", s.text] for s in closing
        ],
        "text": _text(closing),
        "ids": ids,
    }
    check_json(GOLDEN / name / "close_thought.json", actual)
    if tok is not None and ids is not None:
        assert tok.decode(ids) == actual["text"]


@pytest.mark.parametrize("name", REASONING)
def test_closing_is_what_the_history_writes(name: str) -> None:
    dialect = get_dialect(name).with_reasoning(effort="high")
    closing = dialect.close_thought()
    assert closing is not None
    conv = as_conversation(
        from_openai(
            [
                {"role": "user", "content": "Q"},
                {"role": "assistant", "content": "ANSWER", "reasoning_content": "REASON"},
            ]
        )
    )
    blocks = dialect.render_blocks(conv, add_generation_prompt=False)
    text = "".join(_text(b.segments) for b in blocks)
    if name in HISTORY_DROPS:
        assert "REASON" not in text
    else:
        assert "REASON" + _text(closing) + "ANSWER" in text
