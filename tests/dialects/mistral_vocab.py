"""A Tekken vocabulary with Magistral's control tokens, for tests: no Magistral or Ministral 3
vocabulary ships with ``mistral-common``, so its Tekken file (Mistral Nemo's 131k text ranks)
gets the special-token list those models use — v7's controls, fillers, then ``[ARGS]``,
``[CALL_ID]``, ``[THINK]`` and ``[/THINK]`` at 32–35 — and instruct version v13, which
``mistral-common``'s encoder then reads as such."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

#: The controls after v7's twenty and twelve fillers, at ids 32 and up.
V13_EXTRA = ("[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]")


def tekken_v13(folder: Path) -> Path:
    """Write the v13 stand-in file into ``folder`` and return its path (skips without the
    reference package)."""
    mc = pytest.importorskip("mistral_common", reason="mistral-common (the reference) is missing")
    from chatfmt.tokenizers.tekken import DEFAULT_SPECIALS

    data = json.loads((Path(mc.__file__).parent / "data" / "tekken_240911.json").read_bytes())
    names = [*DEFAULT_SPECIALS, *(f"<SPECIAL_{i}>" for i in range(20, 32)), *V13_EXTRA]
    data["special_tokens"] = [
        {"rank": i, "token_str": name, "is_control": True} for i, name in enumerate(names)
    ]
    data["config"]["version"] = "v13"
    path = folder / "tekken_v13.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path
