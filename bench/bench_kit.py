"""Render and stream-parse cost of every dialect, for two source trees side by side.

    python bench/bench_kit.py --before PATH/TO/OLD/CHECKOUT [--rounds 3] [--write]

What a refactor of the dialect kit must not make slower, measured for every registered dialect
(not only those with a vendor reference, as ``bench_dialects.py`` is):

- **render**: ``render_text`` of a 60-message conversation with two tools, calls and their
  results (validation included), CPU time per message;
- **parse**: ``TurnDecoder.feed_text`` over the dialect's own rendering of a long reply (text,
  a thought where the family reasons, and calls), fed in 4-character chunks, CPU time per
  character.

Each tree is measured in a subprocess of its own (its ``src`` first on ``sys.path``); rounds
alternate the trees. A figure is the least CPU time of any run in any round: this machine's
noise (other tenants' CPU) only ever adds time, and comes in bursts longer than a round.
A ratio above 1 is slower than before.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "d",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
    for name in ("get_weather", "get_time")
]
SENTENCE = "The quick brown fox jumps over the lazy dog, naïve café 你好 42. "


def _conversation(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for k in range(turns):
        msgs.append({"role": "user", "content": SENTENCE * 3})
        call = {
            "id": f"call{k:06d}",
            "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
        }
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21 C"})
        msgs.append({"role": "assistant", "content": SENTENCE * 2})
    return msgs


def _measure(src: str, repeat: int) -> dict[str, dict[str, float]]:
    """Runs in the child: the figures of every dialect of the tree at ``src``."""
    sys.path.insert(0, src)
    import chatfmt
    from chatfmt.decoding import TurnDecoder

    conv = _conversation(15)
    out: dict[str, dict[str, float]] = {}
    for name in chatfmt.list_dialects():
        dialect = chatfmt.get_dialect(name)
        try:
            dialect.render_text(conv, tools=TOOLS)
        except Exception:  # a format without tools (Gemma 3): plain turns
            conv_plain = [m for m in conv if m["role"] in ("system", "user")]
            conv_plain = [conv_plain[0]] + [
                x
                for u in conv_plain[1:]
                for x in (u, {"role": "assistant", "content": SENTENCE * 2})
            ]
            render_args: tuple[Any, Any] = (conv_plain, None)
        else:
            render_args = (conv, TOOLS)
        messages = len(render_args[0])

        def render(args: tuple[Any, Any] = render_args, d: Any = dialect) -> None:
            d.render_text(args[0], tools=args[1])

        reply = _reply_text(dialect, render_args)
        parsing = dialect.with_tools(TOOLS) if render_args[1] else dialect

        def parse(d: Any = parsing, text: str = reply) -> None:
            turn = TurnDecoder(d)
            for i in range(0, len(text), 4):
                turn.feed_text(text[i : i + 4])
            turn.finish()

        out[name] = {
            "render_us_per_message": _best(render, repeat) / messages * 1e6,
            "parse_us_per_char": _best(parse, repeat) / max(1, len(reply)) * 1e6,
            "reply_chars": float(len(reply)),
        }
    return out


def _reply_text(dialect: Any, render_args: tuple[Any, Any]) -> str:
    """A long reply as this dialect writes it: its history rendering of an assistant turn
    with text (and a thought and a call where it can), taken after the generation prompt."""
    conv, tools = render_args
    head = [conv[0], {"role": "user", "content": "Go."}]
    reply: dict[str, Any] = {"role": "assistant", "content": SENTENCE * 120}
    if dialect.reasoning != "never":
        reply["reasoning_content"] = SENTENCE * 60
    if tools:
        reply["tool_calls"] = [
            {
                "id": "call000001",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'},
            }
        ]
    prompt = dialect.render_text(head, tools=tools)
    try:
        whole = dialect.render_text([*head, reply], tools=tools, add_generation_prompt=False)
    except Exception:  # a format that refuses a last assistant turn with calls
        reply.pop("tool_calls", None)
        whole = dialect.render_text([*head, reply], tools=tools, add_generation_prompt=False)
    common = 0
    for a, b in zip(prompt, whole, strict=False):
        if a != b:
            break
        common += 1
    return whole[common:]


def _best(fn: Any, repeat: int) -> float:
    """The least CPU time of ``repeat`` runs (after one warm-up): on a shared machine the
    least is the run nothing else slowed."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.thread_time()
        fn()
        times.append(time.thread_time() - start)
    return min(times)


def _run_tree(tree: Path, repeat: int) -> dict[str, dict[str, float]]:
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import bench_kit; "
        "print(json.dumps(bench_kit._measure(sys.argv[2], int(sys.argv[3]))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).resolve().parent), str(tree / "src"),
         str(repeat)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, dict[str, float]] = json.loads(done.stdout)
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="a checkout of the revision to compare with")
    ap.add_argument("--after", default=str(ROOT), help="the tree measured now (default: this)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    ap.add_argument("--before-label", default="OLD_CHECKOUT", help="how --write names it")
    args = ap.parse_args()
    trees = {"before": Path(args.before), "after": Path(args.after)}
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        for label, tree in trees.items():
            runs[label].append(_run_tree(tree, args.repeat))
    names = sorted(set(runs["before"][0]) & set(runs["after"][0]))

    def med(label: str, name: str, key: str) -> float:
        return min(r[name][key] for r in runs[label])

    rows = [
        "| dialect | render µs/message before | after | ratio | parse µs/char before | after "
        "| ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    ratios_r, ratios_p = [], []
    for name in names:
        rb, ra = med("before", name, "render_us_per_message"), med("after", name,
                                                                   "render_us_per_message")
        pb, pa = med("before", name, "parse_us_per_char"), med("after", name, "parse_us_per_char")
        ratios_r.append(ra / rb)
        ratios_p.append(pa / pb)
        rows.append(
            f"| `{name}` | {rb:.1f} | {ra:.1f} | {ra / rb:.2f} | {pb:.3f} | {pa:.3f} | "
            f"{pa / pb:.2f} |"
        )
    gm_r = statistics.geometric_mean(ratios_r)
    gm_p = statistics.geometric_mean(ratios_p)
    rows.append(f"| geometric mean | | | {gm_r:.2f} | | | {gm_p:.2f} |")
    text = "\n".join(rows)
    print(text)
    if args.write:
        from _report import write_section

        write_section(
            "Dialect kit: render and parse, before and after",
            f"CPU time, least of {args.repeat} runs in each of {args.rounds} alternating rounds; "
            "render: `render_text` (validation included) of a 61-message chat with two tools, "
            "15 calls and their results, per message; parse: `TurnDecoder.feed_text` in "
            "4-character chunks over the dialect's own long reply (text, a thought where the "
            "family reasons, a call), per character. `before` is the revision named in the "
            "command.\n\n" + text,
            f"bench/bench_kit.py --before {args.before_label} --rounds {args.rounds} "
            f"--repeat {args.repeat}",
        )


if __name__ == "__main__":
    main()
