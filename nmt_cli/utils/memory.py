"""How much memory this process may still take: the system's available memory, or its cgroup's limit."""

from __future__ import annotations

from pathlib import Path

_MEMINFO = Path("/proc/meminfo")
_OWN_CGROUPS = Path("/proc/self/cgroup")
_CGROUP_ROOT = Path("/sys/fs/cgroup")
# (limit, usage) file names of the memory controller: cgroup v2, then v1 (mounted under memory/)
_V2_FILES = ("memory.max", "memory.current")
_V1_FILES = ("memory.limit_in_bytes", "memory.usage_in_bytes")


def available_memory() -> int | None:
    """Bytes that can still be allocated without swapping: ``MemAvailable``, lowered to what is left under
    the memory limit of this process's cgroup or any cgroup above it (a container's, a job's). None where
    neither can be read (not Linux)."""
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
    """The least memory left under a limit, from this process's cgroup up to the hierarchy's root."""
    left = [_left_in(folder, files) for folder, files in _own_cgroup_folders()]
    limited = [value for value in left if value is not None]
    return min(limited) if limited else None


def _own_cgroup_folders() -> list[tuple[Path, tuple[str, str]]]:
    """This process's memory cgroup folder and its ancestors, each with its (limit, usage) file names.

    ``/proc/self/cgroup`` names the cgroup: ``0::/path`` (v2) or ``N:...memory...:/path`` (v1). Inside a
    container with its own cgroup namespace the path is ``/`` and the mount's root is the container's."""
    try:
        lines = _OWN_CGROUPS.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":
            root, files = _CGROUP_ROOT, _V2_FILES
        elif "memory" in controllers.split(","):
            root, files = _CGROUP_ROOT / "memory", _V1_FILES
        else:
            continue
        own = root / path.strip("/")
        if not own.is_dir():
            own = root  # a namespaced or unmounted path: the mount's root is the nearest we can read
        folders = [own, *[parent for parent in own.parents if parent.is_relative_to(root)]]
        found = [(folder, files) for folder in folders if (folder / files[0]).is_file()]
        if found:
            return found
    return []


def _left_in(folder: Path, files: tuple[str, str]) -> int | None:
    """The limit less what is used, not counting file pages the kernel can drop (the usage counts the
    page cache: just after writing gigabytes of text it is near the limit, as ``docker stats`` knows)."""
    try:
        limit = (folder / files[0]).read_text().strip()
        if limit == "max" or int(limit) >= 1 << 60:  # no limit (v1 writes a huge number)
            return None
        used = int((folder / files[1]).read_text().strip()) - _inactive_file(folder)
        return max(0, int(limit) - max(used, 0))
    except (OSError, ValueError):
        return None


def _inactive_file(folder: Path) -> int:
    """Reclaimable page cache from ``memory.stat`` (v1: ``total_inactive_file``; v2: ``inactive_file``)."""
    try:
        stats = dict(line.split() for line in (folder / "memory.stat").read_text().splitlines() if line.count(" ") == 1)
    except (OSError, ValueError):
        return 0
    return int(stats.get("total_inactive_file", stats.get("inactive_file", 0)))
