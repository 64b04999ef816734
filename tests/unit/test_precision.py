"""precision: auto picks bf16 only where the hardware computes it natively."""

from __future__ import annotations

import torch

from nmt_cli.train import precision


def test_auto_follows_the_cpu_flags(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_bf16"}))
    assert precision.resolve_precision("auto", cpu) == "bf16"
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "amx_tile", "amx_bf16"}))
    assert precision.resolve_precision("auto", cpu) == "bf16"
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))  # bf16 emulated: slower
    assert precision.resolve_precision("auto", cpu) == "fp32"
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset())  # flags unreadable (not Linux)
    assert precision.resolve_precision("auto", cpu) == "fp32"


def test_explicit_choices_are_kept(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    for choice in ("fp32", "bf16", "fp16"):
        assert precision.resolve_precision(choice, torch.device("cpu")) == choice


def test_autocast_contexts():
    cpu = torch.device("cpu")
    with precision.autocast("bf16", cpu):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with precision.autocast("fp32", cpu):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
