"""A returning conversation and the engine's prompt cache: continued on its exact ids (the
Responses API's ``previous_response_id``) against re-sent as messages and rendered again (chat
completions, as every OpenAI-compatible server receives a conversation).

    python bench/bench_continuation.py [--cities 6] [--write]

One ``chatfmt serve --parallel 1`` on the default model per client (a fresh engine each, so
neither inherits the other's cache), greedy. The conversation is a tool loop: the user asks
for the weather in a city, the model calls ``get_weather`` (as this model does: often bare
JSON rather than ``<tool_call>`` tags), the client sends the result, the model answers; then
the next city. For every request: prompt tokens, the tokens the engine reports it took from
its cache (llama.cpp's ``cache_n``), and the request's wall time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import write_section
from bench_concurrency import start_chatfmt, stop

CITIES = ["Paris", "Lima", "Oslo", "Cairo", "Hanoi", "Quito", "Perth", "Minsk"]
WEATHER = {
    "name": "get_weather",
    "description": "The current weather of a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
SETTINGS = {"model": "default", "temperature": 0}
MAX_TOKENS = 48


def weather(city: str) -> str:
    return json.dumps({"city": city, "sky": "clear", "celsius": 10 + len(city)})


class Tally:
    def __init__(self) -> None:
        self.prompt: list[int] = []
        self.output: list[int] = []
        self.cached: list[int] = []
        self.seconds: list[float] = []
        self.calls = 0

    def add(self, prompt: int, output: int, cached: int, seconds: float) -> None:
        self.prompt.append(prompt)
        self.output.append(output)
        self.cached.append(cached)
        self.seconds.append(seconds)

    def row(self, name: str, calls: str) -> str:
        # The first request has nothing to reuse: the figures are over the returning ones.
        prompt, cached = sum(self.prompt[1:]), sum(self.cached[1:])
        # Of each request's prompt, the exchange before it (the previous prompt and reply)
        # could all come from the cache; what did not was read again for nothing.
        earlier = [p + o for p, o in zip(self.prompt, self.output, strict=False)][:-1]
        missed = sum(max(0, e - c) for e, c in zip(earlier, self.cached[1:], strict=True))
        return (
            f"| {calls} | {name} | {len(self.prompt)} | {self.calls} | {prompt} | {cached} "
            f"({cached / max(prompt, 1):.1%}) | {missed} "
            f"({missed / max(len(self.prompt) - 1, 1):.1f} a request) "
            f"| {statistics.median(self.seconds[1:]) * 1e3:.0f} ms |"
        )


def timed(client: httpx.Client, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    r = client.post(path, json=body)
    seconds = time.perf_counter() - start
    if r.status_code != 200:
        raise RuntimeError(f"{path} answered {r.status_code}: {r.text}")
    return r.json(), seconds


def responses_loop(url: str, cities: list[str]) -> Tally:
    """The Responses API, each request continuing the previous response by its id."""
    tally, previous = Tally(), None
    tools = [{"type": "function", **WEATHER}]
    pending: list[dict[str, Any]] = []
    with httpx.Client(base_url=url, timeout=300) as client:
        for city in cities:
            # Results of calls still open (this small model may call again and again) go
            # first; the same tools are offered throughout, so every prompt can continue.
            pending.append({"role": "user", "content": f"What is the weather in {city}?"})
            for _ in range(3):  # a call, then its answer (a model may call again)
                body = {**SETTINGS, "input": pending, "tools": tools}
                body["max_output_tokens"] = MAX_TOKENS
                if previous is not None:
                    body["previous_response_id"] = previous
                r, seconds = timed(client, "/v1/responses", body)
                usage = r["usage"]
                tally.add(
                    usage["input_tokens"],
                    usage["output_tokens"],
                    usage["input_tokens_details"]["cached_tokens"],
                    seconds,
                )
                previous = r["id"]
                calls = [i for i in r["output"] if i["type"] == "function_call"]
                tally.calls += len(calls)
                result = weather(city)
                pending = [
                    {"type": "function_call_output", "call_id": c["call_id"], "output": result}
                    for c in calls
                ]
                if not calls:
                    break
    return tally


def chat_loop(url: str, cities: list[str]) -> Tally:
    """Chat completions, the client sending the whole conversation each time."""
    tally = Tally()
    messages: list[dict[str, Any]] = []
    tools = [{"type": "function", "function": WEATHER}]
    with httpx.Client(base_url=url, timeout=300) as client:
        for city in cities:
            messages.append({"role": "user", "content": f"What is the weather in {city}?"})
            for _ in range(3):
                body = {**SETTINGS, "messages": messages, "tools": tools}
                body["max_tokens"] = MAX_TOKENS
                r, seconds = timed(client, "/v1/chat/completions", body)
                usage = r["usage"]
                details = usage.get("prompt_tokens_details") or {}
                tally.add(
                    usage["prompt_tokens"],
                    usage["completion_tokens"],
                    details.get("cached_tokens") or 0,
                    seconds,
                )
                message = r["choices"][0]["message"]
                messages.append({k: v for k, v in message.items() if v is not None})
                calls = message.get("tool_calls") or []
                tally.calls += len(calls)
                messages += [
                    {"role": "tool", "tool_call_id": c["id"], "content": weather(city)}
                    for c in calls
                ]
                if not calls:
                    break
    return tally


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cities", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--write", action="store_true", help="write docs/benchmarks.md's section")
    args = ap.parse_args()
    cities = CITIES[: args.cities]
    rows = []
    for grammar in (True, False):
        for name, loop in (
            ("Responses API, `previous_response_id` (exact ids)", responses_loop),
            ("chat completions, messages re-sent (rendered again)", chat_loop),
        ):
            store = Path(f"/tmp/chatfmt-bench-{time.time_ns()}.sqlite3")
            extra = ["--store", str(store)] + ([] if grammar else ["--no-call-grammar"])
            proc, url = start_chatfmt(1, args.threads, "llama-server", *extra)
            try:
                tally = loop(url, cities)
            finally:
                stop(proc)
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{store}{suffix}").unlink(missing_ok=True)
            calls = "grammar (tagged)" if grammar else "free (`--no-call-grammar`)"
            rows.append(tally.row(name, calls))
            print(rows[-1], flush=True)
    body = (
        f"A tool loop over {len(cities)} cities on the default model (greedy, `--parallel 1`, "
        f"{args.threads} threads), each client on a fresh server. Over the requests after the "
        "first: prompt tokens, those the engine took from its prompt cache, the tokens of the "
        "earlier exchange (previous prompt and reply, stop token included) that were not "
        "found in the cache and were read again, and the median request time.\n\n"
        "Calls are constrained to the format's tagged syntax by default; with\n"
        "`--no-call-grammar` the model writes them as it likes (often bare JSON), which a\n"
        "re-render turns into tagged calls.\n\n"
        "| calls | client | requests | calls made | prompt tokens | from the cache "
        "| earlier exchange read again | median request |\n"
        "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows)
    )
    print(body)
    if args.write:
        write_section(
            "A returning conversation: exact ids against rendering again",
            body,
            "bench/bench_continuation.py --write",
        )


if __name__ == "__main__":
    main()
