"""The README's and the getting-started page's command lines, run in the order a reader meets them.

They run from a folder laid out as a checkout is (``recipes/``, the bundled corpus at ``nmt_cli/sample``,
``data/multi30k`` as ``nmt download`` leaves it), so every relative path in them means what it means to a reader.
Each command gets overrides appended that change how long it runs, not what it does: a one-layer model, two
updates, short outputs. The lines that need the network, a GPU or WMT14's full corpus are listed in
``RUN_ELSEWHERE`` with the test that runs their command instead; a line added to the pages must be run here or
listed there.
"""

from __future__ import annotations

import json
import re
import shlex
from importlib import resources
from pathlib import Path

import pytest
from conftest import DATA, documented_command_lines, need, read_lines
from typer.testing import CliRunner

from nmt_cli.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

RUN_ELSEWHERE = {
    "nmt quickstart": "tests/cli/test_quickstart.py (the whole job, then the model it printed)",
    "nmt download recipes/multi30k_ende.yaml": "network: tests/cli/test_download.py",
    "nmt download recipes/ende_base.yaml": "network: tests/cli/test_download.py",
    "nmt prepare recipes/ende_base.yaml": "WMT14's 4.5M pairs: benchmarks/bench_prepare_wmt.py",
    "nmt train recipes/ende_base.yaml --gpus 8": "GPUs: tests/integration/test_cuda.py (torchrun, NCCL)",
    "nmt translate -m runs/ende_base -i data/wmt14_ende/newstest2014.en -o hyp.de": "a WMT14 model",
    "nmt score hyp.de data/wmt14_ende/newstest2014.de --paper-bleu": "a WMT14 model's output: "
    "tests/cli/test_score.py scores --paper-bleu",
    "nmt serve -m runs/multi30k_ende --port 8080": "a server: tests/integration/test_serve.py",
}

# Lines run otherwise than written, and why (none: the files the download would fetch are laid in data/multi30k).
REWRITTEN: dict[str, str] = {}

# Appended to each command of that name: how long it runs, not what it does.
CHEAPER = {
    "train": [
        "--set",
        "train.max_steps=2",
        "--set",
        "model.layers=1",
        "--set",
        "model.d_model=32",
        "--set",
        "model.n_heads=2",
        "--set",
        "model.d_ff=64",
        "--set",
        "train.save_every=1",
        "--set",
        "train.threads=1",
        "--set",
        "decode.max_len_b=5",
    ],
    "translate": ["--max-len-b", "5", "--beam", "2"],
}


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder laid out as the reader's checkout, the working directory of the commands."""
    need(DATA / "multi30k")
    work = tmp_path / "nmt"
    (work / "nmt_cli").mkdir(parents=True)
    (work / "recipes").symlink_to(ROOT / "recipes")
    (work / "nmt_cli" / "sample").symlink_to(Path(str(resources.files("nmt_cli") / "sample")))
    (work / "data").mkdir()
    (work / "data" / "multi30k").symlink_to(DATA / "multi30k")  # what `nmt download` would have fetched
    sources = read_lines(DATA / "multi30k" / "test_2016_flickr.en.gz", 20)
    (work / "input.txt").write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    references = read_lines(DATA / "multi30k" / "test_2016_flickr.de.gz", 20)
    (work / "reference.txt").write_text("".join(line + "\n" for line in references), encoding="utf-8")
    monkeypatch.chdir(work)
    return work


def _run(line: str, work: Path) -> str:
    """Run one documented line in-process: its `< file` as standard input, its `> file` as the output file."""
    command, stdin, stdout = line, None, None
    if ">" in command:
        command, target = command.split(">", 1)
        stdout = work / target.strip()
    if "<" in command:
        command, source = command.split("<", 1)
        stdin = (work / source.strip()).read_text(encoding="utf-8")
    words = shlex.split(command)[1:]
    result = runner.invoke(app, [*words, *CHEAPER.get(words[0], [])], input=stdin)
    assert result.exit_code == 0, f"`{line}` failed:\n{result.output}"
    if stdout is not None:
        stdout.write_text(result.stdout, encoding="utf-8")
    return result.stdout


def test_every_documented_line_is_run_here_or_elsewhere():
    lines = {line for _, line in documented_command_lines()}
    assert set(RUN_ELSEWHERE) <= lines, f"listed but no longer documented: {set(RUN_ELSEWHERE) - lines}"


def test_the_documented_commands_run_in_order(checkout):
    outputs = {}
    for _, line in documented_command_lines():
        if line in RUN_ELSEWHERE or line in outputs:  # a line shown twice (the fine-tuning section) runs once
            continue
        outputs[line] = _run(REWRITTEN.get(line, line), checkout)
    translated = (checkout / "output.txt").read_text(encoding="utf-8").splitlines()
    assert len(translated) == 20
    assert re.search(r"BLEU\S*\s*=?\s*\d", outputs["nmt score output.txt reference.txt --metrics bleu,chrf,ter"])
    assert (checkout / "runs" / "multi30k_ende" / "model.pt").is_file()
    assert (checkout / "runs" / "finetune_example" / "model.pt").is_file()
    assert len(outputs["nmt translate -m runs/finetune_example -i input.txt"].splitlines()) >= 20
    assert (checkout / "curves.png").read_bytes().startswith(b"\x89PNG")


def _first_bash_block(page: str) -> list[str]:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block is not None, page
    return [re.sub(r"\s+#.*$", "", line) for line in block.group(1).splitlines() if line.strip()]


def test_the_glossary_guides_first_block_runs_on_the_quickstart_model(overfit, tmp_path, monkeypatch):
    """The guide's first block, as written, in a folder holding what the README's set-up leaves: the model
    `nmt quickstart` writes (here the suite's small trained model in its place)."""
    import subprocess

    run_dir, _, _ = overfit
    (tmp_path / "nmt-quickstart").mkdir()
    (tmp_path / "nmt-quickstart" / "model").symlink_to(run_dir)
    monkeypatch.chdir(tmp_path)
    outputs = []
    for line in _first_bash_block("glossaries.md"):
        assert "[" not in line.replace("'", " ").split("printf")[0], f"a placeholder in a runnable line: {line}"
        if line.startswith("nmt "):
            outputs.append(_run(line, tmp_path))
        else:
            subprocess.run(["bash", "-c", line], check=True, cwd=tmp_path)
    assert len((tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()) == 2
    records = [json.loads(row) for row in outputs[-1].splitlines()]
    assert len(records) == 2 and all("missing_terms" in record for record in records)
