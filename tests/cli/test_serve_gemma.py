"""``chatfmt serve --model <Gemma 3 GGUF> --dialect gemma3`` in its own process, through the
official ``openai`` client: the reply is exactly what llama.cpp's server generates from Gemma
3's chat format for the same messages (greedy, one thread on both sides)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from serve_process import chatfmt_serve

if importlib.util.find_spec("llama_cpp") is None:
    pytest.skip("llama-cpp-python is not installed (chatfmt[local])", allow_module_level=True)

pytestmark = pytest.mark.slow

MESSAGES = [
    {"role": "system", "content": "Answer in one short sentence."},
    {"role": "user", "content": "What is the capital of France?"},
]


@pytest.fixture(scope="module")
def served(gemma_gguf: Path) -> Iterator[str]:
    args = ["--model", str(gemma_gguf), "--dialect", "gemma3", "--threads", "1", "--no-web"]
    with chatfmt_serve(args, ready=lambda line: "serving" in line and "/v1" in line) as (
        port,
        lines,
    ):
        assert any("gemma3" in x and "/v1" in x for x in lines), "".join(lines)
        yield f"http://127.0.0.1:{port}"


def reference_reply(gguf: Path, max_tokens: int, raw_llama_server: Any) -> tuple[str, list[int]]:
    """llama.cpp on its own: the prompt as Gemma 3's template writes it (llama.cpp's
    tokenizer, special tokens parsed), then greedy generation by the same ``llama-server``
    binary that chatfmt's engine runs, started by hand and given those ids."""
    import httpx
    import llama_cpp

    vocab = llama_cpp.Llama(str(gguf), vocab_only=True, verbose=False)
    prompt = (
        "<bos><start_of_turn>user\nAnswer in one short sentence.\n\nWhat is the capital of "
        "France?<end_of_turn>\n<start_of_turn>model\n"
    )
    ids = vocab.tokenize(prompt.encode(), add_bos=False, special=True)
    body = {"prompt": ids, "n_predict": max_tokens, "temperature": 0, "top_k": 0}
    body.update(min_p=0, repeat_penalty=1)
    with raw_llama_server(gguf, "--parallel", "1", "--threads", "1") as url:
        out = httpx.post(url + "/completion", json=body, timeout=120).json()
    return str(out["content"]), ids


def test_gemma3_chat_through_the_openai_sdk(
    served: str, gemma_gguf: Path, raw_llama_server: Any
) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=served + "/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(
        model="gemma",
        messages=MESSAGES,
        max_tokens=24,
        temperature=0,  # type: ignore[arg-type]
    )
    text, prompt_ids = reference_reply(gemma_gguf, 24, raw_llama_server)
    assert reply.usage is not None and reply.usage.prompt_tokens == len(prompt_ids)
    assert reply.choices[0].message.content == text
    assert reply.choices[0].finish_reason in ("stop", "length")
    stream = client.chat.completions.create(
        model="gemma",
        messages=MESSAGES,
        max_tokens=24,
        temperature=0,
        stream=True,  # type: ignore[arg-type]
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert streamed == text


def test_the_dialect_follows_the_gguf_architecture(gemma_gguf: Path) -> None:
    from chatfmt.cli.model_format import default_dialect
    from chatfmt.tokenizers import load_tokenizer

    assert default_dialect(str(gemma_gguf), load_tokenizer(str(gemma_gguf))).name == "gemma3"
    assert default_dialect("default").name == "qwen2.5"
