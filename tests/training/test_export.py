"""``chatfmt dataset export`` end to end, on both store backends: a scripted engine served
through ``create_app`` runs a Responses tool loop (a call, its result, an answer, one more
question) chained by ``previous_response_id``; the export's ``input_ids`` are the engine's
last prompt and what it produced after it, id for id, the stop token it ended on included,
and its labels are exactly the ids the engine produced in every exchange. What kept no ids
is rendered and flagged, or skipped and counted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chatfmt.cli.main import main
from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.server import create_app
from chatfmt.store import ExactIds, NewResponse, open_store, owner_of
from chatfmt.tokenizers import Tokenizer
from chatfmt.training import IGNORE_INDEX, render_for_training
from chatfmt.training.export import exact_row

openai = pytest.importorskip("openai", reason="the openai SDK (a dev dependency) is missing")

pytestmark = pytest.mark.anyio

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
#: A call as a small model may write it: bare JSON, odd spacing, no <tool_call> tags.
BARE_CALL = '{"name":"get_weather" ,  "arguments": {"city":"Paris"}}'


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the test's store lives: a SQLite file, or a new database on the session's
    PostgreSQL server (tests/store/pg_server.py)."""
    if request.param == "sqlite":
        return str(tmp_path / "r.sqlite3")
    server: Any = request.getfixturevalue("postgres_server")
    return str(server.database())


@pytest.fixture
def store(location: str) -> Iterator[Any]:
    opened = open_store(location)
    yield opened
    opened.close()


def odd_ids(tok: Tokenizer, text: str) -> list[int]:
    """``text`` one token per character, as a model may sample it and no encoder writes it:
    a re-render can never give these ids back."""
    return [i for ch in text for i in tok.encode_text(ch)]


class Served:
    """The engine's script, and what it produced for each prompt (its stop token included:
    ``stop``, ``<|im_end|>`` or Qwen's other stop token ``<|endoftext|>``)."""

    def __init__(self, tok: Tokenizer, stop: str = "<|im_end|>") -> None:
        self.tok = tok
        self.stop = stop
        self.produced: list[list[int]] = []

    def __call__(self, prompt: list[int]) -> list[int]:
        tail = self.tok.decode(prompt).rsplit("<|im_start|>user\n", 1)[-1]
        if tail.startswith("<tool_response>"):
            text = "Sunny, 21 °C."
        elif "weather" in tail.lower():
            text = BARE_CALL
        else:
            text = "You are welcome!"
        reply = [*odd_ids(self.tok, text), self.tok.controls[self.stop]]
        self.produced.append(reply)
        return reply


def client(app: Any, key: str) -> Any:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test/v1")
    return openai.AsyncOpenAI(base_url="http://test/v1", api_key=key, http_client=http)


def export(location: str, out: Path, *args: str) -> list[dict[str, Any]]:
    code = main(["dataset", "export", "--store", location, "-o", str(out), *args])
    assert code == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


async def tool_loop(
    store: Any, qwen: Tokenizer, stop: str = "<|im_end|>"
) -> tuple[FakeEngine, Served, list[str]]:
    served = Served(qwen, stop)
    engine = FakeEngine(qwen, served, grammar_support="full")
    app = create_app(engine, get_dialect("qwen2.5"), model_name="m", store=store, api_key=["key-a"])
    c = client(app, "key-a")
    first = await c.responses.create(
        model="m", input="Weather in Paris?", tools=[WEATHER], instructions="Be brief."
    )
    [call] = [i for i in first.output if i.type == "function_call"]
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    second = await c.responses.create(
        model="m", previous_response_id=first.id, input=[output], tools=[WEATHER],
        instructions="Be brief.",
    )  # fmt: skip
    assert second.output_text == "Sunny, 21 °C."
    third = await c.responses.create(
        model="m", previous_response_id=second.id, input="Thanks!", tools=[WEATHER],
        instructions="Be brief.",
    )  # fmt: skip
    assert third.output_text == "You are welcome!"
    return engine, served, [first.id, second.id, third.id]


