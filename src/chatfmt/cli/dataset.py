"""``chatfmt dataset``: training rows, exact ids and loss masks — ``build`` from a chat data
set, ``export`` from the response store.

Reads OpenAI chat JSONL, ShareGPT or Responses API item lists (one conversation per line),
renders each with :class:`~chatfmt.training.TrainingRenderer` and writes Parquet or JSONL
(``docs/training.md``: the rule per family, the columns, packing). Streams: memory holds one
row group, not the data set. Ends with a report (rows, tokens, trained share, what was dropped
and why) on standard error, and as JSON with ``--report FILE``; shows a progress bar on a
terminal when rich (``chatfmt[cli]``) is installed.

``export`` writes the store's served conversations with the ids the model was prompted with
and produced (:mod:`chatfmt.training.export`), rendered only where no ids were kept.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO, Any

from ..dialects import get_dialect
from ..errors import ChatFmtError
from ..store import is_postgres, open_store, owner_of, store_version
from ..tokenizers import load_tokenizer
from ..training import TrainingRenderer
from ..training.build import TRUNCATIONS, Report, build
from ..training.export import META_FIELDS, ExportReport, export
from ..training.sinks import open_sink
from ..training.sources import FORMATS, read_rows
from .options import add_dialect, fail, tokenizer_names


def add_dataset_parser(sub: Any) -> None:
    """The ``dataset`` command and its subcommands, on the ``chatfmt`` parser's ``sub``."""
    p = sub.add_parser("dataset", help="build training data: exact ids and loss masks")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    b = actions.add_parser("build", help="render a chat data set (JSONL) to Parquet or JSONL")
    b.add_argument("input", help="JSONL: OpenAI chat, ShareGPT or Responses API items per line")
    add_dialect(b)
    b.add_argument("--tokenizer", required=True,
                   help=f"the model's tokenizer: a name ({tokenizer_names()}) or the path of "
                   "tokenizer.json, tokenizer.model, *.tiktoken or *.gguf")  # fmt: skip
    b.add_argument("--output", "-o", required=True, metavar="OUT",
                   help="OUT.parquet (needs chatfmt[dataset]) or OUT.jsonl")  # fmt: skip
    b.add_argument("--format", choices=FORMATS, default="auto",
                   help="the input's shape (default: told by each row's keys)")  # fmt: skip
    b.add_argument("--train-on", choices=["all", "last"], default="all",
                   help="train every assistant turn, or the last one alone "
                   "(default: all)")  # fmt: skip
    b.add_argument("--unstable", choices=["error", "skip"], default="error",
                   help="an assistant turn the format's history shows otherwise than the model "
                   "produced it (Qwen3, gpt-oss drop earlier reasoning): stop with an error, or "
                   "leave it untrained and count it (default: error)")  # fmt: skip
    b.add_argument("--no-train-reasoning", action="store_true",
                   help="no loss on the reasoning (thought) of assistant turns")  # fmt: skip
    b.add_argument("--thinking", choices=["on", "off"],
                   help="render with the model's thinking switched on or off (formats with a "
                   "switch; default: the format's own default)")  # fmt: skip
    b.add_argument("--max-length", type=int, metavar="N", help="the most tokens per row")
    b.add_argument("--truncation", choices=TRUNCATIONS, default="drop",
                   help="a conversation over --max-length: drop it, or drop its earliest "
                   "rounds until it fits (never cuts inside a message or a call; default: "
                   "drop)")  # fmt: skip
    b.add_argument("--pack", action="store_true",
                   help="several conversations per row up to --max-length, position_ids "
                   "restarting at each (docs/training.md: which trainers keep them "
                   "apart)")  # fmt: skip
    b.add_argument("--invalid", choices=["error", "drop"], default="error",
                   help="a row that cannot be read or trained: stop with its line number, or "
                   "leave it out and count it (default: error)")  # fmt: skip
    b.add_argument("--lenient", action="store_true",
                   help="check only what rendering needs, not the format's conversation "
                   "rules")  # fmt: skip
    b.add_argument("--row-group-size", type=int, default=1000, metavar="N",
                   help="Parquet rows per row group (memory holds one; default 1000)")  # fmt: skip
    b.add_argument("--report", metavar="FILE", help="also write the report as JSON to FILE")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.set_defaults(func=cmd_dataset)
    add_export_parser(actions)


