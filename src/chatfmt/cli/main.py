"""The ``chatfmt`` command line: render, parse, count, fit, tools, chat, serve.

Exit status 0 on success and 2 on bad input, with a one-line error that names the problem.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn

from ..decoding import TurnDecoder
from ..dialects import get_dialect, list_dialects
from ..dialects.base import Dialect
from ..errors import ChatFmtError, MissingDependencyError
from ..events import Event, event_json
from ..messages import Conversation, Message, as_conversation, load_conversation
from ..tokenizers import Tokenizer, load_tokenizer
from .kernel import add_kernel_options

#: Tokenizer used when ``--tokenizer`` is not given.
DEFAULT_TOKENIZER = {"chatml": "cl100k_base", "qwen2.5": "qwen2.5"}


class _UsageError(Exception):
    """Bad command-line input; reported as one line with exit status 2."""


def _fail(message: str) -> NoReturn:
    raise _UsageError(message)


def _read_json(path: str) -> Any:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        _fail(f"cannot read {path}: {exc.strerror or exc}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        _fail(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")


def _conversation(path: str) -> Conversation:
    return load_conversation(_read_json(path))


def _tokenizer(args: argparse.Namespace, dialect: Dialect) -> Tokenizer:
    name = args.tokenizer or DEFAULT_TOKENIZER.get(dialect.name)
    if name is None:
        _fail(
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
            _fail("--input ids expects a JSON array of integers")
        tok: Tokenizer | None = _tokenizer(args, dialect)
        output: str | list[int] = data
    else:
        try:
            output = sys.stdin.read() if args.file == "-" else Path(args.file).read_text("utf-8")
        except OSError as exc:
            _fail(f"cannot read {args.file}: {exc.strerror or exc}")
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
        _fail("--context must be positive and --reserve not negative")
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


def load_tools_file(path: str) -> Any:
    """A ToolRegistry from a Python file: its ``registry`` if it defines one, else every
    function in it decorated with ``@chatfmt.tools.tool``.

    The file is the user's own code and is imported like any module; model output is never
    executed.
    """
    import importlib.util

    from ..tools import ToolRegistry
    from ..tools.registry import SPEC_ATTR

    file = Path(path)
    if not file.is_file():
        _fail(f"tools file {path} not found")
    spec = importlib.util.spec_from_file_location(f"chatfmt_user_tools_{file.stem}", file)
    if spec is None or spec.loader is None:
        _fail(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's file failed: say where, without a traceback
        _fail(f"importing {path} failed: {type(exc).__name__}: {exc}")
    registry = getattr(module, "registry", None)
    if isinstance(registry, ToolRegistry):
        return registry
    fns = [v for v in vars(module).values() if callable(v) and hasattr(v, SPEC_ATTR)]
    if not fns:
        _fail(f"{path} defines no tools: decorate functions with @chatfmt.tools.tool")
    return ToolRegistry(fns)


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
    from .chat import run_chat
    from .serve import build_engine, default_dialect

    tools = load_tools_file(args.tools) if args.tools else None
    named = get_dialect(args.dialect) if args.dialect else None
    controls = named.text_controls if named else None
    options = _engine_options(args)
    options["engine"] = options["engine"] or "local"
    engine = build_engine(args.model, **options, text_controls=controls)
    dialect = named or default_dialect(args.model, engine.tokenizer)
    if args.file and not args.interpreter:
        raise _UsageError("--file gives the code interpreter a file: use it with --interpreter")
    if args.interpreter:
        from ..interpreter import JupyterInterpreter
        from .kernel import announce, give_files, kernel_kwargs

        kwargs = kernel_kwargs(args)
        announce(kwargs)
        with JupyterInterpreter(**kwargs) as interpreter:
            system = give_files(interpreter, args.file or (), args.system)
            run_chat(engine, dialect, tools=tools, interpreter=interpreter, system=system)
    else:
        run_chat(engine, dialect, tools=tools, system=args.system)
    return 0


def read_keys(args: argparse.Namespace) -> list[str]:
    """The API keys of ``--api-key`` (repeatable) and ``--api-key-file`` (one per line)."""
    keys = list(args.api_key or ())
    if args.api_key_file is not None:
        try:
            lines = Path(args.api_key_file).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            _fail(f"--api-key-file {args.api_key_file}: {exc}")
        keys += [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    if any(not k.strip() for k in keys):
        _fail("--api-key is empty; give a secret, or leave the option out for no key")
    if args.api_key_file is not None and not keys:
        _fail(f"--api-key-file {args.api_key_file} holds no key (one key per line)")
    return keys


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from .serve import run_server
    except ImportError as exc:
        raise MissingDependencyError(
            f"the server is not available ({exc}); install it with `pip install 'chatfmt[all]'`"
        ) from None
    from ..server.http import check_api_key

    api_key = read_keys(args) or None
    check_api_key(api_key)  # before the model loads: a key no client could send
    tools = load_tools_file(args.tools) if args.tools else None
    if args.store_max_age_days <= 0 or args.store_max_mb < 0:
        _fail("--store-max-age-days must be positive, and --store-max-mb 0 (no limit) or more")
    if not 0 < args.max_upload_mb <= args.max_body_mb:
        _fail(f"--max-upload-mb must be positive and at most --max-body-mb ({args.max_body_mb:g})")

    def configure(app: Any, engine: Any, dialect: Dialect) -> None:
        from ..web import demo_tools, mount_web
        from .serve import model_name, trusted_hosts

        factory, sandbox_line = None, None
        if not args.no_interpreter:
            try:
                require_jupyter()
            except MissingDependencyError:
                pass  # the web chat offers chat and tool modes only
            else:
                import atexit

                from ..interpreter import KernelPool
                from .kernel import announce, kernel_kwargs

                kwargs = kernel_kwargs(args)
                announce(kwargs)
                sandbox_line = kwargs["sandbox"].describe()
                # A warm kernel waits for the next conversation that asks for the interpreter.
                pool = KernelPool(size=1, **kwargs).start()
                atexit.register(pool.close)
                factory = pool.acquire
        mount_web(
            app,
            engine=engine,
            dialect=dialect,
            tools=tools if tools is not None else demo_tools(),
            interpreter_factory=factory,
            model_name=model_name(args.model),
            api_key=api_key,
            allowed_hosts=trusted_hosts(args.host),
            sandbox=sandbox_line,
            max_upload_bytes=round(args.max_upload_mb * 1024 * 1024),
            store=app.state.store,
        )

    run_server(
        model=args.model,
        dialect=args.dialect,
        host=args.host,
        port=args.port,
        api_key=api_key,
        store=None if args.no_store else (args.store or default_store_path()),
        store_max_age_days=args.store_max_age_days,
        store_max_mb=args.store_max_mb or None,
        n_threads=args.threads,
        parallel=args.parallel,
        drain_timeout=args.drain_timeout,
        call_grammar=not args.no_call_grammar,
        limits=_limits(args),
        configure=None if args.no_web else configure,
        **{**_engine_options(args), "engine": args.engine or "llama-server"},
    )
    return 0


def default_store_path() -> str:
    """Where ``chatfmt serve`` keeps responses unless told: the user's data directory."""
    import platformdirs

    return str(Path(platformdirs.user_data_dir("chatfmt")) / "responses.sqlite3")


