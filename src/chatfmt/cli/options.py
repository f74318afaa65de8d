"""What the ``chatfmt`` commands share: usage errors, the engine options of ``chat`` and
``serve``, ``serve``'s server limits, API keys, the store's default path, and tools files.

Every command module (``main``, ``serve``, ``store``) imports from here, never from another
command module, so a command can move without dragging the others along.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ..dialects import DIALECT_CONSTRUCTORS, list_dialects
from ..errors import ChatFmtError
from ..tokenizers import TOKENIZER_CONSTRUCTORS

if TYPE_CHECKING:
    from ..server.http.limits import ServerLimits


#: ``--dialect template``: the model served through its own chat template.
TEMPLATE = "template"


class UsageError(Exception):
    """Bad command-line input; reported as one line with exit status 2."""


def fail(message: str) -> NoReturn:
    raise UsageError(message)


def add_dialect(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``--dialect NAME``; optional for the commands that take a ``--model``, whose own chat
    template tells the dialect when it is left out."""
    # Not a closed choices= list: any registered dialect, plugins included, is accepted, and
    # plugins load only when a command names a dialect. The help lists the registry's table as
    # it is now (every built-in dialect, in its order), so that it never falls behind it.
    default = (
        ""
        if required
        else "; or 'template', the model's own GGUF chat template (default: the dialect the "
        "template is written in, checked against it, else the template itself; qwen2.5 for "
        "the default model)"
    )
    p.add_argument(
        "--dialect",
        required=required,
        type=_dialect_name if required else _model_dialect_name,
        metavar="NAME",
        help=f"chat format to use: a dialect ({', '.join(DIALECT_CONSTRUCTORS)}) or one an "
        f"installed plugin adds{default}",
    )


def tokenizer_names() -> str:
    """The tokenizers known by name, for a help text: read from the registry's table, so that
    the help lists every one."""
    return ", ".join(TOKENIZER_CONSTRUCTORS)


def _model_dialect_name(name: str) -> str:
    return name if name == TEMPLATE else _dialect_name(name)


def _dialect_name(name: str) -> str:
    try:
        known = list_dialects()
    except ChatFmtError as exc:  # a plugin that fails to load: say which
        raise argparse.ArgumentTypeError(str(exc)) from None
    if name not in known:
        raise argparse.ArgumentTypeError(f"unknown dialect {name!r}; available: {', '.join(known)}")
    return name


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """The model and engine options of ``chat`` and ``serve`` (read by :func:`engine_options`)."""
    p.add_argument(
        "--model",
        default="default",
        help="'default' or a path to a GGUF file; with --engine remote, the id shown on "
        "/v1/models (and the tokenizer's name unless --tokenizer is given)",
    )
    add_dialect(p, required=False)
    p.add_argument(
        "--engine",
        choices=["llama-server", "local", "remote"],
        help="llama-server: llama.cpp's server as a managed child, many users at once (the "
        "default); local: the model in this process, one sequence at a time; "
        "remote: a server at --engine-url",
    )
    p.add_argument("--engine-url", help="base URL of a remote /v1/completions server")
    p.add_argument("--engine-api-key", help="bearer token for the remote engine")
    p.add_argument(
        "--tokenizer",
        help="the served model's vocabulary for a remote engine (default: qwen2.5 for the "
        "default model, else the --model path)",
    )
    p.add_argument(
        "--n-ctx",
        type=int,
        help="context length (default: with llama-server, the model's training context where "
        "memory holds its KV cache, else a smaller power of two; in process, the model's, at "
        "most 4096; what a remote engine reports, e.g. vLLM's max_model_len)",
    )


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """The engine options that ``chat`` and ``serve`` share, as keyword arguments of
    :func:`~chatfmt.cli.serve.build_engine`."""
    return {
        "engine": args.engine,
        "engine_url": args.engine_url,
        "tokenizer": args.tokenizer,
        "engine_api_key": args.engine_api_key,
        "n_ctx": args.n_ctx,
    }


def read_keys(args: argparse.Namespace) -> list[str]:
    """The API keys of ``--api-key`` (repeatable) and ``--api-key-file`` (one per line)."""
    keys = list(args.api_key or ())
    if args.api_key_file is not None:
        try:
            lines = Path(args.api_key_file).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            fail(f"--api-key-file {args.api_key_file}: {exc}")
        keys += [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    if any(not k.strip() for k in keys):
        fail("--api-key is empty; give a secret, or leave the option out for no key")
    if args.api_key_file is not None and not keys:
        fail(f"--api-key-file {args.api_key_file} holds no key (one key per line)")
    return keys


def default_store_path() -> str:
    """Where ``chatfmt serve`` keeps responses unless told: the user's data directory."""
    import platformdirs

    return str(Path(platformdirs.user_data_dir("chatfmt")) / "responses.sqlite3")


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
        fail(f"tools file {path} not found")
    spec = importlib.util.spec_from_file_location(f"chatfmt_user_tools_{file.stem}", file)
    if spec is None or spec.loader is None:
        fail(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's file failed: say where, without a traceback
        fail(f"importing {path} failed: {type(exc).__name__}: {exc}")
    registry = getattr(module, "registry", None)
    if isinstance(registry, ToolRegistry):
        return registry
    fns = [v for v in vars(module).values() if callable(v) and hasattr(v, SPEC_ATTR)]
    if not fns:
        fail(f"{path} defines no tools: decorate functions with @chatfmt.tools.tool")
    return ToolRegistry(fns)


def server_limits(args: argparse.Namespace) -> ServerLimits:
    """The server limits the flags ask for (each flag is named in the limit's own errors)."""
    from ..server.http.limits import ServerLimits

    per_client = args.max_connections_per_client
    if per_client < 0:
        raise UsageError(
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
            raise UsageError(f"{flag} must be positive, got {value}")
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
        raise UsageError(str(exc)) from None
