"""An engine on another machine: an OpenAI-compatible ``/v1/completions`` endpoint.

The point is to send the exact prompt ids chatfmt rendered, never a prompt string that the
server would re-tokenize with special tokens on (which would turn text such as ``<|im_start|>``
typed by a user into a control token). What is sent, by server kind (detected once from
``GET /v1/models``: ``owned_by`` is ``vllm``, ``llamacpp`` or, for llama-cpp-python, ``me``):

- **vLLM**: ``prompt`` = the token ids; ``stop_token_ids`` = the dialect's stop ids;
  ``skip_special_tokens: false`` (control tokens come back as text); ``return_token_ids:
  true`` (each chunk carries its ``token_ids``); ``stream_options: {include_usage: true}`` (its
  last chunk reports the prompt tokens it took from its cache). ``max_model_len`` gives the
  context length.
- **llama.cpp server** (``llama-server``): its native ``POST /completion``, because only that
  endpoint returns each chunk's token ids (``return_tokens: true``), the end-of-generation
  token included; ``prompt`` = the token ids, ``n_predict`` = the budget, ``cache_prompt:
  true`` (the server then picks the slot holding the longest common prefix, so a growing
  conversation re-uses its KV cache); ``top_k: 0, min_p: 0, repeat_penalty: 1`` unless the
  request sets them, so that sampling is OpenAI's by default (``top_k: 1`` at temperature 0:
  the same greedy tokens, less sampling work). It stops on the model's end-of-generation
  tokens by itself.
- **llama-cpp-python server**: its ``prompt`` accepts only strings, tokenized with special
  tokens on. chatfmt sends the prompt as text *only if* that text re-tokenizes to exactly the
  rendered ids (checked locally, control tokens split out as the server does); a prompt
  containing control-token text, which the server would misread, is refused with an
  :class:`EngineError` instead. Same sampling defaults as llama.cpp.
- **anything else**: ``prompt`` = the token ids and only standard fields; if the server
  rejects that with 400/422, the text fallback above is used.

llama-server sends no event for a token that ends inside a UTF-8 character, so the event
that completes the character lacks the ids before its own; :class:`NativeEvents` puts them
back from its text (or, where they cannot be known, passes the event on as text). Stop strings
are sent as ``stop``, except to llama-server: it holds back the text that could begin one,
which that recovery needs, and the decoder that reads the stream applies them in any case.
The other sampling fields (``top_k``, ``min_p``, the penalties, ``logit_bias``, log-probabilities)
go in each server's own words (:mod:`.sampling`); one the server kind cannot take is refused
(:meth:`Engine.check_sampling`). When a server returns no token ids, the returned text is
split into control tokens and text and re-encoded with the engine's tokenizer, so ids (and
``completion_tokens``) are then the tokenizer's reading of the text, not necessarily the ids
the model sampled. Connection failures before any token arrives are retried with exponential
backoff; 502/503/504 answers too. A stream that breaks after tokens have arrived is never
retried (the tokens were delivered): it raises :class:`EngineError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import replace
from typing import Any, Literal

from ..decoding import ControlSplitter, split_controls
from ..errors import EngineError, EngineUnavailableError, RemoteHTTPError
from ..grammar import Grammar
from ..tokenizers.base import Piece, Tokenizer
from .base import Engine, GenerationChunk, GrammarSupport, SamplingParams, merge_chunks
from .http import EngineHTTP
from .sampling import SUPPORT, native_logprobs, openai_logprobs, sampling_fields

#: How long a health check waits for the engine's model list.
HEALTH_S = 3.0

Flavor = Literal["vllm", "llama.cpp", "llama-cpp-python", "openai"]
PromptMode = Literal["ids", "text"]

DEFAULT_CONTEXT_LENGTH = 4096


class RemoteEngine(Engine):
    """A remote ``/v1/completions`` server, given token-id prompts.

    ``tokenizer`` must be the served model's vocabulary. ``context_length`` defaults to what
    the server reports (vLLM ``max_model_len``, llama.cpp ``/props``), else 4096; call
    :meth:`connect` once to detect it. ``timeout`` bounds the wait for each streamed chunk;
    ``retries`` is the number of extra attempts when the server cannot be reached.
    ``flavor`` skips detection (``"vllm"``, ``"llama.cpp"``, ``"llama-cpp-python"`` or
    ``"openai"``). ``stream_interval``: after a stream's first chunk, tokens are handed on
    once this many have gathered (or the stream ends), as vLLM's ``--stream-interval``
    does: fewer, larger deltas, less relay work per token, at the cost of smoothness;
    1 hands on every read as it arrives.
    """

    def __init__(
        self,
        base_url: str,
        *,
        tokenizer: Tokenizer,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.25,
        context_length: int | None = None,
        flavor: Flavor | None = None,
        text_controls: Sequence[str] | None = None,
        stream_interval: int = 1,
    ) -> None:
        if stream_interval < 1:
            raise EngineError(f"stream_interval must be 1 or more, got {stream_interval}")
        self._interval = stream_interval
        url = base_url.rstrip("/")
        self.base_url = url.removesuffix("/v1")
        self._http = EngineHTTP(
            self.base_url,
            api_key=api_key,
            timeout=timeout,
            connect_timeout=connect_timeout,
            retries=retries,
            backoff=backoff,
        )
        self.name = f"remote:{self.base_url}"
        self.model = model
        self._tokenizer = tokenizer
        self._context_length = context_length
        self._flavor: Flavor | None = flavor
        self._detected = flavor is not None and (context_length is not None or flavor == "openai")
        self._prompt_mode: PromptMode = "text" if flavor == "llama-cpp-python" else "ids"
        self._controls = list(tokenizer.controls)
        # Output that arrives as text only is split at these (the dialect's text controls);
        # ChatGLM3's "sop" must stay a word there, or "isopropyl" would lose it.
        self._output_controls = list(tokenizer.controls if text_controls is None else text_controls)

    # ==== Properties ====

    @property
    def context_length(self) -> int:
        return self._context_length or DEFAULT_CONTEXT_LENGTH

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    @property
    def flavor(self) -> Flavor | None:
        """The detected server kind (``None`` until :meth:`connect` or the first request)."""
        return self._flavor

    # ==== Connection ====

    async def connect(self) -> None:
        """Detect the server kind, model name and context length (retrying while it starts).

        Raises :class:`EngineUnavailableError` if the server cannot be reached.
        """
        data = await self._http.get_json("/v1/models", retry=True)
        self._detect(data)
        if self._flavor == "llama.cpp" and self._context_length is None:
            try:
                props = await self._http.get_json("/props", retry=False)
                n_ctx = props.get("default_generation_settings", {}).get("n_ctx")
                if isinstance(n_ctx, int) and n_ctx > 0:
                    self._context_length = n_ctx
            except EngineError:
                pass  # /props is optional; keep the default
        if self._flavor == "llama.cpp":  # the map that restores the ids it leaves out
            await asyncio.to_thread(self._tokenizer.byte_index)
        self._detected = True

    def _detect(self, data: Any) -> None:
        cards = data.get("data") if isinstance(data, dict) else None
        card = cards[0] if isinstance(cards, list) and cards and isinstance(cards[0], dict) else {}
        if self.model is None and isinstance(card.get("id"), str):
            self.model = card["id"]
        if self._flavor is None:
            owner = str(card.get("owned_by", "")).lower()
            self._flavor = (
                "vllm"
                if owner == "vllm"
                else "llama.cpp"
                if owner == "llamacpp"
                else "llama-cpp-python"
                if owner == "me"
                else "openai"
            )
            if self._flavor == "llama-cpp-python":
                self._prompt_mode = "text"
        max_len = card.get("max_model_len")
        if self._context_length is None and isinstance(max_len, int) and max_len > 0:
            self._context_length = max_len

    async def health(self) -> bool:
        """Whether the engine answers ``GET /v1/models`` within :data:`HEALTH_S`: an engine that
        accepts connections and hangs is unhealthy after that, so ``/health`` answers 503 in
        time for a liveness probe instead of timing it out (which would restart the replica)."""
        try:
            await asyncio.wait_for(self._http.get_json("/v1/models", retry=False), HEALTH_S)
        except (EngineError, asyncio.TimeoutError):
            return False
        return True

    async def aclose(self) -> None:
        await self._http.aclose()

    # ==== Requests ====

    def _body(self, prompt: list[int], params: SamplingParams, budget: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model or "default",
            "max_tokens": budget,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "stream": True,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop_strings and self._flavor != "llama.cpp":
            # llama-server holds back the text that could start a stop string, and that
            # text is what restores the ids it leaves out (NativeEvents); the decoder that
            # reads the stream applies the stop strings, as it does for the local engine.
            body["stop"] = list(params.stop_strings)
        if self._prompt_mode == "text":
            body["prompt"] = self._prompt_text(prompt)
        else:
            body["prompt"] = prompt
        if self._flavor == "vllm":
            body["stop_token_ids"] = list(params.stop_ids)
            body["skip_special_tokens"] = False
            body["spaces_between_special_tokens"] = False
            body["return_token_ids"] = True
            # The usage chunk at the end carries the prompt tokens it took from its cache
            # (with --enable-prompt-tokens-details).
            body["stream_options"] = {"include_usage": True}
        elif self._flavor in ("llama.cpp", "llama-cpp-python"):
            # Their defaults add top-k 40, min-p 0.05 and a repeat penalty; OpenAI has none.
            # Greedy decoding keeps the top token whatever top-k is; with top-k 0 llama.cpp's
            # later samplers pass over the whole vocabulary on every token, ~5% of a 0.5B
            # model's decode time on a CPU (bench: temperature 0, 6 rounds interleaved).
            top_k = 1 if params.temperature == 0 else 0
            body.update(top_k=top_k, min_p=0.0, repeat_penalty=1.0)
            if self._flavor == "llama.cpp":
                del body["max_tokens"], body["model"]
                body.update(n_predict=budget, return_tokens=True, cache_prompt=True)
        if params.grammar is not None:
            self.check_grammar(params)
            body.update(_grammar_fields(params.grammar, self._flavor))
        if params.optional_fields():
            self.check_sampling(params)
            body.update(sampling_fields(params, self._flavor))
        return body

    @property
    def sampling_support(self) -> frozenset[str]:
        # Unknown until the server is detected: OpenAI's own fields only.
        return SUPPORT.get(self._flavor, SUPPORT[None])

    @property
    def grammar_support(self) -> GrammarSupport:
        # llama-server: grammar, grammar_lazy and grammar_triggers. llama-cpp-python's
        # server: a grammar for the whole completion. vLLM: its structured-output grammar
        # (xgrammar reads GBNF), whole completions only. Unknown until the server is detected.
        if self._flavor == "llama.cpp":
            return "lazy"
        if self._flavor in ("llama-cpp-python", "vllm"):
            return "full"
        return "none"

    def _path(self) -> str:
        # llama-server's OpenAI endpoint drops token ids from its chunks; its own one keeps them.
        return "/completion" if self._flavor == "llama.cpp" else "/v1/completions"

    def _prompt_text(self, prompt: list[int]) -> str:
        """The prompt as text with control tokens written out, if that text re-tokenizes (as a
        server tokenizing with special tokens on would) to exactly ``prompt``."""
        tok = self._tokenizer
        text = tok.decode(prompt)
        if tok.encode_pieces(split_controls(text, self._controls)) != prompt:
            raise EngineError(
                f"the engine at {self.base_url} accepts only text prompts, and this prompt "
                "cannot be sent as text without changing its tokens (it contains text that "
                "the server would read as control tokens, such as '<|im_start|>' typed in a "
                "message); serve the model with a server that accepts token-id prompts "
                "(llama.cpp's llama-server or vLLM)"
            )
        return text

    async def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncGenerator[GenerationChunk, None]:
        prompt, budget = self.prepare(prompt_ids, params)
        if not self._detected:
            try:
                await self.connect()
            except EngineUnavailableError:
                raise
            except EngineError:
                self._detected = True  # no /v1/models: a plain OpenAI-compatible server
                self._flavor = self._flavor or "openai"
        try:
            resp = await self._http.open(self._path(), self._body(prompt, params, budget))
        except RemoteHTTPError as exc:
            # llama.cpp servers and vLLM take id prompts: their 400 is about something else.
            known = self._flavor in ("llama.cpp", "vllm")
            if exc.status_code not in (400, 422) or self._prompt_mode == "text" or known:
                raise
            # The server rejected a token-id prompt: fall back to a verified text prompt.
            self._prompt_mode = "text"
            resp = await self._http.open(self._path(), self._body(prompt, params, budget))
        # Closed with this generator, not later by the garbage collector: the connection is
        # released (and the engine stops) before a shielded close returns.
        async with aclosing(self._read(resp, params.logprobs)) as chunks:
            async for chunk in chunks:
                yield chunk

    async def _read(
        self, resp: Any, logprobs: int | None = None
    ) -> AsyncGenerator[GenerationChunk, None]:
        """The stream's chunks; ``logprobs``: the alternatives asked for (``None``: no
        log-probabilities were asked for, and none are read)."""
        splitter = ControlSplitter(self._output_controls)
        native = NativeEvents(self._tokenizer, logprobs)
        finished = False
        interval = self._interval
        first = True
        chunks: list[GenerationChunk] = []  # read, not yet handed on
        held = 0  # their tokens
        batches = self._http.events(resp)
        try:
            async for batch in batches:
                for data in batch:
                    if not isinstance(data, dict):
                        continue
                    if "error" in data:
                        held_back, chunks = chunks, []
                        for done in merge_chunks(held_back):  # what came before it is delivered
                            yield done
                        message = _error_text(data["error"])
                        raise EngineError(f"the engine reported an error: {message}")
                    chunk = self._chunk(data, splitter, native, logprobs)
                    if chunk is not None:
                        chunks.append(chunk)
                        held += len(chunk.token_ids)
                        finished = finished or chunk.finish_reason is not None
                # What arrived in one read goes on as one chunk: one decode, one delta out.
                # With an interval, the first token still goes at once (time to first token).
                if chunks and (first or held >= interval or finished):
                    for chunk in merge_chunks(chunks):
                        yield chunk
                    first = first and not held  # an empty chunk is not the first token
                    chunks, held = [], 0
        except EngineError:
            held_back, chunks = chunks, []
            for chunk in merge_chunks(held_back):  # a broken stream: what was read is given
                yield chunk
            raise
        finally:
            await batches.aclose()
        for chunk in merge_chunks(chunks):  # a stream that ended without finishing
            yield chunk
        if not finished:
            raise EngineError(
                f"the engine at {self.base_url} ended the stream without a finish reason"
            )

    def _chunk(
        self,
        data: dict[str, Any],
        splitter: ControlSplitter,
        native: NativeEvents,
        logprobs: int | None = None,
    ) -> GenerationChunk | None:
        if "choices" not in data and "stop" in data:
            return native.chunk(data)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:  # a usage chunk, or nothing to read
            cached = _cached_tokens(data)
            return None if cached is None else GenerationChunk((), cached_tokens=cached)
        choice = choices[0]
        if not isinstance(choice, dict):
            return None
        text = choice.get("text") or ""
        reason = choice.get("finish_reason")
        finish: Literal["stop", "length"] | None = None
        if reason is not None:
            finish = "length" if reason == "length" else "stop"
        ids = _token_ids(data, choice)
        exact = ids is not None
        if ids is None:
            pieces: list[Piece] = splitter.feed(text) if text else []
            if finish is not None:
                pieces.extend(splitter.flush())
            ids = self._tokenizer.encode_pieces(pieces)
        if not ids and not text and finish is None:
            return None
        cached = _cached_tokens(data)
        entries = None if logprobs is None else openai_logprobs(choice, ids, logprobs)
        return GenerationChunk(tuple(ids), text or None, finish, exact, cached, entries)


#: llama.cpp's numbering of trigger kinds (``common_grammar_trigger_type``).
_TRIGGER_TYPES = {"word": 1, "pattern": 2, "pattern_full": 3}


def _grammar_fields(grammar: Grammar, flavor: Flavor | None) -> dict[str, Any]:
    """A grammar in the request fields of each server kind."""
    if flavor == "vllm":
        return {"structured_outputs": {"grammar": grammar.gbnf}}
    fields: dict[str, Any] = {"grammar": grammar.gbnf}
    if grammar.lazy:
        fields["grammar_lazy"] = True
        fields["grammar_triggers"] = [
            {"type": _TRIGGER_TYPES[t.kind], "value": t.value} for t in grammar.triggers
        ]
    if grammar.preserved:
        # Sampled as tokens, matched by their text; a single-token trigger must be one.
        fields["preserved_tokens"] = list(grammar.preserved)
    return fields


class NativeEvents:
    """llama-server's ``/completion`` events of one stream as chunks, with the ids it leaves
    out put back.

    llama-server sends no event for a token that ends inside a UTF-8 character: the event of
    the token that completes it has only its own id in ``tokens``, while its ``content`` holds
    the whole character and ``tokens_predicted`` counts every token. The ids left out are the
    tokens whose bytes are that content before the event's own token, when those bytes are
    that many vocabulary tokens in exactly one way (:meth:`Tokenizer.split_bytes`).
    Otherwise the event goes on as its text (``exact_ids`` false): the reply's text stays
    right, and only its exact ids (and one token of its count) are lost.

    With ``logprobs`` (the alternatives asked for), each chunk carries the event's
    ``completion_probabilities``; the one entry of an event that completes a split character
    stands for the whole character (:attr:`TokenLogprob.text`): llama-server reports nothing
    for the tokens before it.
    """

    def __init__(self, tokenizer: Tokenizer, logprobs: int | None = None) -> None:
        self._tokenizer = tokenizer
        self._predicted = 0  # tokens the engine counted up to the last event
        self._logprobs = logprobs

    def chunk(self, data: dict[str, Any]) -> GenerationChunk | None:
        chunk = _native_chunk(data)
        if self._logprobs is not None and chunk is not None:
            chunk = replace(chunk, logprobs=native_logprobs(data, self._logprobs))
        predicted = data.get("tokens_predicted")
        if type(predicted) is not int:  # a server that does not count: nothing to check
            return chunk
        ids = chunk.token_ids if chunk is not None else ()
        missing = predicted - self._predicted - len(ids)
        self._predicted = predicted
        if missing == 0:
            return chunk
        if chunk is None:  # the missing ids and no text: only their exactness goes on
            return GenerationChunk((), exact_ids=False)
        if chunk.logprobs and chunk.text:  # its entry stands for the whole character
            whole = chunk.text.encode("utf-8", "surrogatepass")
            chunk = replace(chunk, logprobs=tuple(replace(e, text=whole) for e in chunk.logprobs))
        if missing > 0:
            found = self._recover(chunk, missing)
            if found is not None:
                return replace(chunk, token_ids=found + ids)
        # Ids that cannot be known; or more ids than counted, from a server that counts ahead
        # of its events (then earlier ids put back may be wrong: this drops the reply's ids).
        text = chunk.text or ""
        for token in ids:  # a control token's text (an empty content) for the text decoder
            name = self._tokenizer.control_name(token)
            if name is not None and not text.endswith(name):
                text += name
        return replace(chunk, text=text or None, exact_ids=False)

    def _recover(self, chunk: GenerationChunk, missing: int) -> tuple[int, ...] | None:
        """The ids of the ``missing`` tokens before the chunk's own, from its content."""
        if len(chunk.token_ids) > 1:  # llama-server sends one token an event
            return None
        text = chunk.text or ""
        if "\ufffd" in text:  # llama-server's stand-in for bytes that are not UTF-8: unknown
            return None
        tok = self._tokenizer
        content = text.encode("utf-8", "surrogatepass")
        own = b""
        if chunk.token_ids:
            name = tok.control_name(chunk.token_ids[0])
            if name is None:
                own = tok.token_bytes(chunk.token_ids[0])
            elif content.endswith(name.encode()):  # a control shown as text (user-defined)
                own = name.encode()
        if not content.endswith(own):
            return None
        gap = content[: len(content) - len(own)]
        ids = tok.split_bytes(gap, missing)
        if ids is None:
            return None
        # Each of them must have left the text inside a character, or the server would have
        # sent an event for it: a split that does not is not what the model wrote.
        end = 0
        for token in ids:
            end += len(tok.token_bytes(token))
            if not _ends_inside_character(gap[:end]):
                return None
        return ids


