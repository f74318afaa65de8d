"""Training data: conversations rendered to the exact ids a model is served, with loss masks.

:func:`render_for_training` (or a :class:`TrainingRenderer` kept for a whole data set) turns a
conversation into a :class:`TrainingExample`: ``input_ids``, ``labels`` (``-100`` where no
loss), ``attention_mask`` and the message each token renders. The rule is one for every
dialect: an assistant turn trains on exactly what the model produces after its generation
prompt, through the token that stops it (``docs/training.md``). ``chatfmt dataset`` builds
Parquet or JSONL files from chat data sets with it.
"""

from __future__ import annotations

from .render import (
    IGNORE_INDEX,
    OnUnstable,
    TrainedSpan,
    TrainingError,
    TrainingExample,
    TrainingRenderer,
    TrainOn,
    render_for_training,
)

__all__ = [
    "IGNORE_INDEX",
    "OnUnstable",
    "TrainOn",
    "TrainedSpan",
    "TrainingError",
    "TrainingExample",
    "TrainingRenderer",
    "render_for_training",
]
