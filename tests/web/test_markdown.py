"""Markdown to safe HTML (web/markdown.py) and the page's ``POST /api/markdown``."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server extra (chatfmt[server]) is not installed")
pytest.importorskip("nh3", reason="the server extra (chatfmt[server]) is not installed")

from chatfmt.tokenizers.base import Tokenizer
from chatfmt.web.markdown import render_markdown
from chatfmt.web.schemas import MAX_MARKDOWN_CHARS

from .helpers import build_app


def test_tables_keep_their_alignment_as_classes() -> None:
    html = render_markdown("| name | n | mid |\n|:--|--:|:-:|\n| a | 1 | x |\n")
    assert html == (
        "<table>\n<thead>\n<tr>\n"
        '<th class="align-left">name</th>\n<th class="align-right">n</th>\n'
        '<th class="align-center">mid</th>\n</tr>\n</thead>\n<tbody>\n<tr>\n'
        '<td class="align-left">a</td>\n<td class="align-right">1</td>\n'
        '<td class="align-center">x</td>\n</tr>\n</tbody>\n</table>\n'
    )
    assert "style" not in html  # the page's CSP would block it


def test_nested_lists() -> None:
    html = render_markdown("- fruit\n  - apple\n    1. ripe\n    2. green\n- nuts\n\n3. three\n")
    assert html == (
        "<ul>\n<li>fruit\n<ul>\n<li>apple\n<ol>\n<li>ripe</li>\n<li>green</li>\n</ol>\n</li>\n"
        "</ul>\n</li>\n<li>nuts</li>\n</ul>\n"
        '<ol start="3">\n<li>three</li>\n</ol>\n'
    )


def test_code_fences_keep_their_language_and_escape_their_text() -> None:
    assert render_markdown("```python\nprint('<b>')\n```") == (
        "<pre><code class=\"language-python\">print('&lt;b&gt;')\n</code></pre>\n"
    )
    assert 'class="language-c++"' in render_markdown("```c++\nint x;\n```")
    # An info string that is not a plain word names no class.
    for info in ('x"onclick="y', "a<b", "x" * 41):
        html = render_markdown(f"```{info}\ncode\n```")
        assert html == "<pre><code>code\n</code></pre>\n", info


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "<img src=x onerror=alert(1)>",
            "<p>&lt;img src=x onerror=alert(1)&gt;</p>\n",
        ),
        ("<script>alert(1)</script>", "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>\n"),
        ("a <b>bold?</b> <!-- c -->", "<p>a &lt;b&gt;bold?&lt;/b&gt; &lt;!-- c --&gt;</p>\n"),
        (
            "<div onclick=x>\nblock\n</div>",
            "<p>&lt;div onclick=x&gt;<br>\nblock<br>\n&lt;/div&gt;</p>\n",
        ),
    ],
)
def test_raw_html_is_text(source: str, expected: str) -> None:
    assert render_markdown(source) == expected


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        "data:text/html,<script>x</script>",
        "vbscript:x",
        "/relative/path",
        "file:///etc/passwd",
    ],
)
def test_links_other_than_web_and_mail_stay_text(url: str) -> None:
    html = render_markdown(f"[click]({url}) <{url}>")
    assert "<a" not in html and "href" not in html, html
    assert html.startswith("<p>[click](")


class _Links(HTMLParser):
    """Each ``<a>``'s attributes (whose order the sanitizer does not fix) and text."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[dict[str, str | None], str]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "a":
            self.links.append((dict(attrs), ""))

    def handle_data(self, data: str) -> None:
        if self.links and self.tags and self.tags[-1] == "a":
            attrs, text = self.links[-1]
            self.links[-1] = (attrs, text + data)

    def handle_endtag(self, tag: str) -> None:
        self.tags.append("/" + tag)


def links_of(html: str) -> tuple[list[tuple[dict[str, str | None], str]], list[str]]:
    parser = _Links()
    parser.feed(html)
    return parser.links, parser.tags


def _link(href: str) -> dict[str, str | None]:
    return {"href": href, "rel": "noopener noreferrer", "target": "_blank"}


def test_web_and_mail_links_open_in_a_new_tab_without_the_opener() -> None:
    html = render_markdown(
        "[a](https://example.com/x?q=1&r=2) <http://b.example> [m](mailto:x@y.z)"
    )
    assert links_of(html) == (
        [
            (_link("https://example.com/x?q=1&r=2"), "a"),
            (_link("http://b.example"), "http://b.example"),
            (_link("mailto:x@y.z"), "m"),
        ],
        ["p", "a", "/a", "a", "/a", "a", "/a", "/p"],
    )


def test_images_become_links_never_fetches() -> None:
    html = render_markdown("![a plot](https://tracker.example/pixel.png)")
    assert "<img" not in html and html.startswith("<p>!<a ")
    assert links_of(html) == (
        [(_link("https://tracker.example/pixel.png"), "a plot")],
        ["p", "a", "/a", "/p"],
    )


