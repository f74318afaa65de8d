"""A dialect checked against a model's own chat template: agreement, the first difference, a
template that writes no tools, and every published template at hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chatfmt.dialects import get_dialect
from chatfmt.dialects.detect import detect_dialect
from chatfmt.template import PROBES, ChatTemplate, check_dialect
from chatfmt.template.check import first_difference

PLUGIN = Path(__file__).resolve().parents[1] / "dialects" / "plugin"
REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "templates"

#: ChatML turns and nothing else: no tools, no default system prompt.
PLAIN_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture
def tiny() -> object:
    sys.path.insert(0, str(PLUGIN))
    try:
        from tiny_chat_dialect import Tiny
    finally:
        sys.path.remove(str(PLUGIN))
    return Tiny()


def test_a_dialect_that_renders_as_its_template_passes(tiny: object) -> None:
    template = ChatTemplate((PLUGIN / "tiny_chat_template.jinja").read_text(encoding="utf-8"))
    result = check_dialect(tiny, template)  # type: ignore[arg-type]
    assert result.ok and not result.chat_only
    assert result.compared == tuple(p.name for p in PROBES) and result.skipped == ()
    assert "renders what the model's chat template renders (10 probe" in result.message


def test_the_first_differing_line_is_shown(tiny: object) -> None:
    # A newer version of the same format with a default system prompt of its own.
    source = "<<system>> You are Tiny 2.\n" + (PLUGIN / "tiny_chat_template.jinja").read_text()
    result = check_dialect(tiny, ChatTemplate(source))  # type: ignore[arg-type]
    assert not result.ok and result.difference is not None
    assert result.difference.probe == PROBES[0].name and result.difference.line == 1
    assert result.difference.template == "<<system>> You are Tiny 2.<<user>> Hello!"
    assert result.difference.dialect == "<<user>> Hello!"
    assert "first difference at line 1" in result.message and "Tiny 2" in result.message


def test_first_difference_counts_a_missing_line_as_empty() -> None:
    assert first_difference("p", "a\nb", "a\nb") is None
    longer = first_difference("p", "a\nb\nc", "a\nb")
    assert longer is not None and (longer.line, longer.template, longer.dialect) == (3, "c", "")
    assert first_difference("p", "a", "a\n") is not None


def test_a_template_without_tools_makes_the_model_chat_only() -> None:
    result = check_dialect(get_dialect("chatml"), ChatTemplate(PLAIN_CHATML))
    assert result.ok and result.chat_only
    with_tools = {p.name for p in PROBES if p.body.get("tools")}
    assert {name for name, _ in result.skipped} == with_tools
    assert set(result.compared) == {p.name for p in PROBES} - with_tools
    assert "for chat only" in result.message


def test_a_template_that_refuses_everything_fails_the_check() -> None:
    result = check_dialect(get_dialect("chatml"), ChatTemplate("{{ raise_exception('no') }}"))
    assert not result.ok and result.compared == () and result.difference is None
    assert "no probe conversation could be rendered" in result.message


# ==== Every published template at hand ====

#: The special tokens their tokenizer configs define, by dialect family (a GGUF carries them).
_SPECIAL = {
    "deepseek": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "llama": ("<|begin_of_text|>", "<|eot_id|>"),
    "gemma": ("<bos>", "<eos>"),
    "mistral": ("<s>", "</s>"),
    "magistral": ("<s>", "</s>"),
}

#: Templates a fingerprint matches whose model a dialect would render differently: these must
#: be refused at load (a version chatfmt does not render yet, or the dialect follows another
#: vendor reference: Meta's encoder writes no default system turn, harmony's no date line).
REFUSED = {
    "Mistral-Small-3.2-24B-Instruct-2506.jinja",  # its own default system prompt
    "unsloth-mistral-Devstral-Small-2507.jinja",  # its own default system prompt
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",  # R1 distill: </think> in history
    "llama-cpp-deepseek-r1.jinja",  # llama.cpp's rewrite: end-of-sentence after each user
    "google-gemma-4-31B-it-interleaved.jinja",  # the interleaved-thinking variant
    "meta-llama-Llama-3.1-8B-Instruct.jinja",  # a system turn with dates, always
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "meta-llama-Llama-3.3-70B-Instruct.jinja",
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja",  # earlier turns' thinking
    "moonshotai-Kimi-K2.jinja",  # the first release's default system prompt
    "openai-gpt-oss-120b.jinja",  # a "Current date" line
    "Qwen-QwQ-32B.jinja",  # llama.cpp's edit: the thought closed unless switched on
}


def test_every_detected_reference_template_is_served_exactly_or_refused() -> None:
    if not REFERENCE.is_dir():
        pytest.skip("the reference templates are not beside the project")
    refused, served = set(), set()
    for path in sorted(REFERENCE.glob("*.jinja")):
        source = path.read_text(encoding="utf-8")
        detection = detect_dialect(source, None)
        if detection.name is None:
            continue  # refused already: no dialect claims it
        bos, eos = next(
            (v for k, v in _SPECIAL.items() if detection.name.startswith(k)), ("", "")
        )
        result = check_dialect(
            get_dialect(detection.name), ChatTemplate(source, bos_token=bos, eos_token=eos)
        )
        (served if result.ok else refused).add(path.name)
        if result.ok:
            assert len(result.compared) >= 3, (path.name, result.skipped)
    assert refused == REFUSED
    assert len(served) == 20  # Qwen, GLM, Kimi, DeepSeek, Granite, Nemotron, Gemma, MiniMax


# ==== The vendors' own templates ====

#: Vendor templates a fingerprint matches whose model its dialect does not render: a newer
#: version chatfmt has no dialect for yet, refused at load instead of served in the older one's
#: format.
VENDOR_REFUSED = {
    "glm-4-32b-0414",  # GLM-4-0414: no ChatGLM default system prompt
    "glm-4-9b-0414",
    "glm-5.1",  # <think></think> before a finished answer
    "minimax",  # MiniMax-M2.7: names itself in its default system prompt
}


def test_every_detected_vendor_template_is_served_exactly_or_refused(vendor_wheel: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from vendor_templates import vendor_templates

    refused, served = set(), set()
    for vendor in vendor_templates(vendor_wheel):
        detection = detect_dialect(vendor.source, None)
        if detection.name is None:
            continue
        tokens = {"bos_token": vendor.bos_token, "eos_token": vendor.eos_token}
        template = ChatTemplate(vendor.source, **tokens)
        result = check_dialect(get_dialect(detection.name), template)
        (served if result.ok else refused).add(vendor.model)
    assert refused == VENDOR_REFUSED
    # Qwen's own QwQ template, Qwen3 to 3.6, GLM-4, GLM-4.7-Flash and GLM-5, DeepSeek R1.
    assert {"qwq-32b", "qwen-3", "qwen-3.5", "glm-5", "deepseek-r1"} <= served
