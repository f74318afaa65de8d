"""Streaming parse cost per token, against a re-parse-per-delta parser; count/fit vs re-render.

Run: .venv/bin/python bench/bench_stream.py [--write]

Streaming: model output of 1k, 10k and 100k tokens (plain text, and one tool call whose
arguments span the whole output) is fed one token id at a time to
``tokenizer.decoder()`` + ``dialect.stream_parser()``. The peer is the approach many servers
take: keep the decoded text so far and run the whole-output parser on it after every delta.
At 100k tokens the peer is too slow to run to the end (quadratic), so its per-step cost is
measured on the last steps only.

Budget: ``Budget.count`` / ``Budget.fit`` on a 1,000-message conversation with a warm block
cache (a chat that grew turn by turn) against rendering and encoding it from scratch.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import write_section

import chatfmt
from chatfmt.context import Budget
from chatfmt.decoding import ControlSplitter
from chatfmt.segments import BlockEncoder

SENTENCE = "The quick brown fox jumps over the lazy dog; 北京的天气很好 naïve café 42. "


def make_output(tok: chatfmt.Tokenizer, n: int, kind: str) -> list[int]:
    body = tok.encode_text(SENTENCE * (n // 10 + 2))[:n]
    if kind == "text":
        return body
    text = tok.decode(body).replace("\\", " ").replace('"', " ")
    call = (
        '<tool_call>\n{"name": "write_file", "arguments": {"text": "' + text + '"}}\n</tool_call>'
    )
    splitter = ControlSplitter(list(tok.controls))
    ids: list[int] = []
    for piece in [*splitter.feed(call), *splitter.flush()]:
        ids.extend(
            [tok.control_id(piece.token)] if not isinstance(piece, str) else tok.encode_text(piece)
        )
    return ids


def stream_cost(dialect: chatfmt.Dialect, tok: chatfmt.Tokenizer, ids: list[int]) -> float:
    """Per-token cost of the decode pipeline as the server and agent run it: one id per step
    through :class:`chatfmt.TurnDecoder` (decoder, stop handling, parser)."""
    t0 = time.perf_counter()
    turn = chatfmt.TurnDecoder(dialect, tok)
    for i in ids:
        turn.feed_ids((i,))
    turn.finish()
    turn.result()
    return (time.perf_counter() - t0) / len(ids)


def decode_cost(tok: chatfmt.Tokenizer, ids: list[int]) -> float:
    """The decoder's share: ids to text pieces, no parsing."""
    t0 = time.perf_counter()
    dec = tok.decoder()
    for i in ids:
        dec.feed(i)
    dec.flush()
    return (time.perf_counter() - t0) / len(ids)


def reparse_cost(
    dialect: chatfmt.Dialect, tok: chatfmt.Tokenizer, ids: list[int], last: int | None
) -> float:
    """Per-delta cost of re-parsing the whole text so far (only the last ``last`` steps timed)."""
    dec = tok.decoder()
    text = ""
    start = 0 if last is None else max(0, len(ids) - last)
    for i in ids[:start]:
        for p in dec.feed(i):
            text += p if isinstance(p, str) else p.token
    t0 = time.perf_counter()
    for i in ids[start:]:
        for p in dec.feed(i):
            text += p if isinstance(p, str) else p.token
        dialect.parse(text)
    return (time.perf_counter() - t0) / (len(ids) - start)


def bench_streaming(rows: list[str]) -> None:
    dialect = chatfmt.get_dialect("qwen2.5")
    tok = chatfmt.load_tokenizer("qwen2.5")
    for kind in ("text", "tool call"):
        for n in (1_000, 10_000, 100_000):
            ids = make_output(tok, n, "text" if kind == "text" else "call")
            ours = min(stream_cost(dialect, tok, ids) for _ in range(3))
            decode = min(decode_cost(tok, ids) for _ in range(3))
            last = None if n <= 10_000 else 20
            peer = reparse_cost(dialect, tok, ids, last)
            note = "" if last is None else " (last 20 steps)"
            rows.append(
                f"| {kind} | {len(ids):,} | {ours * 1e6:.2f} µs | {(ours - decode) * 1e6:.2f} µs "
                f"| {peer * 1e6:,.0f} µs{note} "
                f"| {peer / ours:,.0f}× |"
            )
            print(rows[-1], flush=True)


def bench_budget(lines: list[str]) -> None:
    dialect = chatfmt.get_dialect("qwen2.5")
    tok = chatfmt.load_tokenizer("qwen2.5")
    msgs = [{"role": "system", "content": "You are helpful."}]
    for i in range(1000):
        role = "user" if i % 2 == 0 else "assistant"
        msgs.append({"role": role, "content": f"message {i}: " + SENTENCE * (1 + i % 4)})
    enc = BlockEncoder(tok)
    budget = Budget(dialect, tok, encoder=enc)
    budget.count(msgs)  # the chat grew turn by turn: its blocks are already encoded
    msgs.append({"role": "user", "content": "one more question"})
    # An application holding the chat keeps Message objects; dicts are converted on each call.
    held = chatfmt.from_openai(msgs)

    def timed(fn: object, repeat: int = 5) -> float:
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()  # type: ignore[operator]
            best = min(best, time.perf_counter() - t0)
        return best

    t_rerender = timed(lambda: dialect.render(msgs, tok, encoder=BlockEncoder(tok)))
    t_count = timed(lambda: budget.count(msgs))

    def append_once() -> float:
        budget.count(held[:-1])  # the chat as it was before the new message
        t0 = time.perf_counter()
        budget.count(held)
        return time.perf_counter() - t0

    append_once()
    t_count_held = min(append_once() for _ in range(5))
    full = budget.count(msgs)
    t_fit = timed(lambda: budget.fit(msgs, context=full // 2, reserve=256))
    lines += [
        f"1,001-message conversation ({full:,} tokens), after one new message:",
        "",
        "| what | time |",
        "|---|---:|",
        f"| re-render and encode from scratch (peer) | {t_rerender * 1e3:.1f} ms |",
        f"| `Budget.count`, conversation given as OpenAI dicts (converted each call) "
        f"| {t_count * 1e3:.1f} ms ({t_rerender / t_count:.0f}× faster) |",
        f"| `Budget.count` after appending one `Message` to the chat it counted before "
        f"(incremental) | {t_count_held * 1e3:.2f} ms ({t_rerender / t_count_held:.0f}× faster) |",
        f"| `Budget.fit` to half the tokens (warm) | {t_fit * 1e3:.1f} ms "
        f"({t_rerender / t_fit:.1f}× faster) |",
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    rows = [
        "Qwen2.5 dialect and vocabulary; one token id per step through `TurnDecoder` (the "
        "tokenizer's stream decoder, stop handling and the dialect's parser).",
        "",
        "| output | tokens | chatfmt per token | beyond decoding | re-parse per delta (peer) "
        "| ratio |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    bench_streaming(rows)
    budget_lines: list[str] = []
    bench_budget(budget_lines)
    print("\n".join(budget_lines))
    if args.write:
        write_section("Streaming parse", "\n".join(rows), "bench/bench_stream.py --write")
        write_section("Count and fit", "\n".join(budget_lines), "bench/bench_stream.py --write")


if __name__ == "__main__":
    main()
