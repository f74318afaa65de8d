"""The check of :mod:`.check` for a GGUF model: its own template and special tokens."""

from __future__ import annotations

from pathlib import Path

from ..dialects.base import Dialect
from ..tokenizers.gguf import read_gguf_metadata
from .check import TemplateCheck, check_dialect
from .jinja import ChatTemplate

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
