"""chatfmt's labels against transformers' ``return_assistant_tokens_mask``, for Qwen2.5.

transformers computes an assistant mask only from a chat template with ``{% generation %}``
markers, and Qwen2.5's published template has none. Two marked templates are compared:

- the published template (read in place from the shared reference folder) with the markers
  put in at run time around everything an assistant message writes after its role header —
  the text rendered is unchanged (checked);
- TRL's ``qwen2_5_training.jinja``, the same template marked the same way by TRL for
  ``assistant_only_loss`` (when ``trl`` is installed: ``pip install 'chatfmt[train]'``).

On generated conversations (system prompt or not, calls, results, several rounds) the ids are
the same, and the masks agree except where chatfmt's rule (docs/training.md) differs, at two
places per assistant turn and nowhere else:

- the ``\\n`` after ``<|im_start|>assistant``: in transformers' mask, not chatfmt's — the
  generation prompt ``<|im_start|>assistant\\n`` wrote it, the model never does;
- the ``\\n`` after the turn's ``<|im_end|>``: in transformers' mask, not chatfmt's — layout
  after the stop token, which the model never writes (generation ends at ``<|im_end|>``).

Needs transformers (``chatfmt[bench]``) and Qwen2.5's ``tokenizer.json`` beside the project.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_render import TOOLS  # the same two tools the training render's properties use

from chatfmt import get_dialect
from chatfmt.tokenizers.base import Tokenizer
from chatfmt.training import IGNORE_INDEX, render_for_training
from profiles import examples

transformers = pytest.importorskip(
    "transformers", reason="transformers is missing (pip install 'chatfmt[bench]')"
)
jinja2 = pytest.importorskip("jinja2", reason="jinja2 is missing (pip install 'chatfmt[bench]')")

SHARED = Path(__file__).resolve().parents[3] / "shared"
TOKENIZER_JSON = SHARED / "assets" / "qwen2.5" / "tokenizer.json"
PUBLISHED = SHARED / "reference" / "qwen2.5_chat_template.jinja"

words = (
    st.text(st.sampled_from("abc xyzé你.,!?\n"), min_size=1, max_size=12)
    .map(str.strip)
    .filter(bool)
)
arguments = st.fixed_dictionaries({}, optional={"city": words, "n": st.integers(0, 999)})


def with_generation_markers(template: str) -> str:
    """Qwen2.5's published template with ``{% generation %}`` … ``{% endgeneration %}``
    around what an assistant message writes after ``<|im_start|>assistant``."""
    plain = (
        '{%- if (message.role == "user") or (message.role == "system" and not loop.first) '
        'or (message.role == "assistant" and not message.tool_calls) %}\n'
    )
    marked_plain = (
        '{%- if message.role == "assistant" and not message.tool_calls %}\n'
        "        {{- '<|im_start|>' + message.role }}\n"
        "        {%- generation %}\n"
        "        {{- '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
        "        {%- endgeneration %}\n"
        '    {%- elif (message.role == "user") or '
        '(message.role == "system" and not loop.first) %}\n'
    )
    calls = (
        '    {%- elif message.role == "assistant" %}\n'
        "        {{- '<|im_start|>' + message.role }}\n"
    )
    end = "        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}\n"
    for part in (plain, calls, end):
        assert template.count(part) == 1, f"the published template changed: {part!r}"
    return (
        template.replace(plain, marked_plain)
        .replace(calls, calls + "        {%- generation %}\n")
        .replace(end, end.replace("    {%- elif", "        {%- endgeneration %}\n    {%- elif"))
    )


def template_source(which: str) -> str:
    if not PUBLISHED.is_file():
        pytest.skip("Qwen2.5's published template is not beside the project (shared/reference)")
    if which == "marked at run time":
        return with_generation_markers(PUBLISHED.read_text(encoding="utf-8"))
    if importlib.util.find_spec("trl") is None:
        pytest.skip("trl is missing: pip install 'chatfmt[train]'")
    files = importlib.resources.files("trl") / "chat_templates"
    original = (files / "qwen2_5.jinja").read_text(encoding="utf-8")
    if original != PUBLISHED.read_text(encoding="utf-8"):
        pytest.skip("this trl's qwen2_5.jinja is not Qwen2.5's published template")
    return (files / "qwen2_5_training.jinja").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def hf_qwen() -> Any:
    if not TOKENIZER_JSON.is_file():
        pytest.skip("Qwen2.5's tokenizer.json is not beside the project (shared/assets)")
    return transformers.PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER_JSON))


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A system prompt or not, then rounds of a user query and a reply: text, or calls
    (one or two) answered by results before the answer."""
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(words)})
    n = 0
    for _ in range(draw(st.integers(1, 3))):
        msgs.append({"role": "user", "content": draw(words)})
        if draw(st.booleans()):
            calls = []
            for _ in range(draw(st.integers(1, 2))):
                name = draw(st.sampled_from(["get_weather", "find_city"]))
                function = {"name": name, "arguments": json.dumps(draw(arguments))}
                calls.append({"id": f"call_{n}", "type": "function", "function": function})
                n += 1
            content = draw(st.sampled_from(["", "Let me check."]))
            msgs.append({"role": "assistant", "content": content, "tool_calls": calls})
            for call in calls:
                msgs.append({"role": "tool", "tool_call_id": call["id"], "content": draw(words)})
        msgs.append({"role": "assistant", "content": draw(words)})
    return msgs


