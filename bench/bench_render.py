"""Render → ids: the server's path against tiktoken's floor, cold and for a returning chat.

Run: .venv/bin/python bench/bench_render.py [--rounds 5] [--repeat 15] [--write]

Two conversations, Qwen2.5 dialect and vocabulary:

- a tool-heavy chat (203 messages: 8 tools, calls and their results), sent as a server gets it:
  the OpenAI request dict → ``ChatCompletionRequest`` → ``ChatService.prepare`` → prompt ids
  (a fake engine: no generation, no grammar). Timed: **cold** (a fresh service: nothing cached),
  **cold, tools known** (a service that served another conversation with the same tools) and
  **returning** (the previous request's 201 messages were served; now the same history, the
  reply and one new user message come back as new JSON). The floor: tiktoken
  ``encode_ordinary`` over the prompt's text (no control tokens, one call).
- a plain chat (201 messages of text) through ``dialect.render``, against transformers'
  ``apply_chat_template(tokenize=True)`` where the reference tokenizer is present.

Times are the thread's CPU time (``time.thread_time``: what a request costs the server, and
steady on a shared machine), median of ``--repeat`` runs; rounds alternate the measurements and
the figures are medians over the rounds. ``--clock wall`` times wall-clock instead. The ids
are checked equal to an uncached ``dialect.render`` before timing. The caches' worst-case
memory (tracemalloc) is measured after filling them past their bounds.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import write_section  # noqa: E402

WORDS = (
    "the model renders every conversation to exact token ids, parses tool calls, streams "
    "events and keeps long chats inside the context window; 北京 天气 données naïve 😀 42 3.14"
).split()

CLOCK: Callable[[], float] = time.thread_time


def make_conversation(turns: int, seed: int = 0) -> list[dict[str, Any]]:
    """A plain chat: a system message and ``turns`` alternating user / assistant texts."""
    rng = random.Random(seed)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60)))
        msgs.append({"role": role, "content": text})
    return msgs


def make_tools(n: int = 8) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{k}",
                "description": f"Looks up thing {k} for a city and returns what it found",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "description": "The city"},
                        "n": {"type": "integer", "description": "How many"},
                        "unit": {"type": "string", "enum": ["c", "f"]},
                    },
                    "required": ["city"],
                },
            },
        }
        for k in range(n)
    ]


def make_tool_chat(seed: int = 0) -> list[dict[str, Any]]:
    """203 messages: turns of a question, one or two calls, their results and an answer (or a
    plain exchange); the last three are a user message, the reply and the next user message."""
    rng = random.Random(seed)

    def text(lo: int, hi: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))

    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    calls = 0
    left = 199  # turns of 2, 4 or 5 messages up to 200, never leaving 1 or 3
    while left:
        size = rng.choice([s for s in (2, 4, 5) if s <= left and left - s not in (1, 3)])
        left -= size
        msgs.append({"role": "user", "content": text(10, 60)})
        if size > 2:
            made = []
            for _ in range(size - 3):
                calls += 1
                args = {"city": rng.choice(WORDS), "n": rng.randint(0, 99)}
                made.append(
                    {
                        "id": f"call_{calls}",
                        "type": "function",
                        "function": {
                            "name": f"tool_{rng.randrange(8)}",
                            "arguments": json.dumps(args, ensure_ascii=False),
                        },
                    }
                )
            msgs.append({"role": "assistant", "content": None, "tool_calls": made})
            for call in made:
                msgs.append({"role": "tool", "tool_call_id": call["id"], "content": text(5, 40)})
        msgs.append({"role": "assistant", "content": text(10, 60)})
    msgs.append({"role": "user", "content": text(10, 60)})
    msgs.append({"role": "assistant", "content": text(10, 60)})
    msgs.append({"role": "user", "content": text(10, 60)})
    return msgs


def timeit(fn: Callable[[], object], repeat: int) -> float:
    """Median time of ``fn()``, after a warm-up run."""
    return timeit_with(lambda _arg: fn(), repeat, lambda: None)


def timeit_with(fn: Callable[[Any], object], repeat: int, setup: Callable[[], Any]) -> float:
    """Median time of ``fn(setup())``, ``setup`` untimed, after a warm-up run. The garbage
    of the setup (a whole cold render, for a returning request) is collected before the
    clock starts, so that its collection is not charged to the request timed after it."""
    samples = []
    for _ in range(repeat + 1):
        arg = setup()
        gc.collect()
        t0 = CLOCK()
        fn(arg)
        samples.append(CLOCK() - t0)
    return statistics.median(samples[1:])


def fresh_json(body: dict[str, Any]) -> dict[str, Any]:
    """The body as a server parses it: new objects each time, as JSON off the wire."""
    parsed: dict[str, Any] = json.loads(json.dumps(body))
    return parsed


class ServerPath:
    """ChatService.prepare on a fake engine: the request → conversation → render path."""

    def __init__(self, tok: Any, dialect: Any) -> None:
        from chatfmt.engines.fake import FakeEngine
        from chatfmt.server.chat.schemas import ChatCompletionRequest
        from chatfmt.server.chat.service import ChatService

        self.tok, self.dialect = tok, dialect
        self.request = ChatCompletionRequest
        self.engine = FakeEngine(tok, context_length=1 << 20)
        self.service_class = ChatService

    def service(self) -> Any:
        return self.service_class(self.engine, self.dialect, model_name="bench")

    def prepare(self, service: Any, body: dict[str, Any]) -> list[int]:
        ids: list[int] = service.prepare(self.request.model_validate(body)).prompt_ids
        return ids


def cache_memory(path: ServerPath, seed: int = 1) -> list[str]:
    """Fill one service's caches past their bounds with distinct conversations; the memory
    they hold (tracemalloc: what stays allocated after the requests' own objects are gone)."""
    try:
        from chatfmt import render_cache as rc
    except ImportError:
        return []
    tools = make_tools()
    service = path.service()
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    rng = random.Random(seed)
    sent_chars = 0
    n_conv = 0
    peak_held = 0
    # Long distinct messages (4,000 characters) and calls: each cache meets its size bound.
    while sent_chars < 3 * 4 * max(rc.RENDER_TOKENS, service._encoder.max_tokens):
        msgs: list[dict[str, Any]] = [{"role": "system", "content": f"conv {n_conv}"}]
        for k in range(40):
            text = " ".join(rng.choice(WORDS) for _ in range(400))
            msgs.append({"role": "user" if k % 2 == 0 else "assistant", "content": text})
            sent_chars += len(text)
        path.prepare(service, {"model": "m", "messages": msgs, "tools": tools})
        n_conv += 1
        if n_conv % 10 == 0:
            gc.collect()
            peak_held = max(peak_held, tracemalloc.get_traced_memory()[0] - base)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    peak_held = max(peak_held, held)
    tracemalloc.stop()
    c_entries, c_size = service._conversations.size
    enc = service._encoder
    return [
        "",
        f"- Cache bounds (least recently used first out): requests {rc.RENDER_ENTRIES} / "
        f"{rc.RENDER_TOKENS:,} (prompt ids plus a quarter of the messages' characters); tool "
        f"lists {rc.TOOLS_ENTRIES} / {rc.TOOLS_CHARS:,} characters of JSON; the block encoder "
        f"(as before, now also bounded by size) {enc.max_entries:,} blocks / {enc.max_tokens:,}"
        " (ids plus a quarter of the blocks' characters).",
        f"- Worst case, measured: {n_conv} distinct 41-message conversations of 4,000-character "
        f"messages ({sent_chars / 1e6:.0f} M characters sent, well past the bounds) leave "
        f"**{held / 2**20:.0f} MiB** held by one service's caches (at most "
        f"{peak_held / 2**20:.0f} MiB on the way; tracemalloc, non-ASCII text at 4 bytes a "
        f"character); then: {c_entries} requests / {c_size:,}, {enc.size[0]:,} blocks / "
        f"{enc.size[1]:,}.",
    ]


def stages(
    args: argparse.Namespace, dialect: Any, tok: Any, body: dict[str, Any], text: str
) -> list[str]:
    """Where a cold render's time goes, stage by stage (each timed alone)."""
    from chatfmt.messages import Tool, as_conversation, from_openai
    from chatfmt.segments import BlockEncoder
    from chatfmt.server.chat.schemas import ChatCompletionRequest

    enc = tok.encoding
    conv = as_conversation(body["messages"], body["tools"])
    blocks = dialect.render_blocks(conv)
    repeat = args.repeat
    rounds = []
    for _ in range(args.rounds):  # each stage beside the floor, round after round
        rounds.append(
            {
                "floor": timeit(lambda: enc.encode_ordinary(text), repeat),
                "request": timeit_with(ChatCompletionRequest.model_validate, repeat, lambda: body),
                "messages": timeit_with(lambda b: from_openai(b["messages"]), repeat, lambda: body),
                "tools": timeit(lambda: [Tool(definition=t) for t in body["tools"]], repeat),
                "validate": timeit(lambda: dialect.validate(conv), repeat),
                "render_blocks": timeit(lambda: dialect.render_blocks(conv), repeat),
                "encode": timeit(lambda: BlockEncoder(tok).encode(blocks), repeat),
            }
        )
    times = {k: statistics.median(x[k] for x in rounds) for k in rounds[0]}
    share = {k: statistics.median(x[k] / x["floor"] for x in rounds) for k in rounds[0]}
    shown = [
        ("`ChatCompletionRequest.model_validate` (the body)", "request"),
        ("`from_openai`: dicts → `Message`s", "messages"),
        ("tools → `Tool`s", "tools"),
        ("`dialect.validate`", "validate"),
        ("`dialect.render_blocks` (the dialect's own code)", "render_blocks"),
        (f"`BlockEncoder.encode`: {len(blocks)} blocks, one tokenizer call per text", "encode"),
    ]
    return [
        "",
        "A cold render by stage (each timed alone, this build, medians over the rounds; the "
        "rest of `prepare` and the garbage collector make up the difference):",
        "",
        "| stage | time | / floor |",
        "|---|---:|---:|",
        *(f"| {label} | {times[k] * 1e3:.2f} ms | {share[k]:.2f}× |" for label, k in shown),
    ]


def tool_chat_rows(args: argparse.Namespace) -> list[str]:
    import chatfmt

    tok = chatfmt.load_tokenizer("qwen2.5")
    dialect = chatfmt.get_dialect("qwen2.5")
    enc = tok.encoding  # type: ignore[attr-defined]
    msgs, tools = make_tool_chat(), make_tools()
    body = {"model": "m", "messages": msgs, "tools": tools}
    previous = {"model": "m", "messages": msgs[:201], "tools": tools}
    other = {"model": "m", "messages": make_tool_chat(seed=7)[:120], "tools": tools}
    path = ServerPath(tok, dialect)

    reference = dialect.render(msgs, tok, tools=tools)
    text = reference.text
    service = path.service()
    assert path.prepare(service, fresh_json(body)) == reference.ids, "cold ids differ"
    warm = path.service()
    path.prepare(warm, fresh_json(previous))
    assert path.prepare(warm, fresh_json(body)) == reference.ids, "returning ids differ"

    def cold_setup() -> tuple[Any, dict[str, Any]]:
        return path.service(), fresh_json(body)

    def known_tools_setup() -> tuple[Any, dict[str, Any]]:
        service = path.service()
        path.prepare(service, fresh_json(other))
        return service, fresh_json(body)

    def returning_setup() -> tuple[Any, dict[str, Any]]:
        service = path.service()
        path.prepare(service, fresh_json(previous))
        return service, fresh_json(body)

    def run(arg: tuple[Any, dict[str, Any]]) -> None:
        path.prepare(*arg)

    rounds: list[dict[str, float]] = []
    for r in range(args.rounds):
        order: list[tuple[str, Callable[[], float]]] = [
            ("floor", lambda: timeit(lambda: enc.encode_ordinary(text), args.repeat)),
            ("cold", lambda: timeit_with(run, args.repeat, cold_setup)),
            ("known", lambda: timeit_with(run, args.repeat, known_tools_setup)),
            ("returning", lambda: timeit_with(run, args.repeat, returning_setup)),
        ]
        if r % 2:
            order.reverse()  # alternate, so that a slow spell does not hit one figure only
        rounds.append({name: measure() for name, measure in order})
        print(
            f"round {r + 1}: "
            + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in sorted(rounds[-1].items())),
            file=sys.stderr,
        )

    def med(key: str) -> float:
        return statistics.median(x[key] for x in rounds)

    def ratio(a: str, b: str) -> float:
        return statistics.median(x[a] / x[b] for x in rounds)

    def spread(a: str, b: str) -> str:
        each = [x[a] / x[b] for x in rounds]
        return f"rounds {min(each):.2f}–{max(each):.2f}"

    n = len(msgs)
    clock = "CPU" if CLOCK is time.thread_time else "wall-clock"
    figures = {
        "floor": med("floor"),
        "cold": med("cold"),
        "known": med("known"),
        "returning": med("returning"),
        "cold/floor": ratio("cold", "floor"),
        "known/floor": ratio("known", "floor"),
        "returning/cold": ratio("returning", "cold"),
    }
    if args.save:
        Path(args.save).write_text(json.dumps(figures, indent=1))
    before: dict[str, float] = json.loads(Path(args.before).read_text()) if args.before else {}

    def row(label: str, key: str, shown: str) -> str:
        ms = f"{figures[key] * 1e3:.2f} ms"
        if not before:
            return f"| {label} | {ms} | {shown} |"
        old = f"{before[key] * 1e3:.2f} ms" if key in before else "–"
        return f"| {label} | {old} | {ms} | {shown} |"

    def ratios(key: str) -> str:
        if not before:
            return f"{figures[key]:.2f}×"
        return f"{before[key]:.2f}× → **{figures[key]:.2f}×**"

    head = "| what | before | after | ratio |" if before else "| what | time | ratio |"
    lines = [
        f"Tool-heavy chat: {n} messages ({sum(1 for m in msgs if m.get('tool_calls'))} with "
        f"calls, {sum(1 for m in msgs if m['role'] == 'tool')} results), {len(tools)} tools, "
        f"{len(reference.ids)} tokens. The server's path: request dict → `ChatCompletionRequest` "
        f"→ `ChatService.prepare` → prompt ids. Thread {clock} time, median of {args.repeat} "
        f"runs, median of {args.rounds} alternating rounds.",
        "",
        head,
        "|---|---:|" + ("---:|" if before else "") + "---:|",
        row("tiktoken encode_ordinary, the prompt's text (floor)", "floor", ""),
        row("cold: a fresh service, nothing cached", "cold", ratios("cold/floor") + " floor"),
        row(
            "cold conversation, tools known (another chat with them served before)",
            "known",
            ratios("known/floor") + " floor",
        ),
        row(
            "returning: the previous request (201 messages) served; now the same history, "
            "the reply and a new user message",
            "returning",
            ratios("returning/cold") + " cold",
        ),
        "",
        f"- cold / floor: **{figures['cold/floor']:.3f}×** (target ≤ 1.4×: "
        f"{'met' if figures['cold/floor'] <= 1.4 else 'NOT met'}; {spread('cold', 'floor')}).",
        f"- returning / cold: **{figures['returning/cold']:.3f}×** (target ≤ 0.2×: "
        f"{'met' if figures['returning/cold'] <= 0.2 else 'NOT met'}; "
        f"{spread('returning', 'cold')}).",
    ]
    lines += [
        "",
        "What the server keeps between requests (`chatfmt.render_cache`, bounded, below): each "
        "tool list's checked `Tool`s, keyed by its JSON text (so the block that renders them is "
        "the same and its ids come from the block encoder's cache: the tools are encoded once "
        "per distinct set); the last requests' messages and prompts. A request that starts with "
        "a stored one (equal dicts, whose text fields were all strings) reuses its `Message`s "
        "and, where the dialect renders turns independently, re-renders only the last turn and "
        "what follows (`context.render_extension`, Budget's incremental render); the whole "
        "conversation is still validated, so errors are those of an uncached render. OpenAI "
        "dicts that are plainly well-formed become `Message`s without pydantic "
        "(`message_from_openai_fast`; anything else takes the validating path). Ids equal an "
        "uncached render's: property tests over seven dialects with small cache bounds "
        "(tests/test_render_cache.py, tests/server/test_render_caches.py).",
        "",
        "Cold is not within 1.4× of the floor: the tokenizer calls alone (one per text run, as "
        "exactness needs) cost more than the floor, and the dialect's own `render_blocks` "
        "about half of it (stages below). Gone already: pydantic on every message and on the "
        "request's messages, the tools checked three times and written as JSON on every "
        "request, the conversation validated twice. One tokenizer call for all of a render's "
        "runs (joined at a control token none holds) was tried and measured slower: tiktoken "
        "then scans the joined text for special tokens. Going further needs less Python work "
        "per message in conversion and rendering (Qwen2.5 parses and re-serialises each "
        "call's arguments).",
    ]
    lines += stages(args, dialect, tok, body, text)
    if not args.no_memory:
        lines += cache_memory(path)
    return lines


