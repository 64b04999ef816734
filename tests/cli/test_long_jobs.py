"""Long jobs survive: preemption signals, full disks, resumable and sharded translation.

Real processes get real signals: from outside at a moment found by watching the run folder, and
from inside at a moment chosen exactly (``signal_worker.py``), so that the rare moments (during a
validation, during the save) are hit every time.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import nmt_in_process, read_lines

from nmt_cli.train import checkpoint

WORKER = Path(__file__).with_name("signal_worker.py")
EXIT_WITHIN = 10.0  # seconds from the signal to the exit: a cluster kills the job about 30 s after it


def nmt(*args: str, env: dict | None = None, limit: int | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``nmt ARGS`` to completion; ``limit`` caps the size of any file it writes (``ulimit -f``, in bytes).
    A command with no signal to send and no limit (the resumes, the uninterrupted references) runs in this
    process: starting an interpreter and torch for each would take most of these tests' time, and what they
    check is what the command writes, which is the same either way."""
    if not env and not limit:
        return nmt_in_process(*args)
    return subprocess.run(
        [sys.executable, *([str(WORKER)] if env else ["-m", "nmt_cli"]), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        preexec_fn=_file_size_limit(limit) if limit else None,
    )


def _file_size_limit(size: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return apply


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one 'error:' line of a failed command (and no traceback)."""
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    return " ".join(result.stderr[result.stderr.index("error:") :].split())


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture()
def recipe(prepared, tmp_path) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(Path(prepared.run_dir.parent / "tiny.yaml").read_text())
    return path


def train_args(recipe: Path, run: Path, steps: int, *extra: str) -> list[str]:
    """Dropout on, so that a resumed run equals an uninterrupted one only if the random state resumes too."""
    return [
        "train",
        str(recipe),
        *sets(
            f"train.dir={run}",
            f"train.max_steps={steps}",
            "train.save_every=100000",
            "train.keep_last=0",
            "train.log_every=1",
            "train.validate_every=0",
            "model.dropout=0.1",
            *extra,
        ),
    ]


REFERENCE_STEPS = 16


@pytest.fixture(scope="module")
def uninterrupted(prepared, tmp_path_factory) -> Path:
    """One run of ``REFERENCE_STEPS`` updates that nothing stopped, a checkpoint after every update: what a
    stopped and resumed run must equal at any step (the number of updates asked for changes nothing before it)."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    recipe = folder / "r.yaml"
    recipe.write_text(Path(prepared.run_dir.parent / "tiny.yaml").read_text())
    run = folder / "run"
    result = nmt(*train_args(recipe, run, REFERENCE_STEPS, "train.save_every=1"))
    assert result.returncode == 0, result.stderr
    return run


def reference_at(uninterrupted: Path, recipe: Path, tmp_path: Path, step: int) -> Path:
    """The uninterrupted run's checkpoint at ``step``; past its end, a run trained here to that step."""
    if step <= REFERENCE_STEPS:
        return checkpoint.step_path(uninterrupted, step)
    straight = tmp_path / "straight"
    assert nmt(*train_args(recipe, straight, step)).returncode == 0
    return checkpoint.step_path(straight, step)


def metrics(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def weights(path: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load(path)["model"]


def same_weights(a: Path, b: Path) -> bool:
    x, y = weights(a), weights(b)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


# --------------------------------------------------------------------------- training and preemption


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_preemption_signal_saves_the_last_update_exits_fast_and_resumes_exactly(recipe, uninterrupted, tmp_path, sig):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nmt_cli", *train_args(recipe, run, 100_000, "train.average_last=3")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while len(metrics(run)) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(sig)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=EXIT_WITHIN + 50)
    exited = time.monotonic() - sent
    assert exited < EXIT_WITHIN, f"exited {exited:.1f} s after {sig.name}"
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err and f"stopped by {sig.name}" in err and "run the same command to resume" in err
    saved = checkpoint.step_checkpoints(run)
    step = metrics(run)[-1]["step"]
    assert [checkpoint.load(p)["train_state"]["step"] for p in saved] == [step]  # the last logged update
    assert not (run / "model.pt").exists()  # no averaging, no model file: the checkpoint first
    assert not any("valid_loss" in record for record in metrics(run))  # and no validation
    if sig != signal.SIGTERM:
        return  # the same stop; resuming is checked once

    resumed = nmt(*train_args(recipe, run, step + 3))
    assert resumed.returncode == 0, resumed.stderr
    reference = reference_at(uninterrupted, recipe, tmp_path, step + 3)
    assert same_weights(checkpoint.step_path(run, step + 3), reference)
    losses = {r["step"]: r["loss"] for r in metrics(run) if "loss" in r and r["step"] > step}
    assert losses == {
        r["step"]: r["loss"] for r in metrics(reference.parent.parent) if "loss" in r and step < r["step"] <= step + 3
    }


def test_signal_inside_an_update_abandons_it_and_the_resume_redoes_it_exactly(recipe, uninterrupted, tmp_path):
    run = tmp_path / "run"
    stopped = nmt(*train_args(recipe, run, 8), env={"NMT_SIGNAL_AT": "update:5"})
    assert stopped.returncode == 143, stopped.stderr
    assert "update 5 abandoned" in " ".join(stopped.stderr.split())
    assert [p.name for p in checkpoint.step_checkpoints(run)] == [checkpoint.step_path(run, 4).name]
    assert nmt(*train_args(recipe, run, 8)).returncode == 0
    assert same_weights(checkpoint.step_path(run, 8), checkpoint.step_path(uninterrupted, 8))


def test_signal_during_validation_abandons_it_and_resuming_validates_first(recipe, tmp_path):
    run = tmp_path / "run"
    every = ("train.validate_every=3", "train.valid_share=0")  # each as planned, however long validating takes
    stopped = nmt(*train_args(recipe, run, 8, *every), env={"NMT_SIGNAL_AT": "validation"})
    assert stopped.returncode == 143, stopped.stderr
    assert "validation at update 3 abandoned at SIGTERM" in " ".join(stopped.stderr.split())
    assert not any("valid_loss" in r for r in metrics(run))
    state = checkpoint.load(checkpoint.step_path(run, 3))["train_state"]
    assert state["validation_due"] is True
    resumed = nmt(*train_args(recipe, run, 8, *every))
    assert resumed.returncode == 0, resumed.stderr
    validations = [r["step"] for r in metrics(run) if "valid_loss" in r]
    assert validations == [3, 6, 8]  # the abandoned one first, then as planned


def test_second_signals_during_the_save_leave_a_loadable_checkpoint(recipe, tmp_path):
    run = tmp_path / "run"
    stopped = nmt(*train_args(recipe, run, 8), env={"NMT_SIGNAL_AT": "save:4"})
    assert stopped.returncode == 143, stopped.stderr
    assert "Traceback" not in stopped.stderr
    saved = checkpoint.step_checkpoints(run)
    assert [p.name for p in saved] == [checkpoint.step_path(run, 3).name]
    assert checkpoint.load_training(saved[0]).step == 3
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]  # no temporary file left


def test_signal_while_writing_the_model_file_leaves_it_to_the_next_run(recipe, tmp_path):
    run = tmp_path / "run"
    stopped = nmt(
        *train_args(recipe, run, 4, "train.average_last=2", "train.save_every=2"), env={"NMT_SIGNAL_AT": "model_file"}
    )
    assert stopped.returncode == 143, stopped.stderr
    assert not (run / "model.pt").exists() and checkpoint.step_checkpoints(run)[-1] == checkpoint.step_path(run, 4)
    again = nmt(*train_args(recipe, run, 4, "train.average_last=2", "train.save_every=2"))
    assert again.returncode == 0, again.stderr
    assert checkpoint.load(run / "model.pt")["averaged_from"]


def test_ctrl_c_still_validates_and_writes_the_model(recipe, tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nmt_cli", *train_args(recipe, run, 100_000)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while len(metrics(run)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "stopped by SIGINT" in err and (run / "model.pt").is_file()
    assert any("valid_loss" in r for r in metrics(run))


@pytest.mark.parametrize("launcher", ["torchrun", "nmt --nproc"])
def test_torchrun_stops_every_rank_at_one_update_and_rank_0_writes(recipe, tmp_path, launcher):
    """Plain torchrun forwards SIGTERM to its workers; ``nmt train --nproc`` also SIGUSR1 (torchrun alone dies of it)."""
    run = tmp_path / "run"
    args = train_args(recipe, run, 100_000, "train.threads=1", "train.max_tokens=600")
    if launcher == "torchrun":
        cmd, sig = (
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "nmt_cli", *args],
            signal.SIGTERM,
        )
    else:
        cmd, sig = [sys.executable, "-m", "nmt_cli", *args, "--nproc", "2"], signal.SIGUSR1
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while len(metrics(run)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(sig)  # to the launcher alone, which passes it to every worker
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    if launcher != "torchrun":
        assert proc.returncode == 128 + sig
    stopped = [line for line in err.splitlines() if "stopped after update" in line]
    assert len(stopped) == 1, err[-3000:]  # rank 0 alone reports and writes
    step = int(stopped[0].split("stopped after update")[1].split(":")[0].replace(",", ""))
    assert [p.name for p in checkpoint.step_checkpoints(run)] == [checkpoint.step_path(run, step).name]
    assert checkpoint.load_training(checkpoint.step_path(run, step)).payload["world_size"] == 2
    assert not (run / "model.pt").exists()


# --------------------------------------------------------------------------- full disks


def test_a_checkpoint_that_does_not_fit_is_one_line_and_keeps_the_earlier_ones(recipe, tmp_path):
    run = tmp_path / "run"
    assert nmt(*train_args(recipe, run, 3, "train.save_every=3")).returncode == 0
    first = checkpoint.step_path(run, 3)
    before = first.read_bytes(), (run / "model.pt").read_bytes()
    full = nmt(*train_args(recipe, run, 6, "train.save_every=3"), limit=first.stat().st_size - 1)
    assert full.returncode == 1
    line = error_line(full)
    assert str(checkpoint.step_path(run, 6)) in line and "free on its disk" in line and "size limit" in line
    assert (first.read_bytes(), (run / "model.pt").read_bytes()) == before
    assert checkpoint.load_training(first).step == 3
    assert not [p for p in run.rglob(".*.tmp*")]
    assert all(json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines())
    resumed = nmt(*train_args(recipe, run, 6, "train.save_every=3"))
    assert resumed.returncode == 0, resumed.stderr
    assert checkpoint.load(run / "model.pt")["step"] == 6


def test_model_file_and_average_that_do_not_fit_are_one_line(recipe, tmp_path):
    run = tmp_path / "run"
    assert nmt(*train_args(recipe, run, 2, "train.save_every=1")).returncode == 0
    model = run / "model.pt"
    size = model.stat().st_size
    model.unlink()  # as if the first write had failed: the finished run writes it when run again
    full = nmt(*train_args(recipe, run, 2, "train.save_every=1"), limit=size // 2)
    assert full.returncode == 1 and str(model) in error_line(full) and not model.exists()
    assert nmt(*train_args(recipe, run, 2, "train.save_every=1")).returncode == 0 and model.is_file()

    averaged = tmp_path / "avg.pt"
    averaged.write_bytes(b"an earlier file")
    full = nmt("average", str(run), "--last", "2", "-o", str(averaged), limit=size // 2)
    assert full.returncode == 1 and str(averaged) in error_line(full)
    assert averaged.read_bytes() == b"an earlier file"


# --------------------------------------------------------------------------- translating large files


@pytest.fixture(scope="module")
def model_and_input(tmp_path_factory, m30k_slice):
    """A tiny model trained for a few updates and 300 real source lines."""
    from conftest import tiny_recipe_yaml

    from nmt_cli.config import load_recipe
    from nmt_cli.data.prepare import prepare
    from nmt_cli.train.loop import train

    folder = tmp_path_factory.mktemp("translate_jobs")
    path = folder / "tiny.yaml"
    path.write_text(tiny_recipe_yaml(m30k_slice, folder / "data", folder / "run"))
    recipe = load_recipe(path, ["train.max_steps=12", "train.save_every=6", "train.average_last=0"])
    prepare(recipe, log=lambda _m: None, progress=False)
    train(recipe, log=lambda _m: None)
    source = folder / "input.en"
    source.write_text("".join(line + "\n" for line in read_lines(m30k_slice / "train.en.gz", 300)), encoding="utf-8")
    whole = folder / "whole.de"  # one uninterrupted run of one process: what every other way must give
    result = translate(recipe.run_dir, source, whole)
    assert result.returncode == 0, result.stderr
    return recipe.run_dir, source, whole


def translate(model: Path, source: Path, output: Path | None, *extra: str, **kw) -> subprocess.CompletedProcess:
    out = ["-o", str(output)] if output is not None else []
    return nmt("translate", "-m", str(model), "-i", str(source), *out, "--chunk-lines", "40", "--beam", "3", *extra, **kw)


def start_translation(model: Path, source: Path, output: Path) -> subprocess.Popen:
    """``translate`` (below) as a process to signal while it runs."""
    cmd = [sys.executable, "-m", "nmt_cli", "translate", "-m", str(model), "-i", str(source), "-o", str(output)]
    return subprocess.Popen(
        [*cmd, "--chunk-lines", "40", "--beam", "3"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def test_killed_translation_resumes_to_the_same_bytes(model_and_input, tmp_path):
    model, source, whole = model_and_input
    output = tmp_path / "out.de"
    record = tmp_path / "out.de.partial.json"
    proc = start_translation(model, source, output)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if record.exists() and json.loads(record.read_text() or "{}").get("lines", 0) > 0:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)  # no chance to clean up: only what was committed survives
    proc.wait()
    done = json.loads(record.read_text())["lines"]
    assert 0 < done < 300 and done % 40 == 0 and not output.exists()
    with open(tmp_path / "out.de.partial", "ab") as partial:
        partial.write(b"half a line written after the last record")
    resumed = translate(model, source, output)
    assert resumed.returncode == 0, resumed.stderr
    assert output.read_bytes() == whole.read_bytes()
    assert not record.exists() and not (tmp_path / "out.de.partial").exists()


def test_sigterm_keeps_the_progress_and_says_so(model_and_input, tmp_path):
    model, source, _ = model_and_input
    output = tmp_path / "out.de"
    proc = start_translation(model, source, output)
    record = tmp_path / "out.de.partial.json"
    deadline = time.monotonic() + 120
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the translation finished before the signal arrived")
    assert proc.returncode == 143 and "Traceback" not in err
    assert "run the same command to continue" in " ".join(err.split())
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_a_changed_input_or_model_is_refused_and_restart_starts_over(model_and_input, tmp_path):
    model, source, whole = model_and_input
    mine = tmp_path / "input.en"
    mine.write_bytes(source.read_bytes())
    output = tmp_path / "out.de"
    partial, record = tmp_path / "out.de.partial", tmp_path / "out.de.partial.json"
    stopped = translate(model, mine, output, env={"NMT_SIGNAL_AT": "commit:2"})  # SIGTERM after one chunk
    assert stopped.returncode == 143, stopped.stderr
    assert "40 of 300 lines translated are kept" in " ".join(stopped.stderr.split())
    kept = partial.read_bytes()
    assert json.loads(record.read_text())["lines"] == 40 and kept == b"".join(whole.read_bytes().splitlines(True)[:40])

    mine.write_text(mine.read_text(encoding="utf-8").replace("a", "A", 1), encoding="utf-8")
    changed = translate(model, mine, output)
    assert changed.returncode == 1 and "another input" in error_line(changed) and "--restart" in error_line(changed)
    assert partial.read_bytes() == kept and not output.exists()  # the kept lines are untouched
    mine.write_bytes(source.read_bytes())

    other = tmp_path / "other.pt"  # the same weights in another file: another model for all the job knows
    other.write_bytes((model / "model.pt").read_bytes() + b"\0")
    refused = translate(other, mine, output)
    assert refused.returncode == 1 and "another model" in error_line(refused)
    beam = translate(model, mine, output, "--beam", "4")
    assert beam.returncode == 1 and "another beam (3 then, 4 now)" in error_line(beam)

    assert translate(model, mine, output).returncode == 0  # as it was: continues
    assert output.read_bytes() == whole.read_bytes() and not record.exists() and not partial.exists()

    assert translate(model, mine, output, env={"NMT_SIGNAL_AT": "commit:2"}).returncode == 143
    restarted = translate(other, mine, output, "--restart")
    assert restarted.returncode == 0, restarted.stderr
    assert output.read_bytes() == whole.read_bytes() and not record.exists()


def test_two_torchrun_processes_and_shards_equal_one_process(model_and_input, tmp_path):
    model, source, whole = model_and_input
    joined = tmp_path / "joined.de"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "nmt_cli",
            "translate",
            "-m",
            str(model),
            "-i",
            str(source),
            "-o",
            str(joined),
            "--chunk-lines",
            "40",
            "--beam",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert joined.read_bytes() == whole.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["joined.de"]  # no partial file left

    shards = [tmp_path / f"shard{i}.de" for i in range(3)]
    for i, shard in enumerate(shards):
        assert translate(model, source, shard, "--shard", f"{i}/3").returncode == 0
    assert b"".join(s.read_bytes() for s in shards) == whole.read_bytes()
    assert all(s.read_bytes() for s in shards)  # each shard did a share


def test_translate_output_that_does_not_fit_is_one_line_and_resumes(model_and_input, tmp_path):
    model, source, whole = model_and_input
    output = tmp_path / "out.de"
    full = translate(model, source, output, limit=len(whole.read_bytes()) // 2)
    assert full.returncode == 1 and "out.de.partial" in error_line(full) and "free on its disk" in error_line(full)
    assert not output.exists()
    resumed = translate(model, source, output)
    assert resumed.returncode == 0 and output.read_bytes() == whole.read_bytes()


def test_sigterm_leaves_no_temporary_file_beside_a_streamed_output(model_and_input, tmp_path):
    model, source, _ = model_and_input
    output = tmp_path / "out.de"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nmt_cli", "translate", "-m", str(model), "-o", str(output), "--beam", "3"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    proc.stdin.write(source.read_bytes())  # stdin stays open: the command waits for more lines
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".out.de.tmp*")) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert list(tmp_path.iterdir()) == []
