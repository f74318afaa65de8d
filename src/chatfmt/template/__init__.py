"""A model's own chat template: rendered as ``transformers`` renders it, and used to check that
a dialect is the model's format before it is served (:func:`check_dialect`)."""

from __future__ import annotations

from .check import PROBES, Difference, Probe, TemplateCheck, check_dialect, template_messages
from .jinja import ChatTemplate, TemplateError

__all__ = [
    "PROBES",
    "ChatTemplate",
    "Difference",
    "Probe",
    "TemplateCheck",
    "TemplateError",
    "check_dialect",
    "template_messages",
]
