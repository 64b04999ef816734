"""Glossaries read and checked, and their terms found in sentences."""

from __future__ import annotations

import re

import pytest

from nmt_cli.errors import DataError
from nmt_cli.terms.glossary import Glossary, read_glossary, read_keep_terms
from nmt_cli.terms.matching import TermMatcher


def _write(tmp_path, name: str, text: str | bytes):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_tsv_and_csv_glossaries_with_alternatives_comments_and_repeats(tmp_path):
    tsv = _write(tmp_path, "g.tsv", "# product terms\nfile\tDatei|Dateien\n\nRepository\tRepository\nfile\tDatei|Dateien\n")
    glossary = read_glossary(tsv)
    assert [(t.source, t.targets) for t in glossary.terms] == [
        ("file", ("Datei", "Dateien")),
        ("Repository", ("Repository",)),
    ]
    csv = _write(tmp_path, "g.csv", 'file system,"Dateisystem"\n"save, then quit",Speichern und beenden\n')
    assert [t.source for t in read_glossary(csv).terms] == ["file system", "save, then quit"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("file\tDatei\nfile\tAkte\n", r"g.tsv:2: 'file' is already translated as 'Datei' at .*g.tsv:1"),
        ("file\t\n", r"g.tsv:1: an empty term"),
        ("\tDatei\n", r"g.tsv:1: an empty term"),
        ("file\n", r"g.tsv:1: one column"),
        ("file\tDatei|\n", r"g.tsv:1: an empty term"),
    ],
)
def test_bad_glossary_lines_are_one_line_naming_file_and_line(tmp_path, text, problem):
    with pytest.raises(DataError, match=problem):
        read_glossary(_write(tmp_path, "g.tsv", text))


def test_a_glossary_in_another_encoding_is_refused_with_its_line(tmp_path):
    with pytest.raises(DataError, match=r"g.tsv:2: not UTF-8"):
        read_glossary(_write(tmp_path, "g.tsv", "file\tDatei\nK\xe4se\tcheese\n".encode("latin-1")))


TBX = """<?xml version="1.0" encoding="UTF-8"?>
<tbx type="TBX-Basic" style="dca" xml:lang="en" xmlns="urn:iso:std:iso:30042:ed-2">
  <text><body>
    <conceptEntry id="c1">
      <langSec xml:lang="en"><termSec><term>file</term></termSec></langSec>
      <langSec xml:lang="de"><termSec><term>Datei</term></termSec><termSec><term>Dateien</term></termSec></langSec>
    </conceptEntry>
    <conceptEntry id="c2">
      <langSec xml:lang="en-US"><termSec><term>folder</term></termSec><termSec><term>directory</term></termSec></langSec>
      <langSec xml:lang="de-DE"><termSec><term>Ordner</term></termSec></langSec>
    </conceptEntry>
    <conceptEntry id="c3"><langSec xml:lang="en"><termSec><term>orphan</term></termSec></langSec></conceptEntry>
  </body></text>
</tbx>
"""


def test_tbx_concepts_map_every_source_term_to_the_target_terms(tmp_path):
    glossary = read_glossary(_write(tmp_path, "g.tbx", TBX), "en", "de")
    assert [(t.source, t.targets) for t in glossary.terms] == [
        ("file", ("Datei", "Dateien")),
        ("folder", ("Ordner",)),
        ("directory", ("Ordner",)),
    ]


def test_a_tbx_with_entities_is_refused_without_loading_them(tmp_path):
    hostile = TBX.replace(
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<?xml version="1.0"?><!DOCTYPE tbx [<!ENTITY x SYSTEM "file:///etc/passwd">]>',
    ).replace("<term>file</term>", "<term>&x;</term>")
    with pytest.raises(DataError, match=r"g.tbx: declares a DTD or entities"):
        read_glossary(_write(tmp_path, "g.tbx", hostile), "en", "de")
    # the same in UTF-16, where the bytes "<!DOCTYPE" never appear: refused alike, the entity never placed
    utf16 = tmp_path / "g16.tbx"
    utf16.write_bytes(hostile.replace('<?xml version="1.0"?>', '<?xml version="1.0" encoding="UTF-16"?>').encode("utf-16"))
    with pytest.raises(DataError, match=r"g16.tbx: declares a DTD or entities"):
        read_glossary(utf16, "en", "de")


def test_keep_terms_are_names_copied_as_written(tmp_path):
    keep = read_keep_terms(_write(tmp_path, "keep.txt", "# names\nGitLab\nnmt\n"))
    assert [(t.source, t.kept) for t in keep.terms] == [("GitLab", True), ("nmt", True)]
    joined = Glossary.join(read_glossary(_write(tmp_path, "g.tsv", "file\tDatei\n")), keep)
    assert len(joined) == 3
    with pytest.raises(DataError, match="already translated"):
        Glossary.join(keep, read_glossary(_write(tmp_path, "h.tsv", "nmt\tNMT\n")))


