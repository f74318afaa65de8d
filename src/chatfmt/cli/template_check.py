"""``chatfmt template FILE``: how ``chatfmt serve`` would serve a model with this chat template,
told without loading the model — the dialect its markup is written in and whether that renders
exactly as the template, else whether the template can serve itself (its call syntax, its
reasoning), else why it would be refused.

``FILE`` is a Jinja template, a ``tokenizer_config.json`` (its ``chat_template``, BOS and EOS
tokens and added tokens) or a GGUF file. The template dialect needs the vocabulary's control
tokens: a GGUF and a ``tokenizer_config.json`` carry them; for a bare template pass
``--tokenizer`` (a ``tokenizer.json``, a GGUF, or a tokenizer name).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..dialects import get_dialect
from ..dialects.detect import detect_dialect
from ..errors import ChatFmtError


def _token(config: dict[str, Any], key: str) -> str:
    value = config.get(key)
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _read(path: Path) -> tuple[Any, list[str]]:
    """The template of ``path`` and the control tokens it comes with (maybe none)."""
    from ..template import ChatTemplate
    from ..template.model import model_template

    if path.suffix == ".gguf":
        template = model_template(path)
        if template is None:
            raise ChatFmtError(f"{path} carries no chat template")
        from ..tokenizers import load_tokenizer

        return template, list(load_tokenizer(str(path)).controls)
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".json":
        return ChatTemplate(text), []
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ChatFmtError(f"{path} is not valid JSON ({exc})") from None
    source = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(source, list):  # named templates: the default one
        source = next((t.get("template") for t in source if t.get("name") == "default"), None)
    if not isinstance(source, str):
        raise ChatFmtError(f"{path} has no chat_template")
    added = config.get("added_tokens_decoder") or {}
    controls = [t["content"] for t in added.values() if isinstance(t, dict) and "content" in t]
    bos, eos = _token(config, "bos_token"), _token(config, "eos_token")
    return ChatTemplate(source, bos_token=bos, eos_token=eos), controls


def cmd_template(args: argparse.Namespace) -> int:
    from ..template import check_dialect, template_dialect

    path = Path(args.file).expanduser()
    if not path.is_file():
        raise ChatFmtError(f"there is no file {args.file}")
    template, controls = _read(path)
    if args.tokenizer:
        from ..tokenizers import load_tokenizer

        controls = list(load_tokenizer(args.tokenizer).controls)
    detection = detect_dialect(template.source, None)
    report: dict[str, Any] = {"detected": detection.name, "why": detection.reason}
    if detection.name is not None:
        check = check_dialect(get_dialect(detection.name), template)
        report["check"] = check.message
        if check.ok:
            report["served"] = f"the {detection.name} dialect"
            report["chat_only"] = check.chat_only
    if "served" not in report:
        dialect, why = template_dialect(template, controls)
        if dialect is not None:
            report["served"] = why
            report["chat_only"] = dialect.chat_only
            report["stops"] = list(dialect.stop_controls)
        else:
            hint = (
                " (no control tokens were given: pass --tokenizer with the model's vocabulary)"
                if not controls
                else ""
            )
            report["refused"] = why + hint
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        print(f"detected: {detection.name or 'none'} ({detection.reason})")
        if "check" in report:
            print(f"check: {report['check']}")
        if "served" in report:
            print(f"chatfmt serve would use: {report['served']}")
        else:
            print(f"chatfmt serve would refuse it: {report['refused']}")
    return 0 if "served" in report else 1


def add_template_parser(sub: Any) -> None:
    p = sub.add_parser(
        "template",
        help="how chatfmt serve would serve a model with this chat template",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("file", help="a chat template (.jinja), a tokenizer_config.json or a GGUF")
    p.add_argument(
        "--tokenizer",
        metavar="T",
        help="the model's vocabulary, for its control tokens (a tokenizer.json, a GGUF or a name)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_template)