def plain_chat_rows(args: argparse.Namespace) -> list[str]:
    import chatfmt
    from chatfmt.segments import BlockEncoder

    conv = make_conversation(args.turns)
    dialect = chatfmt.get_dialect("qwen2.5")
    tok = chatfmt.load_tokenizer("qwen2.5")
    prompt = dialect.render(conv, tok)
    text = prompt.text
    enc = tok.encoding  # type: ignore[attr-defined]
    warm = BlockEncoder(tok)
    dialect.render(conv, tok, encoder=warm)
    rounds: list[dict[str, float]] = []
    for _ in range(args.rounds):
        rounds.append(
            {
                "cold": timeit(lambda: dialect.render(conv, tok), args.repeat),
                "warm": timeit(lambda: dialect.render(conv, tok, encoder=warm), args.repeat),
                "floor": timeit(lambda: enc.encode_ordinary(text), args.repeat),
            }
        )
    t_cold, t_warm, t_floor = (statistics.median(x[k] for x in rounds) for k in rounds[0])
    n_msgs = len(conv)
    rows = [
        ("chatfmt render→ids (cold, no cache)", t_cold),
        ("chatfmt render→ids (warm block cache)", t_warm),
        ("tiktoken encode_ordinary, same text (floor)", t_floor),
    ]
    t_hf = None
    tj = SHARED / "assets" / "qwen2.5" / "tokenizer.json"
    template = SHARED / "reference" / "qwen2.5_chat_template.jinja"
    if tj.is_file() and template.is_file() and not args.no_transformers:
        from transformers import PreTrainedTokenizerFast

        hf = PreTrainedTokenizerFast(tokenizer_file=str(tj))  # type: ignore[no-untyped-call]
        hf.chat_template = template.read_text()

        def hf_render() -> Any:
            return hf.apply_chat_template(conv, tokenize=True, add_generation_prompt=True)

        hf_ids = hf_render()
        hf_ids = list(hf_ids["input_ids"] if hasattr(hf_ids, "keys") else hf_ids)
        assert hf_ids == prompt.ids, "chatfmt and transformers disagree on the ids"
        t_hf = timeit(hf_render, max(3, args.repeat // 4))
        rows.append(("transformers apply_chat_template(tokenize=True)", t_hf))
    lines = [
        f"Plain chat: {n_msgs} messages of text, {len(prompt.ids)} tokens, "
        "`dialect.render` on messages as OpenAI dicts.",
        "",
        "| what | time | per message |",
        "|---|---:|---:|",
    ]
    for name, t in rows:
        lines.append(f"| {name} | {t * 1e3:.2f} ms | {t / n_msgs * 1e6:.1f} µs |")
    lines += ["", f"- cold render / floor: **{t_cold / t_floor:.2f}×**."]
    if t_hf is not None:
        lines.append(
            f"- transformers / chatfmt cold: **{t_hf / t_cold:.1f}×** faster; warm: "
            f"{t_hf / t_warm:.0f}×."
        )
    return lines


def main() -> None:
    global CLOCK
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--no-memory", action="store_true", help="skip the cache memory fill")
    ap.add_argument("--no-transformers", action="store_true")
    ap.add_argument("--save", help="write the tool-heavy figures to this JSON file")
    ap.add_argument("--before", help="figures saved by --save, shown as 'before'")
    ap.add_argument("--only-tools", action="store_true", help="the tool-heavy chat only")
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()
    if args.clock == "wall":
        CLOCK = time.perf_counter

    load = os.getloadavg()[0]
    lines = tool_chat_rows(args)
    if not args.only_tools:
        lines += ["", *plain_chat_rows(args)]
    lines += [
        "",
        f"Load average (1 min) at the start and the end of this run: {load:.1f}, "
        f"{os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs).",
    ]
    if args.before:
        lines.append(
            "Before: this script on the render path as it was before the render caches "
            "(5aaa7d0; the commits between it and them touch none of it), "
            "`PYTHONPATH=<that tree>/src .venv/bin/python bench/bench_render.py --only-tools "
            "--no-memory --save before.json`, run just before this one."
        )
    report = "\n".join(lines)
    print(report)
    if args.write:
        before = " --before before.json" if args.before else ""
        write_section("Render → ids", report, f"bench/bench_render.py{before} --write")


if __name__ == "__main__":
    main()
