"""The web chat in headless Chromium against a real uvicorn server over a scripted FakeEngine.

Needs Playwright for Python (``pip install playwright``; its own browser download is not used)
and Debian's Chromium at /usr/bin/chromium (``apt-get install chromium``). The interpreter test
uses a real Jupyter kernel when ``jupyter_client`` and ``ipykernel`` are installed. Screenshots
go to ``test-artifacts/web/``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra (chatfmt[server]) is not installed")
pytest.importorskip("uvicorn", reason="the server extra (chatfmt[server]) is not installed")

CHROMIUM = Path("/usr/bin/chromium")
if importlib.util.find_spec("playwright") is None:
    pytest.skip(
        "Playwright for Python is not installed (pip install playwright)", allow_module_level=True
    )
if not CHROMIUM.exists():
    pytest.skip(
        "Chromium is not at /usr/bin/chromium (apt-get install chromium)", allow_module_level=True
    )

from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright  # noqa: E402

from chatfmt.context import Budget  # noqa: E402
from chatfmt.dialects import get_dialect  # noqa: E402
from chatfmt.engines.fake import FakeEngine  # noqa: E402
from chatfmt.tokenizers.base import Tokenizer  # noqa: E402

from .helpers import HARMONY_REPLY, HELLO_REPLY, REASONING, build_app, live_server  # noqa: E402

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1200, "height": 900}
PHONE = {"width": 375, "height": 740}


def _interpreter_factory() -> tuple[Callable[[], Any], str]:
    """A real Jupyter kernel if available, else a stand-in that returns a real matplotlib PNG."""
    if importlib.util.find_spec("jupyter_client") and importlib.util.find_spec("ipykernel"):
        from chatfmt.interpreter import JupyterInterpreter

        return (lambda: JupyterInterpreter(timeout=60).start()), "jupyter"

    class PlotOnly:
        """Draws a fixed plot (it never runs the model's code): exercises the page only."""

        def execute(self, code: str, timeout: float | None = None) -> Any:
            import io

            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            from chatfmt.interpreter import ExecutionResult

            fig = plt.figure()
            plt.plot([1, 2, 3], [1, 4, 9])
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
            plt.close(fig)
            return ExecutionResult(text="plotted", images=[buf.getvalue()])

    return PlotOnly, "stand-in"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer("qwen2.5")


@pytest.fixture(scope="module")
def server(tok: Tokenizer) -> Iterator[tuple[str, FakeEngine]]:
    factory, kind = _interpreter_factory()
    sandbox = None
    if kind == "jupyter":
        from chatfmt.interpreter.sandbox import detect

        sandbox = detect("auto").describe()  # what `chatfmt serve` shows
    from chatfmt.store import ResponseStore

    app, engine = build_app(
        tok,
        delay=0.02,
        interpreter_factory=factory,
        sandbox=sandbox,
        store=ResponseStore(":memory:"),
    )
    with live_server(app) as url:
        yield url, engine


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser, server: tuple[str, FakeEngine]) -> Iterator[Page]:
    """A fresh browser profile per test; fails the test on any page error or console error."""
    yield from _page(browser, server[0])


def _page(browser: Browser, url: str, model: str = "fake-qwen · qwen2.5") -> Iterator[Page]:
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))

    def on_console(msg: ConsoleMessage) -> None:
        if msg.type == "error" and "401" not in msg.text:  # 401: the API-key test
            problems.append(f"console error: {msg.text}")

    page.on("console", on_console)
    page.goto(url)
    expect(page.locator("#model")).to_have_text(model)
    yield page
    context.close()
    assert not problems, problems


def send(page: Page, text: str) -> None:
    page.locator("#prompt").fill(text)
    page.locator("#prompt").press("Enter")


def wait_idle(page: Page, timeout: float = 30_000) -> None:
    """Until the reply has finished (Send enabled, Stop disabled)."""
    expect(page.locator("#stop")).to_be_disabled(timeout=timeout)
    expect(page.locator("#send")).to_be_enabled()


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))


