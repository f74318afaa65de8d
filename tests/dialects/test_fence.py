"""A fenced Python block as a run request (``dialects/parsers/fence.py``)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from streams import outcome

from chatfmt import get_dialect
from chatfmt.decoding import TurnDecoder
from chatfmt.dialects.base import Dialect
from chatfmt.dialects.parsers.fence import FencedRuns
from chatfmt.events import ToolCallDelta, ToolCallEnd, ToolCallStart
from chatfmt.tokenizers import load_tokenizer
from chatfmt.tokenizers.base import Tokenizer
from profiles import examples

QWEN = get_dialect("qwen2.5")


def run(
    output: str | list[str],
    dialect: Dialect = QWEN,
    *,
    length: bool = False,
    tokenizer: Tokenizer | None = None,
) -> tuple[Any, TurnDecoder]:
    turn = TurnDecoder(dialect, tokenizer, parser=FencedRuns(dialect.stream_parser()))
    events = []
    if tokenizer is not None:
        assert isinstance(output, str)
        for token_id in tokenizer.encode_pieces(dialect.pieces(output, None)):
            events += turn.feed_ids([token_id])
    else:
        for chunk in [output] if isinstance(output, str) else output:
            events += turn.feed_text(chunk)
    events += turn.finish("length" if length else "stop")
    return outcome(events, turn.result()), turn


def message(out: Any) -> dict[str, Any]:
    msgs = out[1]
    assert len(msgs) == 1
    return msgs[0]  # type: ignore[no-any-return]


def code_of(msg: dict[str, Any]) -> str:
    (call,) = msg["tool_calls"]
    assert call["function"]["name"] == "interpreter"
    return json.loads(call["function"]["arguments"])["code"]  # type: ignore[no-any-return]


CODE = "def f(n):\n    return sum(i * i for i in range(1, n + 1))\n\nprint(f(100))"


def test_a_python_block_is_an_interpreter_call_and_ends_the_turn() -> None:
    out, turn = run(f"Let me compute it.\n```python\n{CODE}\n```\n\nThe answer is 338350.")
    msg = message(out)
    # The newline before the fence is the separator before the call (see the re-render test).
    assert msg["content"] == "Let me compute it."
    assert code_of(msg) == CODE  # every line, the blank one too; the closing newline is not code
    assert out[2] == "tool_calls"
    assert turn.stopped_by == "parser"  # the text after the fence was never the model's turn
    events = out[0]
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.index, s.name) for s in starts] == [(0, "interpreter")]
    args = "".join(e.arguments for e in events if isinstance(e, ToolCallDelta))
    assert json.loads(args) == {"code": CODE}
    assert ToolCallEnd(0) in events


def test_decoding_stops_at_the_closing_fence_when_fed_ids(qwen) -> None:  # type: ignore[no-untyped-def]
    out, turn = run(f"```py\n{CODE}\n```\nafter<|im_end|>", tokenizer=qwen)
    assert code_of(message(out)) == CODE
    assert message(out)["content"] is None
    assert turn.stopped_by == "parser"


def test_other_blocks_and_inline_backticks_stay_text() -> None:
    text = 'Use `x` or ``y``.\n```json\n{"a": 1}\n```\n    ```python\n    indented\n    ```\nok'
    out, turn = run(text)
    assert message(out) == {"role": "assistant", "content": text}
    assert out[2] == "stop"
    assert turn.stopped_by == "end"


def test_a_block_the_output_ends_inside_is_never_runnable() -> None:
    for length in (False, True):
        out, _ = run("Here:\n```python\nprint(1)\nprint(", length=length)
        msg = message(out)
        assert "tool_calls" not in msg
        assert msg["content"] == "Here:"
        assert out[2] == ("length" if length else "stop")
        assert any("incomplete and not runnable" in w for w in out[3])
        assert ToolCallEnd(0, complete=False) in out[0]


def test_a_fence_closed_at_the_very_end_of_the_output_runs() -> None:
    out, turn = run("```python\nprint(1)\n```")
    assert code_of(message(out)) == "print(1)"
    assert turn.stopped_by == "end"
    out, _ = run("```python\nprint(1)\n```", length=True)  # cut: it may have gone on
    assert "tool_calls" not in message(out)


def test_an_empty_block_is_not_a_run() -> None:
    out, _ = run("```python\n```\n")
    assert "tool_calls" not in message(out)
    assert any("is empty" in w for w in out[3])


def test_a_closing_fence_needs_a_line_of_its_own() -> None:
    code = 'print("```")\nx = """\n```python\n"""'
    out, _ = run(f"```python\n{code}\n```\n")
    assert code_of(message(out)) == code


def test_the_dialects_own_calls_pass_through_and_number_first() -> None:
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    out, _ = run(f"{call}\n```python\nprint(2)\n```")
    calls = message(out)["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["get_weather", "interpreter"]
    starts = [e for e in out[0] if isinstance(e, ToolCallStart)]
    assert [s.index for s in starts] == [0, 1]


def test_a_fence_inside_reasoning_is_not_a_run() -> None:
    qwen3 = get_dialect("qwen3")
    out, _ = run("<think>\n```python\nprint(1)\n```\n</think>\n\nNo code needed.", qwen3)
    msg = message(out)
    assert "tool_calls" not in msg
    assert "```python" in msg["reasoning_content"]
    assert msg["content"] == "No code needed."


PIECES = st.sampled_from(
    [
        "`", "```", "```python", "```py", "```md", " ", "\n", "\n\n", "\r", "x", "print(1)",
        "python", "\\", '"', "é", '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>',
    ]
)  # fmt: skip
QWEN_TOK = load_tokenizer("qwen2.5")