async def test_the_export_is_the_served_ids_and_trains_what_the_engine_produced(
    store: Any, location: str, qwen: Tokenizer, tmp_path: Path
) -> None:
    engine, served, rids = await tool_loop(store, qwen)
    p1, p2, p3 = engine.prompts
    r1, r2, r3 = served.produced  # each ends with the <|im_end|> the engine stopped on
    im_end = qwen.controls["<|im_end|>"]
    # Each prompt continued the one before on the exact ids: the reply as sampled, then the
    # stop token it ended on.
    assert p2[: len(p1) + len(r1)] == p1 + r1 and p3[: len(p2) + len(r2)] == p2 + r2

    [row] = export(location, tmp_path / "out.jsonl")
    assert row["id"] == rids[-1] and row["owner"] == owner_of("key-a")
    assert row["source"] == "exact" and row["kind"] == "response"
    # The last prompt and the last reply as produced, through the stop token it ended on.
    assert row["input_ids"] == p3 + r3 and r3[-1] == im_end
    assert row["attention_mask"] == [1] * len(p3 + r3)
    # Labels: every id the engine produced, where it stands in the ids — the call and the
    # answers, and the stop tokens that ended them.
    spans = [(len(p1), r1), (len(p2), r2), (len(p3), r3)]
    expected = [IGNORE_INDEX] * len(row["input_ids"])
    for start, produced in spans:
        expected[start : start + len(produced)] = produced
    assert row["labels"] == expected
    assert expected[len(p1) + len(r1) - 1] == im_end == expected[len(p2) + len(r2) - 1]
    assert row["num_trained"] == len(r1) + len(r2) + len(r3)
    # Not a re-render: the rendered conversation has a <tool_call> the model never wrote.
    rendered = export(location, tmp_path / "all.jsonl", "--every-response", "--owner", "key-a")
    assert [r["id"] for r in rendered] == rids
    assert [r["input_ids"] for r in rendered] == [p1 + r1, p2 + r2, p3 + r3]
    assert '<tool_call>\n{"name": "get_weather"' not in qwen.decode(row["input_ids"])
    # Another key's export, or a date before it all, has none of it.
    assert export(location, tmp_path / "b.jsonl", "--owner", "key-b") == []
    assert export(location, tmp_path / "d.jsonl", "--until", "2001-01-01") == []


async def test_a_reply_ended_on_another_stop_token_exports_that_token(
    store: Any, location: str, qwen: Tokenizer, tmp_path: Path
) -> None:
    """The model stops on ``<|endoftext|>``, Qwen's other stop token: the row ends with it,
    trained. Later prompts show the format's ``<|im_end|>`` in its place (the model was never
    shown its own), so there the row has the prompt's id and no loss."""
    engine, served, _ = await tool_loop(store, qwen, stop="<|endoftext|>")
    p1, p2, p3 = engine.prompts
    r1, r2, r3 = served.produced
    eot, im_end = qwen.controls["<|endoftext|>"], qwen.controls["<|im_end|>"]
    assert r1[-1] == r2[-1] == r3[-1] == eot
    assert p2[len(p1) + len(r1) - 1] == im_end  # the continuation writes the format's token
    [row] = export(location, tmp_path / "out.jsonl")
    assert row["input_ids"] == p3 + r3
    expected = [IGNORE_INDEX] * len(row["input_ids"])
    for start, produced in [(len(p1), r1[:-1]), (len(p2), r2[:-1]), (len(p3), r3)]:
        expected[start : start + len(produced)] = produced
    assert row["labels"] == expected and row["labels"][-1] == eot
    assert row["num_trained"] == len(r1) + len(r2) + len(r3) - 2


