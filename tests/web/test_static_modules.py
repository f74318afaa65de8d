"""The web page's ES modules: the module graph (plain Python), and the modules' behaviour in
headless Chromium against a real server (the event-stream parser, the streamed message's
render through POST /api/markdown, and that a finished message is never re-rendered).

The browser tests need Playwright for Python and Debian's Chromium at /usr/bin/chromium, like
test_e2e.py; without them they are skipped and the module-graph checks still run.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

STATIC = Path(__file__).resolve().parents[2] / "src" / "chatfmt" / "web" / "static"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]

# ==== The module graph, without a browser ====

_FROM = re.compile(r"^\s*(import|export)\b([^;'\"]*?)\bfrom\s*([\"'])(.+?)\3", re.M | re.S)
_BARE = re.compile(r"^\s*import\s*([\"'])(.+?)\1", re.M)
_DYNAMIC = re.compile(r"\bimport\s*\(\s*([\"'])(.+?)\1\s*\)")
_EXPORT_DECL = re.compile(
    r"^export\s+(?:async\s+)?(?:function\s*\*?|class|const|let|var)\s*([A-Za-z_$][\w$]*)", re.M
)
_EXPORT_LIST = re.compile(r"^export\s*\{([^}]*)\}", re.M)


def imports_of(source: str) -> list[tuple[str, list[str]]]:
    """(specifier, imported names) for each static, side-effect and dynamic import/re-export."""
    found: list[tuple[str, list[str]]] = []
    for m in _FROM.finditer(source):
        names: list[str] = []
        braces = re.search(r"\{([^}]*)\}", m.group(2))
        if braces:
            for part in braces.group(1).split(","):
                if part.strip():
                    names.append(part.split(" as ")[0].strip())
        found.append((m.group(4), names))
    found += [(m.group(2), []) for m in _BARE.finditer(source)]
    found += [(m.group(2), []) for m in _DYNAMIC.finditer(source)]
    return found


def exports_of(source: str) -> set[str]:
    names = set(_EXPORT_DECL.findall(source))
    for m in _EXPORT_LIST.finditer(source):
        for part in m.group(1).split(","):
            if part.strip():
                names.add(part.split(" as ")[-1].strip())
    return names


def resolve(specifier: str, static: Path) -> Path | None:
    """The file under static/ that a specifier names; None for anything else (bare, remote)."""
    if specifier.startswith("./"):
        return static / specifier[2:]
    if specifier.startswith("/static/"):
        return static / specifier[len("/static/") :]
    return None


def graph_problems(static: Path) -> list[str]:
    """Broken imports among static/*.js, and modules that app.js never loads."""
    problems: list[str] = []
    modules = {p.name: p.read_text(encoding="utf-8") for p in sorted(static.glob("*.js"))}
    for name, source in modules.items():
        for specifier, names in imports_of(source):
            target = resolve(specifier, static)
            if target is None or target.parent != static or not target.is_file():
                problems.append(f"{name}: import {specifier!r} is not a file under static/")
                continue
            missing = set(names) - exports_of(modules[target.name])
            if missing:
                problems.append(f"{name}: {target.name} does not export {sorted(missing)}")
    reached, todo = set(), ["app.js"]
    while todo:
        name = todo.pop()
        if name in reached or name not in modules:
            continue
        reached.add(name)
        for specifier, _ in imports_of(modules[name]):
            target = resolve(specifier, static)
            if target is not None:
                todo.append(target.name)
    problems += [f"{name} is not imported from app.js" for name in modules if name not in reached]
    return problems


def test_every_import_points_to_a_module_under_static() -> None:
    assert (STATIC / "app.js").is_file()
    assert len(imports_of((STATIC / "app.js").read_text(encoding="utf-8"))) >= 5
    assert graph_problems(STATIC) == []


def test_the_graph_check_catches_broken_imports(tmp_path: Path) -> None:
    (tmp_path / "app.js").write_text(
        'import { a, gone } from "./a.js";\nimport {\n  b,\n} from "./missing.js";\n'
        'import "https://cdn.example/x.js";\nimport("./dynamic.js");\n'
    )
    (tmp_path / "a.js").write_text("export function a() {}\n")
    (tmp_path / "orphan.js").write_text("export const x = 1;\n")
    assert sorted(graph_problems(tmp_path)) == [
        "app.js: a.js does not export ['gone']",
        "app.js: import './dynamic.js' is not a file under static/",
        "app.js: import './missing.js' is not a file under static/",
        "app.js: import 'https://cdn.example/x.js' is not a file under static/",
        "orphan.js is not imported from app.js",
    ]


def test_page_loads_the_entry_as_a_module() -> None:
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    scripts = re.findall(r"<script\b[^>]*>", html)
    assert scripts == ['<script type="module" src="/static/app.js">']


def test_no_module_evaluates_code_or_writes_raw_html() -> None:
    sinks: list[tuple[str, str]] = []
    for path in sorted(STATIC.glob("*.js")):
        text = path.read_text(encoding="utf-8")
        assert not re.search(
            r"(?<![\w.])eval\s*\(|new\s+Function\s*\(|document\.write|insertAdjacentHTML"
            r"|set(?:Timeout|Interval)\s*\(\s*[\"'`]",
            text,
        ), path.name
        assert "http://" not in text and "https://" not in text, path.name  # own origin only
        sinks += [(path.name, a) for a in re.findall(r"(?:inner|outer)HTML\s*=\s*([^;]*)", text)]
    # One HTML sink in the whole page: setHtml(node, html), given only the server's sanitized
    # rendering (markup.js's renderHtml, which live.js and markup.js call).
    assert sinks == [("dom.js", "html")]
    code = {
        p.name: re.sub(r"^\s*//.*$", "", p.read_text("utf-8"), flags=re.M)
        for p in STATIC.glob("*.js")
    }
    assert sorted(n for n, text in code.items() if "setHtml(" in text) == [
        "dom.js",
        "live.js",
        "markup.js",
    ]
    assert sorted(n for n, text in code.items() if "renderHtml(" in text) == [
        "live.js",
        "markup.js",
    ]