def for_template(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as the template takes them: call arguments as objects (it writes
    ``arguments | tojson``)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {
                    **c,
                    "function": {
                        **c["function"],
                        "arguments": json.loads(c["function"]["arguments"]),
                    },
                }
                for c in m["tool_calls"]
            ]
        out.append(m)
    return out


@pytest.mark.parametrize("which", ["marked at run time", "trl's qwen2_5_training.jinja"])
@settings(max_examples=examples(0.15), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=conversations(), with_tools=st.booleans())
def test_labels_are_transformers_assistant_mask_less_the_two_newlines(
    hf_qwen: Any, qwen: Tokenizer, which: str, messages: list[dict[str, Any]], with_tools: bool
) -> None:
    template = template_source(which)
    tools = TOOLS if with_tools else None
    if not with_tools:  # calls without tools are not what the template is for
        messages = [m for m in messages if not m.get("tool_calls") and m["role"] != "tool"]
    rendered: Any = hf_qwen.apply_chat_template(
        for_template(messages),
        tools=tools,
        chat_template=template,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    hf_ids, hf_mask = list(rendered["input_ids"]), list(rendered["assistant_masks"])
    if which == "marked at run time":  # the markers change no text
        published = hf_qwen.apply_chat_template(
            for_template(messages),
            tools=tools,
            chat_template=PUBLISHED.read_text(encoding="utf-8"),
            tokenize=False,
        )
        assert hf_qwen.decode(hf_ids) == published

    example = render_for_training(messages, get_dialect("qwen2.5"), qwen, tools=tools)
    assert example.input_ids == hf_ids
    ours = {k for k, label in enumerate(example.labels) if label != IGNORE_INDEX}
    theirs = {k for k, flag in enumerate(hf_mask) if flag}
    newline = qwen.encode_text("\n")
    assert len(newline) == 1
    im_start, im_end = qwen.controls["<|im_start|>"], qwen.controls["<|im_end|>"]
    header_newlines, trailing_newlines = set(), set()
    for span in example.spans:
        # The generation prompt <|im_start|>assistant\n ends right before the span ...
        assert hf_ids[span.start - 3] == im_start and hf_ids[span.start - 1] == newline[0]
        header_newlines.add(span.start - 1)
        # ... which ends with <|im_end|>, followed by the layout's \n.
        assert hf_ids[span.end - 1] == im_end and hf_ids[span.end] == newline[0]
        trailing_newlines.add(span.end)
    assert len(example.spans) == sum(m["role"] == "assistant" for m in messages)
    # chatfmt trains nothing transformers' mask leaves out, and leaves out of it exactly the
    # two newlines of each assistant turn.
    assert ours <= theirs
    assert theirs - ours == header_newlines | trailing_newlines
