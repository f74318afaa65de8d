"""``chatfmt dataset build`` against a transformers pipeline, in one run: rows/s, tokens/s and
peak memory on generated OpenAI chat conversations (tools, calls, results) for Qwen2.5.

    python bench/bench_dataset.py [--n 100000] [--peer-n N] [--workdir DIR] [--write]

- **chatfmt**: ``chatfmt dataset build IN.jsonl --dialect qwen2.5 --tokenizer qwen2.5
  -o OUT.parquet``, as a user runs it (a process of its own: its peak RSS is its own).
- **transformers**: a ``PreTrainedTokenizerFast`` built from Qwen2.5's ``tokenizer.json`` with
  Qwen2.5's published chat template (``shared/reference``; no hub access), the usual pipeline
  for a template without ``{% generation %}`` markers: ``apply_chat_template`` of the whole
  conversation, and the assistant mask from re-rendering prefixes (for each assistant message,
  the prompt ``messages[:i]`` with the generation prompt, then ``messages[:i+1]``: the tokens
  between are the reply; the ``\\n`` after ``<|im_end|>`` is left out, as chatfmt's rule does).
  Call arguments are parsed to objects first (the template writes ``arguments | tojson``; a
  JSON string would be quoted twice). Streams too: one conversation read, rendered and
  written (Parquet, 1,000-row groups, the same columns) before the next.

Both read the same file; ``--peer-n`` gives the transformers side the first N conversations
only (its prefix re-rendering is quadratic in the turns, and slow on a small machine). The
rows both wrote are compared: how many have the same ``input_ids`` and ``labels``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
TOKENIZER_JSON = SHARED / "assets" / "qwen2.5" / "tokenizer.json"
TEMPLATE = SHARED / "reference" / "qwen2.5_chat_template.jinja"

WORDS = (
    "the weather in city today is sunny cloudy rain wind temperature degrees please tell me "
    "about flight booking hotel price euro dollar time zone meeting schedule report data "
    "summary the of and to a in for on with as by at from check list find show update"
).split()
CITIES = ["Paris", "Berlin", "Tokyo", "Lima", "Oslo", "Cairo", "Quito", "Hanoi", "Zürich"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": "string", "description": f"The {k}."} for k in keys},
                "required": list(keys[:1]),
            },
        },
    }
    for name, desc, keys in (
        ("get_weather", "Get the current weather in a city.", ("city", "unit")),
        ("get_time", "Get the local time in a city.", ("city",)),
        ("search_flights", "Search flights between two cities.", ("origin", "destination")),
        ("convert_currency", "Convert an amount between currencies.", ("amount", "to")),
    )
]


def _text(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))).capitalize() + "."


def conversation(rng: random.Random, k: int) -> dict[str, Any]:
    """One conversation: an optional system prompt, 1-3 rounds, a tool loop in most (one or
    two calls, their results, an answer)."""
    tools = rng.sample(TOOLS, rng.randint(1, 3))
    messages: list[dict[str, Any]] = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": _text(rng, 5, 20)})
    for _ in range(rng.randint(1, 3)):
        messages.append({"role": "user", "content": _text(rng, 4, 40)})
        if rng.random() < 0.7:
            calls = []
            for j in range(rng.randint(1, 2)):
                fn = rng.choice(tools)["function"]
                args = {p: rng.choice(CITIES) for p in fn["parameters"]["properties"]}
                calls.append(
                    {
                        "id": f"call_{k}_{len(messages)}_{j}",
                        "type": "function",
                        "function": {"name": fn["name"], "arguments": json.dumps(args)},
                    }
                )
            messages.append({"role": "assistant", "content": "", "tool_calls": calls})
            for call in calls:
                result = {"result": _text(rng, 3, 25), "ok": True}
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
                )
        messages.append({"role": "assistant", "content": _text(rng, 5, 80)})
    return {"id": f"conv-{k}", "messages": messages, "tools": tools}


def generate(path: Path, n: int) -> None:
    rng = random.Random(26)
    with open(path, "w", encoding="utf-8") as out:
        for k in range(n):
            out.write(json.dumps(conversation(rng, k), ensure_ascii=False) + "\n")


def timed(argv: list[str]) -> tuple[float, int]:
    """Run ``argv``; its wall time and its own peak RSS in bytes (``wait4``: this child's)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{argv[:4]} failed with status {status}")
    return wall, usage.ru_maxrss * 1024


# ==== The transformers side (run as a process of its own: --peer IN OUT N) ====


def peer(source: Path, output: Path, n: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER_JSON))
    tok.chat_template = TEMPLATE.read_text(encoding="utf-8")
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    ints = pa.list_(pa.int32())
    schema = pa.schema(
        [("id", pa.string()), ("input_ids", ints), ("labels", ints), ("num_tokens", pa.int32())]
    )
    writer = pq.ParquetWriter(str(output), schema)
    group: list[dict[str, Any]] = []
    tokens = 0

    def render(messages: list[dict[str, Any]], tools: Any, prompt: bool) -> list[int]:
        ids = tok.apply_chat_template(
            messages, tools=tools, tokenize=True, add_generation_prompt=prompt
        )
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    with open(source, encoding="utf-8") as rows:
        for k, line in enumerate(rows):
            if k >= n:
                break
            row = json.loads(line)
            messages = row["messages"]
            for m in messages:  # the template writes arguments | tojson: give it objects
                for call in m.get("tool_calls") or ():
                    fn = call["function"]
                    fn["arguments"] = json.loads(fn["arguments"])
            tools = row.get("tools")
            ids = render(messages, tools, False)
            labels = [-100] * len(ids)
            for i, m in enumerate(messages):
                if m["role"] != "assistant":
                    continue
                start = len(render(messages[:i], tools, True))
                end = len(render(messages[: i + 1], tools, False))
                while end > start and ids[end - 1] != im_end:
                    end -= 1  # the layout after <|im_end|> is not the model's
                labels[start:end] = ids[start:end]
            tokens += len(ids)
            group.append({"id": row["id"], "input_ids": ids, "labels": labels,
                          "num_tokens": len(ids)})  # fmt: skip
            if len(group) >= 1000:
                writer.write_table(pa.Table.from_pylist(group, schema=schema))
                group = []
    if group:
        writer.write_table(pa.Table.from_pylist(group, schema=schema))
    writer.close()


