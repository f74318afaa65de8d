"""``GET /metrics``: Prometheus text that counts what the server really did."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from server_helpers import USER_HI, parse_sse

from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.server import create_app

parser = pytest.importorskip("prometheus_client.parser")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus page, keyed by name and sorted labels."""
    out = {}
    for family in parser.text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def run(app: Any, calls: list[tuple[str, str, dict[str, Any]]]) -> list[httpx.Response]:
    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return [await client.request(m, url, **kw) for m, url, kw in calls]

    return asyncio.run(go())


@pytest.fixture
def app(qwen: Any) -> Any:
    engine = FakeEngine(qwen, ["Hello there, friend!<|im_end|>"])
    return create_app(engine, get_dialect("qwen2.5"), model_name="m")


def test_counts_requests_tokens_and_latency(app: Any) -> None:
    body = {"messages": USER_HI, "max_tokens": 50}
    streaming = {**body, "stream": True, "stream_options": {"include_usage": True}}
    plain, streamed, card, missing, bad, page = run(
        app,
        [
            ("POST", "/v1/chat/completions", {"json": body}),
            ("POST", "/v1/chat/completions", {"json": streaming}),
            ("GET", "/v1/models/m", {}),
            ("GET", "/nope/../../etc", {}),
            ("POST", "/v1/chat/completions", {"json": {"messages": []}}),
            ("GET", "/metrics", {}),
        ],
    )  # fmt: skip
    assert plain.status_code == 200 and streamed.status_code == 200
    assert missing.status_code == 404 and bad.status_code == 400
    assert page.headers["content-type"].startswith("text/plain")
    got = samples(page.text)
    route = "/v1/chat/completions"
    assert got[("chatfmt_requests_total", (("route", route), ("status", "200")))] == 2
    assert got[("chatfmt_requests_total", (("route", route), ("status", "400")))] == 1
    assert got[("chatfmt_requests_total", (("route", "other"), ("status", "404")))] == 1
    assert card.status_code == 200  # counted under its route's template, not its path
    key = ("chatfmt_requests_total", (("route", "/v1/models/{model_id:path}"), ("status", "200")))
    assert got[key] == 1
    # Token counters agree with what the responses reported as usage.
    usage = plain.json()["usage"]
    events, _ = parse_sse(streamed.text)
    streamed_usage = events[-1]["usage"]
    prompt = usage["prompt_tokens"] + streamed_usage["prompt_tokens"]
    completion = usage["completion_tokens"] + streamed_usage["completion_tokens"]
    assert got[("chatfmt_prompt_tokens_total", ())] == prompt
    assert got[("chatfmt_completion_tokens_total", ())] == completion
    assert got[("chatfmt_time_to_first_token_seconds_count", ())] == 2
    assert got[("chatfmt_time_per_output_token_seconds_count", ())] == 2
    assert got[("chatfmt_engine_up", ())] == 1
    assert got[("chatfmt_engine_restarts_total", ())] == 0
    assert got[("chatfmt_requests_in_flight", ())] == 1  # the /metrics request itself


def test_body_refused_by_the_limit_is_counted(qwen: Any) -> None:
    from chatfmt.server.http.limits import ServerLimits

    engine = FakeEngine(qwen, ["Hi<|im_end|>"])
    app = create_app(
        engine, get_dialect("qwen2.5"), model_name="m", limits=ServerLimits(max_body_bytes=100)
    )
    big = {"messages": [{"role": "user", "content": "x" * 500}]}
    refused, page = run(
        app, [("POST", "/v1/chat/completions", {"json": big}), ("GET", "/metrics", {})]
    )
    assert refused.status_code == 413
    got = samples(page.text)
    key = ("chatfmt_requests_total", (("route", "/v1/chat/completions"), ("status", "413")))
    assert got[key] == 1


def test_metrics_need_the_api_key(qwen: Any) -> None:
    engine = FakeEngine(qwen, ["Hi<|im_end|>"])
    app = create_app(engine, get_dialect("qwen2.5"), model_name="m", api_key="sekrit")
    anonymous, keyed = run(
        app,
        [
            ("GET", "/metrics", {}),
            ("GET", "/metrics", {"headers": {"Authorization": "Bearer sekrit"}}),
        ],
    )
    assert anonymous.status_code == 401
    assert keyed.status_code == 200 and "chatfmt_engine_up 1.0" in keyed.text
