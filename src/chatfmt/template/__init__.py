"""A model's own chat template: rendered as ``transformers`` renders it, used to check that a
dialect is the model's format before it is served (:func:`check_dialect`), and, where no
built-in dialect is, as the dialect itself (:class:`TemplateDialect`)."""

from __future__ import annotations

from .check import PROBES, Difference, Probe, TemplateCheck, check_dialect, template_messages
from .dialect import TemplateDialect, TemplateFormat, template_dialect
from .jinja import ChatTemplate, TemplateError
from .split import UnsafeTemplate

__all__ = [
    "PROBES",
    "ChatTemplate",
    "Difference",
    "Probe",
    "TemplateCheck",
    "TemplateDialect",
    "TemplateError",
    "TemplateFormat",
    "UnsafeTemplate",
    "check_dialect",
    "template_dialect",
    "template_messages",
]
