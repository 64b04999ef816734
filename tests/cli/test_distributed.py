"""Real ``torch.distributed`` runs on the CPU: two gloo processes launched through torchrun."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import nmt_in_process

from nmt_cli.train import checkpoint

WORKER = Path(__file__).with_name("dist_worker.py")
COMMON = [
    "model.dropout=0.0",
    "train.threads=1",
    "train.save_every=3",
    "train.keep_last=0",
    "train.validate_every=0",
    "train.average_last=0",
]


def torchrun(nproc: int, *args: str, **kw) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


def sets(*items: str) -> list[str]:
    return [a for item in items for a in ("--set", item)]


@pytest.fixture(scope="module")
def recipe_path(prepared, tmp_path_factory):
    path = tmp_path_factory.mktemp("dist") / "r.yaml"
    path.write_text(Path(prepared.run_dir.parent / "tiny.yaml").read_text())
    return path


def test_two_ranks_stay_identical_and_equal_one_rank_with_accumulation(recipe_path, tmp_path):
    two = tmp_path / "two"
    two.mkdir()
    result = torchrun(
        2,
        str(WORKER),
        str(recipe_path),
        str(two),
        *COMMON,
        f"train.dir={two / 'run'}",
        "train.max_steps=6",
        "train.max_tokens=600",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rank0, rank1 = torch.load(two / "rank0.pt"), torch.load(two / "rank1.pt")
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0)

    one = tmp_path / "one"
    one.mkdir()
    result = torchrun(
        1,
        str(WORKER),
        str(recipe_path),
        str(one),
        *COMMON,
        f"train.dir={one / 'run'}",
        "train.max_steps=6",
        "train.max_tokens=600",
        "train.update_freq=2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    single = torch.load(one / "rank0.pt")
    initial_gap = max((rank0[k] - single[k]).abs().max().item() for k in rank0)
    assert initial_gap < 1e-4, initial_gap
    changed = checkpoint.load(checkpoint.step_path(two / "run", 6))["model"]
    first = checkpoint.load(checkpoint.step_path(two / "run", 3))["model"]
    assert any(not torch.equal(changed[k], first[k]) for k in changed)  # training did move the weights


def _wait_until_gone(pids: list[int], timeout: float = 60) -> None:
    """Until none of ``pids`` is alive (zombies do not count)."""
    from nmt_cli.utils.process import pid_alive

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(pid) for pid in pids):
        time.sleep(0.05)


def test_killed_two_process_run_resumes_with_one_or_two(recipe_path, tmp_path):
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "nmt_cli",
        "train",
        str(recipe_path),
        "--nproc",
        "2",
        *sets(*COMMON, f"train.dir={run_dir}", "train.max_steps=100000"),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 180
    while not checkpoint.step_checkpoints(run_dir) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    # torchrun starts each rank in a session of its own: killing the launcher's group leaves the ranks to die a
    # moment later (they follow their parent), and until then rank 0 holds the run folder's lock
    tree = [proc.pid, *_descendants(proc.pid)]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    _wait_until_gone(tree)
    saved = checkpoint.step_checkpoints(run_dir)
    assert saved, "no checkpoint was written before the kill"
    k = int(saved[-1].stem.split("_")[1])
    for nproc, target in ((1, k + 3), (2, k + 6)):
        args = ["train", str(recipe_path), "--nproc", str(nproc)]
        args += sets(*COMMON, f"train.dir={run_dir}", f"train.max_steps={target}")
        # one process resumes in this one (no interpreter to start); two are torchrun's
        result = (
            nmt_in_process(*args)
            if nproc == 1
            else subprocess.run([sys.executable, "-m", "nmt_cli", *args], capture_output=True, text=True, timeout=300)
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert "resuming from" in result.stderr
        assert checkpoint.step_path(run_dir, target).is_file()


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find the worker processes")
def test_a_dying_rank_stops_the_others(recipe_path, tmp_path):
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "nmt_cli",
        "train",
        str(recipe_path),
        "--nproc",
        "2",
        *sets(*COMMON, f"train.dir={run_dir}", "train.max_steps=100000", "train.dist_timeout_minutes=1"),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 180
    while not checkpoint.step_checkpoints(run_dir) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    workers = [
        pid
        for pid in _descendants(proc.pid)
        if b"nmt_cli" in (line := Path(f"/proc/{pid}/cmdline").read_bytes()) and b"torch.distributed.run" not in line
    ]
    assert len(workers) >= 2, workers
    os.kill(workers[-1], signal.SIGKILL)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    assert all(
        not Path(f"/proc/{pid}").exists() or b"zombie" in Path(f"/proc/{pid}/status").read_bytes().lower() for pid in workers
    )
