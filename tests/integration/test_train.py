"""Training: memorising real pairs, exact resume after SIGKILL, checkpoints and averaging."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import OVERFIT_STEPS, kill_at_first_checkpoint, nmt_in_process

from nmt_cli.config import load_recipe
from nmt_cli.errors import CheckpointError, NmtError
from nmt_cli.train import checkpoint
from nmt_cli.train.checkpoint import average_state_dicts, select_checkpoints
from nmt_cli.train.loop import load_dataset, train


def test_tiny_model_memorises_64_pairs(overfit):
    run_dir, _, _ = overfit
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if "nll" in r]
    assert train_records[-1]["step"] == OVERFIT_STEPS
    assert train_records[-1]["nll"] < 0.1
    assert train_records[0]["nll"] > 3.0
    assert {"loss", "ppl", "lr", "tgt_tokens_per_s", "grad_norm", "pad_share"} <= set(train_records[-1])
    assert all(r["grad_norm"] > 0 and 0 <= r["pad_share"] < 0.5 for r in train_records)


def test_run_folder_is_self_contained(overfit):
    run_dir, _, _ = overfit
    for name in ("model.pt", "recipe.yaml", "spm.src.model", "spm.tgt.model", "metrics.jsonl"):
        assert (run_dir / name).is_file(), name
    payload = checkpoint.load(checkpoint.step_path(run_dir, OVERFIT_STEPS))
    assert {"model", "optimizer", "train_state", "rng", "recipe", "vocab"} <= set(payload)
    assert payload["train_state"]["step"] == OVERFIT_STEPS
    assert payload["format_version"] == 1 and payload["nmt_version"]


def _state(path: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load(path)["model"]


def _train_cmd(recipe_path: Path, run_dir: Path, steps: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "nmt_cli",
        "train",
        str(recipe_path),
        "--set",
        f"train.dir={run_dir}",
        "--set",
        f"train.max_steps={steps}",
        "--set",
        "train.save_every=4",
        "--set",
        "train.keep_last=0",
        "--set",
        "train.threads=1",
        "--set",
        "model.dropout=0.1",
    ]


def test_resume_after_sigkill_is_bitwise_exact(prepared, tmp_path):
    """Weights, Adam's moments and the weights' moving average (train.ema_decay) all resume exactly."""
    recipe_path = tmp_path / "r.yaml"
    recipe_path.write_text(Path(prepared.run_dir.parent / "tiny.yaml").read_text())
    ema = ["--set", "train.ema_decay=0.9"]
    killed = tmp_path / "killed"
    k = kill_at_first_checkpoint(_train_cmd(recipe_path, killed, 10_000) + ema, killed, timeout=120)
    # the resume and the straight run in this process: the kill above is what needed a process of its own
    resumed = nmt_in_process(*_train_cmd(recipe_path, killed, 2 * k)[3:], *ema)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming from {checkpoint.step_path(killed, k)}" in resumed.stderr.replace("\n", "")
    straight = tmp_path / "straight"
    assert nmt_in_process(*_train_cmd(recipe_path, straight, 2 * k)[3:], *ema).returncode == 0
    a, b = _state(checkpoint.step_path(killed, 2 * k)), _state(checkpoint.step_path(straight, 2 * k))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[key], b[key]) for key in a)
    ema_a, ema_b = _state(killed / "model.ema.pt"), _state(straight / "model.ema.pt")
    assert ema_a.keys() == a.keys() and all(torch.equal(ema_a[key], ema_b[key]) for key in ema_a)
    assert any(not torch.equal(ema_a[key], a[key]) for key in a)  # an average, not the last weights
    optimizer_a = checkpoint.load(checkpoint.step_path(killed, 2 * k))["optimizer"]["state"]
    optimizer_b = checkpoint.load(checkpoint.step_path(straight, 2 * k))["optimizer"]["state"]
    assert all(torch.equal(optimizer_a[i]["exp_avg"], optimizer_b[i]["exp_avg"]) for i in optimizer_a)


def test_sigterm_writes_a_checkpoint_then_exits(prepared, tmp_path):
    recipe_path = tmp_path / "r.yaml"
    recipe_path.write_text(Path(prepared.run_dir.parent / "tiny.yaml").read_text())
    run_dir = tmp_path / "run"
    cmd = _train_cmd(recipe_path, run_dir, 10_000)
    cmd[cmd.index("train.save_every=4")] = "train.save_every=100000"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    metrics = run_dir / "metrics.jsonl"  # its first line: the loop is running (log_every updates done)
    while not (metrics.exists() and metrics.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err  # 128 + SIGTERM: `nmt train ... && next-step` stops here
    assert "stopped by SIGTERM" in err and "run the same command to resume" in err
    saved = checkpoint.step_checkpoints(run_dir)
    assert len(saved) == 1 and not (run_dir / "model.pt").exists()  # a preemption saves the checkpoint only


def test_average_state_dicts_is_the_elementwise_mean():
    a = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.5], dtype=torch.float16), "n": torch.tensor([3])}
    b = {"w": torch.tensor([3.0, 6.0]), "b": torch.tensor([1.5], dtype=torch.float16), "n": torch.tensor([3])}
    mean = average_state_dicts([a, b])
    assert torch.equal(mean["w"], torch.tensor([2.0, 4.0]))
    assert mean["b"].dtype == torch.float16 and mean["b"].item() == 1.0
    assert torch.equal(mean["n"], torch.tensor([3]))
    same = average_state_dicts([a, a, a])
    assert all(torch.equal(same[k], a[k]) for k in a)


def test_tied_weights_are_averaged_once_and_stay_one_tensor():
    def tied(value: float) -> dict[str, torch.Tensor]:
        shared = torch.full((2, 3), value)
        return {"embed": shared, "other": torch.full((2,), value), "output": shared}

    mean = average_state_dicts([tied(1.0), tied(3.0)])
    assert list(mean) == ["embed", "other", "output"]
    assert mean["embed"] is mean["output"] and torch.equal(mean["embed"], torch.full((2, 3), 2.0))
    assert torch.equal(mean["other"], torch.full((2,), 2.0))
    untied = {"embed": torch.ones(2, 3), "other": torch.ones(2), "output": torch.zeros(2, 3)}
    assert not torch.equal(average_state_dicts([untied])["embed"], average_state_dicts([untied])["output"])


def test_average_refuses_mismatched_architectures():
    a = {"w": torch.zeros(2, 3)}
    with pytest.raises(CheckpointError, match=r"different architecture .*w has shape \(3, 2\)"):
        average_state_dicts([a, {"w": torch.zeros(3, 2)}], ["one.pt", "two.pt"])
    with pytest.raises(CheckpointError, match="different architecture"):
        average_state_dicts([a, {"v": torch.zeros(2, 3)}])


def test_average_checkpoints_of_a_run(overfit, tmp_path):
    run_dir, _, _ = overfit
    paths = select_checkpoints([run_dir], last=2)
    assert paths == [checkpoint.step_path(run_dir, OVERFIT_STEPS // 2), checkpoint.step_path(run_dir, OVERFIT_STEPS)]
    out = tmp_path / "avg.pt"
    checkpoint.average_checkpoints(paths, out)
    averaged = _state(out)
    first, second = _state(paths[0]), _state(paths[1])
    key = "decoder.0.ffn.w1.weight"
    torch.testing.assert_close(averaged[key], (first[key] + second[key]) / 2)
    # the tied output projection and target embedding are stored once, as in the checkpoints
    assert first["output.weight"].data_ptr() == first["tgt_embed.weight"].data_ptr()
    assert averaged["output.weight"].data_ptr() == averaged["tgt_embed.weight"].data_ptr()
    torch.testing.assert_close(averaged["output.weight"], (first["output.weight"] + second["output.weight"]) / 2)
    with pytest.raises(CheckpointError, match="only 2 step checkpoints"):
        select_checkpoints([run_dir], last=5)


def test_average_refuses_other_model_settings(overfit, prepared, tmp_path):
    run_dir, _, _ = overfit
    other = tmp_path / "other.pt"
    payload = checkpoint.load(run_dir / "model.pt")
    payload["recipe"]["model"]["d_ff"] = 7
    checkpoint.save(other, payload, kind="weights")
    with pytest.raises(CheckpointError, match="different model settings"):
        checkpoint.average_checkpoints([run_dir / "model.pt", other], tmp_path / "x.pt")


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "text"])
def test_corrupt_checkpoints_get_one_line_errors(overfit, tmp_path, damage):
    run_dir, _, _ = overfit
    data = (run_dir / "model.pt").read_bytes()
    bad = tmp_path / "bad.pt"
    bad.write_bytes(
        {"truncate": data[: len(data) // 2], "garbage": b"not a checkpoint" * 10, "empty": b"", "text": b"junk\n"}[damage]
    )
    with pytest.raises(CheckpointError, match="bad.pt: truncated or corrupt checkpoint") as err:
        checkpoint.load(bad)
    assert "\n" not in str(err.value)


def test_refuses_to_overwrite_a_run_without_resume(overfit):
    run_dir, _, _ = overfit
    recipe = load_recipe(run_dir / "recipe.yaml")
    with pytest.raises(NmtError, match="already holds checkpoints"):
        train(recipe, resume=False, log=lambda _m: None)


def test_max_time_stops_training(prepared, tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(Path(prepared.run_dir.parent / "tiny.yaml").read_text())
    recipe = load_recipe(path, [f"train.dir={tmp_path / 'run'}", "train.max_steps=0", "train.max_time=2s"])
    messages: list[str] = []
    train(recipe, log=messages.append)
    assert any("reached max_time 2s" in m for m in messages)
    assert os.path.isfile(tmp_path / "run" / "model.pt")
    state = checkpoint.load(checkpoint.step_checkpoints(tmp_path / "run")[-1])["train_state"]
    assert state["elapsed"] >= 2.0 and state["step"] >= 1  # stopped by the clock, after training


def _short_run(prepared, tmp_path, *overrides):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "r.yaml"
    path.write_text(Path(prepared.run_dir.parent / "tiny.yaml").read_text())
    recipe = load_recipe(
        path, [f"train.dir={tmp_path / 'run'}", "train.max_steps=3", "train.save_every=0", "train.log_every=1", *overrides]
    )
    messages: list[str] = []
    train(recipe, log=messages.append)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    return messages, records


def test_bf16_autocast_trains_on_cpu(prepared, tmp_path):
    messages, records = _short_run(prepared, tmp_path, "train.precision=bf16")
    assert any("reached 3 updates" in m for m in messages)
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    weights = checkpoint.load(tmp_path / "run" / "model.pt")["model"]
    assert all(t.dtype == torch.float32 for t in weights.values() if t.is_floating_point())


def test_packed_batches_train_as_padded_ones_and_the_log_says_how(prepared, tmp_path):
    """``train.packed``: the run trains (dropout off in the tiny recipe, so its losses are the padded run's up to
    rounding) and its log names the computation behind the packed attention."""
    messages, records = _short_run(prepared, tmp_path / "packed", "train.packed=true")
    _, padded = _short_run(prepared, tmp_path / "padded")
    assert any(m.startswith("train.packed: sentences laid end to end, attention through the padded") for m in messages)
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses == pytest.approx([r["loss"] for r in padded if "loss" in r], rel=1e-4) and len(losses) == 3


def test_gradient_accumulation_and_clipping_run(prepared, tmp_path):
    messages, records = _short_run(
        prepared, tmp_path, "train.update_freq=2", "train.clip_norm=0.5", "train.lr_schedule=noam", "train.warmup=2"
    )
    assert records[0]["lr"] == pytest.approx(32**-0.5 * 2**-1.5)  # noam at update 1 with warm-up 2
    assert records[-1]["step"] == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fp16 with loss scaling needs CUDA")
def test_fp16_on_cuda(prepared, tmp_path):
    messages, records = _short_run(prepared, tmp_path, "train.precision=fp16", "train.device=cuda")
    assert all(math.isfinite(r["loss"]) for r in records if "loss" in r)


def test_activation_checkpointing_gives_the_same_update(prepared, tmp_path):
    _, plain = _short_run(prepared, tmp_path / "a", "model.dropout=0.0")
    _, checkpointed = _short_run(prepared, tmp_path / "b", "model.dropout=0.0", "train.activation_checkpointing=true")
    assert [r["loss"] for r in plain if "loss" in r] == pytest.approx(
        [r["loss"] for r in checkpointed if "loss" in r], rel=1e-5
    )


@pytest.mark.slow
def test_torch_compile_trains(prepared, tmp_path):
    messages, records = _short_run(prepared, tmp_path, "train.compile=true")
    assert any("reached 3 updates" in m for m in messages)


def test_pairs_longer_than_the_model_are_counted_not_dropped_silently(prepared, tmp_path):
    recipe = load_recipe(
        Path(prepared.run_dir.parent / "tiny.yaml"),
        [f"train.dir={tmp_path / 'run'}", "model.max_positions=20", "train.max_steps=1"],
    )
    messages: list[str] = []
    train(recipe, log=messages.append)
    lengths = load_dataset(recipe).train.pair_lengths
    expected = int((lengths > 20).sum())
    assert expected > 0
    assert any(f"{expected:,} training pairs longer than model.max_positions (20) are left out" in m for m in messages)


def test_repulsive_heads_train_and_head_similarity_is_logged_at_validation(prepared, tmp_path):
    messages, records = _short_run(prepared, tmp_path, "model.repulsive=0.01", "train.validate_every=3")
    similarity = [r["valid_head_similarity"] for r in records if "valid_head_similarity" in r]
    assert similarity and all(0.0 < s <= 1.0 for s in similarity)
    assert any("heads alike" in m for m in messages)
    assert all(math.isfinite(r["loss"]) for r in records if "loss" in r)


def test_a_resumed_run_forgets_the_records_after_its_checkpoint(tmp_path):
    """After a failed or interrupted save the run wrote records past its last checkpoint; resuming writes them
    again, so they are dropped first (and a record cut by a kill mid-write)."""
    from types import SimpleNamespace

    from nmt_cli.train.reporting import Reporter
    from nmt_cli.utils.run_folder import RunFolder

    folder = RunFolder(tmp_path)
    lines = [
        {"step": 100, "loss": 3.0, "lr": 0.1},
        {"step": 100, "bleu": 10.0},
        {"step": 200, "loss": 2.0, "lr": 0.1},
        {"step": 200, "bleu": 12.0},
        {"step": 300, "loss": 1.5, "lr": 0.1},
    ]
    folder.metrics_file.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"step": 30', encoding="utf-8")
    reporter = Reporter(folder, False, SimpleNamespace(is_main=True), lambda _m: None)
    reporter.resumed_at(200, validation_due=True)  # the validation of update 200 runs again
    kept = [json.loads(line) for line in folder.metrics_file.read_text(encoding="utf-8").splitlines()]
    assert kept == lines[:3]
    reporter.resumed_at(100, validation_due=False)
    assert [json.loads(line) for line in folder.metrics_file.read_text(encoding="utf-8").splitlines()] == lines[:2]


def test_a_refused_run_leaves_no_empty_folder(prepared, tmp_path):
    from dataclasses import replace

    run = tmp_path / "runs" / "refused"
    recipe = replace(prepared, train=replace(prepared.train, dir=str(run), init_from=str(tmp_path / "no-such-model")))
    with pytest.raises(NmtError):
        train(recipe, log=lambda _m: None)
    assert not run.exists()


def test_a_budget_schedule_ends_at_zero_averages_its_last_stretch_and_resumes_exactly(prepared, tmp_path):
    """train.lr_schedule: linear over 8 updates; the moving average and the checkpoint average cover the second
    half (train.average_stretch: 0.5); a run resumed from update 4 ends with the same weights, average and
    model file as the run that went straight through."""
    settings = [
        "train.lr_schedule=linear", "train.lr=0.003", "train.warmup_fraction=0.25", "train.max_steps=8",
        "train.save_every=2", "train.keep_last=0", "train.log_every=1", "train.ema_decay=0.9",
        "train.average_stretch=0.5", "train.average_last=4", "model.dropout=0.1",
    ]  # fmt: skip
    path = prepared.run_dir.parent / "tiny.yaml"
    messages: list[str] = []
    straight = tmp_path / "straight"
    train(load_recipe(path, [*settings, f"train.dir={straight}"]), log=messages.append)
    records = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()]
    lr = [r["lr"] for r in records if "lr" in r]
    assert len(lr) == 8
    assert lr[0] < 0.3 * 0.003  # the budget's start: warming up
    assert max(lr) > 0.9 * 0.003 and lr.index(max(lr)) == 2  # the warm-up's end (a quarter of 8 updates)
    assert lr[-1] < 0.1 * 0.003 and all(a > b for a, b in zip(lr[2:], lr[3:]))  # down to the end
    assert any("update 5: the last 50% of the budget; the moving average starts here" in m for m in messages)
    assert any("averaged the last 3 checkpoints" in m for m in messages)  # updates 4, 6, 8: not 2

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    for name in ("recipe.yaml", "spm.src.model", "spm.tgt.model", "metrics.jsonl"):
        (resumed / name).write_bytes((straight / name).read_bytes())
    (resumed / "checkpoints").mkdir()
    for step in (2, 4):
        source = checkpoint.step_path(straight, step)
        checkpoint.step_path(resumed, step).write_bytes(source.read_bytes())
    train(load_recipe(path, [*settings, f"train.dir={resumed}"]), resume=True, log=lambda _m: None)
    for name in ("model.pt", "model.ema.pt", "checkpoints/step_00000008.pt"):
        a, b = _state(straight / name), _state(resumed / name)
        assert all(torch.equal(a[key], b[key]) for key in a), name
    ema, last = _state(straight / "model.ema.pt"), _state(checkpoint.step_path(straight, 8))
    assert any(not torch.equal(ema[key], last[key]) for key in last)


@pytest.mark.parametrize("share, expected", [("0", 4), ("0.000001", 2)])
def test_validations_are_put_off_to_keep_within_their_share_of_the_run(prepared, tmp_path, share, expected):
    """Scheduled after every update; with a share no validation can keep to, the first runs (nothing to judge by
    yet) and the final one always does; each record says how long it took and the run's end what they cost."""
    messages, records = _short_run(
        prepared, tmp_path, "train.max_steps=4", "train.validate_every=1", f"train.valid_share={share}"
    )
    validations = [r for r in records if "valid_loss" in r]
    assert [r["step"] for r in validations] == ([1, 2, 3, 4] if expected == 4 else [1, 4])
    assert all(r["valid_seconds"] >= 0 for r in validations)
    assert any(m.startswith("validation took ") and "of the run's" in m for m in messages)
    assert any("put off" in m for m in messages) == (expected == 2)
