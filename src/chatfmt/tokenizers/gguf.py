"""The vocabulary of a GGUF model, run by llama.cpp itself (via llama-cpp-python).

Given a path, only the vocabulary is loaded (``vocab_only``: no weights, a fraction of a
second). Given a loaded ``llama_cpp.Llama``, its vocabulary is shared, so the server's engine
and tokenizer can never disagree. :func:`read_gguf_metadata` reads a file's header values (its
architecture, its chat template) in Python alone, without llama.cpp and before any model loads.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import re
import struct
import threading
import unicodedata
import weakref
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from .._imports import require
from ..errors import TokenizerError
from .base import Tokenizer

# llama.cpp token attributes (llama.h, enum llama_token_attr).
_ATTR_UNUSED = 1 << 1
_ATTR_NORMAL = 1 << 2
_ATTR_CONTROL = 1 << 3
_ATTR_USER_DEFINED = 1 << 4

#: GGUF pre-tokenizer names whose reference (Hugging Face) tokenizer NFC-normalises its input.
_NFC_PRE = frozenset({"qwen2"})

_backend_lock = threading.Lock()
_backend_ready = False


def _llama_cpp() -> Any:
    global _backend_ready
    llama_cpp = require("llama_cpp", extra="local")
    with _backend_lock:
        if not _backend_ready:
            log = logging.getLogger("llama-cpp-python")
            if log.level == logging.NOTSET:
                # llama.cpp logs every load to stderr, and llama-cpp-python maps its warnings to
                # ERROR; failures reach the caller as exceptions, so keep the log quiet.
                log.setLevel(logging.CRITICAL)
            llama_cpp.llama_backend_init()
            _backend_ready = True
    return llama_cpp


# User-defined tokens that are ordinary text, not chat markup: runs of whitespace and HTML
# element tags (Gemma's vocabulary has both). Both llama.cpp and the Hugging Face tokenizer
# match them in text, so they must stay text tokens. Every other user-defined token (Qwen's
# <tool_call>, a reasoning model's <think>) is a control token that text must never produce:
# hence a list of HTML element names, not a pattern that would also catch <think> or <sop>.
_HTML_ELEMENTS = frozenset(
    "a abbr address area article aside audio b bdi bdo blockquote body br button canvas caption "
    "cite code col colgroup data dd del details dfn div dl dt em embed fieldset figcaption figure "
    "footer form h1 h2 h3 h4 h5 h6 head header hr html i iframe img input ins kbd label legend li "
    "main mark nav noscript ol optgroup option p picture pre q s samp section select small source "
    "span strong sub summary sup table tbody td textarea tfoot th thead time title tr u ul var "
    "video".split()
)
_TAG = re.compile(r"</?([a-z]+[0-9]?)>")


def _is_text_token(token: str) -> bool:
    if not token.strip():
        return True
    m = _TAG.fullmatch(token)
    return m is not None and m.group(1) in _HTML_ELEMENTS


class GGUFTokenizer(Tokenizer):
    """Tokens of a GGUF model, encoded and decoded by llama.cpp.

    Control tokens are the tokens llama.cpp types *control* or *user-defined* (Qwen2.5:
    ``<|im_start|>`` 151644, ``<tool_call>`` 151657, ...), except tokens that are also typed
    *normal*: llama.cpp marks some ordinary vocabulary entries such as ``</s>`` as end-of-
    generation on its own, and they stay text here as in the reference tokenizer. Text is
    encoded with special-token parsing off and no BOS; for vocabularies whose reference
    tokenizer NFC-normalises (Qwen2), the text is normalised first, as the reference does.
    """

    def __init__(self, source: str | Path | Any) -> None:
        llama_cpp = _llama_cpp()
        self._llama_cpp = llama_cpp
        self._owner: Any = None
        if isinstance(source, str | Path):
            path = Path(source).expanduser()
            self.name = str(path)
            if not path.is_file():
                raise TokenizerError(f"GGUF file {str(path)!r} not found")
            params = llama_cpp.llama_model_default_params()
            params.vocab_only = True
            model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
            if not model:
                raise TokenizerError(
                    f"llama.cpp cannot read the vocabulary of {str(path)!r}; is it a GGUF model?"
                )
            self._model = model
            self._finalizer = weakref.finalize(self, llama_cpp.llama_model_free, model)
        else:
            # A loaded llama_cpp.Llama: share its model; keep it alive as long as we are.
            self._owner = source
            self._model = source.model
            self.name = str(getattr(source, "model_path", "gguf"))
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self._n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        pre = self.metadata("tokenizer.ggml.pre")
        self._nfc = pre in _NFC_PRE
        controls: dict[str, int] = {}
        user_defined: list[str] = []
        unused: set[int] = set()
        for i in range(self._n_vocab):
            attr = int(llama_cpp.llama_vocab_get_attr(self._vocab, i))
            if attr & (_ATTR_CONTROL | _ATTR_USER_DEFINED) and not attr & _ATTR_NORMAL:
                token = self._piece(i, special=True).decode("utf-8", "replace")
                if attr & _ATTR_USER_DEFINED and _is_text_token(token):
                    continue  # ordinary text (Gemma's "\n\n", "<h1>"): matched in text
                controls[token] = i
                if attr & _ATTR_USER_DEFINED and len(token) > 1:
                    user_defined.append(token)
            elif attr & _ATTR_UNUSED:
                unused.add(i)
        self._controls = controls
        self._user_defined = tuple(user_defined)
        self._unused = unused
        self._bytes: list[bytes | None] = [None] * self._n_vocab

    # ==== llama.cpp calls ====

    def metadata(self, key: str) -> str | None:
        """A GGUF metadata value as a string (``None`` when absent or not a scalar)."""
        buf = ctypes.create_string_buffer(256)
        n = int(self._llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, 256))
        if n < 0:
            return None
        if n >= 256:
            buf = ctypes.create_string_buffer(n + 1)
            self._llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, n + 1)
        return buf.value.decode("utf-8", "replace")

    def _piece(self, token_id: int, *, special: bool) -> bytes:
        size = 64
        while True:
            buf = ctypes.create_string_buffer(size)
            n = int(
                self._llama_cpp.llama_token_to_piece(self._vocab, token_id, buf, size, 0, special)
            )
            if n >= 0:
                return buf.raw[:n]
            size = -n  # a negative result is the size the piece needs

    # ==== Tokenizer ====

    @property
    def controls(self) -> Mapping[str, int]:
        return self._controls

    @property
    def vocab_size(self) -> int:
        return self._n_vocab

    @property
    def n_ctx_train(self) -> int:
        """The context length the model was trained with (0 for a vocabulary-only load)."""
        return int(self._llama_cpp.llama_model_n_ctx_train(self._model))

    def encode_text(self, text: str) -> list[int]:
        if not text:
            return []
        if self._nfc:
            text = unicodedata.normalize("NFC", text)
        if self._user_defined and any(t in text for t in self._user_defined):
            return [i for part in self._split_user_defined(text) for i in self._encode(part)]
        return self._encode(text)

    def _split_user_defined(self, text: str) -> list[str]:
        """Cut every occurrence of a user-defined token string before its last character.

        llama.cpp matches user-defined tokens (``<tool_call>``) in text even with special
        parsing off, which would let text produce a control id. A cut before the final ``>``
        falls on a pre-tokenizer boundary (letters never join a following punctuation mark in
        the GPT-2 family of split patterns), so encoding the parts separately yields exactly
        the ids of encoding the text as plain text.
        """
        cuts: set[int] = set()
        for token in self._user_defined:
            start = text.find(token)
            while start >= 0:
                cuts.add(start + len(token) - 1)
                start = text.find(token, start + 1)
        parts: list[str] = []
        prev = 0
        for cut in sorted(cuts):
            parts.append(text[prev:cut])
            prev = cut
        parts.append(text[prev:])
        return parts

    def _encode(self, text: str) -> list[int]:
        if not text:
            return []
        data = text.encode("utf-8")
        # Every token covers at least one byte, so len(data) slots always suffice.
        capacity = len(data) + 1
        tokens = (self._llama_cpp.llama_token * capacity)()
        n = int(
            self._llama_cpp.llama_tokenize(
                self._vocab, data, len(data), tokens, capacity, False, False
            )
        )
        if n < 0:
            raise TokenizerError(f"llama.cpp failed to tokenize {len(data)} bytes of text")
        return list(tokens[:n])

    def token_bytes(self, token_id: int) -> bytes:
        if not 0 <= token_id < self._n_vocab:
            return b""
        cached = self._bytes[token_id]
        if cached is None:
            if token_id in self._unused or self.control_name(token_id) is not None:
                cached = b""
            else:
                # special=True renders tokens llama.cpp retyped as control (``</s>``) as text.
                cached = self._piece(token_id, special=True)
            self._bytes[token_id] = cached
        return cached


# ==== The header, read in Python ====

_GGUF_MAGIC = b"GGUF"
#: GGUF value types (gguf.h, enum gguf_type) of fixed size: their struct format.
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q",
                 11: "q", 12: "d"}  # fmt: skip
_GGUF_STRING = 8
_GGUF_ARRAY = 9

GGUFValue = str | int | float | bool | tuple[str, ...]


def read_gguf_metadata(path: str | Path, keys: Collection[str]) -> dict[str, GGUFValue]:
    """The values of ``keys`` (those present: scalars, strings and arrays of strings) in the
    header of the GGUF file at ``path``, such as ``general.architecture`` and
    ``tokenizer.chat_template``.

    Read in Python from the file's header (mapped, so the weights are never read), so that a
    command can decide what to do with a model before loading it, with or without llama.cpp.
    Raises :class:`~chatfmt.errors.TokenizerError` when the file cannot be read or is not a
    GGUF file (version 2 or 3).
    """
    wanted = set(keys)
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _read_header(data, wanted)
    except (OSError, ValueError) as exc:  # mmap of an empty file is a ValueError
        raise TokenizerError(f"cannot read GGUF file {str(path)!r}: {exc}") from None
    except (struct.error, IndexError, UnicodeDecodeError, RecursionError) as exc:
        raise TokenizerError(f"{str(path)!r} is not a readable GGUF file ({exc})") from None


def _read_header(data: mmap.mmap, wanted: set[str]) -> dict[str, GGUFValue]:
    if data[:4] != _GGUF_MAGIC:
        raise TokenizerError("not a GGUF file (no GGUF magic)")
    order = "<"
    (version,) = struct.unpack_from("<I", data, 4)
    if version > 0xFFFF:  # written big-endian: the version's bytes are reversed
        order = ">"
        (version,) = struct.unpack_from(">I", data, 4)
    if version not in (2, 3):
        raise TokenizerError(f"GGUF version {version} is not supported (2 or 3)")
    (n_kv,) = struct.unpack_from(order + "Q", data, 16)
    size = len(data)
    pos = 24
    found: dict[str, GGUFValue] = {}

    def string(at: int) -> tuple[str, int]:
        (n,) = struct.unpack_from(order + "Q", data, at)
        end = at + 8 + n
        if end > size:
            raise IndexError("a string runs past the end of the file")
        return data[at + 8 : end].decode("utf-8"), end

    def skip(kind: int, at: int) -> int:
        if kind in _GGUF_SCALARS:
            return at + struct.calcsize(_GGUF_SCALARS[kind])
        if kind == _GGUF_STRING:
            n: int = struct.unpack_from(order + "Q", data, at)[0]
            return at + 8 + n
        if kind == _GGUF_ARRAY:
            item: int
            count: int
            item, count = struct.unpack_from(order + "IQ", data, at)
            at += 12
            if item in _GGUF_SCALARS:
                return at + count * struct.calcsize(_GGUF_SCALARS[item])
            for _ in range(count):  # strings (a vocabulary) or nested arrays, one by one
                at = skip(item, at)
                if at > size:
                    raise IndexError("an array runs past the end of the file")
            return at
        raise IndexError(f"unknown GGUF value type {kind}")

    for _ in range(n_kv):
        if len(found) == len(wanted):
            break
        key, pos = string(pos)
        (kind,) = struct.unpack_from(order + "I", data, pos)
        pos += 4
        if key in wanted and kind == _GGUF_STRING:
            found[key], pos = string(pos)
        elif key in wanted and kind in _GGUF_SCALARS:
            (found[key],) = struct.unpack_from(order + _GGUF_SCALARS[kind], data, pos)
            pos = skip(kind, pos)
        elif (
            key in wanted
            and kind == _GGUF_ARRAY
            and struct.unpack_from(order + "I", data, pos)[0] == _GGUF_STRING
        ):
            (count,) = struct.unpack_from(order + "Q", data, pos + 4)
            items, pos = [], pos + 12
            for _ in range(count):
                item, pos = string(pos)
                items.append(item)
            found[key] = tuple(items)
        else:
            pos = skip(kind, pos)
    return found