def test_rows_without_ids_are_rendered_and_flagged_or_skipped(
    store: Any, location: str, qwen: Tokenizer, tmp_path: Path, capsys: Any
) -> None:
    ask = {"role": "user", "content": "Hi"}
    answer = {"role": "assistant", "content": "Hello!"}
    body = {"id": "resp_old", "object": "response", "previous_response_id": None,
            "instructions": "Be brief.", "tools": [WEATHER]}  # fmt: skip
    store.put("o", NewResponse(body, [], [ask, answer]))  # stored before ids were kept
    store.save_conversation("o", "web-conv-1", "t", {"messages": [ask, answer], "system": ""})

    out = tmp_path / "out.jsonl"
    assert export(location, out) == []
    err = capsys.readouterr().err
    assert "wrote 0 row(s)" in err and "skipped (no exact ids): 1, first resp_old" in err
    assert "give --dialect and --tokenizer" in err

    rows = export(location, out, "--dialect", "qwen2.5", "--tokenizer", "qwen2.5", "--include-web")
    assert [(r["id"], r["kind"], r["source"]) for r in rows] == [
        ("resp_old", "response", "rendered"),
        ("web-conv-1", "web", "rendered"),
    ]
    dialect = get_dialect("qwen2.5")
    tools = [{"type": "function", "function": {k: WEATHER[k] for k in
              ("name", "description", "parameters")}}]  # fmt: skip
    system = {"role": "system", "content": "Be brief."}
    expected = render_for_training([system, ask, answer], dialect, qwen, tools=tools)
    assert rows[0]["input_ids"] == expected.input_ids and rows[0]["labels"] == expected.labels
    web = render_for_training([ask, answer], dialect, qwen)
    assert rows[1]["input_ids"] == web.input_ids and rows[1]["labels"] == web.labels


def test_exact_rows_start_at_a_prompt_rendered_afresh() -> None:
    """A row of base 0 mid-chain (its predecessor could not be continued on its ids) holds
    its whole prompt: the ids start there, and the replies before it carry no loss."""
    from chatfmt.store import StoredExchange

    def ex(rid: str, exact: ExactIds | None) -> StoredExchange:
        return StoredExchange(rid, 0.0, [], exact)

    chain = [
        ex("r1", ExactIds("v", 0, [1, 2, 3, 4], 2)),
        ex("r2", ExactIds("v", 0, [1, 2, 30, 40, 9, 5, 6], 2)),  # rendered afresh
        ex("r3", ExactIds("v", 7, [99, 7, 8, 10], 1)),
    ]
    row = exact_row(chain)
    assert row is not None and row.untrained == 1
    assert row.input_ids == [1, 2, 30, 40, 9, 5, 6, 99, 7, 8, 10]
    n = IGNORE_INDEX
    assert row.labels == [n, n, n, n, n, 5, 6, 99, n, n, 10]
    # Ids that do not join, or a last exchange without ids: no exact row.
    assert exact_row([chain[0], ex("r2", ExactIds("v", 3, [5], 1))]) is None
    assert exact_row([chain[0], ex("r2", None)]) is None


def test_exact_rows_end_with_the_stop_token_the_model_produced() -> None:
    """The stored stop token of the last reply ends the row, trained; an earlier reply's stop
    token is trained where the next prompt shows the same token, not where it shows the
    format's own in place of another; rows stored before stops were kept end with the reply."""
    from chatfmt.store import StoredExchange

    def ex(rid: str, exact: ExactIds) -> StoredExchange:
        return StoredExchange(rid, 0.0, [], exact)

    n = IGNORE_INDEX
    same = [
        ex("r1", ExactIds("v", 0, [1, 2, 3], 1, 9)),
        ex("r2", ExactIds("v", 3, [9, 4, 5], 1, 8)),
    ]
    row = exact_row(same)
    assert row is not None and row.stopped
    assert (row.input_ids, row.labels) == ([1, 2, 3, 9, 4, 5, 8], [n, n, 3, 9, n, 5, 8])
    other = [ex("r1", ExactIds("v", 0, [1, 2, 3], 1, 7)), same[1]]
    row = exact_row(other)
    assert row is not None and row.labels == [n, n, 3, n, n, 5, 8]
    old = [ex("r1", ExactIds("v", 0, [1, 2, 3], 1)), ex("r2", ExactIds("v", 3, [9, 4, 5], 1))]
    row = exact_row(old)
    assert row is not None and not row.stopped
    assert (row.input_ids, row.labels) == ([1, 2, 3, 9, 4, 5], [n, n, 3, 9, n, 5])
