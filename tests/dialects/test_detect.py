"""detect_dialect: the published chat templates are told apart by the markup they write.

The reference templates are read in place from the shared reference folder beside the project
(never copied into it); the tests that need them skip when it is absent. The few formats with
no template there (ChatGLM3, GLM-4, Mistral v7, plain ChatML) are checked on short templates
written here that carry their markup.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatfmt.dialects import list_dialects
from chatfmt.dialects.detect import Detection, architecture_dialects, detect_dialect
from profiles import examples

TESTS = Path(__file__).resolve().parent.parent
REFERENCE = TESTS.parent.parent / "shared" / "reference"
TEMPLATES = REFERENCE / "templates"
QWEN25 = "qwen2.5_chat_template.jinja"  # in REFERENCE itself, not in TEMPLATES

#: Every reference template and the dialect it is written in; None for the formats chatfmt
#: does not render. A new file in the folder must be added here (test_the_table_is_complete).
EXPECTED: dict[str, str | None] = {
    QWEN25: "qwen2.5",
    "Qwen-Qwen2.5-7B-Instruct.jinja": "qwen2.5",
    "Qwen-Qwen3-0.6B.jinja": "qwen3",
    "Qwen-QwQ-32B.jinja": "qwq",
    "Qwen3-Coder.jinja": "qwen3-coder",
    "Qwen3.5-4B.jinja": "qwen3.5",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": "deepseek-r1",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": "deepseek-r1",
    "llama-cpp-deepseek-r1.jinja": "deepseek-r1",
    "deepseek-ai-DeepSeek-V3.1.jinja": "deepseek-v3.1",
    "deepseek-ai-DeepSeek-V3.2.jinja": "deepseek-v3.2",
    "deepseek-ai-DeepSeek-V4.jinja": "deepseek-v4",
    "openai-gpt-oss-120b.jinja": "harmony",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3",
    "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama3",
    "meta-llama-Llama-3.3-70B-Instruct.jinja": "llama3",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": "mistral-v11",
    "unsloth-mistral-Devstral-Small-2507.jinja": "mistral-v11",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral-v3",
    "GLM-4.6.jinja": "glm4.6",  # GLM-4.5+: <arg_key>/<arg_value> calls, not glm4's JSON
    "GLM-4.7-Flash.jinja": "glm4.7",
    "Kimi-K2-Instruct.jinja": "kimi-k2",
    # Kimi-K2-Instruct's first template: the same format, with bugs of its own (its results'
    # header, its call numbering; docs/formats/kimi.md).
    "moonshotai-Kimi-K2.jinja": "kimi-k2",
    "Kimi-K2-Thinking.jinja": "kimi-k2-thinking",
    # Gemma 2 writes Gemma 3's turns (it refuses a system message, which gemma3 folds).
    "google-gemma-2-2b-it.jinja": "gemma3",
    # ChatML look-alikes: each adds something chatml and the Qwen dialects do not render.
    "MiMo-VL.jinja": None,  # Qwen2.5's template with a default system prompt of its own
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": None,  # its own tool prompt, BOS
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": None,
    "HuggingFaceTB-SmolLM3-3B.jinja": None,  # reasoning, a default system prompt
    "Bielik-11B-v3.0-Instruct.jinja": None,  # <|function_list|>, <|function_output|>
    "LFM2-8B-A1B.jinja": None,  # <|tool_list_start|>
    "LFM2.5-8B-A1B.jinja": None,
    "LFM2.5-Instruct.jinja": None,  # a tool list of its own, reasoning stripped
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": "nemotron3",
    "StepFun3.5-Flash.jinja": None,  # Qwen3.5-like, no vision tokens of Qwen's
    "stepfun-ai-Step-3.5-Flash.jinja": None,
    "openbmb-MiniCPM5-1B.jinja": None,  # <function name=…> calls, <tool_sep>
    "Reka-Edge.jinja": None,
    # Formats of families chatfmt has no dialect for.
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": "magistral",
    "fireworks-ai-llama-3-firefunction-v2.jinja": None,  # Llama 3 turns, functools[…] calls
    "meetkai-functionary-medium-v3.1.jinja": None,  # Llama 3 turns, <function=…> calls
    "meetkai-functionary-medium-v3.2.jinja": None,
    "google-gemma-4-31B-it.jinja": "gemma4",
    # An earlier revision of Gemma 4's template (docs/formats/gemma4.md): the same format.
    "google-gemma-4-31B-it-interleaved.jinja": "gemma4",
    "MiniMax-M2.jinja": "minimax-m2",
    "ibm-granite-granite-3.3-2B-Instruct.jinja": None,
    "ibm-granite-granite-4.0.jinja": "granite4",
    "ibm-granite-granite-4.1.jinja": "granite4.1",
    "Cohere2MoE.jinja": None,
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja": None,
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": None,
    "microsoft-Phi-3.5-mini-instruct.jinja": None,
    "Apertus-8B-Instruct.jinja": None,
    "Apriel-1.6-15b-Thinker-fixed.jinja": None,
    "unsloth-Apriel-1.5.jinja": None,
    "ByteDance-Seed-OSS.jinja": None,
    "GigaChat3-10B-A1.8B.jinja": None,
    "GigaChat3.1-10B-A1.8B.jinja": None,
    "NVIDIA-Nemotron-Nano-v2.jinja": "nemotron-nano2",
    "llama-cpp-rwkv-world.jinja": None,
    "upstage-Solar-Open-100B.jinja": None,
}


def read(name: str) -> str:
    path = REFERENCE / name if name == QWEN25 else TEMPLATES / name
    if not path.is_file():
        pytest.skip(f"reference template {name} not found beside the project")
    return path.read_text(encoding="utf-8")


def check(detection: Detection, expected: str | None) -> None:
    """``detection`` is ``expected``, or, for None, a failure that lists every dialect."""
    if expected is not None and expected not in list_dialects():
        # A dialect this installation lacks is never proposed, but it is named.
        assert detection.name is None and f"no {expected} dialect" in detection.reason
        return
    assert detection.name == expected, detection.message
    if expected is None:
        assert detection.candidates == tuple(list_dialects())
        assert "choose one of: " in detection.message and "chatml" in detection.message
        assert "matches none of the formats" in detection.reason
    else:
        assert detection.reason.startswith("the chat template is ")


# ==== The reference templates ====


def test_the_table_is_complete() -> None:
    if not TEMPLATES.is_dir():
        pytest.skip("the reference templates are not beside the project")
    assert {p.name for p in TEMPLATES.glob("*.jinja")} == set(EXPECTED) - {QWEN25}


@pytest.mark.parametrize(("name", "expected"), sorted(EXPECTED.items()))
def test_each_reference_template(name: str, expected: str | None) -> None:
    check(detect_dialect(read(name), None), expected)


def test_chatml_and_qwen25_both_fit_qwen25s_template_and_qwen25_is_chosen() -> None:
    detection = detect_dialect(read(QWEN25), "qwen2")
    assert detection.name == "qwen2.5"
    assert "preferred to chatml" in detection.reason and "default system prompt" in detection.reason


def test_the_template_wins_over_the_architecture() -> None:
    # QwQ and DeepSeek's R1 distill of Qwen are qwen2 models too; their templates tell.
    assert detect_dialect(read("Qwen-QwQ-32B.jinja"), "qwen2").name == "qwq"
    detection = detect_dialect(read("MiMo-VL.jinja"), "qwen2")
    assert detection.name is None and "ChatML turns" in detection.reason


def test_an_unknown_template_says_what_it_saw() -> None:
    lfm = detect_dialect(read("LFM2-8B-A1B.jinja"), "lfm2")
    assert "ChatML turns (<|im_start|>)" in lfm.reason and "<|tool_list_start|>" in lfm.reason
    # Known formats with markup of another's added: not theirs, and the markup is named.
    kimi = detect_dialect(read("Kimi-K2-Instruct.jinja") + "<|im_vision|>", None)
    assert kimi.name is None and "<|im_vision|>" in kimi.reason
    glm = detect_dialect(read("GLM-4.6.jinja") + "<|begin_of_image|>", "glm4moe")
    assert "GLM markup" in glm.reason and "<|begin_of_image|>" in glm.reason


# ==== Reformatted copies of the same templates ====


def _no_trim_marks(text: str) -> str:
    return re.sub(r"([{][{%#])-|-([%}#][}])", r"\1\2", text)


def _reindented(text: str) -> str:
    lines = [line.strip() for line in text.splitlines()]
    return "\n\n".join("\t" * (i % 3) + line for i, line in enumerate(lines)) + "\n"


def _tight_delimiters(text: str) -> str:
    text = re.sub(r"([{][{%])(-?)\s+", r"\1\2", text)
    return re.sub(r"\s+(-?)([%}][}])", r"\1\2", text)


def _crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


def _double_quoted(text: str) -> str:
    # A literal written in the other quotes (only where that keeps it a literal).
    return re.sub(r"'([^'\"\\\n]*)'", r'"\1"', text)


REFORMATS: dict[str, Callable[[str], str]] = {
    "no trim marks": _no_trim_marks,
    "reindented": _reindented,
    "tight delimiters": _tight_delimiters,
    "crlf": _crlf,
    "double quoted": _double_quoted,
    "all": lambda t: _crlf(_reindented(_tight_delimiters(_no_trim_marks(_double_quoted(t))))),
}


@pytest.mark.parametrize("reformat", sorted(REFORMATS))
@pytest.mark.parametrize(("name", "expected"), sorted(EXPECTED.items()))
def test_reformatted_templates_detect_alike(name: str, expected: str | None, reformat: str) -> None:
    check(detect_dialect(REFORMATS[reformat](read(name)), None), expected)


# ==== Formats without a reference template here ====

PLAIN_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_plain_chatml_is_chatml() -> None:
    detection = detect_dialect(PLAIN_CHATML, "llama")
    assert detection.name == "chatml", detection.message
    assert "plain ChatML" in detection.reason
    assert detect_dialect(_reindented(_no_trim_marks(PLAIN_CHATML)), None).name == "chatml"


@pytest.mark.parametrize(
    ("change", "why"),
    [
        # Qwen2's template: a default system prompt chatml would not write.
        (
            lambda t: (
                "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a "
                "helpful assistant.<|im_end|>\\n' }}{% endif %}" + t
            ),
            "default system prompt",
        ),
        (
            lambda t: (
                "{{ '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                "helpful assistant. Answer in French.<|im_end|>\n' }}" + t
            ),
            "Qwen's default system prompt, and more",
        ),
        (lambda t: "{{ bos_token }}" + t, "BOS token"),
        (lambda t: t.replace("{% endif %}", "<think>\\n{% endif %}"), "reasoning"),
        (lambda t: "{% if tools %}{{ tools | tojson }}{% endif %}" + t, "tools written its way"),
        (lambda t: t.replace("<|im_end|>", "<|im_sep|>", 1), "a token of its own"),
    ],
)
def test_chatml_with_something_of_its_own_is_unknown(
    change: Callable[[str], str], why: str
) -> None:
    detection = detect_dialect(change(PLAIN_CHATML), None)
    assert detection.name is None, f"{why}: {detection.message}"


GLM4 = (
    "[gMASK]<sop>{% for item in messages %}{% if item['tools'] is defined %}<|system|>\n"
    "# 可用工具{% for tool in item['tools'] %}\n\n## {{ tool['function']['name'] }}\n\n"
    "{{ tool['function'] | tojson(indent=4) }}{% endfor %}{% endif %}"
    "{% if item['content'] %}<|{{ item['role'] }}|>{{ item['metadata'] }}\n"
    "{{ item['content'] }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CHATGLM3 = (
    "{% for message in messages %}{% if loop.first %}[gMASK]sop<|{{ message['role'] }}|>\n "
    "{{ message['content'] }}{% else %}<|{{ message['role'] }}|>\n {{ message['content'] }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
MISTRAL_V7 = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}"
    "[SYSTEM_PROMPT]{{ message['content'] }}[/SYSTEM_PROMPT]{% elif message['role'] == 'user' %}"
    "[INST]{{ message['content'] }}[/INST]{% elif message.tool_calls %}[TOOL_CALLS]"
    "{{ message.tool_calls | tojson }}{{ eos_token }}{% elif message['role'] == 'tool' %}"
    "[TOOL_RESULTS]{{ message.tool_call_id }}[TOOL_CONTENT]{{ message['content'] }}"
    "[/TOOL_RESULTS]{% else %}{{ message['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)
GEMMA3 = (
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = "
    "messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}{%- else -%}"
    "{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}{%- if message['role'] == 'assistant' -%}"
    "{%- set role = 'model' -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{%- for item in message['content'] -%}{%- if item['type'] == 'image' -%}"
    "{{ '<start_of_image>' }}{%- else -%}{{ item['text'] | trim }}{%- endif -%}{%- endfor -%}"
    "{{ '<end_of_turn>\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)
LLAMA2 = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<<SYS>>\\n' + "
    "message['content'] + '\\n<</SYS>>\\n\\n' }}{% elif message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}{% else %}"
    "{{ ' ' + message['content'] + ' ' + eos_token }}{% endif %}{% endfor %}"
)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (GLM4, "glm4"),
        (CHATGLM3, "chatglm3"),
        (MISTRAL_V7, "mistral-v7"),
        (GEMMA3, "gemma3"),
        (LLAMA2, None),
    ],
    ids=["glm4", "chatglm3", "mistral-v7", "gemma3", "llama2"],
)
def test_formats_written_here(template: str, expected: str | None) -> None:
    check(detect_dialect(template, None), expected)
    check(detect_dialect(_reindented(template), None), expected)


# ==== No template: the architecture, where it has one format ====


#: Architectures with one chat format, as the dialects declare them (``qwen2`` and ``gemma3``
#: are what ``chatfmt serve`` went by before it read templates).
ARCHITECTURES = {
    "qwen2": "qwen2.5",
    "gemma": "gemma3",
    "gemma2": "gemma3",
    "gemma3": "gemma3",
    "gpt-oss": "harmony",
    "llama4": "llama4",
}


def test_the_architectures_declared() -> None:
    assert architecture_dialects() == ARCHITECTURES


@pytest.mark.parametrize(("architecture", "expected"), sorted(ARCHITECTURES.items()))
def test_an_architecture_with_one_format(architecture: str, expected: str) -> None:
    for template in (None, "", "  \n"):
        detection = detect_dialect(template, architecture)
        assert detection.name == expected
        assert "no chat template" in detection.reason and architecture in detection.reason


def test_no_template_and_an_architecture_that_does_not_tell() -> None:
    detection = detect_dialect(None, "llama")
    assert detection.name is None and detection.candidates == tuple(list_dialects())
    assert "no chat template" in detection.reason and "(llama) does not tell" in detection.reason
    assert detect_dialect(None, None).name is None


def test_only_available_dialects_are_proposed() -> None:
    detection = detect_dialect(PLAIN_CHATML, None, available=["qwen2.5", "llama3"])
    assert detection.name is None and detection.candidates == ("qwen2.5", "llama3")
    assert "no chatml dialect" in detection.reason
    assert detect_dialect(None, "gemma3", available=["chatml"]).name is None


@settings(max_examples=examples(0.25))
@given(st.lists(st.sampled_from([*"<|>[]{}%-'\"\\n _ab/｜", "<|im_start|>", "{%-"])))
def test_never_raises(pieces: list[str]) -> None:
    detection = detect_dialect("".join(pieces), None, available=["chatml"])
    assert isinstance(detection.reason, str) and detection.reason


# ==== The embedded default model (slow: assembled from its parts) ====


def test_the_default_model_detects_as_served_today(default_model_path: Path) -> None:
    from chatfmt.cli.model_format import default_dialect, detect_model_dialect
    from chatfmt.tokenizers.gguf import read_gguf_metadata

    keys = ("tokenizer.chat_template", "general.architecture")
    values = read_gguf_metadata(default_model_path, keys)
    template, architecture = values["tokenizer.chat_template"], values["general.architecture"]
    assert isinstance(template, str) and architecture == "qwen2"
    served = default_dialect("default").name
    assert served == "qwen2.5"
    assert detect_dialect(template, architecture).name == served
    assert detect_model_dialect(str(default_model_path)).name == served
