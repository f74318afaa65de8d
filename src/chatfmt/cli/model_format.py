"""Which chat format a model is served in: detected from a GGUF's own chat template (or its
architecture) when no ``--dialect`` is given (:func:`default_dialect`), and checked against
that template before the model loads (:func:`check_template`). Shared by ``chatfmt serve``
and ``chatfmt chat``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TextIO

from ..dialects import get_dialect
from ..dialects.base import Dialect
from ..dialects.detect import Detection, detect_dialect
from ..engines.default_model import DEFAULT_MODEL_NAME
from ..errors import ChatFmtError, TokenizerError

if TYPE_CHECKING:
    from ..tokenizers.base import Tokenizer


#: The GGUF header values that tell a model's chat format.
_FORMAT_KEYS = ("tokenizer.chat_template", "general.architecture")


def detect_model_dialect(model: str, tokenizer: Tokenizer | None = None) -> Detection:
    """The dialect ``model`` is served in when no ``--dialect`` is given, and why.

    qwen2.5 for the embedded default model. For a GGUF file, the dialect its chat template
    (``tokenizer.chat_template``) is written in, or where it has none, the one its architecture
    implies (:func:`~chatfmt.dialects.detect.detect_dialect`). The values are read from the
    file's header, before any model loads; when ``model`` is no GGUF file here (a remote
    engine's model name), from ``tokenizer``, the served model's vocabulary, if it is a GGUF's.
    A failed detection lists the dialects to choose from.
    """
    if model == "default":
        return Detection("qwen2.5", f"the embedded default model ({DEFAULT_MODEL_NAME})")
    values: dict[str, object] = {}
    path = Path(model).expanduser()
    readable = False
    if path.is_file():
        from ..tokenizers.gguf import read_gguf_metadata

        try:
            values = dict(read_gguf_metadata(path, _FORMAT_KEYS))
            readable = True
        except TokenizerError:
            pass  # not a GGUF file: the served vocabulary may still be one
    metadata = getattr(tokenizer, "metadata", None)
    if not readable and callable(metadata):
        values = {key: metadata(key) for key in _FORMAT_KEYS}
        readable = True
    if not readable:
        reason = (
            f"{model} is not a GGUF file chatfmt can read, so there is no chat template to tell"
            if path.is_file()
            else f"there is no file {model} to read a chat template from"
        )
        return dataclasses.replace(detect_dialect(None, None), reason=reason)
    template = values.get("tokenizer.chat_template")
    architecture = values.get("general.architecture")
    return detect_dialect(
        template if isinstance(template, str) else None,
        architecture if isinstance(architecture, str) else None,
    )


def default_dialect(
    model: str, tokenizer: Tokenizer | None = None, *, log: TextIO | None = None
) -> Dialect:
    """The dialect ``model`` is served in when no ``--dialect`` is given
    (:func:`detect_model_dialect`); ``log`` is told which and why, unless it is the default
    model's. Raises :class:`~chatfmt.errors.ChatFmtError` when it cannot be told, with the
    reason, the dialects to choose from and how to pass one."""
    detection = detect_model_dialect(model, tokenizer)
    if detection.name is None:
        raise ChatFmtError(no_dialect_message(model, detection))
    if log is not None and model != "default":
        print(f"chatfmt: {detection.message}", file=log, flush=True)
    return get_dialect(detection.name)


def check_template(model: str, dialect: Dialect, *, required: bool, log: TextIO) -> bool:
    """Serve the GGUF file ``model`` with ``dialect`` only if it renders what the model's own
    chat template renders (:mod:`chatfmt.template`): otherwise a
    :class:`~chatfmt.errors.ChatFmtError` that shows the first difference, unless not
    ``required`` (then ``log`` is warned). ``log`` is told the outcome either way. Returns
    whether the model is for chat only (its template writes no tools, the dialect would)."""
    from ..template import TemplateError
    from ..template.model import check_model

    override = f"pass --no-template-check to serve it with the {dialect.name} dialect anyway"
    try:
        result = check_model(Path(model).expanduser(), dialect)
    except TemplateError as exc:
        if required:
            raise ChatFmtError(
                f"cannot check the {dialect.name} dialect against {model}'s chat template: "
                f"{exc}; {override}"
            ) from None
        print(f"chatfmt: warning: the chat template is not checked: {exc}", file=log, flush=True)
        return False
    if result is None:
        _unchecked(model, dialect, log)
    elif result.ok:
        print(f"chatfmt: {result.message}", file=log, flush=True)
    elif required:
        raise ChatFmtError(
            f"{result.message}\nThe model would be served in a format it was not trained on. "
            f"Choose the dialect of its format with --dialect, or {override}."
        )
    else:
        print(f"chatfmt: warning: {result.message}", file=log, flush=True)
    return result is not None and result.chat_only


def _unchecked(model: str, dialect: Dialect, log: TextIO) -> None:
    print(
        f"chatfmt: {model} carries no chat template: the {dialect.name} dialect is not "
        "checked against one",
        file=log,
        flush=True,
    )


def no_dialect_message(model: str, detection: Detection) -> str:
    """The error of a model whose dialect could not be detected: why, and what to pass."""
    return (
        f"cannot tell the chat format of {model}: {detection.reason}. Pass the one it was "
        f"trained with as --dialect NAME, one of: {', '.join(detection.candidates)}"
    )


class ModelFormat(NamedTuple):
    """How a model is served: its dialect (``None``: told once the engine runs), whether for
    chat only, and how, in words (``/v1/models`` shows it)."""

    dialect: Dialect | None
    chat_only: bool
    description: str | None = None


def choose_dialect(
    model: str, named: str | None, *, template_check: bool, log: TextIO
) -> ModelFormat:
    """The dialect ``model`` is served in, decided before it loads, whether for chat only, and
    how in words (the dialect ``None``: not a file here — the default model or a remote
    engine's model — told once the engine's vocabulary is known, :func:`default_dialect`).

    - ``named`` (``--dialect``): that dialect, checked against a GGUF's own template
      (:func:`check_template`); ``"template"``: the model's own template as the dialect.
    - Else the dialect the template is written in, if it renders what the template renders;
      where none does (or none is detected), the template itself
      (:class:`~chatfmt.template.TemplateDialect`). A model that can be served neither way is
      a :class:`~chatfmt.errors.ChatFmtError` naming both reasons and what to pass.
    - ``template_check=False`` serves a detected dialect whose render differs, with a warning.
    """
    path = Path(model).expanduser()
    is_file = model != "default" and path.is_file()
    if named == "template":
        if not is_file:
            raise ChatFmtError(
                "--dialect template serves a GGUF file through its own chat template: pass "
                "the file as --model"
            )
        return _template_dialect(model, log, why_not_built_in=None)
    if named is not None:
        dialect = get_dialect(named)
        chat_only = is_file and check_template(model, dialect, required=template_check, log=log)
        return ModelFormat(dialect, chat_only, f"the {named} dialect, as named (--dialect)")
    if not is_file:
        return ModelFormat(None, False)
    detection = detect_model_dialect(model)
    if detection.name is None:
        return _template_dialect(
            model,
            log,
            why_not_built_in=no_dialect_message(model, detection),
            short=f"no dialect's fingerprint fits: {detection.reason}",
        )
    dialect = get_dialect(detection.name)
    print(f"chatfmt: {detection.message}", file=log, flush=True)
    from ..template import TemplateError
    from ..template.model import check_model

    try:
        result = check_model(path, dialect)
    except TemplateError as exc:
        raise ChatFmtError(
            f"{model}'s chat template cannot be rendered, so neither the {dialect.name} "
            f"dialect nor the template itself can be checked: {exc}. Pass --dialect "
            f"{dialect.name} --no-template-check to serve it with that dialect unchecked"
        ) from None
    if result is None:
        _unchecked(model, dialect, log)
        return ModelFormat(dialect, False, f"the {dialect.name} dialect (no template to check)")
    if result.ok:
        print(f"chatfmt: {result.message}", file=log, flush=True)
        checked = f"the {dialect.name} dialect, checked against the model's chat template"
        return ModelFormat(dialect, result.chat_only, checked)
    if not template_check:
        print(f"chatfmt: warning: {result.message}", file=log, flush=True)
        unchecked = f"the {dialect.name} dialect, which differs from the model's chat template"
        return ModelFormat(dialect, result.chat_only, unchecked)
    return _template_dialect(
        model, log, why_not_built_in=result.message, short=result.message, detected=True
    )


def _template_dialect(
    model: str,
    log: TextIO,
    *,
    why_not_built_in: str | None,
    short: str = "",
    detected: bool = False,
) -> ModelFormat:
    """``model`` served through its own chat template, or the error that says why it cannot
    be (and, where a built-in dialect was tried, why that was not used either)."""
    from ..template.model import model_template_dialect

    dialect, why = model_template_dialect(Path(model).expanduser())
    if dialect is None:
        if why_not_built_in is None:
            raise ChatFmtError(f"cannot serve {model} through its own chat template: {why}")
        advice = (
            "\nThe model would be served in a format it was not trained on. Choose the "
            "dialect of its format with --dialect NAME, or pass --no-template-check to serve "
            "the detected dialect anyway."
            if detected
            else ""
        )
        raise ChatFmtError(
            f"{why_not_built_in}\nNor can it be served through its own chat template: "
            f"{why}.{advice}"
        )
    if short:
        print(f"chatfmt: no built-in dialect serves it exactly: {short}", file=log, flush=True)
    print(f"chatfmt: serving {model} through {why}", file=log, flush=True)
    return ModelFormat(dialect, dialect.chat_only, dialect.description)