@settings(max_examples=examples(3))
@given(
    parts=st.lists(PIECES, max_size=30),
    cuts=st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=40),
    length=st.booleans(),
)
def test_streamed_equals_whole(parts: list[str], cuts: list[int], length: bool) -> None:
    text = "".join(parts)
    chunks, i = [], 0
    for n in cuts * (len(text) // max(1, sum(cuts)) + 1):
        if i >= len(text):
            break
        chunks.append(text[i : i + n])
        i += n
    whole, _ = run(text, length=length)
    streamed, _ = run(chunks, length=length)
    assert streamed == whole
    assert run(text, length=length, tokenizer=QWEN_TOK)[0] == whole
    msg = message(whole)
    # Nothing is lost: the visible text plus the call's code (or the incomplete call's raw
    # text) is a prefix of what the model wrote, up to the fence that ended the turn.
    calls = msg.get("tool_calls") or []
    for call in calls:
        json.loads(call["function"]["arguments"])  # a runnable call's arguments always parse


# ==== Regressions (a review's findings) ====


def test_the_closing_fence_then_the_dialects_own_call_runs_the_block() -> None:
    # Qwen's parser holds the newline after the fence (a call's tag may follow): the call that
    # follows closes the block; it is after the turn's end, so it is not a call of the turn.
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    for dialect in ("qwen2.5", "qwen3", "granite4", "qwen3-coder"):
        out, turn = run(f"Computing.\n```python\nprint(6*7)\n```\n{call}", get_dialect(dialect))
        msg = message(out)
        assert code_of(msg) == "print(6*7)", dialect
        assert out[2] == "tool_calls" and not out[3], dialect
        assert turn.stopped_by == "parser", dialect


def test_calls_are_numbered_in_order_whoever_parsed_them() -> None:
    call = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    out, turn = run(f"```python\nprint(1)\n{call}")
    starts = [(e.index, e.name) for e in out[0] if isinstance(e, ToolCallStart)]
    assert starts == [(0, "interpreter"), (1, "f")]
    assert [c["function"]["name"] for c in message(out)["tool_calls"]] == ["f"]
    assert [c.index for c in turn.result().incomplete_calls] == [0]


def test_leading_blank_lines_of_a_block_are_code_however_it_streams(qwen) -> None:  # type: ignore[no-untyped-def]
    for dialect in ("qwen2.5", "gemma3", "mistral-v3"):
        d = get_dialect(dialect)
        text = "Hi\n```python\n\n\nx = 1\n```\nmore"
        whole, _ = run(text, d)
        assert code_of(message(whole)) == "\n\nx = 1", dialect
        assert run(list(text), d)[0] == whole, dialect
    assert run(text, tokenizer=qwen)[0] == run(text)[0]


def test_fence_lines_have_a_bounded_length() -> None:
    for text in ("```" + " " * 50 + "python\nprint(1)\n```\n", "```python" + " " * 50 + "\nx\n```"):
        whole, _ = run(text)
        assert "tool_calls" not in message(whole)
        assert run(list(text))[0] == whole


def test_a_cut_right_after_a_closing_line_reads_alike_in_every_dialect() -> None:
    finishes = set()
    for dialect in ("qwen2.5", "llama3", "gemma3", "mistral-v3"):
        out, _ = run("```python\nprint(1)\n```\n", get_dialect(dialect), length=True)
        finishes.add((code_of(message(out)), out[2]))
    assert finishes == {("print(1)", "tool_calls")}  # the closing line was written whole


def test_crlf_fences_and_blocks_of_other_languages() -> None:
    out, _ = run("```python\r\nprint(1)\r\n```\r\n")
    assert code_of(message(out)) == "print(1)\r"
    example = "````\n```markdown\n```python\nx\n```\n```\n"
    out, _ = run("An example:\n```markdown\n```python\nprint(1)\n```\n```\nok")
    assert "tool_calls" not in message(out)
    out, _ = run("```\nplain\n```\n```python\nprint(2)\n```")
    assert code_of(message(out)) == "print(2)"
    assert example  # four backticks are not a fence chatfmt tracks (CommonMark's rule is longer)


def test_the_call_re_renders_as_the_model_wrote_it(qwen) -> None:  # type: ignore[no-untyped-def]
    written = f"Let me check.\n```python\n{CODE}\n```"
    _, turn = run(written + "\n\nIt is 338350.")
    rendered = QWEN.render_text(
        [{"role": "user", "content": "q"}, turn.result().message], add_generation_prompt=False
    )
    assert f"<|im_start|>assistant\n{written}<|im_end|>" in rendered


def test_whole_text_of_many_lines_scans_in_linear_time() -> None:
    import time

    def cost(lines: int) -> float:
        code = "x = 1\n" * lines
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            run(f"```python\n{code}```\n")
            best = min(best, time.process_time() - start)
        return best

    small, big = cost(10_000), cost(40_000)
    assert big < 8 * max(small, 0.005)  # linear: 4x; a re-copy of the rest per line: 16x


def test_one_character_at_a_time_is_linear() -> None:
    import time

    shapes = [
        ("```python\nx\n```", " "),  # spaces after a closing fence (held while it may close)
        ("```python\n", "a"),
        ("```python\n", "\n"),
        ("", "`"),
        ("x\n```", " "),
    ]
    for prefix, unit in shapes:

        def cost(n: int, prefix: str = prefix, unit: str = unit) -> float:
            best = float("inf")
            for _ in range(3):
                turn = TurnDecoder(QWEN, parser=FencedRuns(QWEN.stream_parser()))
                turn.feed_text(prefix)
                start = time.process_time()
                for _ in range(n):
                    turn.feed_text(unit)
                turn.finish()
                best = min(best, time.process_time() - start)
            return best

        small, big = cost(5_000), cost(20_000)
        assert big < 8 * max(small, 0.02), (prefix, unit, small, big)
