"""A real uvicorn server with a scripted engine, driven by the official openai client."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from server_helpers import USER_HI, WEATHER_TOOL, ServerThread

from chatfmt.server import create_app

openai = pytest.importorskip("openai")


def test_openai_sdk_text_and_stream(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake(["Hello there!<|im_end|>"]), qwen_dialect, model_name="m")
    with ServerThread(app) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
        out = client.chat.completions.create(model="m", messages=USER_HI)
        assert out.choices[0].message.content == "Hello there!"
        assert out.choices[0].finish_reason == "stop"
        assert out.usage is not None and out.usage.completion_tokens == 4
        chunks = list(
            client.chat.completions.create(
                model="m", messages=USER_HI, stream=True, stream_options={"include_usage": True}
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "Hello there!"
        assert chunks[-1].usage is not None and chunks[-1].choices == []
        assert [m.id for m in client.models.list()] == ["m"]


def test_openai_sdk_tool_call_stream(make_fake, qwen_dialect) -> None:
    reply = '{"name": "get_weather", "arguments": {"city": "Paris"}}<|im_end|>'
    app = create_app(make_fake([reply]), qwen_dialect, model_name="m")
    with ServerThread(app) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
        name, args, finish = "", "", None
        for c in client.chat.completions.create(
            model="m", messages=USER_HI, tools=[WEATHER_TOOL], stream=True
        ):
            delta = c.choices[0].delta
            for tc in delta.tool_calls or []:
                assert tc.index == 0
                name += (tc.function.name or "") if tc.function else ""
                args += (tc.function.arguments or "") if tc.function else ""
            finish = c.choices[0].finish_reason or finish
        assert name == "get_weather"
        assert json.loads(args) == {"city": "Paris"}
        assert finish == "tool_calls"


def test_openai_sdk_sees_errors(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    with ServerThread(app) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="m", messages=USER_HI, n=3)
        assert "n=3" in str(info.value)


@pytest.mark.parametrize("stream", [True, False])
def test_client_disconnect_cancels_generation(make_fake, qwen_dialect, stream: bool) -> None:
    fake = make_fake(["word " * 400 + "<|im_end|>"], delay=0.01)
    app = create_app(fake, qwen_dialect, model_name="m")
    with ServerThread(app) as srv:
        body = {"messages": USER_HI, "stream": stream}
        if stream:
            with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body) as r:
                lines = r.iter_lines()
                for _ in range(4):
                    next(lines)
            # Closing the response closes the connection mid-stream.
        else:
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=0.5)
        deadline = time.monotonic() + 5
        while fake.cancelled == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fake.cancelled == 1
        assert fake.finished == 0
        # The server is healthy afterwards.
        assert httpx.get(srv.url + "/health").status_code == 200
