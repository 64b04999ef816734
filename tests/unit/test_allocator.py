"""Freed memory kept for reuse by glibc's malloc (utils/allocator.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nmt_cli.utils import allocator

# In a fresh process (the settings are process-wide): 64 buffers of 1 MiB written and freed, six
# times; the page faults of each round after the first two. With glibc's defaults every round takes
# its 16,384 pages anew from the kernel (the freed heap top is handed back each time).
ROUNDS = """
import resource, sys, torch
from nmt_cli.utils.allocator import keep_freed_memory
print(keep_freed_memory())
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for round in range(6):
    before = faults()
    buffers = [torch.ones(1 << 18) for _ in range(64)]
    del buffers
    if round >= 2:
        print(faults() - before)
"""


def _run_rounds(env: dict[str, str]) -> list[str]:
    result = subprocess.run([sys.executable, "-c", ROUNDS], capture_output=True, text=True, env=env, check=True)
    return result.stdout.split()


@pytest.mark.skipif(not allocator._glibc(), reason="mallopt is glibc's")
def test_buffers_freed_and_taken_again_come_from_the_heap_not_new_pages():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    kept, *faults = _run_rounds(env)
    assert kept == "True"
    pages_per_round = 64 * (1 << 20) // os.sysconf("SC_PAGE_SIZE")
    assert all(int(n) < pages_per_round // 10 for n in faults), faults


@pytest.mark.skipif(not allocator._glibc(), reason="mallopt is glibc's")
def test_a_users_own_malloc_settings_are_left_alone():
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "131072"}
    kept, *_ = _run_rounds(env)
    assert kept == "False"


def test_nothing_is_changed_without_glibc(monkeypatch):
    monkeypatch.setattr(allocator, "_glibc", lambda: False)
    assert allocator.keep_freed_memory() is False


# In a fresh process: products of one packed weight over 300 row counts (as decoding's shrinking batches make),
# then the free heap handed back; what stays is live, the kernels the caches keep for those shapes.
KERNELS = """
import os, sys
from nmt_cli.utils.allocator import bound_kernel_caches, release_freed_memory
bound_kernel_caches()
import torch
from nmt_cli.inference.cpu_linear import onednn_linear, onednn_packed_weight, onednn_usable
if not onednn_usable():
    print("no-onednn")
    sys.exit()
torch.set_num_threads(1)
weight = onednn_packed_weight(torch.randn(1024, 256))
for rows in range(1, 301):
    onednn_linear(torch.randn(rows, 256), weight, None)
release_freed_memory()
print(int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
"""


def _resident_after_kernels(env: dict[str, str]) -> str:
    result = subprocess.run([sys.executable, "-c", KERNELS], capture_output=True, text=True, env=env, check=True)
    return result.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_the_kernel_caches_are_bounded_unless_the_user_sets_them():
    env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")}
    bounded = _resident_after_kernels(env)
    if bounded == "no-onednn":
        pytest.skip("PyTorch here has no oneDNN linear")
    unbounded = _resident_after_kernels({**env, "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "1024", "LRU_CACHE_CAPACITY": "1024"})
    assert int(bounded) < int(unbounded) - 20 * 2**20, (bounded, unbounded)


def test_bounding_the_kernel_caches_keeps_a_users_setting(monkeypatch):
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "512")
    monkeypatch.delenv("LRU_CACHE_CAPACITY", raising=False)
    allocator.bound_kernel_caches()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "512"
    assert os.environ["LRU_CACHE_CAPACITY"] == str(allocator.KERNEL_CACHE_CAPACITY)


def test_decoding_commands_keep_32_kernels_and_training_128(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from nmt_cli.cli import app

    for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    runner.invoke(app, ["train", str(tmp_path / "missing.yaml")])  # refused early: no such recipe
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(allocator.TRAINING_KERNEL_CACHE_CAPACITY)
    for command in (["translate", "-m", str(tmp_path / "missing")], ["calibrate", "-m", "x", "--src", "x", "--ref", "x"]):
        for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
            monkeypatch.delenv(name, raising=False)
        result = runner.invoke(app, command)
        assert result.exit_code != 0  # the model is missing; the caches were bounded before that was found
        assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == os.environ["LRU_CACHE_CAPACITY"] == "32"