def _ends_inside_character(data: bytes) -> bool:
    """Whether the last bytes of ``data`` hold the start of a UTF-8 character without all of
    its bytes: the test llama-server makes before it sends an event."""
    for back in range(1, min(len(data), 4) + 1):
        byte = data[-back]
        if (
            (byte & 0xE0 == 0xC0 and back < 2)
            or (byte & 0xF0 == 0xE0 and back < 3)
            or (byte & 0xF8 == 0xF0 and back < 4)
        ):
            return True
    return False


def _native_chunk(data: dict[str, Any]) -> GenerationChunk | None:
    """A chunk of llama-server's ``/completion`` stream: ``tokens``, ``content``, ``stop``."""
    tokens = data.get("tokens")
    ids = (
        tuple(tokens)
        if isinstance(tokens, list) and all(isinstance(t, int) for t in tokens)
        else ()
    )
    text = data.get("content") if isinstance(data.get("content"), str) else None
    finish: Literal["stop", "length"] | None = None
    if data.get("stop") is True:
        finish = "length" if data.get("stop_type") == "limit" else "stop"
    if not ids and not text and finish is None:
        return None
    return GenerationChunk(ids, text or None, finish, cached_tokens=_cached_tokens(data))


def _cached_tokens(data: dict[str, Any]) -> int | None:
    """Prompt tokens the server reused from its cache: llama.cpp's ``timings.cache_n``, or
    OpenAI's ``usage.prompt_tokens_details.cached_tokens`` (vLLM)."""
    timings = data.get("timings")
    if isinstance(timings, dict) and isinstance(timings.get("cache_n"), int):
        return int(timings["cache_n"])
    usage = data.get("usage")
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        return int(details["cached_tokens"])
    return None


def _token_ids(data: dict[str, Any], choice: dict[str, Any]) -> list[int] | None:
    """Token ids a server put in a chunk, in any of the shapes servers use."""
    for source in (choice.get("token_ids"), choice.get("tokens"), data.get("tokens")):
        if isinstance(source, list) and all(isinstance(t, int) for t in source):
            return list(source)
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict):
        tokens = logprobs.get("tokens")
        if (
            isinstance(tokens, list)
            and tokens
            and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens)
        ):
            return [int(t.removeprefix("token_id:")) for t in tokens]
    return None


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)