def test_streamed_reply_renders_markdown_safely(
    page: Page, server: tuple[str, FakeEngine], tok: Tokenizer
) -> None:
    send(page, "hello")
    reply = page.locator(".msg.assistant .content").last
    # Text shows while the reply is still streaming.
    expect(reply).to_contain_text("Hello!")
    expect(page.locator("#stop")).to_be_enabled()
    assert "second item" not in reply.inner_text()
    wait_idle(page)
    expect(page.locator(".msg.user")).to_have_text("Youhello")
    expect(reply.locator("strong")).to_have_text("bold")
    expect(reply.locator("em")).to_have_text("italics")
    expect(reply.locator("p code")).to_have_text("inline code")
    expect(reply.locator("li")).to_have_count(2)
    expect(reply.locator("pre code")).to_have_text("print('hi')")
    # The model's <script> is text, not markup; links are safe.
    expect(reply.locator("script")).to_have_count(0)
    expect(reply).to_contain_text("<script>alert(1)</script>")
    link = reply.locator("a")
    expect(link).to_have_attribute("href", "https://example.com")
    expect(link).to_have_attribute("rel", "noopener noreferrer")
    # The token count is the exact prompt of the stored conversation.
    budget = Budget(get_dialect("qwen2.5"), tok)
    answer = HELLO_REPLY.removesuffix("<|im_end|>")
    tokens = budget.count(
        [{"role": "user", "content": "hello"}, {"role": "assistant", "content": answer}]
    )
    expect(page.locator("#tokens")).to_have_text(f"{tokens:,} / 32,768 tokens")
    expect(page.locator("#regenerate")).to_be_enabled()
    shot(page, "chat-desktop.png")


def test_tool_call_is_shown_with_its_result(page: Page) -> None:
    page.get_by_label("Tools").check()
    tool_list = page.locator("#tool-list")
    expect(tool_list).to_be_visible()
    tool_list.locator("summary").click()
    expect(tool_list.locator("li")).to_have_count(2)
    expect(tool_list).to_contain_text("get_weather")
    expect(tool_list).to_contain_text("calculator")
    send(page, "What is the weather in Paris?")
    expect(page.get_by_text("It is demo weather in Paris.")).to_be_visible(timeout=20_000)
    wait_idle(page)
    call = page.locator("details.call")
    expect(call).to_have_count(1)
    expect(call.locator("summary")).to_contain_text("get_weather")
    expect(call.locator(".badge")).to_have_text("done")
    call.locator("summary").click()
    expect(call.locator(".args")).to_contain_text('"city": "Paris"')
    expect(call.locator(".output")).to_contain_text("demo data, not a real weather reading")
    shot(page, "tools-desktop.png")


def test_a_conversation_reopens_in_another_browser_and_is_deleted(
    browser: Browser, server: tuple[str, FakeEngine]
) -> None:
    pages = [_page(browser, server[0]) for _ in range(2)]
    first = next(pages[0])
    send(first, "hello from the first browser")
    wait_idle(first)
    history = first.locator("#history")
    expect(history).to_be_visible()
    history.locator("summary").click()
    entry = history.locator("button", has_text="hello from the first browser")
    expect(entry).to_be_visible()
    # Another browser profile (its own storage): the conversation is on the server.
    second = next(pages[1])
    expect(second.locator(".msg")).to_have_count(0)
    second.locator("#history summary").click()
    second.locator("#history button", has_text="hello from the first browser").click()
    expect(second.locator(".msg.user")).to_have_text("Youhello from the first browser")
    expect(second.locator(".msg.assistant .content").last).to_contain_text("Hello!")
    # It goes on there, and the copy on the server follows.
    send(second, "and a second message")
    wait_idle(second)
    second.get_by_role("button", name="Delete hello from the first browser").click()
    expect(
        second.locator("#history button", has_text="hello from the first browser")
    ).to_have_count(0)
    expect(second.locator(".msg")).to_have_count(0)  # the open conversation was the one deleted
    for page_iter in pages:
        with contextlib.suppress(StopIteration):
            next(page_iter)


def test_interpreter_upload_row_count_and_download(page: Page, tmp_path: Path) -> None:
    if _interpreter_factory()[1] != "jupyter":
        pytest.skip("jupyter_client / ipykernel are not installed")
    page.get_by_label("Code interpreter").check()
    files = page.locator("#files")
    expect(files).to_be_visible()
    expect(page.locator("#sandbox summary")).to_contain_text("Code runs in: sandbox")
    csv = tmp_path / "data.csv"
    csv.write_text("x,y\n" + "".join(f"{i},{i * i}\n" for i in range(37)))
    page.locator("#file-input").set_input_files(str(csv))
    expect(page.locator("#status")).to_contain_text("Uploaded data.csv")
    expect(page.locator("#file-list")).to_contain_text("data.csv")
    send(page, "How many rows does it have?")
    wait_idle(page)
    expect(page.locator(".msg.user").last).to_contain_text("Uploaded file: /")
    expect(page.locator(".msg.assistant .content").last).to_have_text("The file has 37 rows.")
    # The file the code wrote is listed and downloads with its content.
    entry = page.locator("#file-list button", has_text="summary.csv")
    expect(entry).to_be_visible()
    with page.expect_download() as download:
        entry.click()
    saved = Path(download.value.path())
    assert saved.read_text().startswith(",x,y\ncount,37.0,37.0")
    shot(page, "interpreter-files.png")