# ==== In the browser ====


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    pytest.importorskip("fastapi", reason="the server extra (chatfmt[server]) is not installed")
    pytest.importorskip("uvicorn", reason="the server extra (chatfmt[server]) is not installed")
    from chatfmt.tokenizers import load_tokenizer

    from .helpers import build_app, live_server

    app, _ = build_app(load_tokenizer("qwen2.5"), delay=0.02)
    with live_server(app) as url:
        yield url


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("Playwright for Python is not installed (pip install playwright)")
    if not CHROMIUM.exists():
        pytest.skip("Chromium is not at /usr/bin/chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium: Any, served: str) -> Iterator[Any]:
    """The chat page, loaded; fails the test on any page or console error."""
    from playwright.sync_api import expect

    context = chromium.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on(
        "console",
        lambda msg: problems.append(f"console: {msg.text}") if msg.type == "error" else None,
    )
    page.goto(served)
    expect(page.locator("#model")).to_have_text("fake-qwen · qwen2.5")
    yield page
    context.close()
    assert not problems, problems


def _send_and_wait(page: Any, text: str) -> None:
    from playwright.sync_api import expect

    page.locator("#prompt").fill(text)
    page.locator("#prompt").press("Enter")
    expect(page.locator("#stop")).to_be_enabled()
    expect(page.locator("#stop")).to_be_disabled(timeout=30_000)


SSE = """async (chunks) => {
  const { readEvents } = await import("/static/sse.js");
  const bytes = chunks.map((c) => new Uint8Array(c));
  const body = new ReadableStream({
    start(controller) { bytes.forEach((b) => controller.enqueue(b)); controller.close(); },
  });
  const events = [];
  for await (const ev of readEvents(body)) events.push(ev);
  return events;
}"""


@pytest.mark.slow
def test_sse_module_parses_events_split_anywhere(page: Any) -> None:
    stream = (
        ': a comment\n\ndata: {"type": "text", "text": "caf\u00e9"}\n\n'
        'event: x\ndata: {"type": "turn",\ndata: "messages": []}\n\n'
        'data:{"type":"done"}\n\n'
        'data: {"type": "text", "text": "never finished"}'
    ).encode()
    cut = stream.index("\u00e9".encode()) + 1  # inside the two bytes of "é"
    chunks = [stream[:5], stream[5:cut], stream[cut : cut + 30], stream[cut + 30 :]]
    events = page.evaluate(SSE, [list(c) for c in chunks])
    assert events == [
        {"type": "text", "text": "caf\u00e9"},
        {"type": "turn", "messages": []},
        {"type": "done"},
    ]


# Records the page's POST /api/markdown requests: when each began and ended, the text it
# carried, and how many were in flight when it began.
RECORD_RENDERS = """() => {
  const log = [];
  let inflight = 0;
  const original = window.fetch;
  window.__renders = log;
  window.fetch = async (url, options) => {
    if (!String(url).endsWith("/api/markdown")) return original(url, options);
    const text = JSON.parse(options.body).text;
    const entry = { start: performance.now(), end: null, inflight, text };
    log.push(entry);
    inflight += 1;
    try {
      const res = await original(url, options);
      await res.clone().json();  // the page reads the body too: in flight until then
      return res;
    } finally {
      inflight -= 1;
      entry.end = performance.now();
    }
  };
}"""

LIVE = """async () => {
  const { LiveMarkdown } = await import("/static/live.js");
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const body = document.createElement("div");
  let paints = 0;
  const live = new LiveMarkdown(body, () => { paints += 1; });
  live.append("| a | b |\\n|---|---|\\n| 1 | 2 |\\n\\n**x**");
  // Before any HTML came: the text itself, as text.
  const first = { plain: body.classList.contains("plain"), children: body.children.length,
                  text: body.textContent };
  const began = performance.now();
  for (let i = 0; i < 60; i++) {  // 1.2 s of deltas, 50 a second
    live.append(" w" + i);
    await sleep(20);
  }
  const elapsed = performance.now() - began;
  await live.flush();
  const shown = { html: body.innerHTML, plain: body.classList.contains("plain") };
  await live.flush();  // nothing new: no request
  return { first, shown, elapsed, text: live.text, renders: window.__renders };
}"""


@pytest.mark.slow
def test_streamed_message_is_rendered_by_the_server_a_few_times_a_second(page: Any) -> None:
    page.evaluate(RECORD_RENDERS)
    out = page.evaluate(LIVE)
    assert out["first"] == {
        "plain": True,
        "children": 0,
        "text": "| a | b |\n|---|---|\n| 1 | 2 |\n\n**x**",
    }
    assert not out["shown"]["plain"]
    assert out["shown"]["html"].startswith("<table>\n<thead>\n<tr>\n<th>a</th>")
    assert out["shown"]["html"].endswith(
        "<strong>x</strong> " + " ".join(f"w{i}" for i in range(60)) + "</p>\n"
    )
    renders = out["renders"]
    assert all(r["inflight"] == 0 for r in renders), renders  # one request at a time
    for before, after in itertools.pairwise(renders):
        assert after["start"] >= before["end"]
    # At most one start per 250 ms while the text streams (the last, at flush, may be sooner),
    # each with the whole text as it was then: longer and longer, the last one all of it.
    streaming = renders[:-1]
    for before, after in itertools.pairwise(streaming):
        assert after["start"] - before["start"] >= 245, renders
    assert 3 <= len(streaming) <= 1 + out["elapsed"] / 250, renders
    texts = [r["text"] for r in renders]
    assert all(out["text"].startswith(t) for t in texts)
    assert [len(t) for t in texts] == sorted({len(t) for t in texts})
    assert texts[-1] == out["text"]


WATCH = """() => {
  const first = document.querySelector(".msg.assistant .content");
  first.dataset.mark = "kept";
  const w = { first, firstHtml: first.innerHTML, onFirst: 0, renders: 0, on: true };
  window.__watch = w;
  const observer = new MutationObserver((records) => {
    for (const r of records) {
      if (first.closest(".msg").contains(r.target)) w.onFirst += 1;
      else if (r.type === "childList" && r.target.matches(".msg.assistant .content")) {
        w.renders += 1;
      }
    }
  });
  observer.observe(document.getElementById("log"),
    { subtree: true, childList: true, characterData: true, attributes: true });
  w.observer = observer;
}"""

REPORT = """() => {
  const w = window.__watch;
  w.on = false;
  w.observer.takeRecords();
  w.observer.disconnect();
  const contents = document.querySelectorAll(".msg.assistant .content");
  return {
    same: contents[0] === w.first && contents[0].dataset.mark === "kept",
    unchanged: contents[0].innerHTML === w.firstHtml,
    onFirst: w.onFirst, renders: w.renders, count: contents.length,
  };
}"""


@pytest.mark.slow
def test_finished_message_is_not_rerendered_while_a_later_one_streams(page: Any) -> None:
    _send_and_wait(page, "hello")
    page.evaluate(WATCH)
    _send_and_wait(page, "hello again")
    page.wait_for_timeout(100)  # let the observer deliver the last records
    report = page.evaluate(REPORT)
    assert report["count"] == 2
    assert report["same"] and report["unchanged"]
    assert report["onFirst"] == 0  # not one mutation inside the finished message
    # The new message did stream: shown as text, then as the server's HTML (live.js's own
    # test bounds how often).
    assert report["renders"] >= 2, report
    assert page.locator(".msg.assistant .content").last.locator("strong").inner_text() == "bold"


@pytest.mark.slow
def test_new_chat_during_a_reply_keeps_the_conversations_apart(page: Any) -> None:
    from playwright.sync_api import expect

    page.locator("#prompt").fill("hello")
    page.locator("#prompt").press("Enter")
    expect(page.locator("#stop")).to_be_enabled()
    old_id = page.evaluate("window.chatfmt.state.id")
    page.locator("#new-chat").click()
    new_id = page.evaluate("window.chatfmt.state.id")
    assert new_id != old_id
    page.wait_for_timeout(500)  # the stopped run settles
    assert page.evaluate("window.chatfmt.state.messages") == []
    assert page.locator("#log .msg").count() == 0
    expect(page.locator("#send")).to_be_enabled()
    stored = page.evaluate(f"JSON.parse(localStorage.getItem('chatfmt.conv.{old_id}'))")
    assert stored["messages"][0] == {"role": "user", "content": "hello"}
    page.reload()
    assert page.evaluate("window.chatfmt.state.id") == new_id
    assert page.evaluate("window.chatfmt.state.messages") == []
