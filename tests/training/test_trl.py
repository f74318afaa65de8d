"""The recipe of docs/training.md, run: ``chatfmt dataset build`` → Parquet → Hugging Face
``datasets`` → TRL's ``SFTTrainer`` on the rows as they are (pre-tokenized: no chat template,
no re-tokenizing, chatfmt's labels), a few steps of a tiny randomly initialised Qwen2 model on
CPU with Qwen2.5's vocabulary.

Checked: the loaded rows are chatfmt's ids, labels and attention mask; the trainer's batches
carry them unchanged (labels padded with -100, attention mask with 0); the loss is finite and
is the mean cross-entropy over exactly the labelled positions, computed here by hand; no
gradient reaches a position whose next label is -100; training lowers the loss.

Needs the ``train`` extra: ``pip install 'chatfmt[train]'`` (torch, transformers, trl,
datasets); skipped without it (CI installs ``.[dev]``).
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest

from chatfmt import get_dialect
from chatfmt.cli.main import main
from chatfmt.tokenizers.base import Tokenizer
from chatfmt.training import IGNORE_INDEX, render_for_training


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ValueError:  # a stand-in in sys.modules (tests/dialects/test_llama4.py's for torch)
        return True


MISSING = [m for m in ("torch", "transformers", "trl", "datasets", "pyarrow") if _missing(m)]
pytestmark = [
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"{', '.join(MISSING)} missing: the TRL recipe needs pip install 'chatfmt[train]'",
    ),
    pytest.mark.slow,  # trains a model: part of CI, not of scripts/test --fast
]

#: Optimizer steps: enough to see the loss fall, few enough for two CPU cores.
STEPS = 3
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def call(cid: str, city: str) -> dict[str, Any]:
    arguments = json.dumps({"city": city})
    return {
        "id": cid,
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments},
    }


ROWS: list[dict[str, Any]] = [
    {"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call("c1", "Paris")]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 °C"},
        {"role": "assistant", "content": "Sunny and 21 °C in Paris."},
    ], "tools": TOOLS},
    {"messages": [
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi!"},
        {"role": "user", "content": "And in French?"},
        {"role": "assistant", "content": "Salut !"},
    ]},
    {"messages": [
        {"role": "user", "content": "Weather in Oslo and Lima?"},
        {"role": "assistant", "content": "Checking both.",
         "tool_calls": [call("a", "Oslo"), call("b", "Lima")]},
        {"role": "tool", "tool_call_id": "a", "content": "snow"},
        {"role": "tool", "tool_call_id": "b", "content": "fog"},
        {"role": "assistant", "content": "Snow in Oslo, fog in Lima."},
    ], "tools": TOOLS},
    {"messages": [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Capital of Japan?"},
        {"role": "assistant", "content": "Tokyo."},
    ]},
]  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rows written by ``chatfmt dataset build`` as a user runs it."""
    tmp = tmp_path_factory.mktemp("trl")
    source = tmp / "chats.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    out = tmp / "train.parquet"
    argv = ["dataset", "build", str(source), "--dialect", "qwen2.5", "--tokenizer", "qwen2.5"]
    assert main([*argv, "-o", str(out)]) == 0
    return out


def pad_tokenizer(pad_id: int) -> Any:
    """The trainer's ``processing_class``: only its pad token is used, the rows being
    tokenized already (a real run passes the model's own tokenizer)."""
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    from tokenizers import Tokenizer as HFTokenizer

    pad = "<|endoftext|>"
    core = HFTokenizer(WordLevel({pad: pad_id}, unk_token=pad))
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=pad, eos_token=pad)


def by_hand(logits: Any, labels: Any) -> Any:
    """Mean cross-entropy of each labelled token given the positions before it."""
    import torch

    total, count = torch.zeros((), dtype=torch.float64), 0
    for b in range(labels.shape[0]):
        for k in range(1, labels.shape[1]):
            if int(labels[b, k]) != IGNORE_INDEX:
                row = torch.log_softmax(logits[b, k - 1].double(), dim=-1)
                total = total - row[int(labels[b, k])]
                count += 1
    return total / count


def test_sft_trainer_trains_on_the_rows_as_built(built: Path, qwen: Tokenizer) -> None:
    import torch
    from datasets import load_dataset
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trl import SFTConfig, SFTTrainer

    # Load: the columns as chatfmt wrote them, the rows its training render.
    ds = load_dataset("parquet", data_files=str(built), split="train")
    assert {"input_ids", "labels", "attention_mask"} <= set(ds.column_names)
    dialect = get_dialect("qwen2.5")
    for row, source in zip(ds, ROWS, strict=True):
        example = render_for_training(source["messages"], dialect, qwen, tools=source.get("tools"))
        assert row["input_ids"] == example.input_ids and row["labels"] == example.labels
        assert row["attention_mask"] == [1] * len(example.input_ids)
    ds = ds.remove_columns(["id", "line", "num_tokens", "num_trained"])

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=151936,  # Qwen2.5's embedding size (its tokenizer's ids all fit)
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(config)
    assert max(max(r) for r in ds["input_ids"]) < config.vocab_size
    args = SFTConfig(
        output_dir=str(built.parent / "out"),
        max_length=None,  # chatfmt fitted the rows already: no truncation
        per_device_train_batch_size=2,
        max_steps=STEPS,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=ds,
        processing_class=pad_tokenizer(qwen.controls["<|endoftext|>"]),
    )

    # The trainer's batch is the rows as built: labels padded with -100, the mask with 0.
    rows = [trainer.train_dataset[i] for i in range(2)]
    assert [r["labels"] for r in rows] == list(ds["labels"][:2])
    batch = trainer.data_collator(rows)
    for b, r in enumerate(rows):
        n = len(r["input_ids"])
        assert batch["input_ids"][b, :n].tolist() == r["input_ids"]
        assert batch["labels"][b].tolist() == r["labels"] + [IGNORE_INDEX] * (batch_len(batch) - n)
        assert batch["attention_mask"][b].tolist() == r["attention_mask"] + [0] * (
            batch_len(batch) - n
        )

    # The loss: cross-entropy over exactly the labelled positions, as the model computes it
    # and as the trainer does (its own fused kernel).
    model.eval()
    out = model(**{k: batch[k] for k in ("input_ids", "attention_mask", "labels")})
    expected = by_hand(out.logits.detach(), batch["labels"])
    assert math.isfinite(out.loss.item())
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)
    with torch.no_grad():
        before = trainer.compute_loss(model, dict(batch)).item()
    assert before == pytest.approx(expected.item(), rel=1e-5)

    # No gradient from a masked position: the logits at p get gradient iff p + 1 is labelled.
    out.logits.retain_grad()
    out.loss.backward()
    assert out.logits.grad is not None
    flows = out.logits.grad.abs().sum(dim=-1) > 0  # (batch, position)
    labelled = torch.zeros_like(flows)
    labelled[:, :-1] = batch["labels"][:, 1:] != IGNORE_INDEX
    assert torch.equal(flows, labelled) and bool(labelled.any())
    model.zero_grad()

    # Train: finite losses, and the batch's loss goes down.
    model.train()
    result = trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == STEPS and all(math.isfinite(x) for x in losses)
    assert math.isfinite(result.training_loss)
    model.eval()
    with torch.no_grad():
        after = trainer.compute_loss(model, dict(batch)).item()
    assert after < before


def batch_len(batch: Any) -> int:
    return int(batch["input_ids"].shape[1])
