"""Mistral's Tekken tokenizer files (``tekken_*.json``), run by tiktoken.

Layout (as ``mistral-common`` reads it): the first ``default_num_special_tokens`` ids are the
special tokens (``<unk>``, ``<s>``, ``</s>``, ``[INST]``, …, then ``<SPECIAL_n>`` fillers); the
BPE vocabulary follows, so a text token's id is its rank plus that count. Only the first
``default_vocab_size - default_num_special_tokens`` ranks are used. Text is encoded with
``encode_ordinary``: a special token's text typed in content stays text.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from ..errors import TokenizerError
from .tiktoken import TiktokenTokenizer

#: The special tokens of files that do not list their own (Tekken before v7), in id order.
DEFAULT_SPECIALS = (
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
    "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
)  # fmt: skip


def load_tekken(path: str | Path) -> TiktokenTokenizer:
    """A :class:`TiktokenTokenizer` with the vocabulary and special tokens of a Tekken file.

    :func:`~chatfmt.tokenizers.load_tokenizer` picks this for a ``.json`` file whose name holds
    ``tekken``, the test ``mistral-common`` itself applies.
    """
    path = Path(path)
    try:
        data: Any = json.loads(path.read_bytes())
        config = data["config"]
        n_special: int = config["default_num_special_tokens"]
        vocab_size: int = config["default_vocab_size"]
        pattern: str = config["pattern"]
        listed = data.get("special_tokens")
        names = [t["token_str"] for t in listed] if listed else list(DEFAULT_SPECIALS)
        inner = vocab_size - n_special
        entries = data["vocab"][:inner]
        ranks = {base64.b64decode(e["token_bytes"]): n_special + e["rank"] for e in entries}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TokenizerError(
            f"cannot read Tekken file {str(path)!r} ({type(exc).__name__}: {exc}); pass a "
            "tekken_*.json file as shipped with a Mistral model or with mistral-common"
        ) from None
    if len(ranks) != inner or len(names) > n_special:
        raise TokenizerError(
            f"Tekken file {str(path)!r} is inconsistent: {len(ranks)} distinct ranks for "
            f"{inner} text ids, {len(names)} special tokens for {n_special} ids"
        )
    names += [f"<SPECIAL_{i}>" for i in range(len(names), n_special)]
    return TiktokenTokenizer(
        path.name,
        pat_str=pattern,
        mergeable_ranks=ranks,
        controls={name: i for i, name in enumerate(names)},
        vocab_size=vocab_size,
    )
