"""ServerLimits: one client cannot stall or exhaust the server for the others.

The socket-level behaviour (body limits while reading, slow headers, connections per client,
a small chat beside a huge request) is tested against a real uvicorn server over real sockets.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_helpers import USER_HI, ServerThread
from test_chat_fake import chat, request
from test_errors import assert_openai_error

from chatfmt.server import create_app
from chatfmt.server.http.limits import DEFAULT_LIMITS, MIB, ServerLimits, uvicorn_options


def serve(app: Any, limits: ServerLimits = DEFAULT_LIMITS) -> ServerThread:
    """A real uvicorn server run as ``chatfmt serve`` runs it: with ``uvicorn_options``."""
    return ServerThread(app, **uvicorn_options(limits))


def port_of(srv: ServerThread) -> int:
    port: int = srv.server.servers[0].sockets[0].getsockname()[1]
    return port


# ==== Raw HTTP over a socket ====


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def error(self) -> dict[str, Any]:
        data = json.loads(self.body)
        assert set(data) == {"error"} and set(data["error"]) == {"message", "type", "param", "code"}
        return dict(data["error"])


def connect(srv: ServerThread | int) -> socket.socket:
    port = srv if isinstance(srv, int) else port_of(srv)
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def post_head(path: str, length: int | None, *, extra: str = "") -> bytes:
    size = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return (
        f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        f"{size}\r\n{extra}\r\n"
    ).encode()


def read_response(sock: socket.socket) -> RawResponse:
    """One response (Content-Length framed, as every error here is)."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        if not more:
            raise ConnectionError(f"closed before a response; got {data!r}")
        data += more
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        more = sock.recv(65536)
        if not more:
            break
        rest += more
    return RawResponse(status, headers, rest[:length])


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``sock`` (reading and dropping any bytes), or None."""
    start = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - start


def chunked(body: bytes, size: int = 64 * 1024) -> bytes:
    parts = [
        b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size])
        for i in range(0, len(body), size)
    ]
    return b"".join(parts) + b"0\r\n\r\n"


# ==== A huge request beside a small chat ====


def messages_body(n: int, **extra: Any) -> bytes:
    """A chat body of ``n`` short messages (250,000 of them: about 10 MB)."""
    one = {"role": "user", "content": "hello there, this is a message"}
    return json.dumps({"messages": [one] * n, **extra}).encode()


class BigPost(threading.Thread):
    """Sends one big request from its own threads: this one reads the answer while a second
    one sends (a server may answer, and close, before the body is all sent)."""

    def __init__(self, port: int, head: bytes, body: bytes) -> None:
        super().__init__(daemon=True)
        self.sock = connect(port)
        self.head, self.body = head, body
        self.sent = 0
        self.response: RawResponse | None = None
        self.answered_at = float("inf")
        self.head_sent = threading.Event()

    def send(self) -> None:
        try:
            self.sock.sendall(self.head)
            self.head_sent.set()
            view = memoryview(self.body)
            while self.sent < len(view):
                self.sent += self.sock.send(view[self.sent : self.sent + 256 * 1024])
        except OSError:
            pass  # the server answered and closed without reading the rest: expected
        finally:
            self.head_sent.set()

    def run(self) -> None:
        sender = threading.Thread(target=self.send, daemon=True)
        sender.start()
        self.response = read_response(self.sock)
        self.answered_at = time.perf_counter()
        sender.join(timeout=30)
        self.sock.close()


SMALL = {"messages": USER_HI, "stream": True}


def first_token_seconds(client: httpx.Client) -> tuple[float, float]:
    """(start time, seconds to the first content delta) of a small streamed chat."""
    start = time.perf_counter()
    first = None
    with client.stream("POST", "/v1/chat/completions", json=SMALL) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if first is None and line.startswith("data: {"):
                choices = json.loads(line[6:])["choices"]
                if choices and choices[0]["delta"].get("content"):
                    first = time.perf_counter() - start
    assert first is not None
    return start, first


@dataclass
class Beside:
    """First-token seconds of small chats alone (the slowest), and of those that started
    while the big request was in flight; ``finished_meanwhile``: how many of those were also
    done before it was answered."""

    baseline: float
    during: list[float] = field(default_factory=list)
    finished_meanwhile: int = 0


@contextlib.contextmanager
def server_process(**limits: Any) -> Iterator[int]:
    """The port of a FakeEngine server in a process of its own (``serve_fake.py``): a client
    in the server's process would share its GIL, and measure its own waits as the server's."""
    script = Path(__file__).with_name("serve_fake.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), json.dumps(limits)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the port, once it accepts
        assert line.strip().isdigit(), f"the server process did not start: {line!r}"
        yield int(line)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def small_chats_beside(port: int, big: BigPost) -> Beside:
    """First-token times of small chats alone, then while ``big`` is in flight."""
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        for _ in range(3):
            first_token_seconds(client)  # warm up: connection, caches, code paths
        alone = [first_token_seconds(client)[1] for _ in range(7)]
        # The slowest alone, not the typical: a loaded machine's hiccups count on both sides.
        result = Beside(baseline=max(alone))
        big.start()
        assert big.head_sent.wait(10)
        while big.is_alive():
            start, seconds = first_token_seconds(client)
            end = time.perf_counter()
            if start < big.answered_at:
                result.during.append(seconds)
                result.finished_meanwhile += end < big.answered_at
        big.join(30)
    return result


BIG_MESSAGES = 250_000


def check_not_delayed(times: Beside, *, overlapped: bool = True) -> None:
    """Small chats were served, start to end, while the big request was being read, parsed
    or rendered: the server was not blocked by it. How much they were slowed is measured in
    ``bench/bench_limits.py`` (a timing bound here fails on a loaded machine)."""
    if overlapped:
        assert times.finished_meanwhile, f"no small chat was served meanwhile: {times}"


@pytest.mark.parametrize("framing", ["chunked", "content-length"])
def test_huge_body_is_413_and_a_small_chat_is_not_delayed(framing: str) -> None:
    body = messages_body(BIG_MESSAGES)
    assert len(body) > 8 * MIB  # the default limit
    with server_process() as port:
        if framing == "chunked":  # read up to the limit, then refused
            big = BigPost(port, post_head("/v1/chat/completions", None), chunked(body))
        else:  # refused on its headers, often before a small chat could start
            big = BigPost(port, post_head("/v1/chat/completions", len(body)), body)
        times = small_chats_beside(port, big)
    assert big.response is not None and big.response.status == 413
    assert big.response.headers["connection"] == "close"
    err = big.response.error()
    assert err["code"] == "request_too_large"
    assert "8 MiB" in err["message"] and "max_body_bytes" in err["message"]
    check_not_delayed(times, overlapped=framing == "chunked")


def test_too_many_messages_is_400_and_a_small_chat_is_not_delayed() -> None:
    body = messages_body(BIG_MESSAGES)
    with server_process(max_body_bytes=32 * MIB) as port:  # the body is read and parsed
        big = BigPost(port, post_head("/v1/chat/completions", len(body)), body)
        times = small_chats_beside(port, big)
    assert big.response is not None and big.response.status == 400
    err = big.response.error()
    assert err["param"] == "messages" and err["code"] == "too_many_messages"
    assert "250000" in err["message"] and "4096" in err["message"]
    assert "max_messages" in err["message"]
    check_not_delayed(times)


def test_a_big_render_does_not_delay_a_small_chat() -> None:
    """A conversation within every limit that renders to far more than the context: rendered
    and tokenized in full (beside the small chats), then refused by the context check."""
    text = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 30  # 1.7 kB
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": text} for i in range(4001)]
    body = json.dumps({"messages": turns}).encode()
    assert 6 * MIB < len(body) < 8 * MIB
    with server_process() as port:
        big = BigPost(port, post_head("/v1/chat/completions", len(body)), body)
        times = small_chats_beside(port, big)
    assert big.response is not None and big.response.status == 400
    err = big.response.error()
    assert err["code"] == "context_length_exceeded"
    assert "at least" not in err["message"]  # the full check: rendered and counted
    check_not_delayed(times)


# ==== The body limit ====


def test_declared_length_over_the_limit_is_answered_before_the_body(
    make_fake, qwen_dialect
) -> None:
    fake = make_fake()
    app = create_app(fake, qwen_dialect, model_name="m")
    with serve(app) as srv, connect(srv) as sock:
        # Only the headers: the answer cannot wait for a body that never comes.
        sock.sendall(post_head("/v1/chat/completions", 50 * MIB))
        r = read_response(sock)
        assert r.status == 413 and r.error()["code"] == "request_too_large"
        assert closed_within(sock, 3) is not None
    assert fake.prompts == []


def test_chunked_body_over_the_limit_is_413_without_reading_it_all(make_fake, qwen_dialect) -> None:
    limits = ServerLimits(max_body_bytes=256 * 1024)
    app = create_app(make_fake(), qwen_dialect, model_name="m", limits=limits)
    endless = b"x" * (64 * MIB)  # far more than the server may read
    with serve(app, limits) as srv:
        big = BigPost(port_of(srv), post_head("/v1/chat/completions", None), chunked(endless))
        big.start()
        big.join(30)
    assert big.response is not None and big.response.status == 413, big.response
    assert "256 KiB" in big.response.error()["message"]
    # The server stopped reading at the limit and closed: the client could not send it all.
    assert big.sent < 16 * MIB


def test_body_limit_over_asgi(make_fake, qwen_dialect) -> None:
    limits = ServerLimits(max_body_bytes=1000)
    fake = make_fake()
    app = create_app(fake, qwen_dialect, model_name="m", limits=limits)
    at_limit = json.dumps({"messages": USER_HI}).encode().ljust(1000)
    headers = {"content-type": "application/json"}
    ok = request(app, "POST", "/v1/chat/completions", content=at_limit, headers=headers)
    assert ok.status_code == 200, ok.text
    over = request(app, "POST", "/v1/chat/completions", content=at_limit + b" ", headers=headers)
    err = assert_openai_error(over, 413)
    assert "1000 bytes" in err["message"] and "--max-body-mb" in err["message"]
    assert over.headers["connection"] == "close"

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted while read
        yield at_limit
        yield b" "

    r = request(app, "POST", "/tokenize", content=chunks(), headers=headers)
    assert assert_openai_error(r, 413)["code"] == "request_too_large"
    assert len(fake.prompts) == 1


def test_the_web_chat_on_the_api_app_has_the_same_limits(make_fake, qwen_dialect) -> None:
    """As `chatfmt serve` mounts it: the app's limits hold for the page's JSON routes too."""
    from chatfmt.web import mount_web

    fake = make_fake()
    limits = ServerLimits(max_body_bytes=2000, max_messages=2)
    app = create_app(fake, qwen_dialect, model_name="m", limits=limits)
    mount_web(app, engine=fake, dialect=qwen_dialect, model_name="m")

    def count(body: bytes) -> httpx.Response:
        headers = {"content-type": "application/json", "host": "127.0.0.1"}
        return request(app, "POST", "/api/count", content=body, headers=headers)

    assert count(json.dumps({"messages": USER_HI * 2}).encode()).status_code == 200
    err = assert_openai_error(count(json.dumps({"messages": USER_HI * 3}).encode()))
    assert err["code"] == "too_many_messages"
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 2000}]}).encode()
    assert assert_openai_error(count(big), 413)["code"] == "request_too_large"


def test_openapi_declares_the_413(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    paths = request(app, "GET", "/openapi.json").json()["paths"]
    for path in ("/v1/chat/completions", "/tokenize"):
        assert "413" in paths[path]["post"]["responses"]


# ==== Messages and tools ====


def test_messages_and_tools_counts(make_fake, qwen_dialect) -> None:
    fake = make_fake()
    app = create_app(fake, qwen_dialect, model_name="m", limits=ServerLimits(max_messages=3))
    ok = chat(app, {"messages": USER_HI * 3})
    assert ok.status_code == 200
    err = assert_openai_error(chat(app, {"messages": USER_HI * 4}))
    assert err["param"] == "messages" and err["code"] == "too_many_messages"
    assert "4 items" in err["message"] and "3" in err["message"]
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    app = create_app(fake, qwen_dialect, model_name="m", limits=ServerLimits(max_tools=2))
    assert chat(app, {"messages": USER_HI, "tools": [tool] * 2}).status_code == 200
    err = assert_openai_error(chat(app, {"messages": USER_HI, "tools": [tool] * 3}))
    assert err["param"] == "tools" and err["code"] == "too_many_tools"
    assert "max_tools" in err["message"]
    # /tokenize takes the same body and the same limits.
    r = request(app, "POST", "/tokenize", json={"messages": USER_HI, "tools": [tool] * 3})
    assert assert_openai_error(r)["code"] == "too_many_tools"
    assert len(fake.prompts) == 2


def test_default_limits() -> None:
    limits = ServerLimits()
    assert limits.max_body_bytes == 8 * MIB
    assert (limits.max_messages, limits.max_tools) == (4096, 512)
    assert limits.header_timeout == 20.0 and limits.max_connections_per_client == 64
    assert ServerLimits(max_connections_per_client=None).max_connections_per_client is None
    for bad in ({"max_body_bytes": 0}, {"max_messages": -1}, {"header_timeout": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ServerLimits(**bad)


# ==== The early context check ====


def test_text_that_cannot_fit_is_refused_before_rendering(make_fake, qwen_dialect) -> None:
    fake = make_fake(context_length=256)
    app = create_app(fake, qwen_dialect, model_name="m")
    service = app.state.service
    # Qwen's longest token is 128 bytes; the bound allows 4x that per token for normalisers.
    huge = [{"role": "user", "content": "a" * (256 * 128 * 4)}]
    renders: list[object] = []
    real = service._render
    service._render = lambda *a: renders.append(a) or real(*a)
    err = assert_openai_error(chat(app, {"messages": huge, "max_tokens": 10}))
    assert err["code"] == "context_length_exceeded" and err["param"] == "messages"
    assert "at least 256 tokens" in err["message"] and "256 tokens" in err["message"]
    assert renders == []
    # Just under the bound: rendered and counted exactly, and refused by the same check.
    under = [{"role": "user", "content": "a" * (256 * 128 * 4 - 1)}]
    err = assert_openai_error(chat(app, {"messages": under}))
    assert err["code"] == "context_length_exceeded" and "at least" not in err["message"]
    assert len(renders) == 1
    # Assistant text does not count towards the bound (a format may drop earlier replies).
    said = [*USER_HI, {"role": "assistant", "content": "a" * (256 * 128 * 4)}, *USER_HI]
    err = assert_openai_error(chat(app, {"messages": said}))
    assert "at least" not in err["message"] and len(renders) == 2
    assert fake.prompts == []


def test_a_render_never_waits_for_another(make_fake, qwen_dialect, qwen) -> None:
    """A render that finds the shared encoder busy uses one of its own, with the same ids."""
    fake = make_fake()
    app = create_app(fake, qwen_dialect, model_name="m")
    service = app.state.service
    assert service._render_lock.acquire()  # as if a long render held it in a worker thread
    try:
        done = threading.Event()

        def run() -> None:
            assert chat(app, {"messages": USER_HI}).status_code == 200
            done.set()

        threading.Thread(target=run, daemon=True).start()
        assert done.wait(10)
    finally:
        service._render_lock.release()
    assert fake.prompts == [qwen_dialect.render(USER_HI, qwen).ids]


# ==== Connections: header deadline and per-client cap ====


def test_slow_headers_are_cut_off(make_fake, qwen_dialect) -> None:
    limits = ServerLimits(header_timeout=1.0)
    app = create_app(make_fake(), qwen_dialect, model_name="m", limits=limits)
    with serve(app, limits) as srv:
        with connect(srv) as half, connect(srv) as silent:
            half.sendall(b"POST /v1/chat/compl")  # half a request line, then nothing
            assert (closed_within(half, 3) or 99) < 3
            assert (closed_within(silent, 3) or 99) < 3
        # A kept-alive connection idle between requests is left to the keep-alive timeout
        # (30 s here); the next request's headers get the deadline again.
        with connect(srv) as sock:
            get = b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n"
            sock.sendall(get)
            assert read_response(sock).status == 200
            time.sleep(1.5)
            sock.sendall(get)
            assert read_response(sock).status == 200
            sock.sendall(b"GET /hea")
            assert (closed_within(sock, 3) or 99) < 3
        # Headers in time and then a slow body: not the header deadline's business.
        with connect(srv) as sock:
            body = json.dumps({"messages": USER_HI}).encode()
            sock.sendall(post_head("/v1/chat/completions", len(body)) + body[:5])
            time.sleep(1.5)
            sock.sendall(body[5:])
            assert read_response(sock).status == 200


def test_oversized_headers_are_refused(make_fake, qwen_dialect) -> None:
    """Headers past the cap are answered 431 (400 from h11, which caps them lower) and the
    connection closed, however they are split; a body far larger than the cap is not
    counted as headers."""
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    with serve(app) as srv:
        with connect(srv) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\n")
            line = b"X-Filler: " + b"a" * 1000 + b"\r\n"
            for _ in range(100):  # 100 KB of headers in 100 reads, never ending them
                try:
                    sock.sendall(line)
                except (BrokenPipeError, ConnectionResetError):
                    break
            answer = read_response(sock)
            assert answer.status in (431, 400), answer
            assert (closed_within(sock, 5) or 99) < 5
        with connect(srv) as sock:  # headers of 10 KB are fine
            filler = b"X-Filler: " + b"a" * 10_000 + b"\r\n"
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\n" + filler + b"\r\n")
            assert read_response(sock).status == 200
        with connect(srv) as sock:  # a 300 KB body after small headers is a body
            body = json.dumps({"messages": USER_HI}).encode()[:-1] + b" " * 300_000 + b"}"
            sock.sendall(post_head("/v1/chat/completions", len(body)) + body)
            assert read_response(sock).status == 200


def test_a_trickled_body_is_cut_off(make_fake, qwen_dialect) -> None:
    # A deadline well above the pause: a machine busy with other work may take a while to
    # read the second half (1 s against a 0.5 s pause once failed under a parallel run).
    limits = ServerLimits(body_timeout=3.0)
    app = create_app(make_fake(), qwen_dialect, model_name="m", limits=limits)
    with serve(app, limits) as srv:
        body = json.dumps({"messages": USER_HI}).encode()
        # A body that arrives within the deadline is served, however it is split.
        with connect(srv) as sock:
            sock.sendall(post_head("/v1/chat/completions", len(body)) + body[:5])
            time.sleep(0.5)
            sock.sendall(body[5:])
            assert read_response(sock).status == 200
        # One that declares more than it sends in time: the connection is closed.
        with connect(srv) as sock:
            sock.sendall(post_head("/v1/chat/completions", len(body) + 1000) + body)
            assert (closed_within(sock, 10) or 99) < 10


def test_connections_per_client_are_capped(make_fake, qwen_dialect) -> None:
    limits = ServerLimits(max_connections_per_client=3)
    app = create_app(make_fake(), qwen_dialect, model_name="m", limits=limits)
    get = b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n"
    with serve(app, limits) as srv:
        held = [connect(srv) for _ in range(3)]
        for sock in held:
            sock.sendall(get)
            assert read_response(sock).status == 200  # kept alive, still counted
        with connect(srv) as fourth:
            fourth.sendall(get)
            r = read_response(fourth)
            assert r.status == 429 and r.headers["connection"] == "close"
            err = r.error()
            assert (
                err["code"] == "too_many_connections"
                and "max_connections_per_client" in (err["message"])
            )
            assert closed_within(fourth, 3) is not None
        # Past twice the cap a connection is not even answered: the 4th to 6th wait for
        # their headers (to answer 429), the 7th is closed at once.
        refused = [connect(srv) for _ in range(4)]
        try:
            assert closed_within(refused[-1], 3) is not None
            assert closed_within(refused[0], 0.3) is None
        finally:
            for sock in refused:
                sock.close()
        held.pop().close()
        deadline = time.monotonic() + 5
        while True:  # the server counts the close once it has seen it
            with connect(srv) as sock:
                sock.sendall(get)
                status = read_response(sock).status
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert status == 200
        for sock in held:
            sock.close()


def test_connection_cap_is_per_server(make_fake, qwen_dialect) -> None:
    """Each uvicorn_options call counts for its own server: two servers do not add up."""
    limits = ServerLimits(max_connections_per_client=1)
    app = create_app(make_fake(), qwen_dialect, model_name="m", limits=limits)
    get = b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n"
    with (
        serve(app, limits) as one,
        serve(app, limits) as two,
        connect(one) as a,
        connect(two) as b,
    ):
        for sock in (a, b):
            sock.sendall(get)
            assert read_response(sock).status == 200
