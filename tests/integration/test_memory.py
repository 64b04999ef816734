"""Fitting batches to memory and skipped loss-scaled updates, on the CPU (the CUDA versions are in test_cuda.py).

Out-of-memory is simulated by raising the allocator's own error from the model when a batch
holds more rows than a limit: the recovery path is the one a real CUDA OOM takes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nmt_cli.config import load_recipe
from nmt_cli.errors import NmtError, RecipeError
from nmt_cli.train import checkpoint
from nmt_cli.train.distributed import init_distributed
from nmt_cli.train.loop import Trainer
from nmt_cli.train.memory import largest_fitting, split_rows, with_headroom


def test_largest_fitting_finds_the_limit_by_doubling_then_bisecting():
    asked: list[int] = []

    def fits(size: int) -> bool:
        asked.append(size)
        return size <= 20_000

    found = largest_fitting(fits, start=2048, limit=1 << 18, grain=256)
    assert 20_000 - 256 < found <= 20_000
    assert asked[:5] == [2048, 4096, 8192, 16384, 32768]  # doubling until the first failure
    assert len(asked) < 15


def test_largest_fitting_edges():
    assert largest_fitting(lambda size: False, start=2048) == 0
    assert largest_fitting(lambda size: True, start=2048, limit=10_000) == 10_000
    assert with_headroom(10_000) == 8_960  # 90%, down to a multiple of 64
    assert with_headroom(10) == 64


@pytest.mark.parametrize("rows,pieces", [(10, 1), (10, 2), (10, 3), (7, 4), (3, 8), (1, 64)])
def test_split_rows_covers_every_row_once(rows, pieces):
    parts = split_rows(rows, pieces)
    covered = [i for part in parts for i in range(rows)[part]]
    assert covered == list(range(rows))
    assert len(parts) == min(rows, pieces) and all(part.stop > part.start for part in parts)


def test_max_tokens_accepts_auto_or_an_integer(tmp_path):
    assert load_recipe(Path("recipes/multi30k_ende.yaml"), ["train.max_tokens=auto"]).train.max_tokens == "auto"
    with pytest.raises(RecipeError, match="expected an integer or one of auto"):
        load_recipe(Path("recipes/multi30k_ende.yaml"), ["train.max_tokens=lots"])
    with pytest.raises(RecipeError, match="out of range"):
        load_recipe(Path("recipes/multi30k_ende.yaml"), ["train.max_tokens=0"])


def _trainer(prepared, run: Path, *overrides: str) -> tuple[Trainer, list[str]]:
    path = run.parent / f"{run.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(Path(prepared.run_dir.parent / "tiny.yaml").read_text())
    recipe = load_recipe(path, [f"train.dir={run}", "model.dropout=0.0", "train.save_every=0", *overrides])
    messages: list[str] = []
    trainer = Trainer(recipe, init_distributed(recipe.train), messages.append)
    trainer.prepare_run_dir(None)
    return trainer, messages


class _RunsOutOfMemoryAbove(torch.nn.Module):
    """Wraps the model; raises the allocator's OOM error for batches of more than ``rows`` sentences."""

    def __init__(self, model: torch.nn.Module, rows: int) -> None:
        super().__init__()
        self.model, self.rows, self.refused = model, rows, 0

    def forward(self, src, *args):
        if src.size(0) > self.rows:
            self.refused += 1
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return self.model(src, *args)


def test_out_of_memory_splits_the_batch_and_gives_the_same_update(prepared, tmp_path):
    whole, _ = _trainer(prepared, tmp_path / "whole")
    split, messages = _trainer(prepared, tmp_path / "split")
    batches = whole._epoch_batches()
    group = [max(batches, key=len)]
    rows = len(group[0])
    split.updates.network = _RunsOutOfMemoryAbove(split.model, rows // 3)
    for trainer in (whole, split):  # plain SGD: the new weights show the gradient itself (Adam's first step is ~sign)
        trainer.updates.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)
    expected, got = whole.updates.run(group, 0, 0.0), split.updates.run(group, 0, 0.0)
    assert split.updates.split == 4 and split.updates.network.refused == 2  # 1 -> 2 -> 4 pieces
    assert any("each batch now runs as 4 accumulation steps" in m for m in messages)
    assert got["tokens"] == expected["tokens"]
    assert float(got["loss"]) == pytest.approx(float(expected["loss"]), rel=1e-5)
    for a, b in zip(whole.model.parameters(), split.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_out_of_memory_on_a_single_sentence_is_one_line_advice(prepared, tmp_path):
    trainer, _ = _trainer(prepared, tmp_path / "run")
    trainer.updates.network = _RunsOutOfMemoryAbove(trainer.model, 0)
    with pytest.raises(NmtError, match=r"out of GPU memory at update 1 .*lower train.max_tokens"):
        trainer.updates.run([trainer._epoch_batches()[0]], trainer.state.step, 0.0)


def test_auto_max_tokens_on_the_cpu_is_fixed_and_resumes_unchanged(prepared, tmp_path):
    trainer, messages = _trainer(prepared, tmp_path / "run", "train.max_tokens=auto", "train.max_steps=2")
    assert trainer.max_tokens == 4096 and any("4,096 on the CPU" in m for m in messages)
    trainer.run()
    saved = checkpoint.load(checkpoint.step_checkpoints(tmp_path / "run")[-1])["train_state"]
    assert saved["max_tokens"] == 4096


def test_resume_keeps_the_batch_size_of_the_run(prepared, tmp_path):
    first, _ = _trainer(prepared, tmp_path / "run", "train.max_tokens=1200", "train.max_steps=2")
    first.run()
    resumed, _ = _trainer(prepared, tmp_path / "run", "train.max_tokens=1200", "train.max_steps=4")
    assert resumed.max_tokens == 1200 and resumed.state.step == 2
    changed, messages = _trainer(prepared, tmp_path / "run", "train.max_tokens=900", "train.max_steps=4")
    assert changed.max_tokens == 900  # the recipe's new value wins, with a warning
    assert any("changed from 1,200 to 900" in m for m in messages)


class _OverflowsFirst(torch.nn.Module):
    """Wraps the model; the first ``n`` batches' losses are infinite, as fp16 gradients are when they overflow."""

    def __init__(self, model: torch.nn.Module, n: int) -> None:
        super().__init__()
        self.model, self.left = model, n

    def forward(self, *args):
        loss, nll, tokens = self.model(*args)
        if self.left:
            self.left -= 1
            loss = loss * float("inf")
        return loss, nll, tokens


def test_overflowing_loss_scale_skips_updates_without_advancing_step_or_schedule(prepared, tmp_path):
    trainer, _ = _trainer(prepared, tmp_path / "run", "train.max_steps=3", "train.log_every=1")
    # The CPU scaler runs the same skip logic as CUDA fp16; two overflowing batches must be skipped.
    trainer.updates.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    trainer.updates.network = _OverflowsFirst(trainer.model, 2)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    state = trainer.run()
    assert state.step == 3 and state.skipped_updates == 2
    assert trainer.updates.scaler.get_scale() == 2.0**14  # halved once per overflow
    assert state.epoch == 1 and state.epoch_batches_done == 5  # the skipped batches' data is consumed
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3]
    assert [r["skipped_updates"] for r in records if "loss" in r] == [2, 2, 2]
    # the schedule counts applied updates only: inverse_sqrt's warm-up (5 updates to 3e-3) at its first three
    assert [r["lr"] for r in records if "loss" in r] == pytest.approx([6e-4, 1.2e-3, 1.8e-3])
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert any(not torch.equal(p, before[name]) for name, p in trainer.model.named_parameters())
