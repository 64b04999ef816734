"""A user's terminology, read and checked: glossaries (TSV, CSV, TBX) and names kept as written.

A glossary maps a source term to its approved translation, with alternatives (``file<TAB>Datei|Dateien``: any
one of them is right; the first is preferred). A keep-terms file lists names copied exactly (a name is a term
whose translation is itself). Everything is checked when read, and a problem is one line naming the file, the
line and the fix: an empty term, a source term given twice with different translations, a file that is not
UTF-8, a TBX that declares a DTD or entities (never loaded: TBX is parsed with lxml, no network, no entities).

Reading only: which occurrences of a term a sentence holds is ``matching.py``'s question.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError

ALTERNATIVES = "|"  # separates a term's accepted translations in TSV and CSV
TBX_SUFFIXES = (".tbx", ".xml")


@dataclass(frozen=True)
class Term:
    """One entry: the source term and its accepted translations (the first preferred); ``where`` is
    ``FILE:LINE`` for messages."""

    source: str
    targets: tuple[str, ...]
    where: str

    @property
    def kept(self) -> bool:
        """A name copied as written."""
        return self.targets == (self.source,)


@dataclass(frozen=True)
class Glossary:
    """The terms of one or more files, one entry per source term."""

    terms: tuple[Term, ...]

    def __len__(self) -> int:
        return len(self.terms)

    @classmethod
    def join(cls, *glossaries: Glossary) -> Glossary:
        """Several glossaries as one; a source term with different translations in two of them is refused."""
        seen: dict[str, Term] = {}
        for glossary in glossaries:
            for term in glossary.terms:
                _add(seen, term)
        return cls(tuple(seen.values()))


def read_glossary(path: Path, src_lang: str = "", tgt_lang: str = "") -> Glossary:
    """A TSV (``.tsv``, ``.txt``), CSV (``.csv``) or TBX (``.tbx``, ``.xml``) glossary. TBX needs the languages
    (a concept entry holds terms in many); TSV and CSV are source, translation(s), in that order."""
    data = _read_bytes(path)
    if path.suffix.lower() in TBX_SUFFIXES:
        return _read_tbx(data, path, src_lang, tgt_lang)
    text = _decoded(data, path)
    dialect = "excel" if path.suffix.lower() == ".csv" else "excel-tab"
    seen: dict[str, Term] = {}
    rows = csv.reader(io.StringIO(text, newline=""), dialect=dialect)
    for row in rows:
        where = f"{path}:{rows.line_num}"
        if not row or all(not cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
            continue  # blank lines and comments
        if len(row) < 2:
            raise DataError(f"{where}: one column; a glossary line is SOURCE, then its translation (TAB-separated)")
        source, targets = row[0].strip(), [t.strip() for t in ALTERNATIVES.join(row[1:]).split(ALTERNATIVES)]
        if not source or not all(targets):
            raise DataError(f"{where}: an empty term; give the source term and each translation")
        _add(seen, Term(source, tuple(dict.fromkeys(targets)), where))
    return Glossary(tuple(seen.values()))


def glossary_from_pairs(pairs: object, where: str) -> Glossary:
    """A glossary given inline (a server request's ``"glossary"``): a list of ``[source, target]`` pairs or of
    ``{"source": ..., "target": ...}`` objects, the target with alternatives as ``A|B``; checked as files are,
    each problem naming ``where`` and the entry's number."""
    if not isinstance(pairs, list):
        raise DataError(f"{where}: give a list of [source, target] pairs, or the name of a served glossary")
    seen: dict[str, Term] = {}
    for number, pair in enumerate(pairs, start=1):
        if isinstance(pair, dict):
            pair = [pair.get("source"), pair.get("target")]
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise DataError(f"{where}, entry {number}: give [source, target] (two strings)")
        source, targets = pair[0].strip(), [t.strip() for t in pair[1].split(ALTERNATIVES)]
        if not source or not all(targets):
            raise DataError(f"{where}, entry {number}: an empty term; give the source term and each translation")
        _add(seen, Term(source, tuple(dict.fromkeys(targets)), f"{where}, entry {number}"))
    return Glossary(tuple(seen.values()))


def read_keep_terms(path: Path) -> Glossary:
    """Names copied exactly: one a line (``#`` starts a comment line)."""
    text = _decoded(_read_bytes(path), path)
    seen: dict[str, Term] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        name = line.strip()
        if name and not name.startswith("#"):
            _add(seen, Term(name, (name,), f"{path}:{number}"))
    return Glossary(tuple(seen.values()))


# A term is a name or a phrase: longer ones are refused (a 10,000-character "term" would keep a constrained search
# busy for minutes), as are line breaks and tabs (one output line per input line, TSV rows) and text that is
# not Unicode (a lone surrogate cannot be encoded for the model or the answer).
MAX_TERM_CHARS = 200
_UNWRITABLE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff\u2028\u2029]")