def cmd_dataset(args: argparse.Namespace) -> int:
    """``chatfmt dataset build``."""
    if args.max_length is not None and args.max_length <= 0:
        fail(f"--max-length must be positive, got {args.max_length}")
    if args.pack and args.max_length is None:
        fail("--pack needs --max-length: the length of the rows it fills")
    if args.row_group_size <= 0:
        fail(f"--row-group-size must be positive, got {args.row_group_size}")
    source = Path(args.input)
    if not source.is_file():
        fail(f"no input file {source}; give the JSONL data set to read")
    output = Path(args.output)
    if output.resolve() == source.resolve():
        fail("--output is the input file; write to another path")
    dialect = get_dialect(args.dialect)
    if args.thinking is not None:
        dialect = dialect.with_reasoning(enabled=args.thinking == "on")
    renderer = TrainingRenderer(
        dialect,
        load_tokenizer(args.tokenizer),
        train_on="all_assistant" if args.train_on == "all" else "last_assistant",
        train_reasoning=not args.no_train_reasoning,
        unstable=args.unstable,
        strict=not args.lenient,
    )
    try:
        sink = open_sink(output, packed=args.pack, row_group_size=args.row_group_size)
    except ValueError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}")
    with open(source, "rb") as raw, _progress(raw, source, args.no_progress) as tick, sink:
        stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
        try:
            report = build(
                read_rows(stream, fmt=args.format, source=source.name),
                renderer,
                sink,
                max_length=args.max_length,
                truncation=args.truncation,
                pack=args.pack,
                invalid=args.invalid,
                progress=tick,
            )
        except UnicodeDecodeError as exc:
            raise ChatFmtError(
                f"{source} is not UTF-8 text (byte {exc.start} of a line); convert it to UTF-8"
            ) from None
    _print_report(report, output)
    if args.report:
        Path(args.report).write_text(json.dumps(report.as_dict(), indent=2) + "\n", "utf-8")
    return 0


class _Ticker:
    """Advances a rich progress bar by the bytes read so far (one call per row)."""

    def __init__(self, raw: IO[bytes], progress: Any, task: Any) -> None:
        self._raw, self._progress, self._task = raw, progress, task
        self._rows = 0

    def __call__(self) -> None:
        self._rows += 1
        if self._rows % 64 == 0:  # a redraw per row would cost more than the row
            self._progress.update(self._task, completed=self._raw.tell())


def _progress(raw: IO[bytes], source: Path, off: bool) -> AbstractContextManager[Any]:
    if off or not sys.stderr.isatty():
        return nullcontext(None)
    try:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )
    except ImportError:  # rich is in chatfmt[cli]; without it the build runs without a bar
        return nullcontext(None)

    class _Bar:
        def __enter__(self) -> _Ticker:
            self._p = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TimeRemainingColumn(),
                transient=True,
            )
            self._p.__enter__()
            task = self._p.add_task(f"rendering {source.name}", total=source.stat().st_size)
            return _Ticker(raw, self._p, task)

        def __exit__(self, *exc: object) -> None:
            self._p.__exit__(None, None, None)

    return _Bar()


def _print_report(report: Report, output: Path) -> None:
    r = report
    lines = [
        f"wrote {r.output_rows} row(s) to {output} from {r.conversations} of "
        f"{r.rows_read} conversation(s)",
        f"tokens: {r.tokens}, trained: {r.trained_tokens} ({r.trained_share:.1%})",
    ]
    if r.shortened:
        lines.append(
            f"shortened to fit: {r.shortened} row(s), {r.turns_dropped} earliest round(s) dropped"
        )
    if r.turns_untrained:
        lines.append(f"assistant turns left untrained (--unstable skip): {r.turns_untrained}")
    for reason, count in r.dropped.counts.most_common():
        lines.append(f"dropped ({reason}): {count}, first at {r.dropped.first[reason]}")
    print("\n".join(lines), file=sys.stderr)


# ==== chatfmt dataset export ====


def add_export_parser(actions: Any) -> None:
    e = actions.add_parser(
        "export", help="the response store's conversations, as served, to Parquet or JSONL"
    )
    e.add_argument("--store", required=True, metavar="PATH_OR_URL",
                   help="the store chatfmt serve keeps: a SQLite file's path or a "
                   "postgresql:// URL")  # fmt: skip
    e.add_argument("--output", "-o", required=True, metavar="OUT",
                   help="OUT.parquet (needs chatfmt[dataset]) or OUT.jsonl")  # fmt: skip
    e.add_argument("--owner", metavar="KEY_OR_HASH",
                   help="one API key's conversations: the key, or its owner hash as the store "
                   "keeps it (32 hex digits); '' for a server without keys "
                   "(default: every key's)")  # fmt: skip
    e.add_argument("--since", metavar="DATE",
                   help="responses created from DATE on (ISO 8601: 2025-05-01 or "
                   "2025-05-01T12:00; UTC unless it names a zone)")  # fmt: skip
    e.add_argument("--until", metavar="DATE",
                   help="responses created before DATE (a day alone: through its "
                   "end)")  # fmt: skip
    e.add_argument("--every-response", action="store_true",
                   help="one row per stored response (its conversation up to it), not only "
                   "each conversation's last")  # fmt: skip
    e.add_argument("--include-web", action="store_true",
                   help="also the web chat's conversations, which keep no ids: rendered "
                   "(needs --dialect and --tokenizer)")  # fmt: skip
    e.add_argument("--dialect", metavar="NAME",
                   help="render the conversations that kept no exact ids with this dialect "
                   "(flagged source=rendered; without it they are skipped and "
                   "counted)")  # fmt: skip
    e.add_argument("--tokenizer", metavar="T",
                   help="the served model's tokenizer, with --dialect")  # fmt: skip
    e.add_argument("--row-group-size", type=int, default=1000, metavar="N",
                   help="Parquet rows per row group (memory holds one; default 1000)")  # fmt: skip
    e.add_argument("--report", metavar="FILE", help="also write the report as JSON to FILE")
    e.set_defaults(func=cmd_export)


