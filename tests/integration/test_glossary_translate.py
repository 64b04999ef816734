"""``nmt translate --glossary`` / ``--keep-terms`` on a trained tiny model: every term found comes out in its
approved translation, lines without terms come out as without a glossary, problems are one line."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from nmt_cli.cli import app


def _translate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["translate", *args])
    return result.exit_code, result.output


def test_glossary_terms_come_out_approved_and_other_lines_unchanged(overfit, tmp_path):
    run_dir, src, _ = overfit
    lines = src[:24]
    with_term = [i for i, line in enumerate(lines) if " man " in f" {line.lower()} "]
    assert with_term and len(with_term) < len(lines)  # both kinds of line, from the real sentences
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n")
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("# approved terms\nman\tKerl|Kerle\n")
    code, plain = _translate("-m", str(run_dir), "-i", str(source))
    assert code == 0
    code, out = _translate("-m", str(run_dir), "-i", str(source), "--glossary", str(glossary), "--format", "jsonl")
    assert code == 0, out
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(records) == len(lines)
    for i, (record, before) in enumerate(zip(records, plain.splitlines())):
        if i in with_term:
            assert "Kerl" in record["translation"] and record["missing_terms"] == [], record
        else:
            assert record["translation"] == before and record["missing_terms"] == []


def test_a_target_prefix_and_a_glossary_together(overfit, tmp_path):
    """``--prefix`` with ``--glossary``: each output starts with its line's prefix and holds the line's terms."""
    run_dir, src, tgt = overfit
    i = next(n for n, line in enumerate(src) if " man " in f" {line.lower()} ")
    source, prefixes, glossary = tmp_path / "in.txt", tmp_path / "prefix.txt", tmp_path / "terms.tsv"
    source.write_text(f"{src[i]}\n{src[0]}\n")
    start = "Heute"  # not how the memorised translation starts
    assert not tgt[i].startswith(start)
    prefixes.write_text(f"{start}\n\n")  # the second line: no prefix
    glossary.write_text("man\tKerl\n")
    code, out = _translate("-m", str(run_dir), "-i", str(source), "--prefix", str(prefixes), "--glossary", str(glossary))
    assert code == 0, out
    first, _ = out.splitlines()
    assert first.startswith(start) and "Kerl" in first, first


def test_kept_names_are_copied_as_written(overfit, tmp_path):
    run_dir, src, _ = overfit
    keep = tmp_path / "names.txt"
    keep.write_text("Zorblax\n")
    result = CliRunner().invoke(
        app, ["translate", "-m", str(run_dir), "--keep-terms", str(keep)], input=f"{src[0]} Zorblax\n"
    )
    assert result.exit_code == 0 and "Zorblax" in result.output, result.output


def test_glossary_problems_are_one_line(overfit, tmp_path):
    run_dir, src, _ = overfit
    source = tmp_path / "in.txt"
    source.write_text(src[0] + "\n")
    empty = tmp_path / "empty.tsv"
    empty.write_text("dog\tHund\ncat\t\n")
    twice = tmp_path / "twice.tsv"
    twice.write_text("dog\tHund\ndog\tKöter\n")
    long = tmp_path / "long.tsv"
    long.write_text("dog\t" + " ".join(["Hundehütte"] * 18) + "\n")  # under 200 characters, too many pieces
    longer = tmp_path / "longer.tsv"
    longer.write_text("dog\t" + " ".join(["Hundehütte"] * 400) + "\n")
    glossary = tmp_path / "ok.tsv"
    glossary.write_text("dog\tHund\n")
    pipe = tmp_path / "pipe"  # what bash's --glossary <(...) hands over
    os.mkfifo(pipe)
    for extra, message in (
        (["--glossary", str(pipe)], f"--glossary {pipe}: a pipe, not a file; write it to a file"),
        (["--glossary", str(empty)], f"{empty}:2: an empty term"),
        (["--glossary", str(twice)], f"{twice}:2: 'dog' is already translated as 'Hund'"),
        (["--glossary", str(tmp_path / "none.tsv")], "--glossary"),
        (["--glossary", str(long)], f"{long}:1: the translation of 'dog' takes"),
        (["--glossary", str(longer)], f"{longer}:1: a term of 4,399 characters; a term is at most 200"),
        (["--glossary", str(glossary), "--sampling"], "drop --sampling"),
        (["--glossary", str(glossary), "-o", str(glossary)], "is also what this command reads"),
    ):
        code, out = _translate("-m", str(run_dir), "-i", str(source), *extra)
        assert code != 0 and message in out and "Traceback" not in out, out
        assert out.count("\n") == 1, out
    assert glossary.read_text() == "dog\tHund\n"  # what the command reads is never written


def test_a_gettext_catalogue_says_which_terms_each_translation_was_made_to_use(overfit, tmp_path):
    pytest.importorskip("polib")
    run_dir, src, _ = overfit
    line = next(s for s in src if " man " in f" {s.lower()} ")
    other = next(s for s in src if " man " not in f" {s.lower()} ")
    catalogue = tmp_path / "app.po"
    catalogue.write_text(
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
        f'# translators: keep it short\nmsgid "{line}"\nmsgstr ""\n\nmsgid "{other}"\nmsgstr ""\n'
    )
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("man\tKerl\n")
    out = tmp_path / "app.de.po"
    code, output = _translate("-m", str(run_dir), "-i", str(catalogue), "-o", str(out), "--glossary", str(glossary))
    assert code == 0, output
    import polib

    first, second = polib.pofile(str(out))
    assert "Kerl" in first.msgstr
    assert first.tcomment.splitlines() == ["translators: keep it short", "nmt glossary: man = Kerl"]
    assert "nmt glossary" not in second.tcomment
