"""How much memory this process may still take: the system's available memory, or a container's limit."""

from __future__ import annotations

from pathlib import Path

_MEMINFO = Path("/proc/meminfo")
# (limit, usage) files of a cgroup v2 and a cgroup v1 memory controller, as a container sees its own
_CGROUPS = (
    (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.current")),
    (Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"), Path("/sys/fs/cgroup/memory/memory.usage_in_bytes")),
)


def available_memory() -> int | None:
    """Bytes that can still be allocated without swapping: ``MemAvailable``, lowered to what is left under a
    container's memory limit. None where neither can be read (not Linux)."""
    candidates = [value for value in (_mem_available(), _cgroup_left()) if value is not None]
    return min(candidates) if candidates else None


def _mem_available() -> int | None:
    try:
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_left() -> int | None:
    for limit_file, usage_file in _CGROUPS:
        try:
            limit = limit_file.read_text().strip()
            if limit == "max" or int(limit) >= 1 << 60:  # no limit (v1 writes a huge number)
                return None
            return max(0, int(limit) - int(usage_file.read_text().strip()))
        except (OSError, ValueError):
            continue
    return None
