"""The embedded engine's default context: the model's training context where the machine's
memory holds the KV cache of every slot, else the largest power of two below it that fits (at
least ``MIN_CONTEXT``); the cache size read from a GGUF's header (metadata-only files written
by the ``gguf`` package here; the default model in the slow tier)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatfmt.engines.context_size import (
    FALLBACK_CONTEXT,
    MIN_CONTEXT,
    available_memory,
    choose_context,
    kv_bytes_per_token,
    training_context,
)

GIB = 2**30
#: The default model's: 24 layers, 2 KV heads of 64 values for keys and for values, f16.
QWEN_05B = 24 * 2 * (64 + 64) * 2


def write_header(path: Path, arch: str, **values: int) -> Path:
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in values.items():
        writer.add_uint32(f"{arch}.{key.replace('__', '.')}", value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_the_cache_size_comes_from_the_layer_and_head_counts(tmp_path: Path) -> None:
    qwen = write_header(
        tmp_path / "q.gguf",
        "qwen2",
        block_count=24,
        embedding_length=896,
        attention__head_count=14,
        attention__head_count_kv=2,
    )
    assert kv_bytes_per_token(qwen) == QWEN_05B
    assert training_context(qwen) == 0  # not in this header
    trained = write_header(tmp_path / "t.gguf", "qwen2", context_length=32768)
    assert training_context(trained) == 32768
    # Explicit key/value lengths win over embedding / heads; no kv head count: every head.
    mla = write_header(
        tmp_path / "m.gguf",
        "llama",
        block_count=4,
        embedding_length=1024,
        attention__head_count=8,
        attention__key_length=192,
        attention__value_length=128,
    )
    assert kv_bytes_per_token(mla) == 4 * 8 * (192 + 128) * 2
    bare = write_header(tmp_path / "b.gguf", "llama", block_count=4)
    assert kv_bytes_per_token(bare) is None


def test_the_training_context_where_memory_holds_it() -> None:
    choice = choose_context(32768, QWEN_05B, slots=4, available=16 * GIB, model_bytes=GIB // 2)
    assert choice.n_ctx == 32768
    assert "training context" in choice.reason and "1.5 GiB" in choice.reason
    assert choice.describe(4).startswith("context 32768 tokens per slot (")
    assert choice.describe(1).startswith("context 32768 tokens (")


@pytest.mark.parametrize(
    ("available_gib", "expected"),
    [(2.0, 16384), (1.2, 4096), (0.7, 2048), (0.1, MIN_CONTEXT)],
)
def test_less_memory_gives_a_smaller_power_of_two(available_gib: float, expected: int) -> None:
    available = int(available_gib * GIB)
    choice = choose_context(32768, QWEN_05B, slots=4, available=available, model_bytes=GIB // 2)
    assert choice.n_ctx == expected
    room = max(available - GIB // 2, 0) / 2
    assert expected == MIN_CONTEXT or expected * 4 * QWEN_05B <= room
    assert "trained for 32768" in choice.reason and "--n-ctx" in choice.reason


def test_a_training_context_that_is_no_power_of_two_falls_to_one() -> None:
    choice = choose_context(40960, QWEN_05B, slots=1, available=int(0.9 * GIB), model_bytes=0)
    assert choice.n_ctx == 32768  # 40960 * 12 KiB = 480 MiB > the 460 MiB allowed
    assert choose_context(40960, QWEN_05B, slots=1, available=4 * GIB).n_ctx == 40960


def test_unknowns() -> None:
    assert choose_context(0, QWEN_05B, slots=1, available=GIB).n_ctx == FALLBACK_CONTEXT
    unknown = choose_context(32768, None, slots=4, available=GIB)
    assert unknown.n_ctx == 32768 and "unknown" in unknown.reason
    free = available_memory()
    assert free is None or free > 0


def test_the_default_model_gets_its_training_context_here(default_model_path: Path) -> None:
    from chatfmt.engines.llama_server import LlamaServerEngine

    assert kv_bytes_per_token(default_model_path) == QWEN_05B
    engine = LlamaServerEngine(default_model_path, parallel=4)  # not started
    choice = engine.context_choice
    free = available_memory()
    if free is not None and free > 8 * GIB:
        assert choice.n_ctx == engine.context_length == 32768
    assert choice.n_ctx & (choice.n_ctx - 1) == 0 and choice.n_ctx <= 32768
    asked = LlamaServerEngine(default_model_path, parallel=4, n_ctx=3000)
    assert asked.context_length == 3000 and asked.context_choice.reason == "asked for"
    assert "--ctx-size" in (command := asked._command(8080))
    assert command[command.index("--ctx-size") + 1] == str(3000 * 4)
