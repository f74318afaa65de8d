"""How much context an embedded model gets when nobody said: what it was trained for, where the
machine's memory holds the KV cache of every slot, else the largest power of two below that
does.

Coding agents send prompts of 10,000 to 20,000 tokens (their system prompt and tool
definitions alone), so a fixed 4,096 refuses them before the model says a word, while the
default model was trained for 32,768. The KV cache is what grows with the context:
``layers × kv_heads × (key_length + value_length)`` values per token, 2 bytes each (llama.cpp's
default f16 cache), for every token of every slot. It may take at most half of the memory
available once the weights are loaded, leaving the rest to compute buffers, the prompt cache
and everything else on the machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..tokenizers.gguf import read_gguf_metadata

#: The least context chosen whatever the memory (a smaller one serves no agent anyway).
MIN_CONTEXT = 2048
#: The context when the model does not say what it was trained for.
FALLBACK_CONTEXT = 4096
#: Bytes per cached value (f16, llama.cpp's default cache type).
_VALUE_BYTES = 2
#: Of the memory left after the weights, the share the KV cache may take.
_KV_SHARE = 0.5


@dataclass(frozen=True)
class ContextChoice:
    """The context of each slot and why (a clause for the start-up log line)."""

    n_ctx: int
    reason: str

    def describe(self, slots: int) -> str:
        each = "" if slots == 1 else " per slot"
        return f"context {self.n_ctx} tokens{each} ({self.reason})"


def kv_bytes_per_token(path: str | Path) -> int | None:
    """Bytes of KV cache one token takes in the GGUF model at ``path`` (``None``: the header
    does not say enough)."""
    arch = read_gguf_metadata(path, ["general.architecture"]).get("general.architecture")
    if not isinstance(arch, str):
        return None
    keys = {
        k: f"{arch}.{k}"
        for k in (
            "block_count",
            "embedding_length",
            "attention.head_count",
            "attention.head_count_kv",
            "attention.key_length",
            "attention.value_length",
        )
    }
    found = read_gguf_metadata(path, keys.values())
    meta = {k: found.get(v) for k, v in keys.items()}
    layers, width = meta["block_count"], meta["embedding_length"]
    heads = meta["attention.head_count"]
    if not (isinstance(layers, int) and isinstance(heads, int) and heads > 0):
        return None
    kv_heads = meta["attention.head_count_kv"]
    kv_heads = kv_heads if isinstance(kv_heads, int) and kv_heads > 0 else heads
    head_dim = width // heads if isinstance(width, int) else None
    key = meta["attention.key_length"]
    value = meta["attention.value_length"]
    key = key if isinstance(key, int) else head_dim
    value = value if isinstance(value, int) else head_dim
    if key is None or value is None:
        return None
    return layers * kv_heads * (key + value) * _VALUE_BYTES


def training_context(path: str | Path) -> int:
    """The context the GGUF model at ``path`` was trained for (its ``context_length``; 0 when
    the header does not say)."""
    arch = read_gguf_metadata(path, ["general.architecture"]).get("general.architecture")
    if not isinstance(arch, str):
        return 0
    key = f"{arch}.context_length"
    value = read_gguf_metadata(path, [key]).get(key)
    return value if isinstance(value, int) and value > 0 else 0


def available_memory() -> int | None:
    """Bytes of memory available to a new process (Linux's ``MemAvailable``; ``None``
    elsewhere)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def choose_context(
    train: int,
    per_token: int | None,
    *,
    slots: int,
    available: int | None,
    model_bytes: int = 0,
) -> ContextChoice:
    """The context of each of ``slots`` slots for a model trained for ``train`` tokens whose KV
    cache takes ``per_token`` bytes a token, on a machine with ``available`` bytes of memory
    free (``None``: unknown) and weights of ``model_bytes``."""
    if train <= 0:
        return ContextChoice(FALLBACK_CONTEXT, "the model does not say its training context")
    if per_token is None or available is None:
        return ContextChoice(
            train, "the model's training context; its cache size or the free memory is unknown"
        )
    budget = max(available - model_bytes, 0) * _KV_SHARE

    def cache(n: int) -> int:
        return n * slots * per_token

    if cache(train) <= budget:
        return ContextChoice(
            train,
            f"the model's training context; KV cache {_gib(cache(train))} of "
            f"{_gib(available)} available",
        )
    n = 1 << (train.bit_length() - 1)  # the largest power of two up to train
    if n == train:
        n //= 2
    while n > MIN_CONTEXT and cache(n) > budget:
        n //= 2
    n = max(n, MIN_CONTEXT)
    return ContextChoice(
        n,
        f"the model was trained for {train}, but the KV cache would take {_gib(cache(train))} "
        f"of {_gib(available)} available; {_gib(cache(n))} at {n}; --n-ctx sets it",
    )


def auto_context(path: str | Path, train: int, *, slots: int) -> ContextChoice:
    """:func:`choose_context` for the GGUF model at ``path`` on this machine."""
    per_token = kv_bytes_per_token(path) if train > 0 else None
    return choose_context(
        train,
        per_token,
        slots=slots,
        available=available_memory(),
        model_bytes=Path(path).stat().st_size,
    )


__all__ = [
    "ContextChoice",
    "auto_context",
    "available_memory",
    "choose_context",
    "kv_bytes_per_token",
    "training_context",
]
