"""``chatfmt dataset build``: formats in, Parquet and JSONL out, lengths, packing, bad rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chatfmt import get_dialect
from chatfmt.cli.main import main
from chatfmt.tokenizers import load_tokenizer
from chatfmt.training import IGNORE_INDEX, render_for_training

pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is missing (chatfmt[dataset])")

PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "w", "parameters": PARAMETERS},
    }
]
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
OPENAI = {
    "id": "chat-1",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
    ],
    "tools": TOOLS,
}  # fmt: skip
SHAREGPT = {
    "conversations": [
        {"from": "system", "value": "Be brief."},
        {"from": "human", "value": "Weather in Paris?"},
        {"from": "function_call", "value": CALL},
        {"from": "observation", "value": "sunny"},
        {"from": "gpt", "value": "It is sunny."},
    ],
    "tools": json.dumps([t["function"] for t in TOOLS]),
}  # fmt: skip
RESPONSES = {
    "instructions": "Be brief.",
    "input": [
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather",
         "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "It is sunny."}]},
    ],
    "tools": [{"type": "function", **TOOLS[0]["function"]}],
}  # fmt: skip


def chat(n: int) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = []
    for k in range(n):
        msgs += [
            {"role": "user", "content": f"question {k} " + "word " * 10},
            {"role": "assistant", "content": f"answer {k} " + "word " * 10},
        ]
    return {"messages": msgs}


def write(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run(*argv: str) -> int:
    return main(["dataset", "build", *argv, "--no-progress"])


def base(src: Path, out: Path, dialect: str = "qwen2.5") -> list[str]:
    return [str(src), "--dialect", dialect, "--tokenizer", "qwen2.5", "-o", str(out)]


def test_the_three_formats_give_the_same_rows(tmp_path: Path, capsys: Any) -> None:
    src = write(tmp_path / "in.jsonl", [OPENAI, SHAREGPT, RESPONSES])
    out = tmp_path / "out.parquet"
    assert run(*base(src, out)) == 0
    rows = pq.read_table(out).to_pylist()
    assert [r["id"] for r in rows] == ["chat-1", "line-2", "line-3"]
    assert [r["line"] for r in rows] == [1, 2, 3]
    expected = render_for_training(
        OPENAI["messages"], get_dialect("qwen2.5"), load_tokenizer("qwen2.5"), tools=TOOLS
    )
    for r in rows:
        assert r["input_ids"] == expected.input_ids
        assert r["labels"] == expected.labels
        assert r["attention_mask"] == [1] * len(expected.input_ids)
        assert r["num_trained"] == expected.trained_tokens
    report = capsys.readouterr().err
    assert "wrote 3 row(s)" in report and "trained:" in report
    assert not (tmp_path / "out.parquet.partial").exists()


def test_jsonl_output_and_the_json_report(tmp_path: Path) -> None:
    src = write(tmp_path / "in.jsonl", [OPENAI, chat(2)])
    out = tmp_path / "out.jsonl"
    assert run(*base(src, out), "--report", str(tmp_path / "r.json")) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2
    assert all(len(r["labels"]) == len(r["input_ids"]) == r["num_tokens"] for r in rows)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["conversations_written"] == 2
    assert report["tokens"] == sum(r["num_tokens"] for r in rows)
    assert report["trained_tokens"] == sum(r["num_trained"] for r in rows)
    assert 0 < report["trained_share"] < 1


def test_parquet_is_written_a_row_group_at_a_time(tmp_path: Path) -> None:
    src = write(tmp_path / "in.jsonl", [chat(1)] * 25)
    out = tmp_path / "out.parquet"
    assert run(*base(src, out), "--row-group-size", "10") == 0
    meta = pq.ParquetFile(out).metadata
    assert (meta.num_rows, meta.num_row_groups) == (25, 3)


def test_too_long_rows_are_dropped_or_shortened_by_whole_rounds(tmp_path: Path) -> None:
    src = write(tmp_path / "in.jsonl", [chat(1), chat(6)])
    qwen = load_tokenizer("qwen2.5")
    one = render_for_training(chat(1)["messages"], get_dialect("qwen2.5"), qwen)
    limit = str(len(one) + 40)
    out = tmp_path / "drop.jsonl"
    assert run(*base(src, out), "--max-length", limit, "--report", str(tmp_path / "r.json")) == 0
    assert len(out.read_text().splitlines()) == 1
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["dropped_by_reason"] == {"too long": 1}
    assert "line 2" in report["first_dropped"]["too long"]
    out = tmp_path / "turns.jsonl"
    assert run(*base(src, out), "--max-length", limit, "--truncation", "drop-turns") == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(r["num_tokens"] <= int(limit) for r in rows)
    tok = load_tokenizer("qwen2.5")
    text = tok.decode(rows[1]["input_ids"])
    assert "answer 5" in text and "question 0" not in text  # the earliest rounds went first
    assert text.count("<|im_start|>user") == text.count("<|im_start|>assistant")


def test_packing_restarts_positions_per_conversation(tmp_path: Path) -> None:
    src = write(tmp_path / "in.jsonl", [chat(1), chat(2), chat(1), chat(1)])
    out = tmp_path / "packed.parquet"
    assert run(*base(src, out), "--max-length", "200", "--pack") == 0
    rows = pq.read_table(out).to_pylist()
    assert sum(len(r["ids"]) for r in rows) == 4
    for r in rows:
        assert len(r["input_ids"]) <= 200
        assert sum(r["seq_lengths"]) == len(r["input_ids"]) == len(r["position_ids"])
        starts = [k for k, p in enumerate(r["position_ids"]) if p == 0]
        assert len(starts) == len(r["seq_lengths"])
        # No loss at a conversation's first token: nothing is predicted across the seam.
        assert all(r["labels"][k] == IGNORE_INDEX for k in starts)


def test_a_bad_row_stops_the_build_naming_its_line(tmp_path: Path, capsys: Any) -> None:
    src = write(tmp_path / "in.jsonl", [OPENAI, {"messages": [{"role": "user"}]}])
    (tmp_path / "in.jsonl").write_text(
        (tmp_path / "in.jsonl").read_text() + "{not json\n", encoding="utf-8"
    )
    out = tmp_path / "out.parquet"
    assert run(*base(src, out)) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and "--invalid drop" in err
    assert not out.exists() and not (tmp_path / "out.parquet.partial").exists()
    assert run(*base(src, out), "--invalid", "drop") == 0
    err = capsys.readouterr().err
    assert "dropped (cannot be trained): 1, first at line 2" in err
    assert "dropped (unreadable): 1, first at line 3: not valid JSON" in err


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"text": "hi"}, "not a conversation"),
        ({"conversations": [{"from": "bot", "value": "x"}]}, "'from': 'bot'"),
        ({"conversations": [{"from": "observation", "value": "x"}]}, "follows no function_call"),
        ({"input": [{"type": "image", "url": "x"}]}, "has type 'image'"),
    ],
)
def test_rows_of_no_known_shape_say_what_to_fix(
    tmp_path: Path, capsys: Any, row: Any, message: str
) -> None:
    src = write(tmp_path / "in.jsonl", [row])
    assert run(*base(src, tmp_path / "o.jsonl")) == 2
    err = capsys.readouterr().err
    assert "in.jsonl, line 1" in err and message in err


def test_usage_errors(tmp_path: Path, capsys: Any) -> None:
    src = write(tmp_path / "in.jsonl", [chat(1)])
    assert run(*base(src, tmp_path / "out.csv")) == 2
    assert "*.parquet or *.jsonl" in capsys.readouterr().err
    assert run(*base(src, tmp_path / "o.jsonl"), "--pack") == 2
    assert "--pack needs --max-length" in capsys.readouterr().err
    assert run(*base(tmp_path / "missing.jsonl", tmp_path / "o.jsonl")) == 2
    assert "no input file" in capsys.readouterr().err


def test_unstable_turns_are_counted_when_skipped(tmp_path: Path, capsys: Any) -> None:
    row = {"messages": [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b", "reasoning_content": "r"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d"},
    ]}  # fmt: skip
    src = write(tmp_path / "in.jsonl", [row])
    args = [str(src), "--dialect", "qwen3", "--tokenizer", "qwen3", "-o", str(tmp_path / "o.jsonl")]
    assert run(*args) == 2
    assert "--train-on last" in capsys.readouterr().err
    assert run(*args, "--unstable", "skip") == 0
    assert "left untrained (--unstable skip): 1" in capsys.readouterr().err
    assert run(*args, "--train-on", "last") == 0
