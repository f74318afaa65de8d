"""The embedded engine: a GGUF model run in-process by llama-cpp-python.

llama.cpp calls block and one model holds one KV cache, so every generation runs on a single
worker thread, one request at a time in arrival order (a FIFO queue: fair, and no request can
starve). Tokens cross to the event loop through an asyncio queue as they are sampled; closing
the stream sets a flag the worker checks before each token, so a disconnected client frees the
model within one decode step (a prompt whose evaluation has started is evaluated to the end
first; llama.cpp offers no safe point to stop it earlier).

Consecutive requests that share a prompt prefix (a growing chat) reuse the KV cache for it:
``Llama.generate`` keeps the longest common prefix and evaluates only the new tokens.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .._imports import require
from ..errors import EngineError
from ..tokenizers.gguf import GGUFTokenizer, _llama_cpp
from .base import GenerationChunk, GGUFEngine, GrammarSupport, SamplingParams, model_file

DEFAULT_N_CTX = 4096

_Item = GenerationChunk | BaseException


class LocalEngine(GGUFEngine):
    """A GGUF model in this process.

    ``n_ctx`` defaults to 4096 tokens, or the model's training context if that is smaller;
    ``n_threads`` defaults to every CPU. Sampling follows OpenAI's parameters only
    (temperature, top_p, seed): llama.cpp's own top-k, min-p and repeat penalty are off.
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        n_batch: int = 512,
    ) -> None:
        require("llama_cpp", extra="local")
        llama_cpp = _llama_cpp()  # also quiets llama.cpp's load-time logging
        path = model_file(model_path)
        self.model_path = path
        self.name = f"local:{path.name}"
        threads = n_threads or os.cpu_count() or 1
        try:
            self._llm: Any = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=n_ctx or DEFAULT_N_CTX,
                n_threads=threads,
                n_threads_batch=threads,
                n_batch=n_batch,
                verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise EngineError(f"llama.cpp cannot load {str(path)!r}: {exc}") from None
        train = int(llama_cpp.llama_model_n_ctx_train(self._llm.model))
        allocated = int(self._llm.n_ctx())
        self._serve_context(n_ctx, allocated, train)
        self._tokenizer = GGUFTokenizer(self._llm)
        vocab = llama_cpp.llama_model_get_vocab(self._llm.model)
        # End-of-generation ids that are real control tokens. llama.cpp also flags look-alikes
        # such as the ordinary text token "</s>" as EOG; stopping on those would cut code short.
        self._eog = frozenset(
            i for i in self._tokenizer.controls.values() if llama_cpp.llama_vocab_is_eog(vocab, i)
        )
        # One worker thread: llama.cpp contexts are not thread-safe, and FIFO is fair.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chatfmt-llama")
        self._closed = False
        #: Tokens sampled since the engine was created (a statistic; cancelled work included).
        self.tokens_generated = 0

    @property
    def grammar_support(self) -> GrammarSupport:
        # llama-cpp-python takes a grammar for the whole completion; lazy grammars (triggers)
        # are not in its API.
        return "full"

    @property
    def llama(self) -> Any:
        """The ``llama_cpp.Llama`` object (for benchmarks against raw llama-cpp-python)."""
        return self._llm

    async def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncGenerator[GenerationChunk, None]:
        if self._closed:
            raise EngineError("the local engine is closed")
        prompt, budget = self.prepare(prompt_ids, params)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        cancel = threading.Event()

        def emit(item: _Item) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is gone: nobody is listening any more
                cancel.set()

        self.check_grammar(params)
        self._executor.submit(self._run, prompt, params, budget, cancel, emit)
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise EngineError(f"llama.cpp failed while generating: {item}") from item
                yield item
                if item.finish_reason is not None:
                    return
        finally:
            cancel.set()

    def _run(
        self,
        prompt: list[int],
        params: SamplingParams,
        budget: int,
        cancel: threading.Event,
        emit: Callable[[_Item], None],
    ) -> None:
        """The worker: generate up to ``budget`` tokens, emitting each as it is sampled."""
        if cancel.is_set():
            return  # cancelled while waiting its turn
        llm = self._llm
        stops = set(params.stop_ids) | self._eog
        # llama.cpp's sampler takes its seed from the Llama object; draw one per request
        # when none is given so that unseeded requests differ.
        llm.set_seed(params.seed if params.seed is not None else secrets.randbits(31))
        grammar = None
        if params.grammar is not None:
            grammar = _llama_grammar(params.grammar.gbnf)
        gen = llm.generate(
            prompt,
            grammar=grammar,
            temp=params.temperature,
            top_p=params.top_p,
            top_k=0,
            min_p=0.0,
            repeat_penalty=1.0,
            reset=True,
        )
        n = 0
        try:
            for token in gen:
                self.tokens_generated += 1  # only this worker thread writes it
                if cancel.is_set():
                    return
                n += 1
                if token in stops:
                    emit(GenerationChunk((token,), finish_reason="stop"))
                    return
                if n >= budget:
                    emit(GenerationChunk((token,), finish_reason="length"))
                    return
                emit(GenerationChunk((token,)))
            emit(GenerationChunk((), finish_reason="stop"))
        except Exception as exc:  # reported to the awaiting coroutine as EngineError
            emit(exc)
        finally:
            gen.close()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._shutdown)

    def _shutdown(self) -> None:
        # The model itself is freed when the engine and its tokenizer (which shares the
        # model's vocabulary) are garbage; closing it here would leave the tokenizer dangling.
        self._executor.shutdown(wait=True, cancel_futures=True)


def _llama_grammar(gbnf: str) -> Any:
    """llama.cpp's grammar object for GBNF text (checked when sampling starts)."""
    from llama_cpp.llama_grammar import LlamaGrammar

    return LlamaGrammar.from_string(gbnf, verbose=False)
