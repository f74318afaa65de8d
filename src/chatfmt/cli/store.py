"""``chatfmt store``: look into and manage the response store ``chatfmt serve`` keeps.

- ``info``: what it holds (schema version, responses, web conversations, keys, bytes);
- ``delete``: everything one API key stored (its responses and web chat conversations), with
  no copy left on disk, for a user who asks for their data to go;
- ``prune``: apply the age and size limits now (the server applies them as it writes).

The store is only opened, never created: a path without one is an error that says so.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

from ..errors import ChatFmtError


def add_store_parser(sub: Any) -> None:
    """The ``store`` command and its subcommands, on the ``chatfmt`` parser's ``sub``."""
    p = sub.add_parser("store", help="inspect the response store, delete a key's data")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help: str) -> argparse.ArgumentParser:
        a: argparse.ArgumentParser = actions.add_parser(name, help=help)
        a.add_argument("--store", metavar="PATH",
                       help="the store's SQLite file (default: the one chatfmt serve keeps in "
                       "the user's data directory)")  # fmt: skip
        a.set_defaults(func=cmd_store)
        return a

    action("info", "what the store holds, as JSON")
    delete = action("delete", "delete everything one API key stored")
    whose = delete.add_mutually_exclusive_group(required=True)
    whose.add_argument("--api-key", action="append", help="the key (repeat for several)")
    whose.add_argument("--api-key-file", metavar="FILE", help="keys, one per line")
    whose.add_argument("--no-key", action="store_true",
                       help="the data of a server that ran without --api-key")  # fmt: skip
    prune = action("prune", "delete what is past the age and size limits now")
    prune.add_argument("--max-age-days", type=float, default=30.0, metavar="DAYS",
                       help="delete rows older than this (default: 30, as serve)")  # fmt: skip
    prune.add_argument("--max-mb", type=float, default=0.0, metavar="MB",
                       help="then delete the oldest past this much data (default: 0, no "
                       "limit)")  # fmt: skip


def cmd_store(args: argparse.Namespace) -> int:
    from ..server.store import ResponseStore, owner_of
    from .main import default_store_path, read_keys

    path = Path(args.store or default_store_path())
    if not path.is_file():
        raise ChatFmtError(
            f"no response store at {path}; give the file chatfmt serve keeps with --store PATH"
        )
    if args.action == "prune":
        store = ResponseStore(path, max_age_days=args.max_age_days, max_mb=args.max_mb or None)
    else:
        store = ResponseStore(path, max_age_days=None)
    try:
        if args.action == "info":
            info = store.info()
            if info["oldest"] is not None:
                oldest = datetime.datetime.fromtimestamp(info["oldest"], datetime.timezone.utc)
                info["oldest"] = oldest.isoformat(timespec="seconds")
            for limit in ("max_age_days", "max_mb"):
                info.pop(limit)
            print(json.dumps(info, indent=2))
        elif args.action == "delete":
            keys: list[str | None] = [None] if args.no_key else list(read_keys(args))
            responses = conversations = 0
            for key in keys:
                r, c = store.delete_owner(owner_of(key))
                responses, conversations = responses + r, conversations + c
            whose = "the keyless server's" if args.no_key else f"{len(keys)} key(s)'"
            print(
                f"deleted {responses} response(s) and {conversations} web chat "
                f"conversation(s): {whose} data"
            )
        else:
            print(f"deleted {store.prune()} row(s) past the limits")
    finally:
        store.close()
    return 0
