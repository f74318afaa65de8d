"""How much a small chat is slowed while another client sends a huge request.

    python bench/bench_limits.py [--rounds 3] [--write]

A real uvicorn server (``chatfmt serve``'s options, a scripted engine) in a process of its
own; a client streams small chats and measures the time to the first content token, first
alone (the peer: the same server with nothing else to do), then while a second client sends:

- a 10 MB chunked body over the 8 MiB limit (read up to the limit, answered 413);
- 250,000 messages in a body within a raised limit (read and parsed, answered 400);
- 4,001 long turns within every limit (rendered and tokenized in full, answered 400 by the
  context check).

The tests (``tests/server/test_limits.py``) check that small chats are served meanwhile;
this measures by how much they are slowed: the slowest small chat during each big request
against the slowest alone, in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "server"))

from test_limits import (
    BIG_MESSAGES,
    Beside,
    BigPost,
    chunked,
    messages_body,
    post_head,
    server_process,
    small_chats_beside,
)

from chatfmt.server.http.limits import MIB


def huge_body(port: int) -> BigPost:
    return BigPost(
        port, post_head("/v1/chat/completions", None), chunked(messages_body(BIG_MESSAGES))
    )


def many_messages(port: int) -> BigPost:
    body = messages_body(BIG_MESSAGES)
    return BigPost(port, post_head("/v1/chat/completions", len(body)), body)


def big_render(port: int) -> BigPost:
    text = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 30
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": text} for i in range(4001)]
    body = json.dumps({"messages": turns}).encode()
    return BigPost(port, post_head("/v1/chat/completions", len(body)), body)


CASES: list[tuple[str, dict[str, Any], Callable[[int], BigPost], int]] = [
    ("10 MB chunked body over the limit (413)", {}, huge_body, 413),
    ("250,000 messages, read and parsed (400)", {"max_body_bytes": 32 * MIB}, many_messages, 400),
    ("4,001 long turns rendered in full (400)", {}, big_render, 400),
]


def run_case(limits: dict[str, Any], make: Callable[[int], BigPost], status: int) -> Beside:
    with server_process(**limits) as port:
        big = make(port)
        times = small_chats_beside(port, big)
    assert big.response is not None and big.response.status == status, big.response
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--write", action="store_true", help="write docs/benchmarks.md's section")
    args = ap.parse_args()
    rows = []
    for title, limits, make, status in CASES:
        alone, worst, typical, served = [], [], [], 0
        for _ in range(args.rounds):
            times = run_case(limits, make, status)
            alone.append(times.baseline)
            worst.append(max(times.during, default=0.0))
            typical.append(statistics.median(times.during) if times.during else 0.0)
            served += len(times.during)
        row = (
            f"| {title} | {statistics.median(alone) * 1e3:.1f} ms "
            f"| {statistics.median(typical) * 1e3:.1f} ms "
            f"| {statistics.median(worst) * 1e3:.1f} ms "
            f"| +{(statistics.median(worst) - statistics.median(alone)) * 1e3:.1f} ms "
            f"| {served} |"
        )
        rows.append(row)
        print(row, flush=True)
    body = (
        "A small streamed chat's time to first token while another client sends a huge\n"
        "request, against the same server with nothing else to do (the slowest of 7 small\n"
        f"chats alone), median of {args.rounds} rounds; each round is a fresh server process.\n\n"
        "| big request beside | slowest alone | median during | slowest during | added "
        "(slowest) | small chats during |\n|---|---|---|---|---|---|\n" + "\n".join(rows)
    )
    print(body)
    if args.write:
        from _report import write_section

        write_section("A small chat beside a huge request", body, "bench/bench_limits.py --write")


if __name__ == "__main__":
    main()
