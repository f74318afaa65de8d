"""The ``chatfmt`` command line: argument parsing and dispatch, and the small commands
(``render``, ``parse``, ``count``, ``fit``, ``tools``, ``chat``).

``serve`` lives in ``serve.py``, ``store`` in ``store.py`` and ``dataset`` in ``dataset.py``,
each with its own options; what the commands share (usage errors, engine options, API keys,
tools files) is in ``options.py``.
Exit status 0 on success and 2 on bad input, with a one-line error that names the problem.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from ..decoding import TurnDecoder
from ..dialects import get_dialect
from ..dialects.base import Dialect
from ..errors import ChatFmtError, MissingDependencyError
from ..events import Event, event_json
from ..messages import Conversation, Message, as_conversation, load_conversation
from ..tokenizers import Tokenizer, load_tokenizer
from .kernel import add_kernel_options
from .options import (
    UsageError,
    add_dialect,
    add_engine_options,
    engine_options,
    fail,
    load_tools_file,
    tokenizer_names,
)

#: Tokenizer used when ``--tokenizer`` is not given.
DEFAULT_TOKENIZER = {"chatml": "cl100k_base", "qwen2.5": "qwen2.5"}


def _read_json(path: str) -> Any:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")


def _conversation(path: str) -> Conversation:
    return load_conversation(_read_json(path))


def _tokenizer(args: argparse.Namespace, dialect: Dialect) -> Tokenizer:
    name = args.tokenizer or DEFAULT_TOKENIZER.get(dialect.name)
    if name is None:
        fail(
            f"dialect {dialect.name} needs --tokenizer (for chatglm3: the path of the model's "
            "tokenizer.model or its model directory)"
        )
    return load_tokenizer(name)


# ==== Commands ====


def cmd_render(args: argparse.Namespace) -> int:
    dialect = get_dialect(args.dialect)
    conv = _conversation(args.file)
    gen = not args.no_generation_prompt
    if args.output == "text" and args.tokenizer is None:
        print(dialect.render_text(conv, add_generation_prompt=gen, strict=not args.lenient))
        return 0
    tok = _tokenizer(args, dialect)
    prompt = dialect.render(conv, tok, add_generation_prompt=gen, strict=not args.lenient)
    if args.output == "ids":
        print(json.dumps(prompt.ids))
    elif args.output == "text":
        print(prompt.text)
    else:
        blocks = [
            {
                "messages": list(span.messages),
                "start": span.start,
                "end": span.end,
                "text": block.text,
                "ids": prompt.ids[span.start : span.end],
            }
            for block, span in zip(prompt.blocks, prompt.spans, strict=True)
        ]
        out = {"text": prompt.text, "ids": prompt.ids, "count": len(prompt), "blocks": blocks}
        print(json.dumps(out, ensure_ascii=False, indent=2))
    return 0


def cmd_parse(args: argparse.Namespace) -> int:
    dialect = get_dialect(args.dialect)
    if args.input == "ids":
        data = _read_json(args.file)
        if not isinstance(data, list) or not all(isinstance(i, int) for i in data):
            fail("--input ids expects a JSON array of integers")
        tok: Tokenizer | None = _tokenizer(args, dialect)
        output: str | list[int] = data
    else:
        try:
            output = sys.stdin.read() if args.file == "-" else Path(args.file).read_text("utf-8")
        except OSError as exc:
            fail(f"cannot read {args.file}: {exc.strerror or exc}")
        tok = None
    finish: Literal["stop", "length"] = "length" if args.length else "stop"
    if not args.stream:
        result = dialect.parse(output, tok, finish_reason=finish)
        print(json.dumps(result.to_openai(), ensure_ascii=False, indent=2))
        return 0
    # Stream as an engine would deliver it: ids one at a time, text in small chunks.
    turn = TurnDecoder(dialect, tok)
    chunks: Iterable[list[Event]]
    if isinstance(output, list):
        chunks = (turn.feed_ids((i,)) for i in output)
    else:
        chunks = (turn.feed_text(output[k : k + 8]) for k in range(0, len(output), 8))
    for events in [*chunks, turn.finish(finish)]:
        for event in events:
            print(json.dumps(event_json(event), ensure_ascii=False))
    print(json.dumps(turn.result().to_openai(), ensure_ascii=False))
    return 0


def cmd_count(args: argparse.Namespace) -> int:
    from ..context import Budget

    dialect = get_dialect(args.dialect)
    tok = _tokenizer(args, dialect)
    conv = _conversation(args.file)
    gen = not args.no_generation_prompt
    print(Budget(dialect, tok).count(conv, add_generation_prompt=gen, strict=not args.lenient))
    return 0


def cmd_fit(args: argparse.Namespace) -> int:
    from ..context import Budget

    dialect = get_dialect(args.dialect)
    tok = _tokenizer(args, dialect)
    conv = _conversation(args.file)
    if args.context <= 0 or args.reserve < 0:
        fail("--context must be positive and --reserve not negative")
    result = Budget(dialect, tok).fit(
        conv, context=args.context, reserve=args.reserve, strict=not args.lenient
    )
    out = {
        "messages": [m.to_openai() for m in result.conversation.messages],
        "tools": [t.definition for t in result.conversation.tools],
        "prompt_tokens": result.prompt_tokens,
        "dropped": list(result.dropped),
    }
    print(json.dumps(out, ensure_ascii=False, indent=2))
    return 0


def cmd_tools(args: argparse.Namespace) -> int:
    dialect = get_dialect(args.dialect)
    registry = load_tools_file(args.file)
    if args.render:
        conv = Conversation(messages=(Message(role="user", content=""),), tools=())
        conv = as_conversation(conv, registry.openai_tools())
        print(dialect.render_text(conv, add_generation_prompt=False))
        return 0
    shaped = registry.functions() if dialect.name == "chatglm3" else registry.openai_tools()
    print(json.dumps(shaped, ensure_ascii=False, indent=2))
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from .chat import choose_system, run_chat
    from .model_format import choose_dialect, default_dialect
    from .serve import build_engine

    tools = load_tools_file(args.tools) if args.tools else None
    # Told from the file's header before the model loads: a wrong file fails at once.
    named, chat_only, _ = choose_dialect(
        args.model, args.dialect, template_check=not args.no_template_check, log=sys.stderr
    )
    if chat_only and tools:
        raise UsageError(
            "the model is served for chat only (its chat template shows it no tools, or "
            "writes calls in a syntax chatfmt cannot read): run it without --tools"
        )
    controls = named.text_controls if named else None
    options = engine_options(args)
    # The same engine as serve's by default (constrained calls, prompt cache, batching).
    options["engine"] = options["engine"] or "llama-server"
    engine = build_engine(args.model, **options, text_controls=controls)
    dialect = named or default_dialect(args.model, engine.tokenizer)
    if args.file and not args.interpreter:
        raise UsageError("--file gives the code interpreter a file: use it with --interpreter")
    system = choose_system(args.system, tools=tools is not None, interpreter=args.interpreter)
    if args.interpreter:
        from ..interpreter import JupyterInterpreter
        from .kernel import announce, give_files, kernel_kwargs

        kwargs = kernel_kwargs(args)
        announce(kwargs)
        with JupyterInterpreter(**kwargs) as interpreter:
            system = give_files(interpreter, args.file or (), system)
            run_chat(engine, dialect, tools=tools, interpreter=interpreter, system=system)
    else:
        run_chat(engine, dialect, tools=tools, system=system)
    return 0


# ==== Argument parsing ====


def _add_tokenizer(p: argparse.ArgumentParser) -> None:
    defaults = ", ".join(f"{t} for {d}" for d, t in DEFAULT_TOKENIZER.items())
    p.add_argument(
        "--tokenizer",
        help=f"{tokenizer_names()}, or a path to tokenizer.model, tokenizer.json, *.tiktoken or "
        f"*.gguf (default: {defaults})",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chatfmt",
        description="Render chat conversations to exact token ids, parse model output, serve.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("render", help="render a conversation file")
    p.add_argument("file", help="conversation JSON: {'messages': [...], 'tools': [...]} or a list")
    add_dialect(p)
    _add_tokenizer(p)
    p.add_argument("--output", choices=["text", "ids", "json"], default="text")
    p.add_argument("--no-generation-prompt", action="store_true")
    p.add_argument("--lenient", action="store_true", help="validate only what rendering needs")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("parse", help="parse model output into an assistant message")
    p.add_argument("file", help="model output file, or - for standard input")
    add_dialect(p)
    _add_tokenizer(p)
    p.add_argument("--input", choices=["text", "ids"], default="text")
    p.add_argument("--stream", action="store_true", help="print events as JSON lines first")
    p.add_argument("--length", action="store_true", help="the output was cut by max_tokens")
    p.set_defaults(func=cmd_parse)

    p = sub.add_parser("count", help="exact prompt token count")
    p.add_argument("file")
    add_dialect(p)
    _add_tokenizer(p)
    p.add_argument("--no-generation-prompt", action="store_true")
    p.add_argument("--lenient", action="store_true")
    p.set_defaults(func=cmd_count)

    p = sub.add_parser("fit", help="drop the oldest turns until the prompt fits")
    p.add_argument("file")
    add_dialect(p)
    _add_tokenizer(p)
    p.add_argument("--context", type=int, required=True, help="context window in tokens")
    p.add_argument("--reserve", type=int, default=0, help="tokens kept free for the reply")
    p.add_argument("--lenient", action="store_true")
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("tools", help="print the tool schemas the model will see")
    p.add_argument("file", help="a Python file with @chatfmt.tools.tool functions")
    add_dialect(p)
    p.add_argument("--render", action="store_true", help="print the rendered tool prompt")
    p.set_defaults(func=cmd_tools)

    p = sub.add_parser("chat", help="interactive terminal chat with tools and interpreter")
    add_engine_options(p)
    p.add_argument("--tools", metavar="FILE.py", help="a Python file with @tool functions")
    p.add_argument("--interpreter", action="store_true", help="run code in a Jupyter kernel")
    p.add_argument("--file", action="append", metavar="PATH",
                   help="copy a file into the interpreter's working directory and tell the "
                   "model (repeatable; with --interpreter)")  # fmt: skip
    p.add_argument("--system",
                   help="system prompt (default: with --interpreter and/or --tools, the default "
                   "prompt of those modes, both joined when both are given; none otherwise); "
                   "--system '' for none")  # fmt: skip
    p.add_argument("--no-template-check", action="store_true",
                   help="use a GGUF model's dialect even where its own chat template renders "
                   "differently (default: refuse, showing the difference)")  # fmt: skip
    add_kernel_options(p)
    p.set_defaults(func=cmd_chat)

    from .dataset import add_dataset_parser
    from .serve import add_serve_parser
    from .store import add_store_parser
    from .template_check import add_template_parser

    add_serve_parser(sub)
    add_template_parser(sub)
    add_store_parser(sub)
    add_dataset_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``chatfmt`` command."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except (UsageError, ChatFmtError, MissingDependencyError) as exc:
        message = " ".join(str(exc).split())
        print(f"chatfmt: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
