"""Translating gettext catalogues keeps their structure.

A catalogue built from real Multi30k sentences the tiny model has memorised, with what real catalogues
hold: printf placeholders, a plural entry, msgctxt, translator comments, references, flags, an entry
already translated, a fuzzy one and an obsolete one. The structure is compared exactly; ``msgfmt -c``
must accept the result; encodings and line ends come back as they went in.
"""

from __future__ import annotations

import gettext as stdlib_gettext
import shutil
import subprocess
from collections import Counter

import pytest
from conftest import nmt_in_process

polib = pytest.importorskip("polib", reason="polib is in the files extra")

from nmt_cli.errors import NmtError  # noqa: E402
from nmt_cli.formats import translate_file  # noqa: E402
from nmt_cli.formats.gettext import plural_forms  # noqa: E402
from nmt_cli.formats.placeholders import placeholders, repair  # noqa: E402
from nmt_cli.formats.segments import translate_texts  # noqa: E402


def catalogue(src: list[str]) -> str:
    header = (
        'msgid ""\nmsgstr ""\n"Project-Id-Version: app 1.0\\n"\n"Language: \\n"\n'
        '"Content-Type: text/plain; charset=CHARSET\\n"\n"Plural-Forms: nplurals=INTEGER; plural=EXPRESSION;\\n"\n\n'
    )
    entries = [
        f'#. {src[0]}\n#: src/a.c:1\nmsgid "{src[0]}"\nmsgstr ""\n',
        f'#: src/a.c:2\n#, c-format\nmsgid "%s: {src[1]}"\nmsgstr ""\n',
        f'msgctxt "menu"\nmsgid "{src[2]}"\nmsgstr ""\n',
        f'#, c-format\nmsgid "{src[3]} (%d)"\nmsgid_plural "{src[4]} (%d)"\nmsgstr[0] ""\nmsgstr[1] ""\n',
        f'msgid "{src[5]}"\nmsgstr "Schon übersetzt."\n',
        f'#, fuzzy\nmsgid "{src[6]}"\nmsgstr "Eine alte Übersetzung."\n',
        f'msgid "{src[7]}\\n{src[8]}"\nmsgstr ""\n',
        '#~ msgid "Old"\n#~ msgstr "Alt"\n',
    ]
    return header + "\n".join(entries)


@pytest.fixture(scope="module")
def translated_lines(overfit):
    """What ``nmt translate`` gives, line by line, for the model's sentences."""
    run, src, _ = overfit
    result = nmt_in_process("translate", "-m", str(run), stdin="\n".join(src[:12]) + "\n")
    assert result.returncode == 0, result.stderr
    return dict(zip(src[:12], result.stdout.splitlines()))


