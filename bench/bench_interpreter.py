"""Benchmark the code interpreter: kernel cold start vs warm-pool acquire, and run latency,
with the sandbox on (bubblewrap namespaces, cgroups) and off, in the same run.

Usage: python bench/bench_interpreter.py [--starts 8] [--runs 300] [--output PATH]

Prints a markdown table and writes it (with the machine it ran on) to
docs/benchmarks_interpreter.md unless ``--output -``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

from chatfmt.interpreter import JupyterInterpreter, KernelPool
from chatfmt.interpreter.sandbox import Sandbox, bwrap_problem, detect
from chatfmt.tools import ToolRegistry

ROOT = Path(__file__).resolve().parent.parent


def summary(samples: list[float]) -> tuple[float, float]:
    """(median, p90) in milliseconds."""
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1e3, p90 * 1e3


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def bench_cold_start(n: int, box: Sandbox) -> tuple[list[float], list[float]]:
    starts, closes = [], []
    for _ in range(n):
        interp = JupyterInterpreter(sandbox=box)
        t0 = time.perf_counter()
        interp.start()
        t1 = time.perf_counter()
        interp.close()
        starts.append(t1 - t0)
        closes.append(time.perf_counter() - t1)
    return starts, closes


def bench_pool_acquire(n: int, box: Sandbox) -> list[float]:
    samples = []
    with KernelPool(size=2, sandbox=box) as pool:
        for _ in range(n):
            pool.wait_ready(timeout=120)  # steady state: a spare kernel is waiting
            t0 = time.perf_counter()
            interp = pool.acquire()
            samples.append(time.perf_counter() - t0)
            interp.close()
    return samples


def bench_exec(runs: int, box: Sandbox, tag: str) -> dict[str, list[float]]:
    with JupyterInterpreter(sandbox=box) as interp:
        interp.execute("1 + 1")  # warm-up
        return {
            f"run `1 + 1` {tag}": timed(lambda: interp.execute("1 + 1"), runs),
            f"run `print('x')` {tag}": timed(lambda: interp.execute("print('x')"), runs),
            f"run `1/0` (traceback) {tag}": timed(
                lambda: interp.execute("1/0"), max(10, runs // 5)
            ),
        }


def bench_tools(runs: int) -> dict[str, list[float]]:
    def add(a: int, b: int) -> int:
        return a + b

    async def aadd(a: int, b: int) -> int:
        return a + b

    reg = ToolRegistry([add, aadd])

    async def many_async() -> list[float]:
        out = []
        for _ in range(runs):
            t0 = time.perf_counter()
            await reg.acall("aadd", '{"a": 1, "b": 2}')
            out.append(time.perf_counter() - t0)
        return out

    async def many_sync() -> list[float]:
        out = []
        for _ in range(runs):
            t0 = time.perf_counter()
            await reg.acall("add", '{"a": 1, "b": 2}')
            out.append(time.perf_counter() - t0)
        return out

    return {
        "tool `acall` (async tool)": asyncio.run(many_async()),
        "tool `acall` (sync tool, thread)": asyncio.run(many_sync()),
        "tool `call` (sync API, new loop)": timed(lambda: reg.call("add", {"a": 1, "b": 2}), runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=8, help="kernel starts / acquisitions")
    parser.add_argument("--runs", type=int, default=300, help="runs of each trivial cell")
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks_interpreter.md"))
    args = parser.parse_args()

    if bwrap_problem() is not None:
        sys.exit(f"the sandbox is not available here: {bwrap_problem()}")
    boxes = [("(sandbox on)", detect("bwrap")), ("(sandbox off)", detect("off"))]
    rows: list[tuple[str, int, list[float]]] = []
    medians: dict[str, tuple[float, float]] = {}
    for tag, box in boxes:
        cold, close = bench_cold_start(args.starts, box)
        warm = bench_pool_acquire(args.starts, box)
        rows += [
            (f"kernel cold start {tag}", args.starts, cold),
            (f"warm pool `acquire()` (size=2) {tag}", args.starts, warm),
            (f"kernel `close()` (kill + reap) {tag}", args.starts, close),
        ]
        rows += [(name, len(s), s) for name, s in bench_exec(args.runs, box, tag).items()]
        medians[tag] = (summary(cold)[0], summary(warm)[0])
    rows += [(name, len(s), s) for name, s in bench_tools(args.runs * 3).items()]

    lines = [
        "| measurement | n | median | p90 |",
        "|---|---:|---:|---:|",
    ]
    for name, n, samples in rows:
        med, p90 = summary(samples)
        lines.append(f"| {name} | {n} | {fmt(med)} | {fmt(p90)} |")
    table = "\n".join(lines)
    (cold_on, warm_on), (cold_off, warm_off) = medians["(sandbox on)"], medians["(sandbox off)"]
    ratio = (
        f"With the sandbox on, warm-pool acquire is {cold_on / warm_on:,.0f}× faster than a cold "
        f"start; the sandbox costs {cold_on / cold_off:.2f}× the cold start and "
        f"{warm_on / warm_off:.2f}× the warm acquire of an unsandboxed kernel (same run)."
    )
    machine = (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, jupyter_client {version('jupyter_client')}, "
        f"ipykernel {version('ipykernel')}; load average at the end "
        f"{os.getloadavg()[0]:.1f} (other work on the machine inflates the start times)"
    )
    print(table)
    print()
    print(ratio)
    if args.output != "-":
        doc = (
            "# Code interpreter benchmarks\n\n"
            "`python bench/bench_interpreter.py` (times in milliseconds; one run, "
            f"{time.strftime('%Y-%m-%d', time.gmtime())}).\n\n"
            f"Machine: {machine}.\n\n"
            f"{table}\n\n{ratio}\n\n"
            "Cold start includes making the kernel's cgroups, the launcher (limits), "
            "bubblewrap's namespaces and mounts (sandbox on), launching `python -m "
            "ipykernel_launcher`, waiting for the kernel to answer, and the silent set-up cell. "
            "A pool hands out an already started kernel and starts its replacement in the "
            "background, so a new session pays only the hand-over. A trivial run is one "
            "`execute_request` over IPC sockets plus waiting for the kernel to go idle.\n"
        )
        Path(args.output).write_text(doc, encoding="utf-8")
        print(f"\nwritten to {args.output}", file=sys.stderr)


def fmt(ms: float) -> str:
    return f"{ms:.3f} ms" if ms < 1 else f"{ms:.1f} ms"


if __name__ == "__main__":
    main()