# ==== The run ====


def _rows(path: Path, limit: int) -> Any:
    import pyarrow.parquet as pq

    seen = 0
    for batch in pq.ParquetFile(str(path)).iter_batches(
        batch_size=1000, columns=["input_ids", "labels"]
    ):
        for ids, labels in zip(
            batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True
        ):
            if seen >= limit:
                return
            seen += 1
            yield ids, labels


def _tokens(path: Path) -> int:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    return int(pc.sum(pq.read_table(str(path), columns=["num_tokens"]).column(0)).as_py())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="conversations (chatfmt's run)")
    ap.add_argument("--peer-n", type=int, help="conversations for transformers (default: --n)")
    ap.add_argument("--workdir", type=Path, help="where the files go (default: a temp dir)")
    ap.add_argument("--write", action="store_true", help="write docs/benchmarks.md's section")
    ap.add_argument("--peer", nargs=3, metavar=("IN", "OUT", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer:
        peer(Path(args.peer[0]), Path(args.peer[1]), int(args.peer[2]))
        return
    peer_n = min(args.peer_n or args.n, args.n)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-dataset-"))
    work.mkdir(parents=True, exist_ok=True)
    source = work / "chats.jsonl"
    if not source.is_file() or sum(1 for _ in open(source, encoding="utf-8")) != args.n:
        generate(source, args.n)
    print(f"{args.n} conversations in {source} ({source.stat().st_size / 2**20:.0f} MiB)")

    ours = work / "chatfmt.parquet"
    cmd = [sys.executable, "-m", "chatfmt.cli", "dataset", "build", str(source),
           "--dialect", "qwen2.5", "--tokenizer", "qwen2.5", "-o", str(ours), "--no-progress",
           "--report", str(work / "report.json")]  # fmt: skip
    c_load = os.getloadavg()[0]
    c_wall, c_rss = timed(cmd)
    c_tokens = _tokens(ours)
    print(f"chatfmt: {args.n} rows in {c_wall:.1f} s, peak RSS {c_rss / 2**20:.0f} MiB")

    theirs = work / "transformers.parquet"
    t_load = os.getloadavg()[0]
    t_wall, t_rss = timed(
        [sys.executable, __file__, "--peer", str(source), str(theirs), str(peer_n)]
    )
    t_tokens = _tokens(theirs)
    print(f"transformers: {peer_n} rows in {t_wall:.1f} s, peak RSS {t_rss / 2**20:.0f} MiB")

    same_ids = same_labels = compared = 0
    for (a_ids, a_labels), (b_ids, b_labels) in zip(
        _rows(ours, peer_n), _rows(theirs, peer_n), strict=True
    ):
        compared += 1
        same_ids += a_ids == b_ids
        same_labels += a_ids == b_ids and a_labels == b_labels

    c_rate, t_rate = args.n / c_wall, peer_n / t_wall
    table = [
        "| pipeline | conversations | wall (s) | rows/s | tokens/s | peak RSS (MiB) |",
        "|---|---:|---:|---:|---:|---:|",
        f"| `chatfmt dataset build` | {args.n:,} | {c_wall:.1f} | {c_rate:,.0f} | "
        f"{c_tokens / c_wall:,.0f} | {c_rss / 2**20:.0f} |",
        f"| transformers `apply_chat_template` + prefix mask | {peer_n:,} | {t_wall:.1f} | "
        f"{t_rate:,.0f} | {t_tokens / t_wall:,.0f} | {t_rss / 2**20:.0f} |",
    ]
    body = "\n".join(
        [
            f"{args.n:,} generated OpenAI chat conversations (1-3 rounds, 1-3 tools each, 70% of "
            "rounds a tool loop of one or two calls, their results and an answer; "
            f"{source.stat().st_size / 2**20:.0f} MiB of JSONL) rendered for `qwen2.5` to "
            "Parquet with labels. Wall time includes starting the process, reading and "
            "writing; peak RSS is each process's own (`wait4`).",
            "",
            *table,
            "",
            f"- chatfmt: {c_rate / t_rate:.1f}x the rows per second of the transformers "
            "pipeline"
            + (
                f" (transformers timed on the first {peer_n:,} conversations only, "
                "--peer-n: its prefix re-rendering is quadratic in the turns)"
                if peer_n < args.n
                else ""
            )
            + ".",
            f"- Measured on {os.cpu_count()} CPU(s), one pipeline after the other, at a load "
            f"average of {c_load:.1f} when chatfmt started and {t_load:.1f} when "
            "transformers did: on a shared machine each saw the share of the CPUs that was "
            "free, so the ratio is indicative."
            + (
                f" At its rate, transformers would take {args.n / t_rate / 60:.0f} min for "
                f"all {args.n:,}."
                if peer_n < args.n
                else ""
            ),
            f"- The rows both wrote ({compared:,}): {same_ids:,} with the same `input_ids`, "
            f"{same_labels:,} with the same `labels` too.",
            "- transformers: `PreTrainedTokenizerFast` from Qwen2.5's `tokenizer.json` with "
            "Qwen2.5's published chat template; the assistant mask by re-rendering prefixes "
            "(the template has no `{% generation %}` markers, so "
            "`return_assistant_tokens_mask` cannot be used), arguments parsed to objects first.",
            "- Both stream (one conversation at a time, Parquet in 1,000-row groups): memory "
            "holds a row group and the pipeline's caches, not the data set.",
        ]
    )
    print(body)
    if args.write:
        sys.path.insert(0, str(ROOT / "bench"))
        from _report import write_section

        command = f"bench/bench_dataset.py --n {args.n}" + (
            f" --peer-n {peer_n}" if peer_n < args.n else ""
        )
        write_section("Training data: chatfmt dataset build", body, command + " --write")


if __name__ == "__main__":
    main()
