"""Several API keys on one server: each key's interpreter sessions, files and kernels are its
own (issue 24). Through the real HTTP server (uvicorn) with two keys, real sandboxed kernels,
and the requests of the issue's report."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server extra (chatfmt[server]) is not installed")
pytest.importorskip("ipykernel", reason="needs the jupyter extra")

from chatfmt.interpreter import JupyterInterpreter
from chatfmt.interpreter.sandbox import bwrap_problem
from chatfmt.tokenizers.base import Tokenizer

from .helpers import build_app, live_server

A = {"Authorization": "Bearer keyA"}
B = {"Authorization": "Bearer keyB"}
OCTET = {"Content-Type": "application/octet-stream"}
CID = "convAlice01"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer("qwen2.5")


@pytest.fixture
def served(tok: Tokenizer) -> Iterator[tuple[str, Any]]:
    app, _ = build_app(
        tok,
        interpreter_factory=lambda: JupyterInterpreter(timeout=30),
        api_key=["keyA", "keyB"],
        max_sessions=2,  # one each: the share is what is tested
    )
    with live_server(app) as url:
        yield url, app


def agent_events(c: httpx.Client, headers: dict[str, str], content: str) -> list[dict[str, Any]]:
    r = c.post(
        "/api/agent",
        json={
            "messages": [{"role": "user", "content": content}],
            "mode": "interpreter",
            "conversation_id": CID,
        },
        headers=headers,
        timeout=120,
    )
    assert r.status_code == 200, r.text
    return [json.loads(b[6:]) for b in r.text.split("\n\n") if b.startswith("data: ")]


def test_another_keys_files_and_kernel_are_out_of_reach(served: tuple[str, Any]) -> None:
    url, app = served
    with httpx.Client(base_url=url, timeout=60) as c:
        notes = b"a,b\n1,2\n3,4\n"
        r = c.post(f"/api/files/{CID}/notes.txt", content=notes, headers={**A, **OCTET})
        assert r.status_code == 200, r.text
        alice_path = r.json()["path"]
        # B does not see, download or list A's upload: to B, the id has no files.
        r = c.get(f"/api/files/{CID}/notes.txt", headers=B)
        assert r.status_code == 404 and b"a,b" not in r.content
        assert c.get(f"/api/files/{CID}", headers=B).json() == {"directory": None, "files": []}
        # B's upload under the same id and name goes to B's own session, not over A's file.
        r = c.post(f"/api/files/{CID}/notes.txt", content=b"B was here", headers={**B, **OCTET})
        assert r.status_code == 200 and r.json()["path"] != alice_path
        assert c.get(f"/api/files/{CID}/notes.txt", headers=A).content == notes
        assert Path(alice_path).read_bytes() == notes
        assert c.get(f"/api/files/{CID}/notes.txt", headers=B).content == b"B was here"
        # A's code reads A's file; B's code, run with A's conversation id, runs in B's own
        # kernel, where A's directory does not exist.
        ask = f"Uploaded file: {alice_path}\nHow many rows?"
        done = [e for e in agent_events(c, A, ask) if e["type"] == "tool_result"]
        assert "rows: 2" in json.dumps(done)
        seen_by_b = json.dumps([e for e in agent_events(c, B, ask) if e["type"] == "tool_result"])
        if bwrap_problem() is None:  # a sandbox sees only its own directory
            assert "rows: 2" not in seen_by_b and "FileNotFoundError" in seen_by_b
    sessions = app.state.chatfmt_web_sessions
    kernels = [s.interpreter.inner for k, s in sessions._sessions.items() if k[1] == CID]
    assert len(kernels) == 2 and kernels[0].pid != kernels[1].pid  # one per key for the id


def test_one_keys_sessions_never_close_anothers(served: tuple[str, Any]) -> None:
    """The issue's eviction: uploads by B into new conversations closed A's session and
    deleted A's files. Now B at its share closes only its own idle sessions."""
    url, _ = served
    with httpx.Client(base_url=url, timeout=60) as c:
        r = c.post(f"/api/files/{CID}/keep.txt", content=b"alice", headers={**A, **OCTET})
        assert r.status_code == 200, r.text
        for i in range(3):
            r = c.post(f"/api/files/convBob{i:04d}/x.txt", content=b"b", headers={**B, **OCTET})
            assert r.status_code == 200, r.text
        assert c.get(f"/api/files/{CID}/keep.txt", headers=A).content == b"alice"
        assert Path(r.json()["path"]).exists()
        # B's older conversation went to make room for its newer one.
        assert c.get("/api/files/convBob0000/x.txt", headers=B).status_code == 404


def test_a_key_at_its_share_gets_429_with_the_limit(tok: Tokenizer) -> None:
    app, _ = build_app(
        tok,
        delay=0.01,  # the "slow" reply holds B's session for seconds
        interpreter_factory=lambda: JupyterInterpreter(timeout=30),
        api_key=["keyA", "keyB"],
        max_sessions=2,
    )
    with live_server(app) as url, httpx.Client(base_url=url, timeout=60) as c:
        body = {
            "messages": [{"role": "user", "content": "slow"}],
            "mode": "interpreter",
            "conversation_id": "convBobBusy",
        }
        with c.stream("POST", "/api/agent", json=body, headers=B) as running:
            assert running.status_code == 200
            chunks = running.iter_bytes()  # kept: a dropped iterator closes the stream
            next(chunks)  # B's one session is now in use
            r = c.post("/api/files/convBobNew1/x", content=b"x", headers={**B, **OCTET})
            assert r.status_code == 429, r.text
            message = r.json()["error"]["message"]
            assert "already has 1 code interpreter sessions" in message
            assert "share of the server's 2" in message
            r = c.post("/api/agent", json={**body, "conversation_id": "convBobNew2"}, headers=B)
            assert r.status_code == 429 and "share" in r.json()["error"]["message"]
            # A still starts its own.
            r = c.post(f"/api/files/{CID}/y", content=b"y", headers={**A, **OCTET})
            assert r.status_code == 200, r.text


def test_sessions_starting_at_once_past_the_cap_are_503(tok: Tokenizer) -> None:
    """More sessions starting at once than the server holds: 503 with the message, never a
    500 (the message only in the log)."""

    def slow() -> JupyterInterpreter:
        time.sleep(1.0)
        return JupyterInterpreter(timeout=30)

    app, _ = build_app(tok, interpreter_factory=slow, max_sessions=2)
    with live_server(app) as url:

        def upload(i: int) -> httpx.Response:
            return httpx.post(
                f"{url}/api/files/convMany{i:04d}/x", content=b"x", headers=OCTET, timeout=60
            )

        results: list[httpx.Response] = []
        threads = [threading.Thread(target=lambda i=i: results.append(upload(i))) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        statuses = sorted(r.status_code for r in results)
        assert statuses == [200, 200, 503], [r.text for r in results]
        busy = next(r for r in results if r.status_code == 503).json()["error"]
        assert busy["message"] == "all 2 code interpreter sessions are busy; try again later"
