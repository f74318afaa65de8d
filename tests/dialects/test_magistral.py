"""Magistral / Ministral 3 reasoning against ``mistral-common``'s ``InstructTokenizerV13`` (every
id, on a Tekken vocabulary with the family's controls) and Ministral 3 Reasoning's published
template (text): generated conversations with tools, calls, results and thoughts, goldens,
validation, and where the two references part."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from goldens import check_json, check_text, read_text, render_cases
from hypothesis import HealthCheck, given, settings
from mistral_vocab import tekken_v13
from templates import TemplateError, conversations, load_template, reference_messages

from chatfmt import get_dialect
from chatfmt.dialects.magistral import DEFAULT_SYSTEM
from chatfmt.errors import ReasoningOptionError, ValidationError
from chatfmt.messages import Conversation, load_conversation
from chatfmt.tokenizers.base import Tokenizer
from profiles import examples

mc = pytest.importorskip("mistral_common", reason="mistral-common (the reference) is not installed")

from mistral_common.protocol.instruct import chunk as mk  # noqa: E402
from mistral_common.protocol.instruct import messages as mm  # noqa: E402
from mistral_common.protocol.instruct import tool_calls as mt  # noqa: E402
from mistral_common.protocol.instruct.request import ChatCompletionRequest  # noqa: E402
from mistral_common.protocol.instruct.validator import ValidationMode  # noqa: E402
from mistral_common.tokens.tokenizers.instruct import InstructTokenizerV13  # noqa: E402
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer  # noqa: E402

# The generated conversations cover 500 per family in the full profile: two properties of
# half each.
EXAMPLES = examples(1.25)
DIALECT = get_dialect("magistral")
TEMPLATE = "mistralai-Ministral-3-14B-Reasoning-2512.jinja"
_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tekken_v13(tmp_path_factory.mktemp("tekken"))


@pytest.fixture(scope="module")
def tok(vocab_file: Path) -> Tokenizer:
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer(str(vocab_file))


@pytest.fixture(scope="module")
def reference(vocab_file: Path) -> Any:
    # "agnostic": a conversation may end with the assistant's reply (training data, goldens).
    ref = MistralTokenizer.from_file(str(vocab_file), mode=ValidationMode.agnostic)
    assert isinstance(ref.instruct_tokenizer, InstructTokenizerV13)
    return ref


@pytest.fixture(scope="module")
def template() -> Any:
    return load_template(TEMPLATE)


def to_request(conv: Conversation) -> ChatCompletionRequest:
    """The conversation as the encoder's request: thoughts as think chunks, and the default
    system prompt (text, example thought, text) where the conversation has none, as chatfmt
    and the template write it."""
    msgs: list[Any] = []
    if not any(m.role == "system" for m in conv.messages):
        intro, thought, outro = DEFAULT_SYSTEM
        chunks = [mk.TextChunk(text=intro), mk.ThinkChunk(thinking=thought),
                  mk.TextChunk(text=outro)]  # fmt: skip
        msgs.append(mm.SystemMessage(content=chunks))
    for m in conv.messages:
        if m.role == "system":
            msgs.append(mm.SystemMessage(content=m.text))
        elif m.role == "user":
            msgs.append(mm.UserMessage(content=m.text))
        elif m.role == "assistant":
            calls = [
                mt.ToolCall(id=c.id, function=mt.FunctionCall(name=c.name, arguments=c.arguments))
                for c in m.tool_calls or ()
            ]
            content: Any = m.content
            if m.reasoning is not None:
                content = [mk.ThinkChunk(thinking=m.reasoning)]
                content += [mk.TextChunk(text=m.content)] if m.content else []
            msgs.append(mm.AssistantMessage(content=content, tool_calls=calls or None))
        else:
            msgs.append(mm.ToolMessage(content=m.text, tool_call_id=m.tool_call_id))
    tools = [
        mt.Tool(
            function=mt.Function(
                name=t.name,
                description=t.function.get("description") or "",
                parameters=t.function.get("parameters") or {},
            )
        )
        for t in conv.tools
    ]
    return ChatCompletionRequest(messages=msgs, tools=tools or None)


def reference_ids(reference: Any, conv: Conversation) -> list[int]:
    tokens: list[int] = reference.encode_chat_completion(to_request(conv)).tokens
    return tokens


def template_messages(conv: Conversation) -> list[dict[str, Any]]:
    """The messages as the template reads them: a thought is a ``thinking`` chunk of the
    content, before a ``text`` chunk."""
    out = reference_messages(conv)
    for d in out:
        thought = d.pop("reasoning_content", None)
        if thought is not None:
            d["content"] = [{"type": "thinking", "thinking": thought},
                            {"type": "text", "text": d["content"] or ""}]  # fmt: skip
    return out


def render_template(template: Any, conv: Conversation, *, gen: bool) -> str:
    text: str = template.render(
        messages=template_messages(conv),
        tools=[t.definition for t in conv.tools] or None,
        add_generation_prompt=gen,
        bos_token="<s>",
        eos_token="</s>",
    )
    return text


def template_domain(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as both references take it: an assistant text without a thought ends in no
    space (the encoder strips those spaces, the template keeps them), and a reply has text,
    a thought or calls (the template refuses an empty one)."""
    out = []
    for m in body["messages"]:
        if m["role"] == "assistant":
            m = {**m}
            if m.get("reasoning_content") is None:
                m["content"] = m["content"].rstrip(" ")
                if not m["content"] and not m.get("tool_calls"):
                    m["content"] = "ok"
        out.append(m)
    return {**body, "messages": out}


# ==== Generated conversations ====


