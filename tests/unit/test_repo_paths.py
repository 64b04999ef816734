"""Every path of this repository that its scripts, CI, pyproject, README and guides name exists.

Tests moved into tests/unit, tests/integration and tests/cli once, and benchmarks/run_gpu.sh went on
calling the old paths behind `|| true`: the GPU tests silently ran nothing. This keeps such names honest.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = ("tests", "benchmarks", "recipes", "docs", "scripts", "nmt_cli", ".ci")
# A repository path: one of the top folders, then name characters, not preceded by part of a longer path.
PATH = re.compile(r"(?<![\w./$-])(?:" + "|".join(re.escape(t) for t in TOP) + r")/[\w./-]*\w")
RUN_TIME = ("benchmarks/work",)  # folders the benchmarks create when they run
NOT_CHECKED: tuple[str, ...] = ()


def _naming_files() -> list[Path]:
    files = [ROOT / ".ci" / "run", ROOT / "pyproject.toml", ROOT / "README.md"]  # the CHANGELOG is history
    files += sorted((ROOT / "benchmarks").glob("*.sh")) + sorted((ROOT / "scripts").glob("*.sh"))
    files += [p for p in sorted((ROOT / "docs").rglob("*.md")) if str(p.relative_to(ROOT)) not in NOT_CHECKED]
    return [p for p in files if p.is_file()]


def test_the_path_pattern_finds_paths_and_only_paths():
    text = "run tests/unit/test_api.py and benchmarks/run_gpu.sh; ../shared/data/x and $dir/tests/x are not ours"
    assert PATH.findall(text) == ["tests/unit/test_api.py", "benchmarks/run_gpu.sh"]


def test_every_named_repository_path_exists():
    missing, checked = [], set()
    for file in _naming_files():
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            for name in PATH.findall(line):
                name = name.rstrip(".")
                if name.startswith(RUN_TIME) or "*" in name:
                    continue
                checked.add(name)
                if not (ROOT / name).exists():
                    missing.append(f"{file.relative_to(ROOT)}:{number}: {name}")
    assert not missing, "paths named but absent:\n" + "\n".join(missing)
    assert {"tests/integration/test_cuda.py", "tests/unit/test_hf_peer.py"} <= checked  # run_gpu.sh's tests stage
