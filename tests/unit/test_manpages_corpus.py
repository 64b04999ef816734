"""scripts/manpages_corpus.py: po4a catalogues -> paragraphs in page order with .docids, read by nmt prepare."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "manpages_corpus.py"


def _script():
    spec = importlib.util.spec_from_file_location("manpages_corpus", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CATALOGUE = """# German translation of manpages
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"

#. type: TH
#, no-wrap
msgid "CP"
msgstr "CP"

#. type: Plain text
msgid ""
"copy files\\n"
"and   directories"
msgstr "Dateien und Verzeichnisse kopieren"

#, fuzzy
msgid "do not overwrite"
msgstr "nicht"

msgid "untranslated"
msgstr ""

#~ msgid "obsolete"
#~ msgstr "veraltet"

msgid "B<-f>, B<--force>"
msgstr "B<-f>, B<--force>"
"""


def _read(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def test_catalogues_become_paragraphs_in_page_order_with_their_page_as_document(tmp_path):
    script = _script()
    for page in ("cp.1", "mv.1", "ls.1"):
        folder = tmp_path / "po" / "de" / "man1"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{page}.po").write_text(CATALOGUE.replace("CP", page.upper()), encoding="utf-8")
    (tmp_path / "po" / "de" / "man8").mkdir()
    (tmp_path / "po" / "de" / "man8" / "empty.8.po").write_text('msgid ""\nmsgstr ""\n', encoding="utf-8")
    script.main(
        ["--po", str(tmp_path / "po"), "--lang", "de", "--out", str(tmp_path / "out"), "--valid", "0", "--test", "0"]
    )
    english, german, ids = (_read(tmp_path / "out" / f"train.en-de.{s}.gz") for s in ("en", "de", "docids"))
    assert english[:3] == ["CP.1", "copy files and directories", "B<-f>, B<--force>"]  # fuzzy, empty, obsolete: out
    assert german[1] == "Dateien und Verzeichnisse kopieren"
    assert ids == ["man1/cp.1"] * 3 + ["man1/ls.1"] * 3 + ["man1/mv.1"] * 3  # a page without entries: no document
    assert _read(tmp_path / "out" / "test.en-de.en.gz") == []


def test_a_page_always_lands_in_the_same_split():
    script = _script()
    pages = [f"man1/page{i}.1" for i in range(2000)]
    splits = [script.split_of(page, 2.5, 3.0) for page in pages]
    assert splits == [script.split_of(page, 2.5, 3.0) for page in pages]
    assert 20 < splits.count("valid") < 80 and 30 < splits.count("test") < 90
