"""``chatfmt store``: look into and manage the response store ``chatfmt serve`` keeps.

- ``info``: what it holds (schema version, responses, web conversations, keys, bytes);
- ``delete``: everything one API key stored (its responses and web chat conversations), with
  no copy left on disk, for a user who asks for their data to go;
- ``prune``: apply the age and size limits now (the server applies them as it writes).

``--store`` is the SQLite file or the ``postgresql://`` URL ``chatfmt serve`` was given. The
store is only opened, never created: a path without one, a file that is not one, or a database
holding none, is an error that says so; ``info`` changes nothing (an older schema is not
upgraded). A URL's password is never printed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ChatFmtError

if TYPE_CHECKING:
    from ..store import AdminStorage


def add_store_parser(sub: Any) -> None:
    """The ``store`` command and its subcommands, on the ``chatfmt`` parser's ``sub``."""
    p = sub.add_parser("store", help="inspect the response store, delete a key's data")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help: str) -> argparse.ArgumentParser:
        a: argparse.ArgumentParser = actions.add_parser(name, help=help)
        a.add_argument("--store", metavar="PATH|URL",
                       help="the store's SQLite file or postgresql:// URL (default: the file "
                       "chatfmt serve keeps in the user's data directory)")  # fmt: skip
        a.set_defaults(func=cmd_store)
        return a

    action("info", "what the store holds, as JSON")
    delete = action("delete", "delete everything one API key stored")
    whose = delete.add_mutually_exclusive_group(required=True)
    whose.add_argument("--api-key", action="append", help="the key (repeat for several)")
    whose.add_argument("--api-key-file", metavar="FILE", help="keys, one per line")
    whose.add_argument("--no-key", action="store_true",
                       help="the data of a server that ran without --api-key")  # fmt: skip
    prune = action("prune", "delete what is past an age or size limit now")
    prune.add_argument("--max-age-days", type=float, metavar="DAYS",
                       help="delete rows older than this")  # fmt: skip
    prune.add_argument("--max-mb", type=float, metavar="MB",
                       help="then free space so that the store, its write-ahead log "
                       "included, stays within this much, from the keys that store the most "
                       "(as serve --store-max-mb)")  # fmt: skip


def cmd_store(args: argparse.Namespace) -> int:
    from ..store import (
        PG_SCHEMA_VERSION,
        SCHEMA_VERSION,
        StoreUnavailable,
        is_postgres,
        open_store,
        read_info,
        redact,
        store_version,
    )
    from .options import default_store_path

    location = args.store or default_store_path()
    postgres = is_postgres(location)  # another scheme: an error naming the forms
    path = redact(location)  # what is shown: a URL without its password
    if not postgres and not Path(location).is_file():
        raise ChatFmtError(
            f"no response store at {path}; give the file chatfmt serve keeps with --store PATH"
        )
    version = store_version(location)
    known = PG_SCHEMA_VERSION if postgres else SCHEMA_VERSION
    if version > known:
        raise ChatFmtError(
            f"{path} has schema version {version}, newer than this chatfmt knows "
            f"({known}); use the chatfmt that wrote it"
        )
    if args.action == "info":
        _print_info(read_info(location))
        return 0
    limits: dict[str, float | None] = {"max_age_days": None, "max_mb": None}
    if args.action == "prune":
        for flag, value in (("--max-age-days", args.max_age_days), ("--max-mb", args.max_mb)):
            if value is not None and value <= 0:
                raise ChatFmtError(f"{flag} must be positive, got {value:g}")
        if args.max_age_days is None and args.max_mb is None:
            raise ChatFmtError("give --max-age-days or --max-mb: what to prune")
        limits = {"max_age_days": args.max_age_days, "max_mb": args.max_mb}
    try:
        store = open_store(location, **limits)
    except StoreUnavailable as exc:
        raise ChatFmtError(f"cannot open the response store {path} ({exc.reason})") from None
    try:
        _run(args, store)
    except sqlite3.Error as exc:
        raise ChatFmtError(
            f"the response store {path} could not be changed ({exc}); if a server is writing "
            "to it, run the command again in a moment"
        ) from None
    finally:
        store.close()
    return 0


def _print_info(info: dict[str, Any]) -> None:
    if info["oldest"] is not None:
        oldest = datetime.datetime.fromtimestamp(info["oldest"], datetime.timezone.utc)
        info["oldest"] = oldest.isoformat(timespec="seconds")
    print(json.dumps(info, indent=2))


def _run(args: argparse.Namespace, store: AdminStorage) -> None:
    from ..store import owner_of
    from .options import read_keys

    if args.action == "delete":
        keys: list[str | None] = [None] if args.no_key else list(read_keys(args))
        responses = conversations = 0
        for key in keys:
            r, c = store.delete_owner(owner_of(key))
            responses, conversations = responses + r, conversations + c
        whose = "of the server without keys" if args.no_key else f"of {len(keys)} key(s)"
        print(
            f"deleted {responses} response(s) and {conversations} web chat conversation(s) {whose}"
        )
    else:
        print(f"deleted {store.prune()} row(s) past the limits")
