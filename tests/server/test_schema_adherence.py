"""The schema-adherence suite on the default model, through a real ``chatfmt serve`` app and the
openai client: every forced tool call and every ``json_schema`` reply parses and validates
(``jsonschema``). In full (108 cases, tests/server/adherence_cases.py) on the embedded engine
(llama-server as chatfmt's child); as a smoke test (one case per schema and per tool, 20) on a
remote llama.cpp server started by hand. Both engines are the same llama-server with the same
grammars, so the model's adherence is measured once; the remote one checks that its path (the
grammar and the tools sent over HTTP, the reply read back) holds for every schema and tool."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from adherence_cases import call_cases, json_cases
from server_helpers import ServerThread

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

PARALLEL = 4


#: The engine the cases run on in full; the other runs the smoke cases.
FULL = "llama-server"


@pytest.fixture(scope="module", params=[FULL, "remote"])
def client(
    request: pytest.FixtureRequest,
    default_model_path: Path,
    llama_server_binary: Path,
    raw_llama_server: Callable[..., AbstractContextManager[str]],
) -> Iterator[tuple[Any, bool]]:
    from chatfmt.dialects import get_dialect
    from chatfmt.engines.base import Engine
    from chatfmt.server import create_app
    from chatfmt.tokenizers import load_tokenizer

    threads = os.environ.get("CHATFMT_TEST_THREADS", "1")
    with (
        raw_llama_server(
            default_model_path,
            "--parallel",
            str(PARALLEL),
            "--ctx-size",
            str(4096 * PARALLEL),
            "--threads",
            threads,
        )
        if request.param == "remote"
        else contextlib.nullcontext()
    ) as url:
        engine: Engine
        if url is None:
            from chatfmt.engines.llama_server import LlamaServerEngine

            engine = LlamaServerEngine(
                default_model_path, parallel=PARALLEL, n_threads=int(threads), n_ctx=4096
            )
        else:
            from chatfmt.engines.remote import RemoteEngine

            engine = RemoteEngine(url, tokenizer=load_tokenizer("qwen2.5"))
        app = create_app(engine, get_dialect("qwen2.5"), model_name="default")
        with ServerThread(app, startup=getattr(engine, "connect", None)) as srv:
            assert engine.grammar_support == "lazy"
            api = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
            yield api, request.param != FULL
            srv.call(engine.aclose())


def run_all(cases: list[Any], one: Callable[[Any], str | None]) -> None:
    """Run the cases ``PARALLEL`` at a time; every failure is reported, not only the first."""
    with ThreadPoolExecutor(PARALLEL) as pool:
        problems = [p for p in pool.map(one, cases) if p is not None]
    assert not problems, f"{len(problems)} of {len(cases)} failed:\n" + "\n".join(problems)


def test_json_schema_replies_always_validate(client: tuple[Any, bool]) -> None:
    api, smoke = client

    def one(case: tuple[str, dict[str, Any], str]) -> str | None:
        name, schema, prompt = case
        out = api.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": prompt}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": True},
            },
            temperature=0,
            max_tokens=1000,
        )
        text = out.choices[0].message.content or ""
        try:
            jsonschema.validate(json.loads(text), schema)
        except (ValueError, jsonschema.ValidationError) as exc:
            return f"{name} / {prompt!r} ({out.choices[0].finish_reason}): {exc}: {text[:300]!r}"
        return None

    run_all(json_cases(smoke=smoke), one)


def test_forced_calls_always_validate(client: tuple[Any, bool]) -> None:
    api, smoke = client

    def one(case: tuple[dict[str, Any], str]) -> str | None:
        tool, prompt = case
        fn = tool["function"]
        out = api.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": prompt}],
            tools=[tool],
            tool_choice={"type": "function", "function": {"name": fn["name"]}},
            temperature=0,
            max_tokens=300,
        )
        calls = out.choices[0].message.tool_calls or []
        if len(calls) != 1 or calls[0].function.name != fn["name"]:
            text = out.choices[0].message.content
            return f"{fn['name']} / {prompt!r}: calls {calls!r}, text {text!r}"
        try:
            jsonschema.validate(json.loads(calls[0].function.arguments), fn["parameters"])
        except (ValueError, jsonschema.ValidationError) as exc:
            return f"{fn['name']} / {prompt!r}: {exc}: {calls[0].function.arguments!r}"
        return None

    run_all(call_cases(smoke=smoke), one)


def test_streams_equal_whole_replies_under_constraints(client: tuple[Any, bool]) -> None:
    """The same greedy request streamed and whole: the same text and the same calls, and the
    streamed arguments only ever grow (append-only deltas)."""
    api, _ = client
    name, schema, prompt = json_cases()[0]
    tool, question = call_cases()[0]
    bodies = [
        {
            "messages": [{"role": "user", "content": prompt}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema},
            },
        },
        {"messages": [{"role": "user", "content": question}], "tools": [tool]},
        {
            "messages": [{"role": "user", "content": question}],
            "tools": [tool],
            "tool_choice": "required",
        },
    ]
    for body in bodies:
        args = {"model": "default", "temperature": 0, "max_tokens": 300, **body}
        whole = api.chat.completions.create(**args).choices[0].message
        text, calls = "", {}
        for chunk in api.chat.completions.create(**args, stream=True):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            text += delta.content or ""
            for d in delta.tool_calls or ():
                name_, so_far = calls.get(d.index, ("", ""))
                calls[d.index] = (
                    name_ or (d.function.name or ""),
                    so_far + (d.function.arguments or ""),
                )
        assert text == (whole.content or ""), body
        got = [calls[i] for i in sorted(calls)]
        assert got == [(c.function.name, c.function.arguments) for c in whole.tool_calls or ()]
