"""Which dialect a model's chat template is written in: :func:`detect_dialect`.

A GGUF model carries its chat template (``tokenizer.chat_template``) and its architecture
(``general.architecture``). Each dialect declares the markup its template writes as a
:class:`~.fingerprint.Fingerprint` (``Dialect.fingerprint``); detection asks every registered
dialect, plugins included, and takes the first whose fingerprint fits, by precedence.

Every control-token-like string a template writes must belong to the fingerprint's format, so a
fine-tune that borrows ChatML's turns but adds markup of its own (a tool list token, a thinking
switch, a default system prompt of its own) is not mistaken for the format it borrowed from: it
is reported as unknown, with the dialects to choose from. A model rendered in the wrong format
does not fail, it just answers worse, which is why a guess is never made.

A name is proposed only when the registry (:func:`~chatfmt.dialects.list_dialects`) lists it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import DialectPluginError
from .fingerprint import Fingerprint, markup_tokens, normalize_template

if TYPE_CHECKING:
    from .base import Dialect

__all__ = ["Detection", "architecture_dialects", "detect_dialect", "normalize_template"]


@dataclass(frozen=True)
class Detection:
    """What :func:`detect_dialect` found: a dialect ``name`` and why, or ``None`` and why not,
    with the dialects a caller may choose from instead (``candidates``)."""

    name: str | None
    reason: str
    candidates: tuple[str, ...] = ()

    @property
    def found(self) -> bool:
        return self.name is not None

    @property
    def message(self) -> str:
        """One line for a person: the dialect and why, or why none and which to choose from."""
        if self.name is not None:
            return f"dialect {self.name}: {self.reason}"
        return f"no dialect detected: {self.reason}; choose one of: {', '.join(self.candidates)}"


def _fingerprints(names: tuple[str, ...]) -> list[tuple[str, Fingerprint]]:
    """The fingerprint each of ``names`` declares, in the order detection tries them."""
    from . import get_dialect

    declared: list[tuple[str, Fingerprint]] = []
    for name in names:
        try:
            fingerprint = _own_fingerprint(get_dialect(name))
        except DialectPluginError:
            continue  # a broken plugin fails where it is chosen, not every other model's load
        if fingerprint is not None:
            declared.append((name, fingerprint))
    return sorted(declared, key=lambda item: (-item[1].precedence, item[0]))


def _own_fingerprint(dialect: Dialect) -> Fingerprint | None:
    """The fingerprint ``dialect`` itself declares (on the instance or its own class), never
    one inherited: a subclass of a family is another format until it says what it writes, and
    an inherited fingerprint would have it detected for its parent's models."""
    own = vars(dialect).get("fingerprint", vars(type(dialect)).get("fingerprint"))
    return own if isinstance(own, Fingerprint) else None


def architecture_dialects(names: Collection[str] | None = None) -> dict[str, str]:
    """For models without a chat template: each architecture with one chat format, and the
    dialect that renders it (as the dialects declare in their fingerprints), among ``names``
    (default: every registered dialect)."""
    if names is None:
        from . import list_dialects

        names = list_dialects()
    by_arch: dict[str, str] = {}
    for name, fp in reversed(_fingerprints(tuple(names))):  # the highest precedence wins a tie
        by_arch.update(dict.fromkeys(fp.architectures, name))
    return by_arch


#: Markup of formats that are named in a failure, to say what the template looked like.
_FAMILIES = (
    ("<|im_start|>", "ChatML turns (<|im_start|>)"),
    ("<|start_header_id|>", "Llama 3 turns (<|start_header_id|>)"),
    ("[INST]", "[INST] turns (Mistral, Llama 2)"),
    ("<start_of_turn>", "Gemma turns (<start_of_turn>)"),
    ("[gMASK]", "GLM markup ([gMASK])"),
    ("<｜Assistant｜>", "DeepSeek markup (<｜Assistant｜>)"),
)


def _unknown(norm: str, tokens: set[str], known: frozenset[str]) -> str:
    seen = [label for marker, label in _FAMILIES if marker in norm]
    foreign = sorted(tokens - known)
    what = f"it writes {' and '.join(seen)}, but" if seen else "it"
    reason = f"the chat template matches none of the formats chatfmt renders: {what} "
    if foreign:
        shown = ", ".join(foreign[:5]) + (", …" if len(foreign) > 5 else "")
        return reason + f"has markup none of them writes ({shown})"
    return reason + "differs from each of them (its prompts, tool syntax or reasoning)"


def detect_dialect(
    template: str | None,
    architecture: str | None,
    *,
    available: Collection[str] | None = None,
) -> Detection:
    """The dialect whose format ``template`` (a model's Jinja chat template) writes, or, when
    there is no template, the one ``architecture`` (GGUF ``general.architecture``) implies
    where it has a single chat format.

    ``available`` are the dialect names that may be proposed (default: every name
    :func:`~chatfmt.dialects.list_dialects` lists, plugins included); they are also the
    ``candidates`` of a failed detection. Never raises for any template text.
    """
    from . import list_dialects

    registered = tuple(list_dialects())
    names = tuple(registered if available is None else available)
    arch = (architecture or "").strip()

    if not template or not template.strip():
        by_arch = architecture_dialects(registered).get(arch)
        if by_arch is not None and by_arch in names:
            return Detection(
                by_arch,
                f"the model has no chat template, and its architecture ({arch}) has one chat "
                f"format, {by_arch}'s",
            )
        said = f"its architecture ({arch}) does not tell" if arch else "no architecture"
        return Detection(
            None, f"the model has no chat template (tokenizer.chat_template), and {said}", names
        )

    norm = normalize_template(template)
    tokens = markup_tokens(norm)
    declared = _fingerprints(registered)
    fits = [(name, fp) for name, fp in declared if fp.fits(norm, tokens)]
    if not fits:
        known = frozenset().union(*(fp.tokens for _, fp in declared if fp.tokens is not None))
        return Detection(None, _unknown(norm, tokens, known), names)
    best, fingerprint = fits[0]
    if best not in names:
        return Detection(
            None,
            f"the chat template is {fingerprint.why}, but this installation has no {best} dialect",
            names,
        )
    reason = f"the chat template is {fingerprint.why}"
    # Named unless the reason already says why the first was preferred to it.
    also = [name for name, _ in fits[1:] if name in names and name not in fingerprint.why]
    if also:
        reason += f" (also fits: {', '.join(also)})"
    return Detection(best, reason)
