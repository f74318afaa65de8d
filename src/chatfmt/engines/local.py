"""The embedded engine: a GGUF model run in-process by llama-cpp-python.

llama.cpp calls block and one model holds one KV cache, so every generation runs on a single
worker thread, one request at a time in arrival order (a FIFO queue: fair, and no request can
starve). Tokens cross to the event loop through an asyncio queue as they are sampled; closing
the stream sets a flag the worker checks before each token, so a disconnected client frees the
model within one decode step (a prompt whose evaluation has started is evaluated to the end
first; llama.cpp offers no safe point to stop it earlier).

Consecutive requests that share a prompt prefix (a growing chat) reuse the KV cache for it:
``Llama.generate`` keeps the longest common prefix and evaluates only the new tokens.

Every sampling field is honoured: llama.cpp's sampler takes top-k, min-p and the three
penalties (over its last 64 tokens, as llama-server's); ``logit_bias`` and log-probabilities go
through llama-cpp-python's logits processor, which sees the raw logits in id order before any
other sampler (so the log-probabilities are the model's own distribution, as llama-server
reports them). Neither processor is installed for a request that does not ask.
"""

from __future__ import annotations

import asyncio
import math
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
from .base import (
    GenerationChunk,
    GGUFEngine,
    GrammarSupport,
    SamplingParams,
    TokenLogprob,
    model_file,
)
from .sampling import ALL_FIELDS

DEFAULT_N_CTX = 4096

_Item = GenerationChunk | BaseException


class LocalEngine(GGUFEngine):
    """A GGUF model in this process.

    ``n_ctx`` defaults to 4096 tokens, or the model's training context if that is smaller;
    ``n_threads`` defaults to every CPU. Sampling is OpenAI's unless a request sets more:
    llama.cpp's own top-k, min-p and repeat penalty are off by default.
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
    def sampling_support(self) -> frozenset[str]:
        return ALL_FIELDS

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
        self.check_sampling(params)
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
        recorder = _Logprobs(params.logprobs) if params.logprobs is not None else None
        processors: list[Callable[[Any, Any], Any]] = []
        if recorder is not None:
            processors.append(recorder)  # first: the raw logits, before the bias
        if params.logit_bias:
            processors.append(_bias(params.logit_bias))
        gen = llm.generate(
            prompt,
            grammar=grammar,
            temp=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            min_p=params.min_p,
            repeat_penalty=params.repetition_penalty,
            presence_penalty=params.presence_penalty,
            frequency_penalty=params.frequency_penalty,
            logits_processor=processors or None,
            reset=True,
        )
        n = 0
        try:
            for token in gen:
                self.tokens_generated += 1  # only this worker thread writes it
                if cancel.is_set():
                    return
                n += 1
                entries = None if recorder is None else (recorder.entry(token),)
                if token in stops:
                    emit(GenerationChunk((token,), finish_reason="stop", logprobs=entries))
                    return
                if n >= budget:
                    emit(GenerationChunk((token,), finish_reason="length", logprobs=entries))
                    return
                emit(GenerationChunk((token,), logprobs=entries))
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


class _Logprobs:
    """A logits processor that keeps the log-softmax of each step's raw logits (it changes
    nothing), and the entry of the token then sampled, with its ``k`` likeliest alternatives."""

    def __init__(self, k: int) -> None:
        import numpy

        self._np = numpy
        self._k = k
        self._last: Any = None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        np = self._np
        # A copy: the array is llama.cpp's, and the samplers after this one change it.
        logits = np.array(scores, dtype=np.float64)
        top = logits.max()
        self._last = logits - (top + math.log(float(np.exp(logits - top).sum())))
        return scores

    def entry(self, token: int) -> TokenLogprob:
        logp = self._last
        if logp is None:  # (every sampled token is seen first)
            return TokenLogprob(token, -math.inf)
        alternatives: tuple[tuple[int, float], ...] = ()
        k = self._k
        if k:
            np = self._np
            best = np.argpartition(logp, -k)[-k:]
            best = best[np.argsort(-logp[best], kind="stable")]
            alternatives = tuple((int(i), float(logp[i])) for i in best)
        return TokenLogprob(token, float(logp[token]), alternatives)


def _bias(pairs: tuple[tuple[int, float], ...]) -> Callable[[Any, Any], Any]:
    """A logits processor adding each ``(id, bias)`` to that token's logit."""
    import numpy as np

    ids = np.array([token for token, _ in pairs], dtype=np.intp)
    biases = np.array([bias for _, bias in pairs], dtype=np.float32)

    def apply(input_ids: Any, scores: Any) -> Any:
        scores[ids] += biases
        return scores

    return apply
