"""Any Hugging Face ``tokenizer.json``, with added tokens kept out of text encoding."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._imports import require
from ..errors import TokenizerError
from .base import Tokenizer


def _byte_decoder() -> dict[str, int]:
    # The GPT-2 byte-level alphabet: printable bytes map to themselves, the rest to U+0100 on.
    bs = list(range(ord("!"), ord("~") + 1))
    bs += list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


class HFTokenizer(Tokenizer):
    """A ``tokenizers`` tokenizer whose added tokens are control tokens.

    Like every HF tokenizer, the stock one splits added-token strings out of text (a typed
    ``"<|im_start|>"`` would become the control id). Here text goes through a copy of the
    tokenizer with no added tokens, so text can never produce a control id.
    """

    def __init__(self, path: str | Path) -> None:
        tokenizers = require("tokenizers", extra="hf")
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        self.name = str(p)
        try:
            spec = json.loads(p.read_text(encoding="utf-8"))
            full = tokenizers.Tokenizer.from_str(json.dumps(spec))
        except (OSError, ValueError, Exception) as exc:  # tokenizers raises plain Exception
            raise TokenizerError(
                f"cannot load tokenizer.json {str(p)!r}: {exc}; pass a Hugging Face "
                "tokenizer.json file or a model directory holding one"
            ) from None
        self._controls = {t["content"]: int(t["id"]) for t in spec.get("added_tokens", [])}
        text_spec = dict(spec, added_tokens=[], post_processor=None)
        self._text: Any = tokenizers.Tokenizer.from_str(json.dumps(text_spec))
        self._full: Any = full
        decoder = spec.get("decoder") or {}
        self._byte_level = "ByteLevel" in json.dumps(decoder)
        self._byte_map = _byte_decoder() if self._byte_level else {}

    @property
    def controls(self) -> Mapping[str, int]:
        return self._controls

    @property
    def vocab_size(self) -> int:
        size: int = self._full.get_vocab_size(with_added_tokens=True)
        return size

    @property
    def hf_tokenizer(self) -> Any:
        """The full ``tokenizers.Tokenizer`` (added tokens enabled) for interop."""
        return self._full

    def encode_text(self, text: str) -> list[int]:
        ids: list[int] = self._text.encode(text, add_special_tokens=False).ids
        return ids

    def token_bytes(self, token_id: int) -> bytes:
        token: str | None = self._full.id_to_token(token_id)
        if token is None:
            return b""
        if self._byte_level:
            try:
                return bytes(self._byte_map[c] for c in token)
            except KeyError:
                return token.encode()
        if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            return bytes([int(token[3:5], 16)])
        return token.replace("\u2581", " ").encode()
