"""Watching training: TensorBoard event files beside metrics.jsonl, and `nmt plot` of one or several runs."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import tiny_recipe_yaml

from nmt_cli.config import load_recipe
from nmt_cli.errors import NmtError
from nmt_cli.train.events import EventWriter
from nmt_cli.train.loop import train

pytest.importorskip("matplotlib")
pytest.importorskip("tensorboard")


@pytest.fixture(scope="module")
def run_dir(prepared, tmp_path_factory) -> Path:
    """A tiny real run with training and validation records (valid BLEU included)."""
    folder = tmp_path_factory.mktemp("curves")
    path = folder / "r.yaml"
    path.write_text(tiny_recipe_yaml(prepared.data.root, prepared.data_dir, folder / "run"))
    recipe = load_recipe(path, ["train.max_steps=6", "train.validate_every=3", "train.log_every=2"])
    train(recipe, log=lambda _m: None)
    return recipe.run_dir


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_tensorboard_event_files_hold_the_metrics(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {
        "train/loss",
        "train/nll",
        "train/ppl",
        "train/lr",
        "train/tgt_tokens_per_s",
        "train/grad_norm",
        "train/pad_share",
        "valid/loss",
        "valid/ppl",
        "valid/bleu",
    } <= tags
    logged = {r["step"]: r for r in records(run_dir) if "loss" in r}
    seen = {e.step: e.value for e in events.Scalars("train/loss")}
    assert seen.keys() == logged.keys()
    assert all(seen[step] == pytest.approx(logged[step]["loss"], rel=1e-6) for step in seen)
    valid = [r for r in records(run_dir) if "valid_bleu" in r]
    assert [e.step for e in events.Scalars("valid/bleu")] == [r["step"] for r in valid]


def test_training_without_tensorboard_writes_no_events(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if the extra were not installed
    writer = EventWriter(tmp_path / "tb", enabled=True)
    writer.write({"step": 1, "loss": 2.0})
    writer.close()
    assert not writer.active and not (tmp_path / "tb").exists()


def read_png(path: Path):
    from matplotlib.image import imread

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return imread(path)


def test_plot_draws_one_and_several_runs(run_dir, tmp_path):
    from typer.testing import CliRunner

    from nmt_cli.cli import app

    other = tmp_path / "other"
    other.mkdir()
    shifted = [
        {**r, **{k: v * 1.5 for k, v in r.items() if k in ("loss", "valid_loss", "valid_bleu")}} for r in records(run_dir)
    ]
    (other / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in shifted))
    one, two = tmp_path / "one.png", tmp_path / "two.png"
    runner = CliRunner()
    assert runner.invoke(app, ["plot", str(run_dir), "-o", str(one)]).exit_code == 0
    result = runner.invoke(app, ["plot", str(run_dir), str(other), "-o", str(two), "--x", "hours"])
    assert result.exit_code == 0, result.output
    image_one, image_two = read_png(one), read_png(two)
    assert image_one.shape[:2] == (800, 1200)
    assert image_one.std() > 0.05  # drawn on, not blank
    assert (image_one[..., :3] < 0.9).mean() > 0.01  # ink: lines, axes and text
    assert image_one.shape == image_two.shape and abs(image_one - image_two).mean() > 0.001  # the second run shows


def test_plot_errors_are_one_line(run_dir, tmp_path):
    from nmt_cli.curves import read_run

    with pytest.raises(NmtError, match="metrics.jsonl: not found"):
        read_run(tmp_path, "empty")
    broken = tmp_path / "broken"
    shutil.copytree(run_dir, broken, ignore=shutil.ignore_patterns("*.pt", "tensorboard"))
    with open(broken / "metrics.jsonl", "a") as handle:
        handle.write('{"step": 9, "lo')
    lines = len((broken / "metrics.jsonl").read_text().splitlines())
    with pytest.raises(NmtError, match=rf"metrics.jsonl:{lines}: not a JSON line"):
        read_run(broken, "broken")


def test_a_run_with_one_validation_draws_its_point():
    """One validation (a short run): each validation panel shows its point, not an empty frame."""
    pytest.importorskip("matplotlib")
    from nmt_cli.curves import RunCurves, _add, draw_runs

    run = RunCurves("short")
    for record in ({"step": 10, "loss": 5.0, "lr": 1e-3}, {"step": 20, "loss": 4.0, "lr": 1e-3}):
        _add(run, record)
    _add(run, {"step": 20, "valid_loss": 4.5, "valid_ppl": 90.0, "valid_bleu": 3.2})
    figure = draw_runs([run])
    for box in figure.axes[1:3]:  # perplexity and BLEU: one validation each
        assert [line.get_marker() for line in box.lines] == ["o"], box.get_title()
