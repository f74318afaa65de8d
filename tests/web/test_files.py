"""Files in and out of a conversation's interpreter: the path checks against traps the
sandboxed code could set (links to host files, swapped directories), and the routes, over a
real sandboxed kernel."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server extra (chatfmt[server]) is not installed")

from chatfmt.tokenizers.base import Tokenizer
from chatfmt.web.files import FileError, check_name, list_files, open_download, save_upload

from .helpers import build_app

pytestmark = pytest.mark.anyio

CID = "conv-files-0001"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer("qwen2.5")


# ==== Paths ====


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../x", "a/b", "/etc/passwd", ".hidden", "a\\b", "x\x00y", "é" * 200]
)
def test_only_plain_names_are_accepted(name: str) -> None:
    with pytest.raises(FileError, match="plain name"):
        check_name(name)


def test_an_upload_replaces_a_planted_link_instead_of_writing_through_it(tmp_path: Path) -> None:
    root, target = tmp_path / "work", tmp_path / "host-file"
    root.mkdir()
    target.write_text("host data")
    (root / "data.csv").symlink_to(target)
    save_upload(root, "data.csv", b"a,b\n1,2\n")
    assert target.read_text() == "host data"
    assert (
        not (root / "data.csv").is_symlink() and (root / "data.csv").read_bytes() == b"a,b\n1,2\n"
    )


def test_downloads_never_follow_links(tmp_path: Path) -> None:
    root, secret = tmp_path / "work", tmp_path / "secret"
    (root / "sub").mkdir(parents=True)
    secret.write_text("host secret")
    (root / "ok.txt").write_text("fine")
    (root / "sub" / "deep.txt").write_text("deep")
    (root / "link.txt").symlink_to(secret)
    (root / "dirlink").symlink_to(tmp_path)
    chunks, size, headers = open_download(root, "ok.txt")
    assert b"".join(chunks) == b"fine" and size == 4
    assert headers["Content-Disposition"].startswith("attachment;")
    assert b"".join(open_download(root, "sub/deep.txt")[0]) == b"deep"
    for bad in ("link.txt", "dirlink/secret", "../secret", "sub/../../secret", "sub", "nope"):
        with pytest.raises(FileError) as info:
            open_download(root, bad)
        assert info.value.status == 404
    listed = {f["name"] for f in list_files(root)}
    assert listed == {"ok.txt", "sub/deep.txt"}  # links are not listed


# ==== Routes, over a real sandboxed kernel ====


@pytest.fixture
def app(tok: Tokenizer) -> Any:
    pytest.importorskip("ipykernel", reason="needs the jupyter extra")
    from chatfmt.interpreter import JupyterInterpreter

    app, _ = build_app(
        tok, interpreter_factory=lambda: JupyterInterpreter(timeout=30), max_upload_bytes=1000
    )
    return app


async def _with(app: Any, fn: Any) -> Any:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as c:
        # The lifespan closes the kernels (as at server shutdown).
        async with app.router.lifespan_context(app):
            return await fn(c)


async def test_upload_list_download(app: Any) -> None:
    async def run(c: httpx.AsyncClient) -> None:
        r = await c.get(f"/api/files/{CID}")
        assert r.status_code == 200 and r.json() == {"directory": None, "files": []}
        body = b"x,y\n1,2\n3,4\n"
        r = await c.post(
            f"/api/files/{CID}/data.csv",
            content=body,
            headers={"Content-Type": "application/octet-stream"},
        )
        assert r.status_code == 200, r.text
        saved = r.json()
        assert saved["name"] == "data.csv" and saved["size"] == len(body)
        assert Path(saved["path"]).read_bytes() == body
        # What the page sends the model: where the file is and how to read it.
        assert (
            saved["note"]
            == f"Uploaded file: {saved['path']} (read it with Python, e.g. pandas.read_csv)"
        )
        # The kernel of this conversation sees it where the model is told it is.
        sessions = app.state.chatfmt_web_sessions
        async with sessions.use(CID) as interp:
            res = interp.execute(
                f"import pandas as pd\nlen(pd.read_csv({saved['path']!r}))\n"
                "open('out.txt', 'w').write('made by code')"
            )
            assert res.error is None
        r = await c.get(f"/api/files/{CID}")
        names = {f["name"] for f in r.json()["files"]}
        assert names == {"data.csv", "out.txt"}
        r = await c.get(f"/api/files/{CID}/out.txt")
        assert r.status_code == 200 and r.content == b"made by code"
        assert r.headers["content-disposition"].startswith("attachment;")
        assert r.headers["x-content-type-options"] == "nosniff"

    await _with(app, run)


async def test_bad_uploads_are_refused_with_the_fix(app: Any) -> None:
    async def run(c: httpx.AsyncClient) -> None:
        octet = {"Content-Type": "application/octet-stream"}
        r = await c.post(f"/api/files/{CID}/big.bin", content=b"x" * 1001, headers=octet)
        assert r.status_code == 413 and "upload limit" in r.json()["error"]["message"]
        r = await c.post(f"/api/files/{CID}/.bashrc", content=b"x", headers=octet)
        assert r.status_code == 400 and "plain name" in r.json()["error"]["message"]
        r = await c.post(
            f"/api/files/{CID}/a.txt", content=b"x", headers={"Content-Type": "text/plain"}
        )
        assert r.status_code == 415
        r = await c.post(
            f"/api/files/{CID}/a.txt",
            content=b"x",
            headers={**octet, "Origin": "http://evil.example"},
        )
        assert r.status_code == 403
        r = await c.get(f"/api/files/{CID}/a.txt", headers={"Host": "evil.example"})
        assert r.status_code == 403
        r = await c.get("/api/files/bad!/x")
        assert r.status_code == 400

    await _with(app, run)


async def test_a_link_the_code_plants_is_not_served(app: Any, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret")
    os.chmod(secret, 0o644)

    async def run(c: httpx.AsyncClient) -> None:
        sessions = app.state.chatfmt_web_sessions
        async with sessions.use(CID) as interp:
            assert (
                interp.execute(f"import os\nos.symlink({str(secret)!r}, 'leak.txt')").error is None
            )
        r = await c.get(f"/api/files/{CID}/leak.txt")
        assert r.status_code == 404 and b"host secret" not in r.content

    await _with(app, run)


async def test_odd_paths_get_clear_answers(app: Any) -> None:
    async def run(c: httpx.AsyncClient) -> None:
        octet = {"Content-Type": "application/octet-stream"}
        sessions = app.state.chatfmt_web_sessions
        async with sessions.use(CID) as interp:
            assert interp.execute("import os\nos.mkdir('taken')").error is None
        r = await c.post(f"/api/files/{CID}/taken", content=b"x", headers=octet)
        assert r.status_code == 409 and "cannot save 'taken'" in r.json()["error"]["message"]
        r = await c.get(f"/api/files/{CID}/a%00b")
        assert r.status_code == 404

    await _with(app, run)


async def test_an_upload_past_the_disk_cap_is_refused(tok: Tokenizer) -> None:
    pytest.importorskip("ipykernel", reason="needs the jupyter extra")
    from chatfmt.interpreter import JupyterInterpreter
    from chatfmt.interpreter.sandbox import Limits, detect

    box = detect("auto", limits=Limits(memory_mb=1024, disk_mb=1))
    app, _ = build_app(
        tok,
        interpreter_factory=lambda: JupyterInterpreter(timeout=30, sandbox=box),
        max_upload_bytes=2 * 1024 * 1024,
    )

    async def run(c: httpx.AsyncClient) -> None:
        octet = {"Content-Type": "application/octet-stream"}
        part = os.urandom(600 * 1024)
        r = await c.post(f"/api/files/{CID}/one.bin", content=part, headers=octet)
        assert r.status_code == 200, r.text
        r = await c.post(f"/api/files/{CID}/two.bin", content=part, headers=octet)
        assert r.status_code == 507, r.text
        error = r.json()["error"]
        assert error["code"] == "disk_limit" and "--kernel-disk-mb" in error["message"]
        assert [f["name"] for f in (await c.get(f"/api/files/{CID}")).json()["files"]] == [
            "one.bin"
        ]

    await _with(app, run)
