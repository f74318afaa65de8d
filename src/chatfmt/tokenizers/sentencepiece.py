"""SentencePiece tokenizers with control tokens laid after the vocabulary (the ChatGLM3 layout)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._imports import require
from ..errors import TokenizerError
from .base import Piece, StreamDecoder, Tokenizer

#: ChatGLM3's special tokens, appended in this order after the SentencePiece vocabulary.
CHATGLM3_SPECIALS = (
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "sop",
    "eop",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
)


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece model plus control tokens numbered from the end of its vocabulary.

    Text is encoded with one plain ``encode`` call (no BOS/EOS), as ChatGLM3's official
    tokenizer does; SentencePiece's own control pieces (``<s>``, ``</s>``) are control tokens
    here and are never produced from text.
    """

    def __init__(self, model_file: str | Path, specials: Sequence[str] = CHATGLM3_SPECIALS) -> None:
        spm = require("sentencepiece", extra="sentencepiece")
        path = Path(model_file)
        if path.is_dir():
            path = path / "tokenizer.model"
        self.name = str(path)
        try:
            self._sp: Any = spm.SentencePieceProcessor(model_file=str(path))
        except (OSError, RuntimeError) as exc:
            raise TokenizerError(
                f"cannot load SentencePiece model {str(path)!r}: {exc}; "
                "pass the path of a tokenizer.model file or of the model directory holding it"
            ) from None
        n: int = self._sp.get_piece_size()
        controls: dict[str, int] = {}
        for i in range(n):
            if self._sp.is_control(i):
                controls[self._sp.id_to_piece(i)] = i
        controls.update({t: n + k for k, t in enumerate(specials)})
        self._controls = controls
        self._n_sp = n
        self._pieces: list[bytes] = [self._piece_bytes(i) for i in range(n)]

    def _piece_bytes(self, i: int) -> bytes:
        if self._sp.is_byte(i):
            piece: str = self._sp.id_to_piece(i)
            return bytes([int(piece[3:-1], 16)])
        if self._sp.is_unknown(i):
            return " \u2047 ".encode()
        if self._sp.is_control(i):
            return b""
        text: str = self._sp.id_to_piece(i)
        return text.replace("\u2581", " ").encode()

    @property
    def controls(self) -> Mapping[str, int]:
        return self._controls

    @property
    def vocab_size(self) -> int:
        return (
            self._n_sp
            + len(self._controls)
            - sum(1 for i in self._controls.values() if i < self._n_sp)
        )

    @property
    def processor(self) -> Any:
        """The ``sentencepiece.SentencePieceProcessor``."""
        return self._sp

    def encode_text(self, text: str) -> list[int]:
        ids: list[int] = self._sp.encode(text)
        return ids

    def token_bytes(self, token_id: int) -> bytes:
        if 0 <= token_id < self._n_sp:
            return self._pieces[token_id]
        return b""

    def decoder(self) -> StreamDecoder:
        return _SentencePieceDecoder(self)


class _SentencePieceDecoder(StreamDecoder):
    """Drops the dummy-prefix space at the start of every run of text.

    ChatGLM3's tokenizer decodes each run between control tokens with one SentencePiece call,
    which removes the leading space that the dummy prefix put there.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        super().__init__(tokenizer)
        self._run_start = True

    def feed(self, token_id: int) -> list[Piece]:
        if self.tokenizer.control_name(token_id) is not None:
            self._run_start = True
            return super().feed(token_id)
        data = self.tokenizer.token_bytes(token_id)
        if self._run_start and data:
            self._run_start = False
            if data.startswith(b" "):
                data = data[1:]
        text = self._utf8.decode(data)
        return [text] if text else []
