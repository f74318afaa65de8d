"""A GGUF model's own chat template and special tokens: the check of :mod:`.check` against a
dialect, and the model served through the template itself (:mod:`.dialect`)."""

from __future__ import annotations

from pathlib import Path

from ..dialects.base import Dialect
from ..errors import ChatFmtError
from ..tokenizers.gguf import read_gguf_metadata
from .check import TemplateCheck, check_dialect
from .dialect import TemplateDialect, template_dialect
from .jinja import ChatTemplate, TemplateError

_KEYS = (
    "tokenizer.chat_template",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
)


def model_template(path: str | Path) -> ChatTemplate | None:
    """The chat template of the GGUF file at ``path`` with its model's BOS and EOS tokens
    (``None``: the file carries no template). Raises
    :class:`~chatfmt.errors.TokenizerError` when the file is no readable GGUF, and
    :class:`~.jinja.TemplateError` when its template does not compile."""
    values = read_gguf_metadata(path, _KEYS)
    source = values.get("tokenizer.chat_template")
    if not isinstance(source, str):
        return None
    tokens = values.get("tokenizer.ggml.tokens")

    def token(key: str) -> str:
        index = values.get(key)
        if isinstance(tokens, tuple) and isinstance(index, int) and 0 <= index < len(tokens):
            return tokens[index]
        return ""

    bos, eos = token("tokenizer.ggml.bos_token_id"), token("tokenizer.ggml.eos_token_id")
    return ChatTemplate(source, bos_token=bos, eos_token=eos)


def check_model(path: str | Path, dialect: Dialect) -> TemplateCheck | None:
    """Whether ``dialect`` renders what the GGUF model at ``path`` renders with its own chat
    template (``None``: the file has no template to check against)."""
    template = model_template(path)
    return None if template is None else check_dialect(dialect, template)


def model_template_dialect(path: str | Path) -> tuple[TemplateDialect | None, str]:
    """The GGUF model at ``path`` served through its own chat template, on the control tokens
    of its own vocabulary (llama.cpp's control and user-defined tokens, as its tokenizer
    splits them); or ``None`` and why not (no template, or one that cannot be split safely)."""
    try:
        template = model_template(path)
    except TemplateError as exc:
        return None, str(exc)
    if template is None:
        return None, "the file carries no chat template"
    from ..tokenizers import load_tokenizer

    try:
        controls = load_tokenizer(str(path)).controls
    except ChatFmtError as exc:  # no vocabulary llama.cpp can load (or no llama.cpp)
        return None, f"its vocabulary cannot be read: {exc}"
    return template_dialect(template, controls)