def test_a_catalogue_keeps_its_structure_and_msgfmt_accepts_it(overfit, translated_lines, tmp_path):
    run, src, _ = overfit
    template = tmp_path / "app.pot"
    template.write_text(catalogue(src), encoding="utf-8")
    before = template.read_bytes()
    output = tmp_path / "de.po"
    result = nmt_in_process("translate", "-m", str(run), "-i", str(template), "-o", str(output))
    assert result.returncode == 0, result.stderr
    assert template.read_bytes() == before  # only read

    source, target = polib.pofile(str(template)), polib.pofile(str(output))
    assert [(e.msgctxt, e.msgid, e.msgid_plural, e.comment, e.occurrences, e.obsolete) for e in source] == [
        (e.msgctxt, e.msgid, e.msgid_plural, e.comment, e.occurrences, e.obsolete) for e in target
    ]
    by_id = {e.msgid: e for e in target}
    assert by_id[src[0]].msgstr == translated_lines[src[0]]  # the engine's translation of the same sentence
    assert by_id[src[2]].msgctxt == "menu" and by_id[src[2]].msgstr == translated_lines[src[2]]
    assert by_id[src[5]].msgstr == "Schon übersetzt." and "fuzzy" not in by_id[src[5]].flags  # left alone
    assert by_id[src[6]].msgstr == "Eine alte Übersetzung."
    assert by_id[f"{src[7]}\n{src[8]}"].msgstr == f"{translated_lines[src[7]]}\n{translated_lines[src[8]]}"
    for entry in target:
        if entry.obsolete or entry.msgid in (src[5], src[6]):
            continue
        assert entry.flags[0] == "fuzzy"  # machine translation: for a translator to review
        outputs = entry.msgstr_plural.values() if entry.msgid_plural else [entry.msgstr]
        for text in outputs:
            assert text and Counter(placeholders(text)) == Counter(placeholders(entry.msgid))
    plural = by_id[f"{src[3]} (%d)"]
    assert sorted(plural.msgstr_plural) == [0, 1]  # German: two forms
    assert target.metadata["Language"] == "de"
    assert target.metadata["Plural-Forms"] == "nplurals=2; plural=(n != 1);"
    assert target.metadata["Content-Type"] == "text/plain; charset=UTF-8"
    if shutil.which("msgfmt"):
        checked = subprocess.run(["msgfmt", "-c", "-o", "/dev/null", str(output)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr


def test_no_fuzzy_retranslate_and_other_encodings(overfit, translated_lines, tmp_path):
    run, src, _ = overfit
    latin = tmp_path / "latin.po"
    text = catalogue(src).replace("charset=CHARSET", "charset=ISO-8859-1").replace("Language: ", "Language: de")
    latin.write_bytes(text.replace("\n", "\r\n").encode("iso-8859-1"))
    out = tmp_path / "latin.de.po"
    result = nmt_in_process("translate", "-m", str(run), "-i", str(latin), "-o", str(out), "--no-fuzzy", "--retranslate")
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    assert b"\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")  # CRLF kept
    target = polib.pofile(data.decode("iso-8859-1").replace("\r\n", "\n"))
    assert target.metadata["Content-Type"] == "text/plain; charset=ISO-8859-1"
    entry = next(e for e in target if e.msgid == src[5])
    assert entry.msgstr == translated_lines[src[5]] and "fuzzy" not in entry.flags  # retranslated, not flagged

    wide = tmp_path / "wide.po"
    wide.write_bytes(b"\xff\xfe" + catalogue(src).encode("utf-16-le"))
    out = tmp_path / "wide.de.po"
    assert nmt_in_process("translate", "-m", str(run), "-i", str(wide), "-o", str(out)).returncode == 0
    assert out.read_bytes().startswith(b"\xff\xfe")
    assert polib.pofile(out.read_bytes()[2:].decode("utf-16-le")).metadata["Language"] == "de"


def test_bad_catalogues_and_formats_are_one_line(overfit, tmp_path):
    run = str(overfit[0])
    broken = tmp_path / "broken.po"
    broken.write_text('msgid "a"\nmsgid "b"\nmsgstr ""\n', encoding="utf-8")
    result = nmt_in_process("translate", "-m", run, "-i", str(broken), "-o", str(tmp_path / "out.po"))
    assert result.returncode == 1 and f"{broken}:2: not valid gettext syntax" in " ".join(result.stderr.split())
    assert not (tmp_path / "out.po").exists() and "Traceback" not in result.stderr
    unknown = nmt_in_process("translate", "-m", run, "-i", str(broken), "--file-format", "pdf")
    assert unknown.returncode == 1 and "choose from lines, text, po, html" in unknown.stderr


# --------------------------------------------------------------------------- the pieces, without a model


def test_plural_rules_pick_the_singular_form_by_the_number_one():
    assert plural_forms("de").singular_forms() == [True, False]
    assert plural_forms("ru").singular_forms() == [True, False, False]
    assert plural_forms("ja").singular_forms() == [True]
    french = plural_forms("fr")  # 0 and 1 are singular in French (CLDR 42+ adds a form for millions)
    assert french.singular_forms()[:2] == [True, False] and not any(french.singular_forms()[2:])
    assert stdlib_gettext.c2py(french.expression)(0) == 0
    header = "nplurals=3; plural=(n==1 ? 0 : n==2 ? 1 : 2);"
    assert plural_forms("xx", header, "xx").count == 3  # the catalogue's own rule for its language
    with pytest.raises(NmtError, match="no plural rule is known"):
        plural_forms("xx")


def test_placeholders_are_kept_exactly_whatever_the_model_does():
    assert placeholders("%s of %1$d at {0} {{x}} #URL1# &amp; <b>%(n)s</b> %%") == [
        "%s",
        "%1$d",
        "{0}",
        "{{x}}",
        "#URL1#",
        "&amp;",
        "<b>",
        "%(n)s",
        "</b>",
        "%%",
    ]
    assert repair("Open %s now", "Jetzt öffnen") == "Jetzt %s öffnen"
    assert repair("Open %s", "Öffne %s %s {0}") == "Öffne %s"
    assert Counter(placeholders(repair("%s: %d", "nichts"))) == Counter(["%s", "%d"])
    # never inside another placeholder (a tag with a space in it)
    repaired = repair("%s <disk device> <partition number>", "%s")
    assert Counter(placeholders(repaired)) == Counter(["%s", "<disk device>", "<partition number>"])


def test_texts_keep_lines_spacing_and_sentences(tmp_path):
    seen = []

    def shout(sentences: list[str]) -> list[str]:
        seen.extend(sentences)
        return [s.upper().replace(" %S", "") for s in sentences]  # loses the placeholders

    out = translate_texts(["Dr. Smith is here. It costs 3.5 euros.\n  Indented %s line. ", ""], shout, "en")
    assert out == ["DR. SMITH IS HERE. IT COSTS 3.5 EUROS.\n  INDENTED %s LINE. ", ""]
    assert seen == ["Dr. Smith is here.", "It costs %s euros.", "Indented %s line."]  # the number masked

    po = tmp_path / "x.pot"
    po.write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\nmsgid "Hello %s."\nmsgstr ""\n')
    assert translate_file(po, tmp_path / "x.po", shout, "en", "de") == 1
    assert 'msgstr "HELLO %s."' in (tmp_path / "x.po").read_text()


def test_sentences_are_never_cut_inside_a_placeholder():
    from nmt_cli.formats.segments import split_sentences

    assert split_sentences("%.*s is in index", "en") == ["%.*s is in index"]
    assert split_sentences("Stopped at %s... %.*s. Next one.", "en") == ["Stopped at %s... ", "%.*s. ", "Next one."]
    line = "Use <disk device. partition> here. Then go."
    assert "".join(split_sentences(line, "en")) == line
    assert all(piece.count("<") == piece.count(">") for piece in split_sentences(line, "en"))


def test_confidence_marks_only_doubtful_entries_fuzzy_and_says_why(overfit, tmp_path):
    import json

    run, src, _ = overfit
    unseen = "Three old men are repairing a blue boat on the beach."
    template = tmp_path / "app.pot"
    extra = f'\n# checked by Anna\nmsgid "{unseen}"\nmsgstr ""\n'
    template.write_text(catalogue(src) + extra, encoding="utf-8")
    output = tmp_path / "de.po"
    result = nmt_in_process("translate", "-m", str(run), "-i", str(template), "-o", str(output), "--confidence")
    assert result.returncode == 0, result.stderr
    lines = "\n".join([src[0], src[2], unseen]) + "\n"
    judged = nmt_in_process("translate", "-m", str(run), "--confidence", "--format", "jsonl", stdin=lines)
    records = {sentence: json.loads(line) for sentence, line in zip(lines.split("\n"), judged.stdout.splitlines())}
    by_id = {e.msgid: e for e in polib.pofile(str(output))}
    for sentence, record in records.items():
        entry = by_id[sentence]
        doubtful = record["confidence"] < 0.5 or bool(record["flags"])
        assert ("fuzzy" in entry.flags) == doubtful, (sentence, record)
        assert f"nmt confidence {record['confidence']:.2f}" in entry.tcomment
    assert entry.tcomment.startswith("checked by Anna\n")  # the translators' own comment stays
    assert any("fuzzy" not in e.flags for e in by_id.values() if e.msgid in records)  # trusted ones are not flagged
    again = tmp_path / "again.po"
    rerun = ["-i", str(output), "-o", str(again), "--confidence", "--retranslate", "--fuzzy-below", "1"]
    assert nmt_in_process("translate", "-m", str(run), *rerun).returncode == 0
    redone = {e.msgid: e for e in polib.pofile(str(again))}[unseen]
    assert redone.tcomment.count("nmt confidence") == 1 and "fuzzy" in redone.flags  # replaced, not added
    page = tmp_path / "page.html"
    page.write_text(f"<p>{src[0]}</p>", encoding="utf-8")
    refused = nmt_in_process("translate", "-m", str(run), "-i", str(page), "-o", str(tmp_path / "out.html"), "--confidence")
    assert refused.returncode == 1 and "not html documents" in refused.stderr and "Traceback" not in refused.stderr