def test_interpreter_plot_appears_and_survives_reload(page: Page) -> None:
    page.get_by_label("Code interpreter").check()
    send(page, "plot the squares of 1, 2, 3")
    cell = page.locator("details.code-cell")
    # The code streams into the cell before it runs.
    expect(cell.locator(".source")).to_contain_text("plt.plot([1, 2, 3]", timeout=20_000)
    image = cell.locator("img")
    expect(image).to_have_count(1, timeout=120_000)  # the first kernel takes a while to start
    assert (image.get_attribute("src") or "").startswith("data:image/png;base64,iVBOR")
    expect(page.get_by_text("Here is the plot of the squares.")).to_be_visible(timeout=20_000)
    wait_idle(page)
    assert image.evaluate("img => img.naturalWidth") > 100
    expect(cell.locator(".output")).to_contain_text("plotted")
    expect(cell.locator(".badge")).to_have_text("done")
    shot(page, "interpreter-desktop.png")

    page.set_viewport_size(PHONE)
    page.locator("#main").evaluate("m => { m.scrollTop = m.scrollHeight; }")
    shot(page, "interpreter-375.png")
    # Nothing is wider than a phone screen.
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert page.evaluate("document.body.scrollWidth") <= PHONE["width"]

    page.reload()
    expect(page.locator(".msg.user")).to_contain_text("plot the squares")
    expect(page.locator("details.code-cell img")).to_have_count(1)
    expect(page.locator("details.code-cell .source")).to_contain_text("plt.plot([1, 2, 3]")
    expect(page.get_by_label("Code interpreter")).to_be_checked()
    expect(page.get_by_text("Here is the plot of the squares.")).to_be_visible()


def test_reload_keeps_the_conversation_and_tabs_are_separate(page: Page) -> None:
    page.locator("summary", has_text="System prompt").click()
    page.get_by_label("System prompt").fill("Answer in English.")
    send(page, "hello")
    wait_idle(page)
    page.reload()
    expect(page.locator(".msg.user")).to_have_text("Youhello")
    expect(page.locator(".msg.assistant strong")).to_have_text("bold")
    expect(page.get_by_label("System prompt")).to_have_value("Answer in English.")
    expect(page.locator("#tokens")).to_have_text(re.compile(r"^[\d,]+ / 32,768 tokens$"))

    # Another tab in the same browser has its own conversation (sessionStorage id).
    other = page.context.new_page()
    other.goto(page.url)
    expect(other.locator("#empty")).to_be_visible()
    expect(other.locator(".msg")).to_have_count(0)
    other.close()

    # New chat empties this tab, and the empty chat survives a reload.
    page.get_by_role("button", name="New chat").click()
    expect(page.locator(".msg")).to_have_count(0)
    page.reload()
    expect(page.locator(".msg")).to_have_count(0)
    expect(page.locator("#empty")).to_be_visible()


def test_stop_and_regenerate(page: Page, server: tuple[str, FakeEngine]) -> None:
    engine = server[1]
    cancelled = engine.cancelled
    send(page, "slow story please")
    reply = page.locator(".msg.assistant .content").last
    expect(reply).to_contain_text("word5")
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("#status")).to_have_text("Stopped.")
    wait_idle(page)
    deadline = time.monotonic() + 5
    while engine.cancelled == cancelled and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine.cancelled == cancelled + 1  # the server stopped generating
    kept = reply.inner_text()
    assert "word399" not in kept

    # Regenerate replaces the partial answer with a new one (stopped again here).
    page.get_by_role("button", name="Regenerate").click()
    expect(page.locator("#stop")).to_be_enabled()
    expect(page.locator(".msg.assistant .content").last).to_contain_text("word3")
    page.get_by_role("button", name="Stop").click()
    wait_idle(page)
    expect(page.locator(".msg.user")).to_have_count(1)


