"""Runs inside the grammar backends' own environment (see ``backends.py``): vLLM's grammar
compilers, xgrammar and llguidance, judge chatfmt's GBNF grammars.

Reads a JSON list of cases from stdin, each ``{"name", "gbnf", "texts", "ids"}``: the grammar,
texts it must accept whole (matched as text), and token-id sequences it must accept whole
(matched token by token in the vocabulary of ``tokenizer.json``, the first argument, as vLLM
does when it samples). Writes one JSON object per case: each backend's compile error (``null``
when it compiled) and, per text and id sequence, whether it was accepted.
"""

from __future__ import annotations

import json
import sys
import warnings
from importlib.metadata import version
from typing import Any

warnings.filterwarnings("ignore")

import llguidance  # noqa: E402
import llguidance.hf  # noqa: E402
import xgrammar  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402


def first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]


def xgrammar_case(compiler: Any, case: dict[str, Any], stop: int) -> dict[str, Any]:
    try:
        compiled = compiler.compile_grammar(case["gbnf"])
    except Exception as exc:  # xgrammar raises its own RuntimeError subclasses
        return {"error": first_line(exc), "texts": [], "ids": []}
    texts = []
    for text in case["texts"]:
        m = xgrammar.GrammarMatcher(compiled, terminate_without_stop_token=True)
        texts.append(bool(m.accept_string(text)) and m.is_terminated())
    ids = []
    for seq in case["ids"]:
        m = xgrammar.GrammarMatcher(compiled, override_stop_tokens=[stop])
        ok = all(m.accept_token(t) for t in seq)
        ids.append(ok and m.accept_token(stop) and m.is_terminated())
    return {"error": None, "texts": texts, "ids": ids}


def llguidance_case(tokenizer: Any, case: dict[str, Any]) -> dict[str, Any]:
    try:
        grammar = llguidance.grammar_from("grammar", case["gbnf"])
        failed, warnings_ = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, tokenizer)
    except Exception as exc:  # the GBNF-to-Lark conversion raises ValueError
        return {"error": first_line(exc), "texts": [], "ids": []}
    if failed:
        return {"error": str(warnings_)[:300], "texts": [], "ids": []}
    ids = []
    for seq in case["ids"]:
        m = llguidance.LLMatcher(tokenizer, grammar)
        ok = all(m.consume_token(t) for t in seq)
        ids.append(ok and m.is_accepting())
    return {"error": None, "texts": [], "ids": ids}


def main() -> None:
    hf = PreTrainedTokenizerFast(tokenizer_file=sys.argv[1])
    stop = int(sys.argv[2])
    info = xgrammar.TokenizerInfo.from_huggingface(hf, stop_token_ids=[stop])
    compiler = xgrammar.GrammarCompiler(info)
    lltok = llguidance.hf.from_tokenizer(hf)
    cases = json.load(sys.stdin)
    out = {
        "versions": {name: version(name) for name in ("xgrammar", "llguidance")},
        "cases": [
            {
                "name": case["name"],
                "xgrammar": xgrammar_case(compiler, case, stop),
                "llguidance": llguidance_case(lltok, case),
            }
            for case in cases
        ],
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