def test_inline_markup_headings_and_line_breaks() -> None:
    html = render_markdown("# Title\n###### Six\n**b** *i* ~~gone~~ `c<d`\nnext line\n\n---\n> q")
    assert html == (
        "<h2>Title</h2>\n<h6>Six</h6>\n"
        "<p><strong>b</strong> <em>i</em> <del>gone</del> <code>c&lt;d</code><br>\n"
        "next line</p>\n<hr>\n<blockquote>\n<p>q</p>\n</blockquote>\n"
    )


# ==== POST /api/markdown ====


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer("qwen2.5")


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


@pytest.mark.anyio
async def test_endpoint_renders(tok: Tokenizer) -> None:
    app, engine = build_app(tok)
    async with client(app) as c:
        r = await c.post("/api/markdown", json={"text": "**hi** <i>x</i>\n\n| a |\n|---|\n| 1 |"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {
        "html": "<p><strong>hi</strong> &lt;i&gt;x&lt;/i&gt;</p>\n"
        "<table>\n<thead>\n<tr>\n<th>a</th>\n</tr>\n</thead>\n<tbody>\n<tr>\n<td>1</td>\n"
        "</tr>\n</tbody>\n</table>\n"
    }
    assert engine.prompts == []  # no model involved


@pytest.mark.anyio
async def test_endpoint_needs_the_api_key_and_the_page_origin(tok: Tokenizer) -> None:
    app, _ = build_app(tok, api_key="s3cret")
    body = {"text": "x"}
    async with client(app) as c:
        none = await c.post("/api/markdown", json=body)
        wrong = await c.post("/api/markdown", json=body, headers={"authorization": "Bearer no"})
        other_site = await c.post(
            "/api/markdown",
            json=body,
            headers={"authorization": "Bearer s3cret", "origin": "http://evil.example"},
        )
        ok = await c.post("/api/markdown", json=body, headers={"authorization": "Bearer s3cret"})
    assert none.status_code == wrong.status_code == 401
    assert none.json()["error"]["code"] == "invalid_api_key"
    assert other_site.status_code == 403
    assert ok.status_code == 200 and ok.json() == {"html": "<p>x</p>\n"}


@pytest.mark.anyio
async def test_endpoint_size_limit(tok: Tokenizer) -> None:
    app, _ = build_app(tok)
    async with client(app) as c:
        at_limit = await c.post("/api/markdown", json={"text": "a" * MAX_MARKDOWN_CHARS})
        over = await c.post("/api/markdown", json={"text": "a" * (MAX_MARKDOWN_CHARS + 1)})
    assert at_limit.status_code == 200
    assert over.status_code == 413
    error = over.json()["error"]
    assert error["param"] == "text" and error["code"] == "text_too_long"
    assert error["message"] == (
        f"text is {MAX_MARKDOWN_CHARS + 1:,} characters; /api/markdown renders at most "
        f"{MAX_MARKDOWN_CHARS:,}"
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{}", "text: Field required"),
        ('{"text": 5}', "text: Input should be a valid string"),
        ('{"text": "a", "extra": 1}', "extra: Extra inputs are not permitted"),
        ("[1]", "the request body must be a JSON object, got list"),
        ("{not json", "the request body is not valid JSON"),
        ('{"text": "\\ud800"}', "text contains a lone surrogate"),
    ],
)
async def test_endpoint_body_errors_are_400s_that_say_what_is_wrong(
    tok: Tokenizer, content: str, message: str
) -> None:
    app, _ = build_app(tok)
    async with client(app) as c:
        r = await c.post(
            "/api/markdown", content=content, headers={"content-type": "application/json"}
        )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"].startswith(message), r.text


@pytest.mark.anyio
async def test_endpoint_needs_a_json_body(tok: Tokenizer) -> None:
    app, _ = build_app(tok)
    async with client(app) as c:
        r = await c.post("/api/markdown", content=json.dumps({"text": "x"}))
    assert r.status_code == 415
    assert r.json()["error"]["code"] == "unsupported_media_type"


@pytest.mark.anyio
async def test_endpoint_is_in_the_openapi_document(tok: Tokenizer) -> None:
    app, _ = build_app(tok)
    async with client(app) as c:
        doc = (await c.get("/openapi.json")).json()
    post = doc["paths"]["/api/markdown"]["post"]
    body = post["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/MarkdownRequest"}
    ok = post["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/MarkdownResponse"}
    assert {"400", "401", "403", "413", "415"} <= set(post["responses"])
    schemas = doc["components"]["schemas"]
    assert schemas["MarkdownRequest"]["required"] == ["text"]
    assert schemas["MarkdownResponse"]["properties"]["html"]["type"] == "string"