def _limits(args: argparse.Namespace) -> Any:
    """The server limits the flags ask for (each flag is named in the limit's own errors)."""
    from ..server.limits import ServerLimits

    per_client = args.max_connections_per_client
    if per_client < 0:
        raise _UsageError(
            f"--max-connections-per-client must be 0 (no cap) or more, got {per_client}"
        )
    for flag, value in (
        ("--max-body-mb", args.max_body_mb),
        ("--max-messages", args.max_messages),
        ("--max-tools", args.max_tools),
        ("--header-timeout", args.header_timeout),
        ("--body-timeout", args.body_timeout),
    ):
        if not value > 0:
            raise _UsageError(f"{flag} must be positive, got {value}")
    try:
        return ServerLimits(
            max_body_bytes=round(args.max_body_mb * 1024 * 1024),
            max_messages=args.max_messages,
            max_tools=args.max_tools,
            header_timeout=args.header_timeout,
            body_timeout=args.body_timeout,
            max_connections_per_client=per_client if per_client > 0 else None,
        )
    except ValueError as exc:
        raise _UsageError(str(exc)) from None


def _engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """The engine options that ``chat`` and ``serve`` share."""
    return {
        "engine": args.engine,
        "engine_url": args.engine_url,
        "tokenizer": args.tokenizer,
        "engine_api_key": args.engine_api_key,
        "n_ctx": args.n_ctx,
    }


