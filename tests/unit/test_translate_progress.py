"""A document's sentences go through ``nmt translate`` in one call, which may take minutes: a bar shows it."""

from __future__ import annotations

from nmt_cli.commands.translate import _sentences
from nmt_cli.decode.translation import Translation


def results(lines, first=0):
    for line in lines:
        yield [Translation(line.upper(), 0.0)]


def test_a_documents_sentences_show_progress_when_asked(capsys):
    shown = _sentences(results, aligned=False, show=True)
    assert shown.translate(["one", "two", "three"]) == ["ONE", "TWO", "THREE"]
    bar = capsys.readouterr().err
    assert "translate" in bar and "3/3" in bar
    quiet = _sentences(results, aligned=False, show=False)
    assert quiet.translate(["one", "two"]) == ["ONE", "TWO"]
    assert capsys.readouterr().err == ""
