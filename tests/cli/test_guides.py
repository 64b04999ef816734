"""The how-to guides' command blocks, run as a reader runs them: on the quickstart model (`nmt-quickstart/model`,
the README's first command makes it) and the files each block creates, in an empty folder.

Each page's first block is run, and every block of the pages whose blocks each stand alone (one per format). The
blocks that need the network, a GPU, a cluster, a server or hours of training are listed in ``RUN_ELSEWHERE``
with the test that runs their command instead; a guide added to the site must be run here or listed there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import read_lines

ROOT = Path(__file__).resolve().parents[2]
GUIDES = ROOT / "docs"

# page -> which blocks run here: "first" or "all"
RUN_HERE = {"formats.md": "all", "confidence.md": "first", "glossaries.md": "first", "ctranslate2.md": "first"}
RUN_ELSEWHERE = {
    "getting-started.md": "tests/cli/test_documented_runs.py runs every command of the page",
    "index.md": "the README's set-up: tests/cli/test_quickstart.py",
    "install.md": "installs packages",
    "documents.md": "builds a corpus from manpages-l10n's catalogues: tests/unit/test_manpages_corpus.py",
    "multilingual.md": "downloads and trains: tests/integration/test_multilingual.py",
    "serving.md": "a server: tests/integration/test_serve.py",
    "import.md": "the hub and a fairseq checkpoint: tests/integration/test_import_marian.py, test_import_fairseq.py",
    "backtranslation.md": "trains two models: tests/integration/test_backtranslation.py",
    "long-jobs.md": "a SLURM script: tests/cli/test_long_jobs.py",
    "gpus-and-clusters.md": "GPUs: tests/integration/test_cuda.py",
    "benchmarks.md": "the benchmarks themselves",
    "distill.md": "a teacher translating 35,200 messages, then training: tests/integration/test_distill.py",
}


def blocks(page: str) -> list[str]:
    found = re.findall(r"```bash\n(.*?)```", (GUIDES / page).read_text(encoding="utf-8"), re.S)
    return found[:1] if RUN_HERE[page] == "first" else found


def test_every_guide_with_commands_is_run_here_or_said_where():
    with_blocks = {p.name for p in GUIDES.glob("*.md") if "```bash" in p.read_text(encoding="utf-8")}
    assert with_blocks <= set(RUN_HERE) | set(RUN_ELSEWHERE), with_blocks - set(RUN_HERE) - set(RUN_ELSEWHERE)


@pytest.fixture(scope="module")
def reader(tmp_path_factory, overfit, multi30k) -> Path:
    """An empty folder but for a model and validation text where the README's first command leaves them."""
    folder = tmp_path_factory.mktemp("reader")
    (folder / "nmt-quickstart" / "data" / "text").mkdir(parents=True)
    (folder / "nmt-quickstart" / "model").mkdir()  # a copy: a block may write beside the model (nmt calibrate)
    shutil.copy2(overfit[0] / "model.pt", folder / "nmt-quickstart" / "model" / "model.pt")
    # the tiny model's own pairs (it translates them well) and unseen ones (badly): what a calibration needs
    for lang, seen in (("en", overfit[1]), ("de", overfit[2])):
        lines = seen + read_lines(multi30k / f"val.{lang}.gz", 60)
        (folder / "nmt-quickstart" / "data" / "text" / f"valid.{lang}").write_text("\n".join(lines) + "\n")
    return folder


def runnable(block: str) -> str:
    """The block as bash runs it: its installing lines left out (the extras are installed here), and msgfmt's
    check where this machine has no gettext."""
    skipped = ("pip install",) + (("msgfmt",) if shutil.which("msgfmt") is None else ())
    return "\n".join(line for line in block.splitlines() if not line.startswith(skipped)) + "\n"


@pytest.mark.parametrize("page, number", [(page, n) for page in sorted(RUN_HERE) for n in range(len(blocks(page)))])
def test_a_guides_block_runs_as_written(reader, page, number):
    folder = reader / f"{page}.{number}"
    shutil.copytree(reader / "nmt-quickstart", folder / "nmt-quickstart")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    script = "set -euo pipefail\n" + runnable(blocks(page)[number])
    done = subprocess.run(["bash", "-c", script], cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "Traceback" not in done.stderr, (
        f"{page} block {number}:\n{script}\n{done.stderr[-3000:]}"
    )
