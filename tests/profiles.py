"""Hypothesis example counts: one knob, ``CHATFMT_PROFILE``, for the whole suite.

Two profiles, named after the tiers they are for (``tests/conftest.py`` says which tier a test
is in):

- ``unit``: every property at a tenth of its full count, for the unit tier's quick loop
  (``scripts/test --fast``);
- ``full`` (the default): every property at its full count, for the oracle and slow tiers and
  for CI.

Under ``CI`` the examples are derandomized: CI explores the same examples on every run, so a
landing never hinges on a lucky draw; local runs draw new examples each time and keep finding
new cases. The profiles are Hypothesis's own, so ``--hypothesis-profile=unit`` picks one too.

A property whose examples cost much more or much less than usual does not hard-code a count:
it asks for a multiple of the profile's (``@settings(max_examples=examples(2.5))``), so the one
knob scales it with the rest.
"""

from __future__ import annotations

import os

from hypothesis import settings

#: Examples per property in each profile.
COUNTS = {"unit": 20, "full": 200}
DEFAULT = "full"
PROFILE = os.environ.get("CHATFMT_PROFILE", DEFAULT)


def register() -> None:
    """Register both profiles and load the one ``CHATFMT_PROFILE`` names."""
    if PROFILE not in COUNTS:
        raise ValueError(f"CHATFMT_PROFILE={PROFILE!r}: expected one of {', '.join(COUNTS)}")
    for name, count in COUNTS.items():
        settings.register_profile(
            name, max_examples=count, deadline=None, derandomize=bool(os.environ.get("CI"))
        )
    settings.load_profile(PROFILE)


def examples(factor: float) -> int:
    """``factor`` times the loaded profile's examples per property (at least one)."""
    return max(1, round(settings.default.max_examples * factor))
