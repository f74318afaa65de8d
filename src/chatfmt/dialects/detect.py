"""Which dialect a model's chat template is written in: :func:`detect_dialect`.

A GGUF model carries its chat template (``tokenizer.chat_template``) and its architecture
(``general.architecture``). The template is fingerprinted by the markup it writes: its control
tokens, the tags of its tool calls and reasoning, the variables that switch them, and a few
short sentences that only one format writes. Never by its whole text: a re-indented or
reformatted copy of a template (Jinja's ``{%-`` trims, quotes, line breaks) is the same format.

Every control-token-like string a template writes must belong to the fingerprint's format, so a
fine-tune that borrows ChatML's turns but adds markup of its own (a tool list token, a thinking
switch, a default system prompt of its own) is not mistaken for the format it borrowed from: it
is reported as unknown, with the dialects to choose from. A model rendered in the wrong format
does not fail, it just answers worse, which is why a guess is never made.

Only names are returned: no dialect module is imported, and a name is proposed only when the
registry (:func:`~chatfmt.dialects.list_dialects`) lists it.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

__all__ = ["ARCHITECTURE_DIALECTS", "Detection", "detect_dialect", "normalize_template"]


@dataclass(frozen=True)
class Detection:
    """What :func:`detect_dialect` found: a dialect ``name`` and why, or ``None`` and why not,
    with the dialects a caller may choose from instead (``candidates``)."""

    name: str | None
    reason: str
    candidates: tuple[str, ...] = ()

    @property
    def found(self) -> bool:
        return self.name is not None

    @property
    def message(self) -> str:
        """One line for a person: the dialect and why, or why none and which to choose from."""
        if self.name is not None:
            return f"dialect {self.name}: {self.reason}"
        return f"no dialect detected: {self.reason}; choose one of: {', '.join(self.candidates)}"


# ==== Normalising a template ====

_TRIM_OPEN = re.compile(r"(\{[{%#])[-+]")
_TRIM_CLOSE = re.compile(r"[-+]([}%#]\})")
_SPACE = re.compile(r"\s+")
_PAD_OPEN = re.compile(r"(\{[{%#]) ")
_PAD_CLOSE = re.compile(r" ([}%#]\})")


def normalize_template(text: str) -> str:
    """``text`` with the differences that do not change the format taken out: an escaped
    ``\\n`` and a line break are both one space, as is any run of whitespace; Jinja's trim
    marks (``{%-``, ``-}}``) and the spaces inside delimiters are dropped; double quotes are
    single quotes. Markers are matched in this form, and normalised the same way."""
    t = text.replace("\\n", "\n").replace('"', "'")
    t = _TRIM_CLOSE.sub(r"\1", _TRIM_OPEN.sub(r"\1", t))
    t = _SPACE.sub(" ", t)
    return _PAD_CLOSE.sub(r"\1", _PAD_OPEN.sub(r"\1", t))


#: Control-token-like strings: ``<|x|>``, DeepSeek's ``<｜x｜>``, ``[X]`` and ``<x>`` tags.
_TOKEN = re.compile(
    r"<\|[^|\s{}'+]{1,40}\|>|<｜[^｜\s{}'+]{1,40}｜>|\[[A-Z_/]{2,30}\]|</?[a-z_]{2,30}>|\[gMASK\]"
)


# ==== The formats ====

_CHATML = frozenset({"<|im_start|>", "<|im_end|>", "<|endoftext|>"})
_HERMES = frozenset(
    {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>"}
)
_THINK = frozenset({"<think>", "</think>"})
#: Qwen3-Coder's calls (``<function=name>``, ``<parameter=name>``) and its tool descriptions.
_XML_CALLS = frozenset(
    f"<{slash}{tag}>"
    for tag in ("function", "parameter", "parameters", "name", "description", "type")
    for slash in ("", "/")
)
_VISION = frozenset({"<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"})
_LLAMA3 = frozenset(
    {
        "<|begin_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|python_tag|>",
    }
)
_MISTRAL = frozenset(
    "[INST] [/INST] [AVAILABLE_TOOLS] [/AVAILABLE_TOOLS] [TOOL_CALLS] [TOOL_RESULTS] "
    "[/TOOL_RESULTS] [TOOL_CONTENT] [SYSTEM_PROMPT] [/SYSTEM_PROMPT] [CALL_ID] [ARGS] "
    "[IMG] [IMG_BREAK] [IMG_END]".split()
)
_GEMMA = frozenset(
    {"<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<bos>", "<eos>"}
)
_GLM = frozenset({"[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"})
#: GLM-4.5+ calls (``<tool_call>name<arg_key>…</arg_key><arg_value>…</arg_value>``), results
#: and reasoning, besides the GLM role tokens.
_GLM45 = _GLM | frozenset(
    f"<{slash}{tag}>"
    for tag in ("tool_call", "arg_key", "arg_value", "tool_response", "tools", "think")
    for slash in ("", "/")
)
_KIMI = frozenset(
    {"<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>"}
    | {f"<|tool_call{s}|>" for s in ("s_section_begin", "s_section_end", "_begin", "_end")}
    | {"<|tool_call_argument_begin|>", "<think>", "</think>"}
    | {f"<|media_{s}|>" for s in ("start", "content", "pad", "end")}
)
_KIMI_MARKERS = ("<|im_user|>", "<|im_middle|>", "<|tool_calls_section_begin|>")

#: The tool section of Qwen's templates (Qwen2.5, QwQ, Qwen3), before the tool list.
_QWEN_TOOLS = "# Tools\n\nYou may call one or more functions to assist with the user query."
#: Qwen2.5's default system prompt, written when a conversation has none.
_QWEN25_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
#: Qwen3's history rule: reasoning is kept only after the last real user query.
_QWEN3_HISTORY = ("last_query_index", "multi_step_tool")
#: ChatML with calls as ``<tool_call><function=name><parameter=name>`` (Qwen3-Coder, Qwen3.5).
_QWEN_XML_CALLS = ("<|im_start|>", "<tool_call>", "<function=", "<parameter=")
_DEEPSEEK = ("<｜User｜>", "<｜Assistant｜>")


@dataclass(frozen=True)
class _Fingerprint:
    """What a template of one dialect writes. Every marker is matched normalised."""

    name: str
    #: Why a template with these markers is this dialect (shown to the user).
    why: str
    requires: tuple[str, ...] = ()
    #: At least one of these, when given.
    any_of: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    #: Every control-token-like string must be one of these (``None``: not checked).
    tokens: frozenset[str] | None = None
    #: Markers required when the template writes tools at all (it mentions ``tools``).
    with_tools: tuple[str, ...] = ()
    #: ChatML formats: the text a system turn may start with when the template writes one
    #: of its own (a default system prompt); any other is a format chatfmt does not render.
    fixed_system: tuple[str, ...] | None = None


#: Most specific first: the first that fits is chosen, and any other that fits is named.
_FINGERPRINTS: tuple[_Fingerprint, ...] = (
    _Fingerprint(
        "harmony",
        "gpt-oss's harmony format (<|start|>, <|channel|>, <|message|>)",
        requires=("<|start|>", "<|channel|>", "<|message|>"),
    ),
    _Fingerprint(
        "minimax-m2",
        "MiniMax-M2 (]~!b[ … ]~b] turns, <minimax:tool_call> XML calls, interleaved <think>)",
        requires=("]~!b[", "]~b]", "<minimax:tool_call>"),
    ),
    _Fingerprint(
        "gemma4",
        "Gemma 4 (<|turn>role … <turn|>, <|tool_call>call:NAME{…} calls with <|\"|> strings, "
        "a <|channel>thought channel)",
        requires=("<|turn>", "<turn|>", '<|"|>'),
    ),
    _Fingerprint(
        "nemotron-nano2",
        "Nemotron Nano v2 (<SPECIAL_10>System, <SPECIAL_11>User/Assistant turns, "
        "<TOOLCALL>[…] calls, /think and /no_think switches)",
        requires=("<SPECIAL_10>", "<SPECIAL_11>", "<TOOLCALL>"),
    ),
    _Fingerprint(
        "nemotron3",
        "Nemotron 3 Nano (ChatML, <function=…> calls, XML tool descriptions with extra schema "
        "keys, truncate_history_thinking)",
        requires=("<|im_start|>", "<function=", "truncate_history_thinking", "render_extra_keys"),
    ),
    _Fingerprint(
        "granite4",
        "Granite 4.0 (<|start_of_role|>role<|end_of_role|> … <|end_of_text|>, Hermes "
        "<tool_call> calls, a default system prompt when there is none)",
        requires=("<|start_of_role|>", "<|end_of_role|>", "tools_system_message_prefix"),
        any_of=("g4_default_system_message",),
        excludes=("<|tool_call|>",),
    ),
    _Fingerprint(
        "granite4.1",
        "Granite 4.1 (<|start_of_role|>role<|end_of_role|> … <|end_of_text|>, Hermes "
        "<tool_call> calls, no default system prompt)",
        requires=("<|start_of_role|>", "<|end_of_role|>", "tools_system_message_prefix"),
        excludes=("<|tool_call|>", "g4_default_system_message"),
    ),
    _Fingerprint(
        "magistral",
        "Magistral / Ministral 3 reasoning ([SYSTEM_PROMPT], [INST], [THINK]…[/THINK] thoughts, "
        "[TOOL_CALLS]name[ARGS]… calls)",
        requires=("[INST]", "[SYSTEM_PROMPT]", "[THINK]"),
    ),
    _Fingerprint(
        "llama4",
        "Llama 4 (<|header_start|>role<|header_end|> … <|eot|> or <|eom|>)",
        requires=("<|header_start|>", "<|header_end|>", "<|eot|>"),
    ),
    _Fingerprint(
        "deepseek-v4",
        "DeepSeek V4 (DSML tool calls, <tool_result> results)",
        requires=(*_DEEPSEEK, "｜DSML｜", "<tool_result>"),
    ),
    _Fingerprint(
        "deepseek-v3.2",
        "DeepSeek V3.2 (DSML function calls, <function_results>)",
        requires=(*_DEEPSEEK, "｜DSML｜", "<function_results>"),
    ),
    _Fingerprint(
        "deepseek-v3.1",
        "DeepSeek V3.1 (<｜tool▁calls▁begin｜> calls, one output per tool, <think></think> "
        "thinking switch)",
        requires=(*_DEEPSEEK, "<｜tool▁calls▁begin｜>", "<think></think>"),
        excludes=("<｜tool▁outputs▁begin｜>", "｜DSML｜"),
    ),
    _Fingerprint(
        "deepseek-r1",
        "DeepSeek R1 (<｜tool▁calls▁begin｜> calls with fenced JSON, <｜tool▁outputs▁begin｜> "
        "results, the reply opened with <think>)",
        requires=(*_DEEPSEEK, "<｜tool▁calls▁begin｜>", "<｜tool▁outputs▁begin｜>", "<think>"),
        excludes=("｜DSML｜",),
    ),
    _Fingerprint(
        "qwen3.5",
        "Qwen3.5 (ChatML, <function=…> calls, <think> reasoning, vision tokens)",
        requires=(*_QWEN_XML_CALLS, "<think>", "<|vision_start|>"),
        tokens=_CHATML | _HERMES | _THINK | _XML_CALLS | _VISION,
        excludes=("bos_token",),
    ),
    _Fingerprint(
        "qwen3-coder",
        "Qwen3-Coder (ChatML, <function=…> calls with <parameter=…>, no reasoning)",
        requires=_QWEN_XML_CALLS,
        tokens=_CHATML | _HERMES | _XML_CALLS,
        excludes=("<think>", "enable_thinking", "bos_token"),
    ),
    _Fingerprint(
        "qwen3",
        "Qwen3 (ChatML, Hermes <tool_call> calls, <think> reasoning switched by "
        "enable_thinking, kept after the last user query)",
        requires=("<|im_start|>", "<tool_call>", "<think>", "enable_thinking", _QWEN_TOOLS),
        any_of=_QWEN3_HISTORY,
        tokens=_CHATML | _HERMES | _THINK,
        excludes=("<function=", "bos_token"),
        fixed_system=(),
    ),
    _Fingerprint(
        "qwq",
        "QwQ (ChatML, Hermes <tool_call> calls, <think> reasoning dropped from every earlier turn)",
        requires=("<|im_start|>", "<tool_call>", "<think>", "</think>", _QWEN_TOOLS),
        tokens=_CHATML | _HERMES | _THINK,
        excludes=(*_QWEN3_HISTORY, "<function=", "bos_token"),
        fixed_system=(),
    ),
    _Fingerprint(
        "qwen2.5",
        "the Qwen2.5 instruct template (ChatML, Hermes <tool_call> calls, Qwen's default "
        "system prompt); preferred to chatml, which renders the same turns without that "
        "default system prompt",
        requires=("<|im_start|>", _QWEN25_SYSTEM),
        tokens=_CHATML | _HERMES,
        excludes=("<think>", "</think>", "enable_thinking", "reasoning_content", "bos_token"),
        with_tools=(_QWEN_TOOLS,),
        fixed_system=(_QWEN25_SYSTEM,),
    ),
    _Fingerprint(
        "chatml",
        "plain ChatML turns (<|im_start|>role … <|im_end|>), with no default system prompt "
        "and, if any, Qwen's Hermes-style tool section",
        requires=("<|im_start|>", "<|im_end|>"),
        tokens=_CHATML | _HERMES,
        excludes=("<think>", "</think>", "enable_thinking", "reasoning_content", "bos_token"),
        with_tools=(_QWEN_TOOLS,),
        fixed_system=(_QWEN25_SYSTEM,),
    ),
    _Fingerprint(
        "llama3",
        "Llama 3 (<|start_header_id|>role<|end_header_id|> … <|eot_id|>) with Meta's JSON "
        "tool calls",
        requires=("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        tokens=_LLAMA3,
        # Llama 3 fine-tunes with call syntaxes of their own (Functionary, FireFunction).
        excludes=("<function=", "functools", ">>>"),
    ),
    _Fingerprint(
        "mistral-v11",
        "Mistral instruct v11 ([TOOL_CALLS]name[ARGS]… calls, [SYSTEM_PROMPT])",
        requires=("[INST]", "[/INST]", "[TOOL_CALLS]", "[ARGS]"),
        tokens=_MISTRAL,
        excludes=("<<SYS>>",),
    ),
    _Fingerprint(
        "mistral-v7",
        "Mistral instruct v7 ([SYSTEM_PROMPT] in place, [TOOL_CALLS] with a JSON list)",
        requires=("[INST]", "[/INST]", "[SYSTEM_PROMPT]"),
        tokens=_MISTRAL,
        excludes=("[ARGS]", "<<SYS>>"),
    ),
    _Fingerprint(
        "mistral-v3",
        "Mistral instruct v3 ([AVAILABLE_TOOLS] before the last user turn, [TOOL_CALLS] with "
        "a JSON list, no [SYSTEM_PROMPT])",
        requires=("[INST]", "[/INST]"),
        any_of=("[TOOL_CALLS]", "[AVAILABLE_TOOLS]"),
        tokens=_MISTRAL,
        excludes=("[SYSTEM_PROMPT]", "[ARGS]", "<<SYS>>"),
    ),
    _Fingerprint(
        "gemma3",
        "Gemma turns (<start_of_turn>role … <end_of_turn>, the reply as model); Gemma 2 and 3 "
        "write the same turns (Gemma 2 refuses a system message, which gemma3 puts before the "
        "first user message)",
        requires=("<start_of_turn>", "<end_of_turn>"),
        tokens=_GEMMA,
    ),
    _Fingerprint(
        "glm4.6",
        "GLM-4.5/4.6 (role tokens, <tool_call> calls with <arg_key>/<arg_value> on lines of "
        "their own, <think> reasoning, /nothink when thinking is off)",
        requires=("[gMASK]<sop>", "<tool_call>", "<arg_key>", "<think>", "/nothink"),
        tokens=_GLM45,
    ),
    _Fingerprint(
        "glm4.7",
        "GLM-4.7 (role tokens, compact <tool_call> calls with <arg_key>/<arg_value>, the "
        "generation prompt opening <think>)",
        requires=("[gMASK]<sop>", "<tool_call>", "<arg_key>", "<think>"),
        tokens=_GLM45,
        excludes=("/nothink",),
    ),
    _Fingerprint(
        "kimi-k2-thinking",
        "Kimi K2-Thinking (<|im_user|>…<|im_middle|> turns, functions.NAME:INDEX calls in a "
        "tool-calls section, <think> reasoning)",
        requires=(*_KIMI_MARKERS, "<think>"),
        tokens=_KIMI,
    ),
    _Fingerprint(
        "kimi-k2",
        "Kimi K2 Instruct (<|im_user|>…<|im_middle|> turns, functions.NAME:INDEX calls in a "
        "tool-calls section, no reasoning)",
        requires=_KIMI_MARKERS,
        tokens=_KIMI,
        excludes=("<think>",),
    ),
    _Fingerprint(
        "glm4",
        "GLM-4 chat ([gMASK]<sop>, role tokens, calls as JSON in an <|assistant|> segment)",
        requires=("[gMASK]<sop>",),
        tokens=_GLM,
        # GLM-4.5 and later write calls as <tool_call> with <arg_key>/<arg_value>, and think.
        excludes=("<tool_call>", "<arg_key>", "<think>"),
    ),
    _Fingerprint(
        "chatglm3",
        "ChatGLM3 ([gMASK]sop, role tokens, tool_call(…) segments)",
        requires=("[gMASK]sop",),
        tokens=_GLM,
        excludes=("<tool_call>", "<arg_key>", "<think>"),
    ),
)

_KNOWN_TOKENS = frozenset().union(*(f.tokens for f in _FINGERPRINTS if f.tokens is not None))

#: For a model without a chat template: architectures with one chat format only. ``qwen2`` and
#: ``gemma3`` are what ``chatfmt serve`` went by before it read templates, so such models keep
#: their dialect; Gemma 1 and 2 write Gemma 3's turns, and gpt-oss only speaks harmony.
ARCHITECTURE_DIALECTS = {
    "qwen2": "qwen2.5",
    "gemma": "gemma3",
    "gemma2": "gemma3",
    "gemma3": "gemma3",
    "gpt-oss": "harmony",
    "llama4": "llama4",
}

#: Markup of formats that are named in a failure, to say what the template looked like.
_FAMILIES = (
    ("<|im_start|>", "ChatML turns (<|im_start|>)"),
    ("<|start_header_id|>", "Llama 3 turns (<|start_header_id|>)"),
    ("[INST]", "[INST] turns (Mistral, Llama 2)"),
    ("<start_of_turn>", "Gemma turns (<start_of_turn>)"),
    ("[gMASK]", "GLM markup ([gMASK])"),
    ("<｜Assistant｜>", "DeepSeek markup (<｜Assistant｜>)"),
)


def _fixed_systems(norm: str) -> list[str]:
    """The text of every system turn the template writes itself (a default system prompt),
    up to where a literal, an expression or a control token ends it."""
    return re.findall(r"<\|im_start\|>system ([^'<{+~]{3,})", norm)


def _fits(fp: _Fingerprint, norm: str, tokens: set[str]) -> bool:
    if not all(normalize_template(m) in norm for m in fp.requires):
        return False
    if fp.any_of and not any(normalize_template(m) in norm for m in fp.any_of):
        return False
    if any(normalize_template(m) in norm for m in fp.excludes):
        return False
    if fp.tokens is not None and not tokens <= fp.tokens:
        return False
    if fp.with_tools and re.search(r"\btools\b", norm):
        if not all(normalize_template(m) in norm for m in fp.with_tools):
            return False
    if fp.fixed_system is not None:
        allowed = {normalize_template(s) for s in fp.fixed_system}
        if any(text.strip() not in allowed for text in _fixed_systems(norm)):
            return False
    return True


def _unknown(norm: str, tokens: set[str]) -> str:
    seen = [label for marker, label in _FAMILIES if marker in norm]
    foreign = sorted(tokens - _KNOWN_TOKENS)
    what = f"it writes {' and '.join(seen)}, but" if seen else "it"
    reason = f"the chat template matches none of the formats chatfmt renders: {what} "
    if foreign:
        shown = ", ".join(foreign[:5]) + (", …" if len(foreign) > 5 else "")
        return reason + f"has markup none of them writes ({shown})"
    return reason + "differs from each of them (its prompts, tool syntax or reasoning)"


def detect_dialect(
    template: str | None,
    architecture: str | None,
    *,
    available: Collection[str] | None = None,
) -> Detection:
    """The dialect whose format ``template`` (a model's Jinja chat template) writes, or, when
    there is no template, the one ``architecture`` (GGUF ``general.architecture``) implies
    where it has a single chat format.

    ``available`` are the dialect names that may be proposed (default: every name
    :func:`~chatfmt.dialects.list_dialects` lists, plugins included); they are also the
    ``candidates`` of a failed detection. Never raises for any template text.
    """
    if available is None:
        from . import list_dialects

        available = list_dialects()
    names = tuple(available)
    arch = (architecture or "").strip()

    if not template or not template.strip():
        by_arch = ARCHITECTURE_DIALECTS.get(arch)
        if by_arch is not None and by_arch in names:
            return Detection(
                by_arch,
                f"the model has no chat template, and its architecture ({arch}) has one chat "
                f"format, {by_arch}'s",
            )
        said = f"its architecture ({arch}) does not tell" if arch else "no architecture"
        return Detection(
            None, f"the model has no chat template (tokenizer.chat_template), and {said}", names
        )

    norm = normalize_template(template)
    tokens = set(_TOKEN.findall(norm))
    fits = [fp for fp in _FINGERPRINTS if _fits(fp, norm, tokens)]
    if not fits:
        return Detection(None, _unknown(norm, tokens), names)
    best = fits[0]
    if best.name not in names:
        return Detection(
            None,
            f"the chat template is {best.why}, but this installation has no {best.name} dialect",
            names,
        )
    reason = f"the chat template is {best.why}"
    # Named unless the reason already says why the first was preferred to it.
    also = [fp.name for fp in fits[1:] if fp.name in names and fp.name not in best.why]
    if also:
        reason += f" (also fits: {', '.join(also)})"
    return Detection(best.name, reason)
