"""llama.cpp's own grammar engine as the judge of a GBNF grammar: does it accept a text?

The text is tokenized with the default model's vocabulary and fed token by token to a grammar
sampler, exactly as during generation; at the end the end-of-generation token must be allowed
(the grammar is complete). Loads only the vocabulary (no weights).
"""

from __future__ import annotations

import ctypes
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

llama_cpp = pytest.importorskip("llama_cpp")


class GrammarOracle:
    def __init__(self, model: Path) -> None:
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self._model = llama_cpp.llama_model_load_from_file(str(model).encode(), params)
        assert self._model, f"cannot load the vocabulary of {model}"
        self.vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.eos = llama_cpp.llama_vocab_eos(self.vocab)

    def tokenize(self, text: str) -> list[int]:
        data = text.encode()
        buf = (llama_cpp.llama_token * (len(data) + 16))()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, len(buf), False, True)
        assert n >= 0
        return list(buf[:n])

    def compiles(self, gbnf: str) -> bool:
        sampler = llama_cpp.llama_sampler_init_grammar(self.vocab, gbnf.encode(), b"root")
        if not sampler:
            return False
        llama_cpp.llama_sampler_free(sampler)
        return True

    def accepts(self, gbnf: str, text: str, *, whole: bool = True) -> bool:
        """Whether ``text`` is a whole sentence of the grammar (``whole=False``: the start
        of one)."""
        sampler = llama_cpp.llama_sampler_init_grammar(self.vocab, gbnf.encode(), b"root")
        assert sampler, f"llama.cpp rejected the grammar:\n{gbnf}"
        try:
            for token in self.tokenize(text):
                if not self._allowed(sampler, token):
                    return False
                llama_cpp.llama_sampler_accept(sampler, token)
            return self._allowed(sampler, self.eos) if whole else True
        finally:
            llama_cpp.llama_sampler_free(sampler)

    def _allowed(self, sampler: Any, token: int) -> bool:
        data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
        arr = llama_cpp.llama_token_data_array(data, 1, -1, False)
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(arr))
        return bool(data[0].logit != float("-inf"))


@lru_cache(maxsize=1)
def oracle(model: Path) -> GrammarOracle:
    return GrammarOracle(model)