def owner_hash(value: str) -> str:
    """The owner string of ``--owner``: a hash as the store keeps it is taken as it is, a key
    is hashed; ``''``: the rows of a server without keys."""
    if value == "" or re.fullmatch(r"[0-9a-f]{32}", value):
        return value
    return owner_of(value)


def parse_date(value: str, option: str, *, end_of_day: bool = False) -> float:
    """``value`` (ISO 8601) as seconds since the epoch, UTC unless it names a zone; a day alone
    with ``end_of_day`` is the start of the next day (``--until`` includes the day)."""
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        fail(f"{option} {value!r} is not a date; write it as 2025-05-01 or 2025-05-01T12:00")
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    if end_of_day and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.strip()):
        when += timedelta(days=1)
    return when.timestamp()


def cmd_export(args: argparse.Namespace) -> int:
    """``chatfmt dataset export``."""
    if args.row_group_size <= 0:
        fail(f"--row-group-size must be positive, got {args.row_group_size}")
    if (args.dialect is None) != (args.tokenizer is None):
        fail("--dialect and --tokenizer go together: the rows without exact ids are rendered "
             "with both (give the served model's dialect and tokenizer)")  # fmt: skip
    if args.include_web and args.dialect is None:
        fail("--include-web needs --dialect and --tokenizer: web conversations keep no ids, "
             "so they are exported rendered")  # fmt: skip
    since = None if args.since is None else parse_date(args.since, "--since")
    until = None if args.until is None else parse_date(args.until, "--until", end_of_day=True)
    location: str = args.store
    if not is_postgres(location) and not Path(location).is_file():
        fail(f"no response store at {location}; give the SQLite file chatfmt serve keeps "
             "(its --store) or a postgresql:// URL")  # fmt: skip
    store_version(location)  # not a store: says so, before anything is written
    renderer = None
    if args.dialect is not None:
        renderer = TrainingRenderer(
            get_dialect(args.dialect), load_tokenizer(args.tokenizer), unstable="skip",
            strict=False,
        )  # fmt: skip
    output = Path(args.output)
    try:
        sink = open_sink(output, packed=False, row_group_size=args.row_group_size,
                         meta_fields=META_FIELDS)  # fmt: skip
    except ValueError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}")
    # No age or size limit: an export reads, it never prunes what it came to read.
    store = open_store(location, max_age_days=None, max_mb=None)
    try:
        with sink:
            report = export(
                store,
                sink,
                renderer=renderer,
                owner=None if args.owner is None else owner_hash(args.owner),
                since=since,
                until=until,
                last_only=not args.every_response,
                include_web=args.include_web,
            )
    finally:
        store.close()
    _print_export_report(report, output)
    if args.report:
        Path(args.report).write_text(json.dumps(report.as_dict(), indent=2) + "\n", "utf-8")
    return 0


def _print_export_report(report: ExportReport, output: Path) -> None:
    r = report
    lines = [
        f"wrote {r.written} row(s) to {output} from {r.read} stored conversation(s): "
        f"{r.exact} exact, {r.rendered} rendered",
        f"tokens: {r.tokens}, trained: {r.trained_tokens} ({r.trained_share:.1%})",
    ]
    if r.replies_untrained:
        lines.append(
            f"replies inside a prompt rendered afresh (in the ids, without loss): "
            f"{r.replies_untrained}"
        )
    if r.no_stop:
        lines.append(
            f"exact rows ending without their last stop token (stored before chatfmt kept it; "
            f"that stop untrained): {r.no_stop}"
        )
    for reason, count in r.skipped.counts.most_common():
        lines.append(f"skipped ({reason}): {count}, first {r.skipped.first[reason]}")
    print("\n".join(lines), file=sys.stderr)