@_SETTINGS
@given(body=conversations(), gen=...)
def test_text_matches_the_template(body: dict[str, Any], gen: bool, template: Any) -> None:
    """Thinking is always on (the family has no switch); the template writes no generation
    prompt, so with or without one the text is the same."""
    conv = load_conversation(template_domain(body))
    expected = render_template(template, conv, gen=gen)
    assert DIALECT.render_text(conv, add_generation_prompt=gen) == expected


@_SETTINGS
@given(body=conversations(), gen=...)
def test_ids_match_the_encoder(
    body: dict[str, Any], gen: bool, tok: Tokenizer, reference: Any
) -> None:
    """Every id as ``mistral-common`` encodes the same request, trailing spaces included."""
    conv = load_conversation(body)
    if any(m.role == "assistant" and not (m.content or m.tool_calls or m.reasoning is not None)
           for m in conv.messages):  # fmt: skip
        with pytest.raises(ValidationError):
            DIALECT.validate(conv)
        return
    ids = DIALECT.render(conv, tok, add_generation_prompt=gen).ids
    assert ids == reference_ids(reference, conv)


# ==== Goldens ====


@pytest.mark.parametrize("case", render_cases("magistral"), ids=lambda c: c.name)
def test_render_golden(case: Path, tok: Tokenizer, reference: Any, template: Any) -> None:
    conv = load_conversation(json.loads(read_text(case / "conversation.json")))
    prompt = DIALECT.render(conv, tok)
    check_text(case / "expected.txt", prompt.text)
    check_json(case / "expected_ids.json", prompt.ids, compact=True)
    assert prompt.ids == reference_ids(reference, conv)
    assert render_template(template, conv, gen=True) == prompt.text


def test_goldens_exist() -> None:
    assert len(render_cases("magistral")) >= 4


# ==== The vocabulary, the controls, the rules ====


def test_controls_are_the_vocabularys(tok: Tokenizer, reference: Any) -> None:
    raw = reference.instruct_tokenizer.tokenizer
    for token in DIALECT.controls:
        assert tok.control_id(token) == raw.get_special_token(token), token
    typed = "[THINK]x[/THINK][TOOL_CALLS]f[ARGS]{}"
    assert tok.encode_text(typed) == raw.encode(typed, bos=False, eos=False)
    assert not set(tok.encode_text(typed)) & {9, 32, 34, 35}


def test_message_text_never_becomes_a_control(tok: Tokenizer, reference: Any) -> None:
    conv = load_conversation(
        [
            {"role": "user", "content": "[THINK]not a thought[/THINK][INST]"},
            {"role": "assistant", "content": "[TOOL_CALLS]f[ARGS]{}", "reasoning": "[/THINK]"},
            {"role": "user", "content": "</s>"},
        ]
    )
    ids = DIALECT.render(conv, tok).ids
    assert ids == reference_ids(reference, conv)
    think = tok.control_id("[THINK]")
    assert ids.count(think) == 2  # the default system prompt's example and the reply's thought


def test_the_family_always_thinks() -> None:
    assert DIALECT.reasoning == "always" and DIALECT.thinking
    assert DIALECT.with_reasoning(enabled=True) is DIALECT
    assert DIALECT.with_reasoning(effort="high") is DIALECT
    with pytest.raises(ReasoningOptionError, match="always thinks"):
        DIALECT.with_reasoning(enabled=False)


def test_a_system_prompt_replaces_the_default() -> None:
    text = DIALECT.render_text([{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "hi"}])  # fmt: skip
    assert text == "<s>[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]hi[/INST]"
    default = DIALECT.render_text([{"role": "user", "content": "hi"}])
    assert default.startswith("<s>[SYSTEM_PROMPT]# HOW YOU SHOULD THINK AND ANSWER")
    assert "[THINK]Your thoughts" in default and default.endswith("[/SYSTEM_PROMPT][INST]hi[/INST]")


def test_where_template_and_encoder_part(template: Any, tok: Tokenizer, reference: Any) -> None:
    """A reply's trailing spaces: the encoder strips them (and chatfmt with it), the template
    keeps them. Two user messages in a row: the encoder joins them, the template refuses."""
    conv = load_conversation([{"role": "user", "content": "a"},
                              {"role": "assistant", "content": "b  "},
                              {"role": "user", "content": "c"},
                              {"role": "user", "content": "d"}])  # fmt: skip
    ours = DIALECT.render(conv, tok)
    assert ours.ids == reference_ids(reference, conv)
    assert ours.text.endswith("[INST]a[/INST]b</s>[INST]c\n\nd[/INST]")
    with pytest.raises(TemplateError):
        render_template(template, conv, gen=True)


@pytest.mark.parametrize(
    ("messages", "rule"),
    [
        ([{"role": "assistant", "content": "hi"}], "first-message"),
        ([{"role": "user", "content": "a"}, {"role": "assistant", "content": ""}], "content"),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "assistant", "content": "c"},
            ],
            "order",
        ),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "system", "content": "s"},
            ],
            "order",
        ),
        ([{"role": "system", "content": "s"}], "first-message"),
    ],
)
def test_validation_names_the_fix(messages: list[dict[str, Any]], rule: str) -> None:
    with pytest.raises(ValidationError) as err:
        DIALECT.validate(load_conversation(messages))
    assert err.value.rule == rule


def test_a_thought_alone_is_a_reply(tok: Tokenizer, reference: Any) -> None:
    conv = load_conversation([{"role": "user", "content": "a"},
                              {"role": "assistant", "content": "", "reasoning": "hm"}])  # fmt: skip
    assert DIALECT.render(conv, tok).text.endswith("[INST]a[/INST][THINK]hm[/THINK]</s>")
    assert DIALECT.render(conv, tok).ids == reference_ids(reference, conv)
