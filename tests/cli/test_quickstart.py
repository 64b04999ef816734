"""``nmt quickstart`` end to end on the bundled corpus (a few updates only: the real run is
measured in docs/benchmarks.md)."""

from __future__ import annotations

import gzip
from importlib import resources
from pathlib import Path

from typer.testing import CliRunner

from nmt_cli.cli import app

runner = CliRunner()


def test_bundled_corpus_is_split_without_overlap():
    root = Path(str(resources.files("nmt_cli") / "sample"))
    for pair in ("en-de", "en-fr"):
        splits = {
            s: gzip.decompress((root / pair / f"{s}.en.gz").read_bytes()).decode().splitlines()
            for s in ("train", "valid", "test")
        }
        assert len(splits["train"]) >= 20_000
        assert not set(splits["train"]) & set(splits["test"])
        assert not set(splits["train"]) & set(splits["valid"])
        tgt = gzip.decompress((root / pair / f"test.{pair[3:]}.gz").read_bytes()).decode().splitlines()
        assert len(tgt) == len(splits["test"])
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    assert size < 5 * 2**20


def test_quickstart_runs_the_whole_job(tmp_path):
    work = tmp_path / "qs"
    result = runner.invoke(
        app,
        [
            "quickstart",
            "--dir",
            str(work),
            "--minutes",
            "5",
            "--set",
            "train.max_steps=4",
            "--set",
            "model.layers=1",
            "--set",
            "model.d_model=64",
            "--set",
            "model.d_ff=128",
            "--set",
            "vocab.size=2000",
            "--set",
            "train.save_every=2",
            "--set",
            "decode.beam=2",
            "--set",
            "decode.max_len_b=5",
            # eflomal would align the 35k pairs (half a minute); tests/integration/test_guided_alignment.py
            # runs the guided path on a slice
            "--set",
            "data.align=false",
            "--set",
            "train.guided_alignment=0",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "copy-the-source baseline" in result.output and "nmt translate -m" in result.output
    # training ends by fitting the confidence on the validation set, or says why there is none (4 updates:
    # every translation is bad, nothing to tell apart)
    assert "none of the first 100 translations reaches sentence chrF 50" in " ".join(result.output.split())
    assert "nmt calibrate -m" in result.output  # the command that fits one later
    model_dir = work / "model"
    assert (model_dir / "model.pt").is_file()
    hyps = (model_dir / "test.hyp").read_text().splitlines()
    refs = gzip.decompress((Path(str(resources.files("nmt_cli") / "sample")) / "en-de" / "test.de.gz").read_bytes())
    assert len(hyps) == len(refs.decode().splitlines())
    translated = runner.invoke(app, ["translate", "-m", str(model_dir)], input="Cannot open file\n")
    assert translated.exit_code == 0 and len(translated.stdout.splitlines()) == 1


def test_quickstart_rejects_unknown_pairs(tmp_path):
    result = runner.invoke(app, ["quickstart", "--pair", "en-xx", "--dir", str(tmp_path)])
    assert result.exit_code == 2 and "'en-xx' is not one of 'en-de', 'en-fr', 'en-de,en-fr'" in result.output


def test_the_multilingual_quickstart_trains_one_model_of_both_pairs(tmp_path):
    """--pair en-de,en-fr: one model, each bundled corpus read from its own folder, each test set scored."""
    work = tmp_path / "qs"
    tiny = [
        "train.max_steps=2",
        "model.layers=1",
        "model.d_model=32",
        "model.d_ff=64",
        "vocab.size=2000",
        "train.save_every=2",
        "decode.beam=1",
        "decode.max_len_b=3",
        "train.calibrate=false",
        "vocab.input_sentence_size=2000",
        "data.train=[valid]",  # the small split: the plumbing is what is tested
        "train.valid_bleu=false",
    ]
    args = ["quickstart", "--pair", "en-de,en-fr", "--dir", str(work), *[a for t in tiny for a in ("--set", t)]]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "held-out test set (en-de)" in text and "held-out test set (en-fr)" in text and "--to de" in text
    sample = Path(str(resources.files("nmt_cli") / "sample"))
    for pair in ("en-de", "en-fr"):
        refs = gzip.decompress((sample / pair / f"test.{pair[3:]}.gz").read_bytes()).decode().splitlines()
        assert len((work / "model" / f"test.{pair}.hyp").read_text().splitlines()) == len(refs)
    translated = runner.invoke(app, ["translate", "-m", str(work / "model"), "--to", "fr"], input="Cannot open file\n")
    assert translated.exit_code == 0 and len(translated.stdout.splitlines()) == 1
