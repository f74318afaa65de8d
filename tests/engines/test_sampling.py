"""The sampling fields in each server's words, and the log-probabilities read back from each
server's shape (llama-server's ``completion_probabilities``, vLLM's ``token_id:N`` lists)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from chatfmt.engines.base import OPTIONAL_SAMPLING, SamplingParams, TokenLogprob
from chatfmt.engines.sampling import (
    ALL_FIELDS,
    SUPPORT,
    native_logprobs,
    openai_logprobs,
    sampling_fields,
)

EVERYTHING = SamplingParams(
    top_k=5,
    min_p=0.1,
    presence_penalty=0.5,
    frequency_penalty=-0.25,
    repetition_penalty=1.3,
    logit_bias=((7, -100.0), (42, 5.5)),
    logprobs=3,
)


def test_optional_fields_are_those_set_away_from_off() -> None:
    assert SamplingParams().optional_fields() == ()
    assert SamplingParams(temperature=0.3, top_p=0.5, seed=1).optional_fields() == ()
    assert set(EVERYTHING.optional_fields()) == set(OPTIONAL_SAMPLING) == ALL_FIELDS
    assert SamplingParams(logprobs=0).optional_fields() == ("logprobs",)  # 0 is "the token's own"
    assert SamplingParams(repetition_penalty=0.9).optional_fields() == ("repetition_penalty",)


def test_nothing_is_sent_for_a_request_that_sets_nothing() -> None:
    for flavor in SUPPORT:
        assert sampling_fields(SamplingParams(temperature=0.7), flavor) == {}


def test_llama_server_names() -> None:
    assert sampling_fields(EVERYTHING, "llama.cpp") == {
        "top_k": 5,
        "min_p": 0.1,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.25,
        "repeat_penalty": 1.3,
        "logit_bias": [[7, -100.0], [42, 5.5]],
        "n_probs": 3,
    }
    # n_probs 0 would report nothing: the token's own needs one alternative.
    assert sampling_fields(SamplingParams(logprobs=0), "llama.cpp") == {"n_probs": 1}


def test_vllm_names() -> None:
    assert sampling_fields(EVERYTHING, "vllm") == {
        "top_k": 5,
        "min_p": 0.1,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.25,
        "repetition_penalty": 1.3,
        "logit_bias": {"7": -100.0, "42": 5.5},
        "logprobs": 3,
        "return_tokens_as_token_ids": True,
    }


def test_llama_cpp_python_names() -> None:
    params = SamplingParams(repetition_penalty=1.1, logit_bias=((3, 1.0),))
    assert sampling_fields(params, "llama-cpp-python") == {
        "repeat_penalty": 1.1,
        "logit_bias": {"3": 1.0},
    }


def test_what_each_kind_honours() -> None:
    assert SUPPORT["llama.cpp"] == SUPPORT["vllm"] == ALL_FIELDS
    assert "logprobs" not in SUPPORT["llama-cpp-python"]  # it names tokens by their text
    assert SUPPORT["openai"] == SUPPORT[None] == {"presence_penalty", "frequency_penalty",
                                                  "logit_bias"}  # fmt: skip


def _probability(token: int, logprob: float, top: list[tuple[int, float]]) -> dict[str, Any]:
    """An entry of llama-server's ``completion_probabilities``, as it writes them."""
    return {
        "id": token,
        "token": "x",
        "bytes": [120],
        "logprob": logprob,
        "top_logprobs": [
            {"id": t, "token": "y", "bytes": [121], "logprob": lp} for t, lp in top
        ],
    }


def test_native_entries() -> None:
    data = {"completion_probabilities": [_probability(5, -0.5, [(5, -0.5), (9, -1.5), (2, -3.0)])]}
    assert native_logprobs(data, 2) == (TokenLogprob(5, -0.5, ((5, -0.5), (9, -1.5))),)
    assert native_logprobs(data, 0) == (TokenLogprob(5, -0.5),)
    # The alternatives are ordered by likelihood whatever order they came in.
    shuffled = {"completion_probabilities": [_probability(9, -1.5, [(9, -1.5), (5, -0.5)])]}
    assert native_logprobs(shuffled, 2)[0].top == ((5, -0.5), (9, -1.5))
    assert native_logprobs({"content": "x"}, 2) == ()
    whole = native_logprobs(data, 0, whole=b"\xf0\x9d\x94\x98")
    assert whole[0].text == b"\xf0\x9d\x94\x98"


def test_missing_or_odd_numbers_are_very_unlikely() -> None:
    data = {"completion_probabilities": [{"id": 1, "logprob": None}, {"id": 2}, {"x": 3}]}
    entries = native_logprobs(data, 1)
    assert [e.token_id for e in entries] == [1, 2]
    assert all(e.logprob == -math.inf for e in entries)


def test_vllm_entries() -> None:
    choice = {
        "text": "ab",
        "logprobs": {
            "tokens": ["token_id:10", "token_id:11"],
            "token_logprobs": [-0.1, -2.0],
            # vLLM adds the sampled token to the alternatives when it is not among them.
            "top_logprobs": [
                {"token_id:10": -0.1, "token_id:12": -2.5},
                {"token_id:13": -0.5, "token_id:14": -1.0, "token_id:11": -2.0},
            ],
        },
    }
    assert openai_logprobs(choice, [10, 11], 2) == (
        TokenLogprob(10, -0.1, ((10, -0.1), (12, -2.5))),
        TokenLogprob(11, -2.0, ((13, -0.5), (14, -1.0))),
    )
    assert openai_logprobs(choice, [10, 11], 0)[1] == TokenLogprob(11, -2.0)
    # Tokens named by their text: the chunk's ids say which they are.
    by_text = {"logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1.0, -0.25]}}
    assert [e.token_id for e in openai_logprobs(by_text, [3, 4], 0)] == [3, 4]
    assert openai_logprobs({"text": "a"}, [3], 1) == ()


@pytest.mark.parametrize(
    "bad",
    [
        {"top_k": -1},
        {"min_p": 1.5},
        {"presence_penalty": 3},
        {"frequency_penalty": -2.5},
        {"repetition_penalty": 0},
        {"logprobs": 21},
        {"logprobs": -1},
    ],
)
def test_params_out_of_range_are_refused(bad: dict[str, Any]) -> None:
    (name,) = bad
    with pytest.raises(ValueError, match=name):
        SamplingParams(**bad)
