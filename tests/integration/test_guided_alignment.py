"""Guided alignment end to end on real pairs: ``nmt prepare`` word-aligns with eflomal, ``nmt train`` trains the
guided head, and ``--alignments`` reads that head."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import read_lines, tiny_recipe_yaml, write_slice

from nmt_cli.config import load_recipe
from nmt_cli.data.align import load_links
from nmt_cli.data.binary import TokenArray
from nmt_cli.data.prepare import prepare
from nmt_cli.decode.aligner import Aligner
from nmt_cli.decode.loading import load_model
from nmt_cli.decode.translator import Translator
from nmt_cli.errors import NmtError
from nmt_cli.model.guided import GUIDED_HEAD
from nmt_cli.train.loop import train

pytest.importorskip("eflomal", reason="the word aligner is an optional extra: pip install 'nmt-cli[align]'")


@pytest.fixture(scope="module")
def guided_run(tmp_path_factory: pytest.TempPathFactory, multi30k: Path):
    folder = tmp_path_factory.mktemp("guided")
    # 300 pairs: eflomal runs more sampling iterations the smaller the corpus (its time grows as the root of the
    # corpus's size), so a slice this small still takes it a few seconds
    for split, start, n in (("train", 0, 300), ("val", 800, 50), ("test", 850, 50)):
        write_slice(
            folder / "c", split, {lang: read_lines(multi30k / f"train.{lang}.gz", n, start) for lang in ("en", "de")}
        )
    text = tiny_recipe_yaml(folder / "c", folder / "data", folder / "run").replace(
        "  workers: 1\n", "  workers: 1\n  align: true\n"
    )
    path = folder / "guided.yaml"
    path.write_text(text)
    recipe = load_recipe(path, ["train.guided_alignment=0.5", "vocab.size=800"])
    meta = prepare(recipe, log=lambda _m: None, progress=False)
    train(recipe, log=lambda _m: None)
    return recipe, meta


def test_prepare_aligns_every_training_pair_within_its_pieces(guided_run):
    recipe, meta = guided_run
    data = recipe.data_dir
    links = load_links(data / "train.align")
    dtypes = meta["splits"]["train"]["dtypes"]
    src = TokenArray(data / "train.en", np.dtype(dtypes[0]))
    tgt = TokenArray(data / "train.de", np.dtype(dtypes[1]))
    assert len(links) == len(src) == meta["splits"]["train"]["sentences"]
    assert meta["splits"]["train"]["alignment_links"] == sum(len(links[i]) // 2 for i in range(len(links)))
    # eflomal links most pieces of ordinary sentences, each within its sentence
    assert meta["splits"]["train"]["alignment_links"] > 0.5 * meta["splits"]["train"]["tgt_tokens"]
    for i in range(0, len(links), 97):
        pairs = links[i].reshape(-1, 2)
        assert (pairs[:, 0] < len(src[i])).all() and (pairs[:, 1] < len(tgt[i])).all()
    # a second prepare finds the alignments up to date
    logged: list[str] = []
    prepare(recipe, log=logged.append, progress=False)
    assert any("word alignments are up to date" in line for line in logged)


def test_training_is_guided_and_alignments_come_from_the_guided_head(guided_run):
    recipe, _ = guided_run
    records = [json.loads(line) for line in (recipe.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "nll" in r][-1] == 6
    loaded = load_model(recipe.run_dir)
    assert loaded.recipe.train.guided_alignment == 0.5
    assert Aligner(loaded).heads == [GUIDED_HEAD]
    assert Aligner(loaded, layer=0).heads is None  # an explicit layer: its heads averaged
    translator = Translator(loaded, loaded.recipe.decode, alignments=True)
    sources = ["A man rides a bike.", "Two dogs play in the snow."]
    for source, hyps in zip(sources, translator.translate(sources)):
        text, pharaoh = hyps[0].text, hyps[0].alignment
        assert pharaoh is not None
        pairs = [tuple(map(int, pair.split("-"))) for pair in pharaoh.split()]
        assert {j for _, j in pairs} == set(range(len(text.split())))  # every output word linked
        assert all(i < len(source.split()) for i, _ in pairs)


def test_guided_training_without_aligned_data_says_how_to_get_it(prepared, tmp_path):
    recipe = replace(prepared, train=replace(prepared.train, guided_alignment=0.1, dir=str(tmp_path / "run")))
    with pytest.raises(NmtError, match="data.align: true"):
        train(recipe, log=lambda _m: None)
    assert not (tmp_path / "run").exists()  # refused before anything was written: no empty run folder


def test_the_aligner_dies_with_a_killed_prepare_and_its_files_go_at_the_next_run(tmp_path, monkeypatch):
    """eflomal starts its binary with subprocess.Popen: while aligning, every such child dies with its parent, even on
    kill -9; and the temporary folder a killed run left is removed by the next."""
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    from nmt_cli.data.align import aligner_workdir
    from nmt_cli.utils.process import pid_alive

    script = (
        "import subprocess, sys, time\n"
        "from nmt_cli.data.align import children_die_with_this_process\n"
        "with children_die_with_this_process():\n"
        "    child = subprocess.Popen(['sleep', '120'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    aligner = int(parent.stdout.readline())
    assert pid_alive(aligner)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while pid_alive(aligner) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(aligner)

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stale = tmp_path / f"nmt-align-{parent.pid}-x"  # a folder named by a process that is gone
    stale.mkdir()
    (stale / "forward.links").write_text("0-0\n")
    with aligner_workdir() as workdir:
        assert workdir.parent == tmp_path and workdir.name.startswith("nmt-align-")
    assert not stale.exists() and not workdir.exists()