def test_keyboard(page: Page) -> None:
    prompt = page.locator("#prompt")
    expect(prompt).to_be_focused()
    prompt.type("line one")
    prompt.press("Shift+Enter")
    prompt.type("line two")
    expect(prompt).to_have_value("line one\nline two")
    expect(page.locator(".msg")).to_have_count(0)
    prompt.press("Enter")
    expect(page.locator(".msg.user")).to_have_text("Youline one\nline two")
    wait_idle(page)
    # Controls are reachable by keyboard and labelled.
    for label in ("Chat", "Tools", "Code interpreter", "Message", "System prompt"):
        expect(page.get_by_label(label, exact=True)).to_have_count(1)
    expect(page.locator("#log")).to_have_attribute("aria-live", "polite")


def test_reasoning_streams_into_a_collapsible_box_as_text(browser: Browser) -> None:
    from chatfmt.tokenizers import load_tokenizer

    # gpt-oss, whose analysis channel (read by the real harmony parser) is its reasoning.
    app, _ = build_app(
        load_tokenizer("o200k_harmony"),
        delay=0.02,
        dialect="harmony",
        script=[HARMONY_REPLY],
        model_name="fake-gpt-oss",
    )
    with live_server(app) as url:
        for page in _page(browser, url, model="fake-gpt-oss · harmony"):
            send(page, "hello")
            box = page.locator(".msg.assistant details.reasoning")
            summary = box.locator("summary")
            # While it streams: open, "Thinking…", above the (not yet begun) answer.
            expect(summary).to_have_text("Thinking…")
            expect(box).to_have_attribute("open", "")
            expect(box.locator(".reasoning-text")).to_contain_text("step3")
            assert box.evaluate("b => b.nextElementSibling.classList.contains('content')")
            wait_idle(page)
            # Once the answer came: collapsed to a summary, the answer rendered as Markdown.
            expect(summary).to_have_text(re.compile(r"^Thought for (\d+ s|less than a second)$"))
            expect(box).not_to_have_attribute("open", "")
            answer = page.locator(".msg.assistant .content")
            expect(answer.locator("strong")).to_have_text("Glad")
            shot(page, "reasoning-collapsed.png")
            # Expanded, it is the model's text exactly: nothing in it became markup.
            summary.click()
            text = box.locator(".reasoning-text")
            expect(text).to_be_visible()
            assert text.text_content() == REASONING
            assert text.evaluate("t => t.children.length") == 0
            expect(box.locator("img, b, strong, script")).to_have_count(0)
            shot(page, "reasoning-expanded.png")
            # It is kept with the message, so the next turn's request carries it back ...
            stored = page.evaluate("window.chatfmt.state.messages")
            assert stored[-1]["reasoning_content"] == REASONING
            # Stopped while thinking, the reasoning so far is kept too (with no answer).
            send(page, "hello again")
            thinking = page.locator(".msg.assistant details.reasoning").nth(1)
            expect(thinking.locator(".reasoning-text")).to_contain_text("step1")
            page.get_by_role("button", name="Stop").click()
            wait_idle(page)
            expect(thinking.locator("summary")).to_have_text(re.compile(r"^Thought for "))
            stopped = page.evaluate("window.chatfmt.state.messages")[-1]
            assert stopped["content"] is None
            assert REASONING.startswith(stopped["reasoning_content"])
            # ... and a reload draws both again, collapsed and still plain text.
            page.reload()
            boxes = page.locator(".msg.assistant details.reasoning")
            expect(boxes).to_have_count(2)
            expect(boxes.locator("summary")).to_have_text(["Thoughts", "Thoughts"])
            expect(boxes.first).not_to_have_attribute("open", "")
            assert boxes.first.locator(".reasoning-text").text_content() == REASONING
            expect(boxes.locator("img, b, strong")).to_have_count(0)


def test_api_key_is_asked_for(browser: Browser, tok: Tokenizer) -> None:
    app, _ = build_app(tok, api_key="s3cret")
    with live_server(app) as url:
        for page in _page(browser, url, model="API key needed"):
            form = page.locator("#key-form")
            expect(form).to_be_visible()
            expect(page.get_by_label("This server needs an API key")).to_be_focused()
            page.get_by_label("This server needs an API key").fill("s3cret")
            page.get_by_role("button", name="Use key").click()
            expect(page.locator("#model")).to_have_text("fake-qwen · qwen2.5")
            expect(form).to_be_hidden()
            send(page, "hello")
            wait_idle(page)
            expect(page.locator(".msg.assistant strong")).to_have_text("bold")
