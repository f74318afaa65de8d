"""Render → ids: chatfmt against transformers' apply_chat_template and tiktoken's floor.

Run: .venv/bin/python bench/bench_render.py [--turns 200] [--repeat 20] [--write]

All three work on the same conversation and the same Qwen2.5 vocabulary:
- chatfmt: ``get_dialect("qwen2.5").render(conv, load_tokenizer("qwen2.5"))``, a cold encoder
  every time (no cache), and warm (the per-block cache of a growing chat);
- transformers: ``PreTrainedTokenizerFast`` from the reference ``tokenizer.json`` with the
  official Qwen2.5 chat template, ``apply_chat_template(tokenize=True)``;
- floor: tiktoken ``encode_ordinary`` over the rendered text (no control tokens, one call).
The ids of chatfmt and transformers are checked equal before timing.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
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


def make_conversation(turns: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60)))
        msgs.append({"role": role, "content": text})
    return msgs


def timeit(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()

    import chatfmt
    from chatfmt.segments import BlockEncoder

    conv = make_conversation(args.turns)
    dialect = chatfmt.get_dialect("qwen2.5")
    tok = chatfmt.load_tokenizer("qwen2.5")
    prompt = dialect.render(conv, tok)
    text = prompt.text
    enc = tok.encoding  # type: ignore[attr-defined]

    rows = []
    t_cold = timeit(lambda: dialect.render(conv, tok), args.repeat)
    warm = BlockEncoder(tok)
    t_warm = timeit(lambda: dialect.render(conv, tok, encoder=warm), args.repeat)
    t_floor = timeit(lambda: enc.encode_ordinary(text), args.repeat)
    n_msgs = len(conv)
    rows.append(("chatfmt render→ids (cold, no cache)", t_cold))
    rows.append(("chatfmt render→ids (warm block cache)", t_warm))
    rows.append(("tiktoken encode_ordinary, same text (floor)", t_floor))

    t_hf = None
    tj = SHARED / "assets" / "qwen2.5" / "tokenizer.json"
    template = SHARED / "reference" / "qwen2.5_chat_template.jinja"
    if tj.is_file() and template.is_file():
        from transformers import PreTrainedTokenizerFast

        hf = PreTrainedTokenizerFast(tokenizer_file=str(tj))
        hf.chat_template = template.read_text()

        def hf_render() -> Any:
            return hf.apply_chat_template(conv, tokenize=True, add_generation_prompt=True)

        hf_ids = hf_render()
        hf_ids = list(hf_ids["input_ids"] if hasattr(hf_ids, "keys") else hf_ids)
        assert hf_ids == prompt.ids, "chatfmt and transformers disagree on the ids"
        t_hf = timeit(hf_render, max(3, args.repeat // 4))
        rows.append(("transformers apply_chat_template(tokenize=True)", t_hf))

    lines = [
        f"Conversation: {n_msgs} messages, {len(prompt.ids)} tokens, Qwen2.5 vocabulary. "
        f"Median of {args.repeat} runs.",
        "",
        "| what | time | per message |",
        "|---|---:|---:|",
    ]
    for name, t in rows:
        lines.append(f"| {name} | {t * 1e3:.2f} ms | {t / n_msgs * 1e6:.1f} µs |")
    budget = 1.3 * t_floor + 5e-6 * n_msgs
    lines += [
        "",
        f"- cold render / floor: **{t_cold / t_floor:.2f}×**; target budget "
        f"1.3 × floor + 5 µs/message = {budget * 1e3:.2f} ms → "
        f"{'met' if t_cold <= budget else 'NOT met'} ({t_cold * 1e3:.2f} ms).",
    ]
    if t_hf is not None:
        lines.append(
            f"- transformers / chatfmt cold: **{t_hf / t_cold:.1f}×** faster "
            f"(target ≥ 10×: {'met' if t_hf / t_cold >= 10 else 'NOT met'}); "
            f"warm: {t_hf / t_warm:.0f}×."
        )
    report = "\n".join(lines)
    print(report)
    if args.write:
        write_section("Render → ids", report, "bench/bench_render.py --write")


if __name__ == "__main__":
    main()
