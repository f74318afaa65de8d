"""The web chat in headless Chromium: a phone-width layout, what each mode shows, each mode's
default system prompt, and Markdown rendered by the server (tables, nested lists, nothing
executable).

The same requirements as test_e2e.py (Playwright for Python, Debian's Chromium); its helpers
are used here. The phone screenshot is saved in the test's tmp_path, and also under
``test-artifacts/web/`` beside test_e2e.py's.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chatfmt.prompts import INTERPRETER_PROMPT, TOOLS_PROMPT

# test_e2e.py skips itself (and so this module) without Playwright or Chromium.
from .test_e2e import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, _page, send, wait_idle

from playwright.sync_api import Browser, Page, expect, sync_playwright  # isort: skip

pytestmark = pytest.mark.slow

PHONE = {"width": 390, "height": 844}
#: What `chatfmt serve` shows for a bubblewrap sandbox (Sandbox.describe()'s shape).
SANDBOX = (
    "sandbox on (bubblewrap): no network, only its working directory writable and no other "
    "host files, own process namespace; limits: memory 2048 MB (real usage), CPU 60 s, "
    "256 tasks, files up to 512 MB, disk 1024 MB per working directory"
)


class NeverRuns:
    """An interpreter these tests never call (interpreter mode needs one to be offered)."""

    def execute(self, code: str, timeout: float | None = None) -> Any:
        raise AssertionError("no code runs in these tests")


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    from chatfmt.tokenizers import load_tokenizer

    from .helpers import build_app, live_server

    app, _ = build_app(
        load_tokenizer("qwen2.5"), delay=0.005, interpreter_factory=NeverRuns, sandbox=SANDBOX
    )
    with live_server(app) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM.exists()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser, url: str) -> Iterator[Page]:
    """The page (a fresh profile), failing the test on any page error, console error or dialog
    (an alert() that ran)."""
    dialogs: list[str] = []
    for page in _page(browser, url):
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        yield page
    assert dialogs == []


def overflow(page: Page) -> dict[str, Any]:
    return dict(
        page.evaluate(
            """() => ({
              scrollWidth: document.scrollingElement.scrollWidth,
              innerWidth: window.innerWidth,
              bodyWidth: document.body.scrollWidth,
            })"""
        )
    )


def in_view(page: Page, selector: str) -> bool:
    """The whole element is inside the viewport (nothing to scroll to reach it)."""
    return bool(
        page.locator(selector).evaluate(
            """e => { const r = e.getBoundingClientRect();
                      return r.width > 0 && r.height > 0 && r.top >= 0 && r.left >= 0
                        && r.bottom <= innerHeight && r.right <= innerWidth; }"""
        )
    )


def test_phone_layout_and_what_each_mode_shows(browser: Browser, url: str, tmp_path: Path) -> None:
    context = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    expect(page.locator("#model")).to_have_text("fake-qwen · qwen2.5")

    # Chat mode: no interpreter controls; the composer fits.
    expect(page.get_by_label("Chat", exact=True)).to_be_checked()
    for selector in ("#files", "#sandbox", "#upload"):
        expect(page.locator(selector)).to_be_hidden()
    assert in_view(page, "#prompt") and in_view(page, "#send")
    sizes = overflow(page)
    assert sizes["scrollWidth"] <= sizes["innerWidth"] == PHONE["width"], sizes

    # A reply with a wide table and a long line of code: each scrolls inside itself.
    send(page, "show me a table")
    wait_idle(page)
    reply = page.locator(".msg.assistant .content").last
    expect(reply.locator("table")).to_have_count(2)
    sizes = overflow(page)
    assert sizes["scrollWidth"] <= sizes["innerWidth"], sizes
    assert sizes["bodyWidth"] <= sizes["innerWidth"], sizes
    for selector in ("table >> nth=1", "pre"):
        box = reply.locator(selector)
        scroll = box.evaluate(
            "e => ({ scroll: e.scrollWidth, client: e.clientWidth, "
            "right: e.getBoundingClientRect().right, overflow: getComputedStyle(e).overflowX })"
        )
        assert scroll["scroll"] > scroll["client"], (selector, scroll)  # wider than its box
        assert scroll["overflow"] == "auto" and scroll["right"] <= PHONE["width"], scroll
    assert in_view(page, "#prompt") and in_view(page, "#send")
    page.locator("#main").evaluate("m => { m.scrollTop = m.scrollHeight; }")
    shot = tmp_path / "chat-390.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000

    # Interpreter mode: the sandbox's one-line summary and the upload button appear.
    page.get_by_label("Code interpreter").check()
    for selector in ("#files", "#sandbox", "#upload"):
        expect(page.locator(selector)).to_be_visible()
    summary = page.locator("#sandbox summary")
    expect(summary).to_have_text("Code runs in: sandbox on (bubblewrap)")
    assert summary.evaluate("s => s.getBoundingClientRect().height") < 40  # one line
    detail = page.locator("#sandbox-detail")
    expect(detail).to_be_hidden()
    summary.click()
    expect(detail).to_have_text("Code runs in: " + SANDBOX)
    summary.click()
    assert overflow(page)["scrollWidth"] <= PHONE["width"]
    assert in_view(page, "#prompt") and in_view(page, "#send")
    page.screenshot(path=str(tmp_path / "interpreter-390.png"))

    # Back to chat: hidden again.
    page.get_by_label("Chat", exact=True).check()
    for selector in ("#files", "#sandbox", "#upload"):
        expect(page.locator(selector)).to_be_hidden()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for name in ("chat-390.png", "interpreter-390.png"):
        shutil.copy(tmp_path / name, ARTIFACTS / name)
    context.close()
    assert errors == []


def test_tables_and_nested_lists_render_and_markup_stays_inert(page: Page) -> None:
    send(page, "a table please")
    wait_idle(page)
    reply = page.locator(".msg.assistant .content").last
    table = reply.locator("table").first
    expect(table.locator("th")).to_have_text(["name", "value"])
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(table.locator("td").nth(3)).to_have_text("22")
    expect(table.locator("td").nth(3)).to_have_class("align-right")
    assert table.locator("td").nth(3).evaluate("e => getComputedStyle(e).textAlign") == "right"
    # - fruit / - apple, - pear / 1. ripe, 2. green: a list in a list in a list.
    expect(reply.locator("ul > li > ul > li")).to_have_count(2)
    expect(reply.locator("ul > li > ul > li > ol > li")).to_have_text(["ripe", "green"])
    expect(reply.locator(":scope > ul > li")).to_have_count(2)
    # The fence's language is shown as text above its code.
    expect(reply.locator("pre > .lang")).to_have_text("python")
    expect(reply.locator("pre > code.language-python")).to_contain_text("a long line of code")
    # Raw HTML is text; the javascript: link is text; the web link opens a new tab.
    expect(reply).to_contain_text("<img src=x onerror=alert(1)>")
    expect(reply).to_contain_text("[click me](javascript:alert(2))")
    expect(reply.locator("img, script, iframe")).to_have_count(0)
    hrefs = reply.locator("a").evaluate_all("as => as.map(a => a.getAttribute('href'))")
    assert hrefs == ["https://example.com"]
    handlers = reply.evaluate(
        "r => [...r.querySelectorAll('*')].flatMap(e => [...e.attributes].map(a => a.name))"
        ".filter(n => n.startsWith('on') || n === 'style' || n === 'src')"
    )
    assert handlers == []
    link = reply.locator("a")
    expect(link).to_have_attribute("target", "_blank")
    expect(link).to_have_attribute("rel", "noopener noreferrer")
    page.wait_for_timeout(200)  # an onerror would have fired by now (the page fixture checks)
    # After a reload the stored reply renders the same way.
    page.reload()
    reply = page.locator(".msg.assistant .content").last
    expect(reply.locator("ul > li > ul > li > ol > li")).to_have_text(["ripe", "green"])
    expect(reply.locator("img")).to_have_count(0)
    # The user's own message is shown as the text they typed.
    expect(page.locator(".msg.user .content")).to_have_class("content plain")


def test_each_mode_prefills_its_default_system_prompt(page: Page) -> None:
    system = page.get_by_label("System prompt")
    preview = page.locator("#system-preview")
    expect(system).to_have_value("")
    expect(preview).to_have_text(": none")
    page.get_by_label("Tools").check()
    expect(system).to_have_value(TOOLS_PROMPT)
    expect(preview).to_have_text(": " + TOOLS_PROMPT)
    assert preview.is_visible()  # shown even while the box is closed
    page.get_by_label("Code interpreter").check()
    expect(system).to_have_value(INTERPRETER_PROMPT)
    page.get_by_label("Tools").check()
    expect(system).to_have_value(TOOLS_PROMPT)

    # A reader who types nothing sends the default.
    with page.expect_request("**/api/agent") as request:
        send(page, "hello")
    assert request.value.post_data_json["system"] == TOOLS_PROMPT
    assert request.value.post_data_json["mode"] == "tools"
    wait_idle(page)

    # The reader's own prompt survives mode changes and a reload.
    page.locator("#system-box summary").click()
    system.fill("Answer like a pirate.")
    page.get_by_label("Chat", exact=True).check()
    expect(system).to_have_value("Answer like a pirate.")
    page.get_by_label("Code interpreter").check()
    expect(system).to_have_value("Answer like a pirate.")
    page.reload()
    expect(page.get_by_label("System prompt")).to_have_value("Answer like a pirate.")

    # Emptied, it follows the mode again; chat's default is none.
    page.get_by_label("System prompt").fill("")
    page.get_by_label("Tools").check()
    expect(page.get_by_label("System prompt")).to_have_value(TOOLS_PROMPT)
    page.get_by_label("Chat", exact=True).check()
    expect(page.get_by_label("System prompt")).to_have_value("")