def test_terms_match_on_word_boundaries_longest_first_case_as_the_term_says(tmp_path):
    glossary = read_glossary(_write(tmp_path, "g.tsv", "file\tDatei\nfile system\tDateisystem\nRepository\tRepo\n"))
    matcher = TermMatcher(glossary)
    text = "Open the File, then the file system; profile and repository and Repository."
    found = [(text[m.start : m.end], m.term.targets[0]) for m in matcher.find(text)]
    assert found == [("File", "Datei"), ("file system", "Dateisystem"), ("Repository", "Repo")]


def test_no_term_inside_a_placeholder_a_path_a_url_or_an_option(tmp_path):
    matcher = TermMatcher(read_glossary(_write(tmp_path, "g.tsv", "file\tDatei\nname\tName\n")))
    text = "Copy /usr/share/file to https://example.org/file with --file and %(name)s, then the file."
    found = [(m.start, text[m.start : m.end]) for m in matcher.find(text)]
    assert found == [(len(text) - len("file."), "file")]


def test_names_with_inner_capitals_can_be_terms_and_keep_terms(tmp_path):
    names = read_keep_terms(_write(tmp_path, "names.txt", "GitHub\nmacOS\niPhone\nPyTorch\n"))
    text = "Open GitHub on macOS, an iPhone or with PyTorch; not in /srv/GitHub/x."
    found = [text[m.start : m.end] for m in TermMatcher(names).find(text)]
    assert found == ["GitHub", "macOS", "iPhone", "PyTorch"]


@pytest.mark.parametrize(
    "pairs, problem",
    [
        ([["a" * 201, "b"]], "a term of 201 characters"),
        ([["file", "b" * 5000]], "a term of 5,000 characters"),
        ([["file", "Datei\nDateien"]], "holds a line break or tab"),
        ([["file", "Da\ttei"]], "holds a line break or tab"),
        ([["fi\ud800le", "Datei"]], "holds the character U+D800"),
    ],
)
def test_terms_too_long_or_not_one_line_are_refused_on_every_way_in(tmp_path, pairs, problem):
    from nmt_cli.terms.glossary import glossary_from_pairs

    with pytest.raises(DataError, match=re.escape(problem)) as inline:
        glossary_from_pairs(pairs, '"glossary"')
    str(inline.value).encode("utf-8")  # the message itself can be printed and sent
    if "\ud800" not in pairs[0][0]:
        (source, target) = pairs[0]
        csv = _write(tmp_path, "g.csv", f'"{source}","{target}"\n')
        with pytest.raises(DataError, match=re.escape(problem)):
            read_glossary(csv)


def test_a_tbx_without_the_models_pair_is_refused_naming_its_languages(tmp_path):
    with pytest.raises(DataError, match=r"no concept has terms in both en and ja \(the languages it has: de, en"):
        read_glossary(_write(tmp_path, "g.tbx", TBX), "en", "ja")


def test_protected_lines_mask_kept_names_and_leave_glossary_terms_to_the_search(tmp_path):
    from nmt_cli.decode.protected import ProtectedEngine
    from nmt_cli.decode.translation import TranslationStats

    terms = Glossary.join(
        read_keep_terms(_write(tmp_path, "names.txt", "Ubuntu\nGitHub\n")),
        read_glossary(_write(tmp_path, "g.tsv", "README.md\tLIESMICH.md\nfile\tDatei\n")),
    )
    from types import SimpleNamespace

    inner = SimpleNamespace(
        terms=TermMatcher(terms), config=None, languages=("", ""), max_positions=0, context_sentences=0,
        stats=TranslationStats(),
    )  # fmt: skip
    engine = ProtectedEngine(inner)  # type: ignore[arg-type]
    masked = engine.mask("Open GitHub on Ubuntu, then the file README.md in /etc.")
    assert set(masked.originals.values()) == {"GitHub", "Ubuntu", "/etc"}
    assert "README.md" in masked.text and "file" in masked.text
    assert masked.restore(masked.text.replace("Ubuntu", "x")) == "Open GitHub on Ubuntu, then the file README.md in /etc."


def test_documents_mask_the_names_to_keep_so_they_come_back_whole(tmp_path):
    """A kept name in markup and in plain text is never shown to the model: a model that runs names on
    ("Ubuntuu") cannot touch it."""
    from nmt_cli.formats.markup import translate_fragments
    from nmt_cli.formats.segments import Sentences, translate_texts

    matcher = TermMatcher(read_keep_terms(_write(tmp_path, "names.txt", "Ubuntu\nData Loader\n")))
    seen: list[str] = []

    def run_on(lines: list[str]) -> list[str]:
        seen.extend(lines)
        return [" ".join(w if w.startswith("%") else w + "u" for w in line.split()) for line in lines]

    sentences = Sentences(run_on, kept=matcher.kept_spans)
    (page,) = translate_fragments(["Install <b>Ubuntu</b> with Data Loader now."], sentences, "en")
    (text,) = translate_texts(["Install Ubuntu with Data Loader now."], sentences, "en")
    for out in (page, text):
        assert "Ubuntu" in out and "Ubuntuu" not in out and "Data Loader" in out, out
    assert not any("Ubuntu" in line or "Loader" in line for line in seen)
