"""``chatfmt serve`` as a user runs it (its argument parsing, checks, web chat and warm
interpreter kernel), on a FakeEngine instead of a model, so that it starts in a second.

Run as ``python serve_cli_fake.py <serve arguments>``: exits with ``chatfmt``'s status."""

from __future__ import annotations

import sys

import chatfmt.cli.serve as serve
from chatfmt.cli.main import main
from chatfmt.engines.fake import FakeEngine
from chatfmt.tokenizers import load_tokenizer


def fake_engine(*_args: object, **_kwargs: object) -> FakeEngine:
    return FakeEngine(load_tokenizer("qwen2.5"), ["Hello!<|im_end|>"])


serve.build_engine = fake_engine  # type: ignore[assignment]

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