def _check_term(text: str, where: str) -> None:
    if len(text) > MAX_TERM_CHARS:
        raise DataError(
            f"{where}: a term of {len(text):,} characters; a term is at most {MAX_TERM_CHARS} (a name or a phrase)"
        )
    bad = _UNWRITABLE.search(text)
    if bad is not None:
        said = "a line break or tab" if bad.group(0) in "\n\r\t\u2028\u2029" else f"the character U+{ord(bad.group(0)):04X}"
        shown = "".join(c if c.isprintable() and not _UNWRITABLE.match(c) else f"\\u{ord(c):04x}" for c in text[:40])
        raise DataError(f"{where}: the term '{shown}' holds {said}; a term is one line of text")


def _add(seen: dict[str, Term], term: Term) -> None:
    """One entry per source term: the same term again with the same translations is kept once, with others refused.
    Every way in (files, keep-terms, TBX, a request's pairs) comes here, so every way gets the same checks."""
    for text in (term.source, *term.targets):
        _check_term(text, term.where)
    earlier = seen.get(term.source)
    if earlier is None:
        seen[term.source] = term
    elif earlier.targets != term.targets:
        raise DataError(
            f"{term.where}: '{term.source}' is already translated as '{ALTERNATIVES.join(earlier.targets)}' at "
            f"{earlier.where}; give one entry per term (alternatives as A{ALTERNATIVES}B)"
        )


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: glossary not found; check the path") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder; give a glossary file") from None


def _decoded(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not UTF-8; save the glossary as UTF-8") from None


def _read_tbx(data: bytes, path: Path, src_lang: str, tgt_lang: str) -> Glossary:
    """TBX (ISO 30042), v2 (``termEntry``/``tig``) or v3 (``conceptEntry``/``termSec``): per concept, the source
    language's terms each map to the target language's (the first listed preferred)."""
    from lxml import etree

    refused = DataError(f"{path}: declares a DTD or entities, which are never loaded; remove the DOCTYPE")
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise refused
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as err:
        raise DataError(f"{path}:{err.lineno}: not well-formed XML ({err.msg})") from None
    docinfo = root.getroottree().docinfo
    if docinfo.doctype or docinfo.internalDTD is not None:  # in an encoding the byte test cannot read (UTF-16)
        raise refused
    if not src_lang or not tgt_lang:
        raise DataError(f"{path}: a TBX glossary needs the model's source and target languages")
    seen: dict[str, Term] = {}
    languages: set[str] = set()
    lang_key = "{http://www.w3.org/XML/1998/namespace}lang"
    for entry in root.iter("{*}termEntry", "{*}conceptEntry"):
        by_language: dict[str, list[str]] = {}
        for lang_set in entry.iter("{*}langSet", "{*}langSec"):
            language = (lang_set.get(lang_key) or lang_set.get("lang") or "").split("-")[0].lower()
            terms = ["".join(term.itertext()).strip() for term in lang_set.iter("{*}term")]
            by_language.setdefault(language, []).extend(t for t in terms if t)
        targets = tuple(dict.fromkeys(by_language.get(tgt_lang.lower(), [])))
        for source in by_language.get(src_lang.lower(), []):
            if targets:
                _add(seen, Term(source, targets, f"{path}:{entry.sourceline}"))
        languages.update(by_language)
    if not seen:
        found = ", ".join(sorted(lang for lang in languages if lang)) or "none"
        raise DataError(
            f"{path}: no concept has terms in both {src_lang} and {tgt_lang} (the languages it has: {found}); "
            "give a glossary for the model's pair"
        )
    return Glossary(tuple(seen.values()))
