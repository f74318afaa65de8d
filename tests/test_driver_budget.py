"""TurnDriver's thinking budget over an engine that sends many tokens per chunk (as
llama-server's merged reads do): the cap falls between two tokens of one chunk."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence

from chatfmt.decoding import TurnDecoder, split_controls
from chatfmt.dialects import get_dialect
from chatfmt.driver import ThoughtBudget, TurnDriver
from chatfmt.engines.base import Engine, GenerationChunk, SamplingParams, TokenLogprob
from chatfmt.events import ReasoningDelta, TextDelta
from chatfmt.tokenizers import Tokenizer, load_tokenizer


class OneChunk(Engine):
    """Answers each request with its whole reply in one chunk (log-probabilities aligned)."""

    name = "one-chunk"

    def __init__(self, tokenizer: Tokenizer, replies: list[list[int]]) -> None:
        self._tok, self.replies = tokenizer, replies
        self.prompts: list[list[int]] = []
        self.params: list[SamplingParams] = []
        self.closed = 0

    @property
    def context_length(self) -> int:
        return 4096

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tok

    @property
    def sampling_support(self) -> frozenset[str]:
        return frozenset({"logprobs"})

    async def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncGenerator[GenerationChunk, None]:
        self.prompts.append(list(prompt_ids))
        self.params.append(params)
        ids = tuple(self.replies[len(self.prompts) - 1])
        entries = tuple(TokenLogprob(t, -0.5) for t in ids)
        try:
            yield GenerationChunk(ids, logprobs=entries)
            yield GenerationChunk((), finish_reason="stop")
        finally:
            self.closed += 1


def test_the_cap_cuts_a_chunk_between_two_tokens() -> None:
    tok = load_tokenizer("qwen3")
    dialect = get_dialect("qwen3")
    controls = list(tok.controls)
    thought = tok.encode_pieces(split_controls("<think>\n" + "one two " * 30, controls))
    answer = tok.encode_pieces(split_controls("Done.<|im_end|>", controls))
    close = tuple(tok.encode_pieces(split_controls("\n</think>\n\n", controls)))
    engine = OneChunk(tok, [thought, answer])
    params = SamplingParams(max_tokens=500, stop_ids=tuple(dialect.stop_ids(tok)), logprobs=0)
    driver = TurnDriver(
        engine,
        TurnDecoder(dialect, tok),
        [1, 2, 3],
        params,
        budget=ThoughtBudget(7, close),
    )

    async def go() -> list[object]:
        return [ev async for step in driver.steps() for ev in step]

    events = asyncio.run(go())
    assert engine.prompts == [[1, 2, 3], [1, 2, 3, *thought[:8], *close]]
    assert driver.reasoning_tokens == 7 and driver.thoughts_closed == 1
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert reasoning == tok.decode(thought[1:8]).lstrip("\n")  # <think>, then seven tokens
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Done."
    assert driver.completion_tokens == 8 + len(close) + len(answer)
    assert driver.produced == [*thought[:8], *close, *answer]
    # The log-probabilities are those of sampled tokens: not of the tokens cut off, nor of
    # the closing chatfmt wrote.
    assert driver.logprobs is not None and len(driver.logprobs) == 8 + len(answer) - 1
    assert engine.closed == 2  # the first generation was stopped at the cap
    assert [p.max_tokens for p in engine.params] == [500, 500 - 8 - len(close)]


def test_budget_needs_a_closing() -> None:
    import pytest

    with pytest.raises(ValueError, match="close the thought"):
        ThoughtBudget(3, ())
    with pytest.raises(ValueError, match="at least 0"):
        ThoughtBudget(-1, (1,))