def require_jupyter() -> None:
    """Raise MissingDependencyError unless the interpreter's kernel packages are installed."""
    from .._imports import require

    require("jupyter_client", extra="jupyter")
    require("ipykernel", extra="jupyter")


# ==== Argument parsing ====


def _add_dialect(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    p.add_argument(
        "--dialect", required=required, choices=list_dialects(), help="chat format to use"
    )


def _add_tokenizer(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tokenizer",
        help="cl100k_base, o200k_base, qwen2.5, or a path to tokenizer.model, tokenizer.json, "
        "*.tiktoken or *.gguf (default: cl100k_base for chatml, qwen2.5 for qwen2.5)",
    )


def _add_engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="default", help="'default' or a path to a GGUF file")
    _add_dialect(p, required=False)
    p.add_argument(
        "--engine",
        choices=["llama-server", "local", "remote"],
        help="llama-server: llama.cpp's server as a managed child, many users at once (serve's "
        "default); local: the model in this process, one sequence at a time (chat's default); "
        "remote: a server at --engine-url",
    )
    p.add_argument("--engine-url", help="base URL of a remote /v1/completions server")
    p.add_argument("--engine-api-key", help="bearer token for the remote engine")
    p.add_argument(
        "--tokenizer",
        help="the served model's vocabulary for a remote engine (default: qwen2.5 for the "
        "default model, else the --model path)",
    )
    p.add_argument("--n-ctx", type=int, help="context length (default: the model's, max 4096)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chatfmt",
        description="Render chat conversations to exact token ids, parse model output, serve.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("render", help="render a conversation file")
    p.add_argument("file", help="conversation JSON: {'messages': [...], 'tools': [...]} or a list")
    _add_dialect(p)
    _add_tokenizer(p)
    p.add_argument("--output", choices=["text", "ids", "json"], default="text")
    p.add_argument("--no-generation-prompt", action="store_true")
    p.add_argument("--lenient", action="store_true", help="validate only what rendering needs")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("parse", help="parse model output into an assistant message")
    p.add_argument("file", help="model output file, or - for standard input")
    _add_dialect(p)
    _add_tokenizer(p)
    p.add_argument("--input", choices=["text", "ids"], default="text")
    p.add_argument("--stream", action="store_true", help="print events as JSON lines first")
    p.add_argument("--length", action="store_true", help="the output was cut by max_tokens")
    p.set_defaults(func=cmd_parse)

    p = sub.add_parser("count", help="exact prompt token count")
    p.add_argument("file")
    _add_dialect(p)
    _add_tokenizer(p)
    p.add_argument("--no-generation-prompt", action="store_true")
    p.add_argument("--lenient", action="store_true")
    p.set_defaults(func=cmd_count)

    p = sub.add_parser("fit", help="drop the oldest turns until the prompt fits")
    p.add_argument("file")
    _add_dialect(p)
    _add_tokenizer(p)
    p.add_argument("--context", type=int, required=True, help="context window in tokens")
    p.add_argument("--reserve", type=int, default=0, help="tokens kept free for the reply")
    p.add_argument("--lenient", action="store_true")
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("tools", help="print the tool schemas the model will see")
    p.add_argument("file", help="a Python file with @chatfmt.tools.tool functions")
    _add_dialect(p)
    p.add_argument("--render", action="store_true", help="print the rendered tool prompt")
    p.set_defaults(func=cmd_tools)

    p = sub.add_parser("chat", help="interactive terminal chat with tools and interpreter")
    _add_engine_options(p)
    p.add_argument("--tools", metavar="FILE.py", help="a Python file with @tool functions")
    p.add_argument("--interpreter", action="store_true", help="run code in a Jupyter kernel")
    p.add_argument("--file", action="append", metavar="PATH",
                   help="copy a file into the interpreter's working directory and tell the "
                   "model (repeatable; with --interpreter)")  # fmt: skip
    p.add_argument("--system", help="system prompt")
    add_kernel_options(p)
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("serve", help="OpenAI-compatible API and web chat")
    _add_engine_options(p)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", action="append",
                   help="require this bearer token (repeat for several keys; stored responses "
                   "belong to the key that made them)")  # fmt: skip
    p.add_argument("--api-key-file", metavar="FILE", help="API keys, one per line")
    p.add_argument("--store", metavar="PATH",
                   help="SQLite file keeping Responses API responses (default: in the user's "
                   "data directory)")  # fmt: skip
    p.add_argument("--no-store", action="store_true", help="keep no responses")
    p.add_argument("--store-max-age-days", type=float, default=30.0, metavar="DAYS",
                   help="delete stored responses older than this (default: 30)")  # fmt: skip
    p.add_argument("--store-max-mb", type=float, default=1024.0, metavar="MB",
                   help="past this much stored data, the oldest responses and web chat "
                   "conversations go first; 0 for no limit (default: 1024)")  # fmt: skip
    p.add_argument("--threads", type=int, help="CPU threads for the local model")
    p.add_argument(
        "--parallel",
        type=int,
        metavar="N",
        help="conversations the llama-server engine decodes at once, each with its own "
        "context of --n-ctx tokens and prompt cache (default: 4)",
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM or Ctrl+C, how long requests in flight may take to finish (default: 30)",
    )
    p.add_argument(
        "--no-call-grammar",
        action="store_true",
        help="leave tool calls unconstrained when the model may answer in text (tool_choice "
        '"auto"); forced calls, strict tools and response_format are still constrained',
    )
    limits = p.add_argument_group("limits per request and client")
    limits.add_argument(
        "--max-body-mb",
        type=float,
        default=8.0,
        metavar="MB",
        help="largest request body; larger ones get 413 (default: 8)",
    )
    limits.add_argument(
        "--max-messages",
        type=int,
        default=4096,
        metavar="N",
        help="most messages in one request (default: 4096)",
    )
    limits.add_argument(
        "--max-tools",
        type=int,
        default=512,
        metavar="N",
        help="most tools in one request (default: 512)",
    )
    limits.add_argument(
        "--header-timeout",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="a connection must send its request headers within this (default: 20)",
    )
    limits.add_argument("--body-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="a request body must arrive within this of its headers "
                        "(default: 60)")  # fmt: skip
    limits.add_argument("--max-connections-per-client", type=int, default=64, metavar="N",
                        help="open connections one client address may hold; 0 for no cap, e.g. "
                        "behind a reverse proxy (default: 64)")  # fmt: skip
    p.add_argument("--tools", metavar="FILE.py", help="tools for the web chat (default: demo)")
    p.add_argument("--no-interpreter", action="store_true", help="no code interpreter mode")
    p.add_argument("--max-upload-mb", type=float, default=8.0, metavar="MB",
                   help="largest file the web chat uploads to the interpreter; at most "
                   "--max-body-mb (default: 8)")  # fmt: skip
    add_kernel_options(p)
    p.add_argument("--no-web", action="store_true", help="serve only the API, no web chat")
    p.set_defaults(func=cmd_serve)

    from .store import add_store_parser

    add_store_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``chatfmt`` command."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except (_UsageError, ChatFmtError, MissingDependencyError) as exc:
        message = " ".join(str(exc).split())
        print(f"chatfmt: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
