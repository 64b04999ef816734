"""Which arithmetic training runs in: the recipe's choice, or ``auto`` read off the hardware.

bf16 autocast pays only where the hardware multiplies bf16 natively: on a CPU with AVX512-BF16
or AMX, torch's bf16 matrix products run several times faster than fp32 (docs/choices.md); on a CPU
without them bf16 is emulated and slower than fp32. ``auto`` therefore picks bf16 on
such CPUs and on CUDA devices that support it, and fp32 everywhere else.
"""

from __future__ import annotations

import contextlib

import torch

from ..utils.cpu import NATIVE_BF16_CPU_FLAGS, cpu_flags


def native_bf16(device: torch.device) -> bool:
    """True where bf16 matrix products run in hardware on ``device``."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return bool(cpu_flags() & NATIVE_BF16_CPU_FLAGS)
    return False


def resolve_precision(requested: str, device: torch.device) -> str:
    """``fp32``, ``bf16`` or ``fp16``: the recipe's value, with ``auto`` decided for ``device``."""
    if requested != "auto":
        return requested
    return "bf16" if native_bf16(device) else "fp32"


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The autocast context for a resolved precision (none for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)
