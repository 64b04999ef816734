"""What the processor is: its vendor and feature flags, read once from Linux's ``/proc/cpuinfo``.

Which kernels are fastest changes with the processor (docs/benchmarks.md measures AMD EPYC Zen 3 and
Zen 4 and an Intel Xeon), so training's precision and inference's products are chosen from these.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from ..errors import NmtError

# Flags of processors that multiply bf16 in hardware (elsewhere bf16 is emulated, slower than fp32)
NATIVE_BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


CPUINFO = Path("/proc/cpuinfo")


def read_cpuinfo(path: Path = CPUINFO) -> dict[str, str]:
    """The first processor's ``key: value`` lines of a cpuinfo file; empty where it cannot be read."""
    fields: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return fields
    for line in text.splitlines():
        if not line.strip():  # a blank line ends a processor's block
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


@lru_cache(maxsize=1)
def _this_processor() -> dict[str, str]:
    return read_cpuinfo()


def cpu_flags() -> frozenset[str]:
    """The processor's feature flags (``avx2``, ``avx512_bf16``, ...); empty where unknown."""
    info = _this_processor()
    return frozenset((info.get("flags") or info.get("Features") or "").split())


def cpu_vendor() -> str:
    """The processor's vendor string (``GenuineIntel``, ``AuthenticAMD``, ...), or "" where unknown."""
    return _this_processor().get("vendor_id", "")


def native_bf16_cpu() -> bool:
    """True where the processor multiplies bf16 in hardware (AVX512-BF16 or AMX)."""
    return bool(cpu_flags() & NATIVE_BF16_CPU_FLAGS)


# Threads or processes per core that a command accepts: a little oversubscription can pay (waiting on I/O,
# hyper-threads a container hides), thousands per core cannot, and far beyond the machine OpenMP cannot
# create its threads and the process dies without a word.
PER_CORE_LIMIT = 4


def cores() -> int:
    """The cores this process may run on (its affinity, as taskset and Slurm set it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_parallelism(value: int, option: str) -> int:
    """A thread or process count (0: one per core), refused in one line when it is far above this
    machine's cores; returns the count to use."""
    limit = PER_CORE_LIMIT * cores()
    if value > limit:
        raise NmtError(
            f"{option} {value}: this machine gives this process {cores()} core(s); use at most {limit} (0: one per core)"
        )
    return value or cores()
