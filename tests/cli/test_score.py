"""``nmt score`` prints what the sacrebleu command prints, and fails cleanly on bad files."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from conftest import read_lines
from typer.testing import CliRunner

from nmt_cli.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def files(tmp_path_factory, multi30k):
    folder = tmp_path_factory.mktemp("score")
    refs = read_lines(multi30k / "test_2016_flickr.de.gz", 300)
    rng = random.Random(7)
    hyps = []
    for line in refs:  # a deliberately altered copy: dropped and swapped words
        words = line.split()
        if len(words) > 3 and rng.random() < 0.7:
            del words[rng.randrange(len(words))]
        if len(words) > 3 and rng.random() < 0.5:
            i = rng.randrange(len(words) - 1)
            words[i], words[i + 1] = words[i + 1], words[i]
        hyps.append(" ".join(words))
    (folder / "ref.de").write_text("\n".join(refs) + "\n")
    (folder / "hyp.de").write_text("\n".join(hyps) + "\n")
    (folder / "hyp2.de").write_text("\n".join(refs[:150] + hyps[150:]) + "\n")
    return folder


def sacrebleu_cli(*args: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "sacrebleu", *args], capture_output=True, text=True, check=True)
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def test_same_lines_as_the_sacrebleu_command(files):
    ours = runner.invoke(app, ["score", str(files / "hyp.de"), str(files / "ref.de"), "--metrics", "bleu,chrf,ter"])
    assert ours.exit_code == 0, ours.output
    theirs = sacrebleu_cli(str(files / "ref.de"), "-i", str(files / "hyp.de"), "-m", "bleu", "chrf", "ter", "-f", "text")
    assert [line.strip() for line in ours.stdout.splitlines()] == theirs
    assert "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in ours.stdout


def test_json_matches_sacrebleu_scores(files):
    args = ["score", str(files / "hyp.de"), str(files / "ref.de"), "--json", "--metrics", "bleu,chrf"]
    ours = json.loads(runner.invoke(app, args).stdout)
    theirs = json.loads(
        "\n".join(sacrebleu_cli(str(files / "ref.de"), "-i", str(files / "hyp.de"), "-m", "bleu", "-w", "4"))
    )
    assert ours[0]["score"] == pytest.approx(theirs["score"], abs=1e-4)
    assert ours[0]["signature"] == theirs["signature"]
    assert 20 < ours[0]["score"] < 95


def test_stdin_and_options(files):
    text = (files / "hyp.de").read_text()
    ours = runner.invoke(app, ["score", "-", str(files / "ref.de"), "--lowercase", "--tokenize", "intl"], input=text)
    theirs = sacrebleu_cli(str(files / "ref.de"), "-i", str(files / "hyp.de"), "-lc", "-tok", "intl", "-f", "text")
    assert ours.stdout.strip() == theirs[0]
    # sacrebleu's own spellings still work, with a line that names ours
    old = runner.invoke(app, ["score", "-", str(files / "ref.de"), "-lc", "-tok", "intl"], input=text)
    assert old.stdout.strip() == theirs[0] and "use --tokenize" in old.stderr and "use --lowercase" in old.stderr


def test_paper_bleu_is_labelled_next_to_sacrebleu(files):
    result = runner.invoke(app, ["score", str(files / "hyp.de"), str(files / "ref.de"), "--paper-bleu"])
    lines = result.stdout.splitlines()
    assert lines[0].startswith("BLEU|") and "paper-style tokenized BLEU" in lines[1] and "not sacreBLEU" in lines[1]


def test_compare_bootstrap(files):
    result = runner.invoke(
        app, ["score", "--compare", str(files / "hyp.de"), str(files / "hyp2.de"), str(files / "ref.de"), "--samples", "200"]
    )
    assert result.exit_code == 0, result.output
    assert "p = " in result.stdout and "bs:200" in result.stdout


@pytest.mark.parametrize(
    "case, message",
    [
        ("mismatch", "has 300 lines but"),
        ("missing", "nothere.txt: file not found"),
        ("empty", "empty; it must hold one translation per line"),
    ],
)
def test_bad_input_gets_one_line_errors(files, tmp_path, case, message):
    hyp = {"mismatch": files / "hyp2.de", "missing": tmp_path / "nothere.txt", "empty": tmp_path / "empty.txt"}[case]
    if case == "mismatch":
        hyp = tmp_path / "short.txt"
        hyp.write_text("eins\nzwei\n")
        message = "short.txt has 2 lines but"
    if case == "empty":
        hyp.write_text("")
    result = runner.invoke(app, ["score", str(hyp), str(files / "ref.de")])
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("separator", ["\u2028", "\x85", "\x0c", "\r", "\x1c", "\u2029"])
def test_score_splits_lines_only_at_newlines_as_sacrebleu_does(tmp_path, multi30k, separator):
    """A Unicode line separator inside a sentence must not shift the hypotheses against the references."""
    from sacrebleu import corpus_bleu

    refs = read_lines(multi30k / "test_2016_flickr.de.gz", 200)
    hyps = [" ".join(line.split()[:-1]) for line in refs]  # imperfect hypotheses: BLEU well below 100
    hyps[10] = hyps[10].replace(" ", f" {separator}", 1)
    refs[20] = refs[20].replace(" ", f" {separator}", 1)
    (tmp_path / "hyp").write_text("".join(h + "\n" for h in hyps), encoding="utf-8", newline="")
    (tmp_path / "ref").write_text("\ufeff" + "".join(r + "\r\n" for r in refs), encoding="utf-8", newline="")
    result = CliRunner().invoke(app, ["score", str(tmp_path / "hyp"), str(tmp_path / "ref"), "--json"])
    assert result.exit_code == 0, result.output
    bleu = json.loads(result.stdout)[0]  # stderr may say that control characters became spaces
    assert bleu["name"] == "BLEU"
    assert bleu["score"] == pytest.approx(corpus_bleu(hyps, [refs]).score, abs=0.01)
    assert 20 < bleu["score"] < 90
