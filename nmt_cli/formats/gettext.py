"""gettext catalogues (``.po``, ``.pot``): msgid -> msgstr, plural forms, everything else kept.

Read and written with polib (the maintained Python reader and writer of PO files). What changes:

- every untranslated entry gets a translation; entries already translated (fuzzy ones included: a
  translator wrote them) are left alone unless ``retranslate`` asks; obsolete ones (``#~``) always;
- a plural entry fills every ``msgstr[i]`` the target language has (its Plural-Forms: the header's when
  it names the target language, else Babel's CLDR-derived table): form i takes the translation of
  msgid when the number that picks it is 1, else of msgid_plural;
- machine translations are flagged ``fuzzy`` (a translator reviews them; tools skip them when compiling)
  unless ``fuzzy=False``; with ``fuzzy_below`` (``nmt translate --confidence``) only those whose
  confidence is below it or that carry a flag, and each entry gets a translator comment with its
  confidence and flags (an earlier one of ours is replaced, the translators' own kept);
- the header's Language and Plural-Forms are set for the target language, and a template's
  ``charset=CHARSET`` becomes UTF-8. msgctxt, comments, flags, references and the entry order are kept.

Placeholders are kept exactly (``segments.py``), so ``msgfmt -c`` accepts c-format entries.
"""

from __future__ import annotations

import gettext as stdlib_gettext
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from ..errors import NmtError
from ..version import __version__
from .document import DocumentRequest
from .placeholders import PLACEHOLDER, TEXT_PLACEHOLDER
from .po_grammar import check_po_grammar
from .segments import UNDOUBTED, Sentences, TextConfidence, TranslateSentences, assess_texts, translate_texts
from .textfile import NEAREST, TextFile

FUZZY = "fuzzy"


@dataclass(frozen=True)
class PluralForms:
    """A language's plural rule: how many forms, and which form a number takes."""

    count: int
    expression: str

    @property
    def header(self) -> str:
        return f"nplurals={self.count}; plural={self.expression};"

    def singular_forms(self) -> list[bool]:
        """For each form, whether the number 1 selects it (that form translates msgid, the others msgid_plural)."""
        choose: Callable[[int], int] = stdlib_gettext.c2py(self.expression)
        return [choose(1) == form for form in range(self.count)]


def plural_forms(language: str, header: str = "", header_language: str = "") -> PluralForms:
    """The target language's plural rule: the catalogue header's when it is for that language, else Babel's."""
    if header and _same_language(header_language, language):
        parsed = _parse_plural_header(header)
        if parsed is not None:
            return parsed
    try:
        from babel.core import UnknownLocaleError
        from babel.messages.plurals import get_plural
    except ImportError:
        raise NmtError(
            "translating a gettext catalogue needs the plural rules of its target language: pip install 'nmt-cli[files]'"
        ) from None
    try:
        rule = get_plural(language.replace("-", "_"))
    except (ValueError, UnknownLocaleError):
        raise NmtError(
            f"no plural rule is known for the language '{language}'; give the catalogue a Plural-Forms header "
            "and a Language header naming it"
        ) from None
    return PluralForms(rule.num_plurals, rule.plural_expr)


def _parse_plural_header(text: str) -> PluralForms | None:
    match = re.search(r"nplurals\s*=\s*(\d+)\s*;\s*plural\s*=\s*(.+?)\s*;?\s*$", text)
    if not match:
        return None
    try:
        stdlib_gettext.c2py(match.group(2))
    except (ValueError, SyntaxError):
        return None
    return PluralForms(int(match.group(1)), match.group(2))


def _same_language(a: str, b: str) -> bool:
    return a.replace("-", "_").lower() == b.replace("-", "_").lower() if a and b else False


def translate_po(
    source: TextFile,
    translate: TranslateSentences | Sentences,
    source_language: str,
    target_language: str,
    fuzzy: bool = True,
    retranslate: bool = False,
    fuzzy_below: float | None = None,
) -> tuple[str, int]:
    """The catalogue in ``source`` translated; returns its new text and how many entries were translated.
    ``fuzzy_below``: mark fuzzy only what is trusted less (``translate`` must be :class:`Sentences` that assess)."""
    try:
        import polib
    except ImportError:
        raise NmtError("translating gettext catalogues needs polib: pip install 'nmt-cli[files]'") from None
    check_po_grammar(source.text, source.path)
    try:
        catalogue = polib.pofile(source.text)
    except (OSError, ValueError, IndexError) as err:
        line = re.search(r"line (\d+)", str(err))
        where = f"{source.path}:{line.group(1)}" if line else str(source.path)
        raise NmtError(f"{where}: not valid gettext syntax ({_first_line(err)}); msgfmt -c shows the same") from None
    content = [line for line in source.text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if content and not len(catalogue) and not catalogue.metadata:
        raise NmtError(f"{source.path}: no gettext entry could be read from it; is it a .po file?")
    metadata = catalogue.metadata
    plurals = plural_forms(target_language, metadata.get("Plural-Forms", ""), metadata.get("Language", ""))
    todo = [
        entry
        for entry in catalogue
        if entry.msgid and not entry.obsolete and (retranslate or not entry.translated() and FUZZY not in entry.flags)
    ]
    keys = {id(entry): mnemonic(entry.msgid) for entry in todo}  # GTK's "_File": the model reads "File"
    texts = [_without_mnemonic(entry.msgid, keys[id(entry)]) for entry in todo]
    texts += [_without_mnemonic(entry.msgid_plural, keys[id(entry)]) for entry in todo if entry.msgid_plural]
    if fuzzy_below is not None:
        assert isinstance(translate, Sentences) and translate.assess is not None
        done = iter(assess_texts(texts, translate, source_language))
    else:
        done = iter((text, UNDOUBTED) for text in translate_texts(texts, translate, source_language))
    singular = {id(entry): next(done) for entry in todo}
    plural = {id(entry): next(done) for entry in todo if entry.msgid_plural}
    forms = plurals.singular_forms()
    for entry in todo:
        one, assessed = singular[id(entry)]
        one = _with_mnemonic(one, keys[id(entry)])
        reordered = _reordered(entry, entry.msgid, one)
        if entry.msgid_plural:
            many, plural_assessed = plural[id(entry)]
            many = _with_mnemonic(many, keys[id(entry)])
            reordered = reordered or _reordered(entry, entry.msgid_plural, many)
            assessed = assessed.worst(plural_assessed)
            entry.msgstr_plural = {i: one if takes_one else many for i, takes_one in enumerate(forms)}
        else:
            entry.msgstr = one
        copied = _copied(entry.msgid, one)
        if copied:  # the source came back as it was: a reader must look, whatever the model's confidence
            assessed = assessed.worst(TextConfidence(min(assessed.confidence, COPY_CEILING), (UNTRANSLATED,)))
            if fuzzy_below is None:
                entry.tcomment = _with_comment(entry.tcomment, UNTRANSLATED_COMMENT)
        if reordered:  # a program would format its arguments into the wrong slots: never final
            assessed = assessed.worst(TextConfidence(assessed.confidence, (REORDERED,)))
            if fuzzy_below is None:  # with --confidence the confidence comment below names the flag
                entry.tcomment = _with_comment(entry.tcomment, REORDERED_COMMENT)
        doubted = fuzzy_below is None or assessed.confidence < fuzzy_below or bool(assessed.flags)
        doubtful = (fuzzy or reordered or copied) and doubted
        if doubtful and FUZZY not in entry.flags:
            entry.flags.insert(0, FUZZY)  # first, as the gettext tools write it
        elif not doubtful and FUZZY in entry.flags:
            entry.flags.remove(FUZZY)
        if fuzzy_below is not None:
            entry.tcomment = _with_confidence_comment(entry.tcomment, assessed)
        if isinstance(translate, Sentences) and translate.terms is not None:
            applied = translate.terms(entry.msgid) + (translate.terms(entry.msgid_plural) if entry.msgid_plural else [])
            entry.tcomment = _with_glossary_comment(entry.tcomment, list(dict.fromkeys(applied)))
    metadata["Language"] = target_language
    metadata["Plural-Forms"] = plurals.header
    if todo:
        metadata["PO-Revision-Date"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M+0000")
        metadata["X-Generator"] = f"nmt {__version__}"
    content_type = metadata.get("Content-Type", "")
    if "charset=CHARSET" in content_type or not content_type:
        metadata["Content-Type"] = "text/plain; charset=UTF-8"
    metadata.setdefault("Content-Transfer-Encoding", "8bit")
    return _unwrapped_as_written(catalogue), len(todo)


UNTRANSLATED = "untranslated"  # the flag's name in quality/flag_names.py (formats sit below quality)
COPY_CEILING = 0.25  # quality/flag_names.py's: the most a copy of its source may be trusted
REORDERED = "placeholders-reordered"  # the flag of an entry whose conversions came back in another order
# printf conversions that take their argument by position in the list (no "%2$s"), as a c-format or
# python-format string has them: their order is the program's argument order.
_SEQUENTIAL = re.compile(
    r"%%|%(?!\d+\$)[-+ 0#']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|Z|t)?[diouxXeEfFgGaAcspn]|%<PRI\w+>|\{\}"
)
# In an entry no flag declares a format, conversions as xgettext's heuristic finds them: no space flag
# ("50% done" is prose), the usual conversions only.
_UNFLAGGED = re.compile(r"%%|%(?!\d+\$)[-+0#']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|z|j|t)?[diouxXeEfFgGcsp]")
_FORMAT_FLAGS = ("c-format", "python-format", "python-brace-format")
_MNEMONIC = re.compile(r"(?<![\w_])_(?=[^\W\d_])")


def _reordered(entry, source: str, target: str) -> bool:  # type: ignore[no-untyped-def]
    """Whether a format string's sequential conversions come back in another order, or changed (``%2.2f`` as
    ``%d.2f``): checked for every entry with printf-like conversions, as msgfmt checks what xgettext flags
    (real templates rarely carry the flag), except where a ``no-*-format`` flag says it is not a format."""
    if any(flag.startswith("no-") and flag.endswith("-format") for flag in entry.flags):
        return False
    pattern = _SEQUENTIAL if any(flag in entry.flags for flag in _FORMAT_FLAGS) else _UNFLAGGED
    wanted = [c for c in pattern.findall(source) if c != "%%"]
    found = [c for c in pattern.findall(target) if c != "%%"]
    return wanted != found


_WORD = re.compile(r"[^\W\d_]{2,}")


def _copied(source: str, target: str) -> bool:
    """Whether ``target`` is ``source`` unchanged while ``source`` has words to translate (letters outside its
    placeholders): a column heading copied as a name, a message the model gave back. A message that is nothing
    but tags ("<incomplete>") is text: its words count."""
    if " ".join(source.split()) != " ".join(target.split()):
        return False
    outside = PLACEHOLDER.sub(" ", source)
    return bool(_WORD.search(outside if outside.strip() else TEXT_PLACEHOLDER.sub(" ", source)))


def mnemonic(msgid: str) -> str | None:
    """The access key a msgid marks GTK's way ("_File": F), when it marks exactly one."""
    marks = list(_MNEMONIC.finditer(msgid))
    return msgid[marks[0].end()] if len(marks) == 1 else None


def _without_mnemonic(text: str, key: str | None) -> str:
    return _MNEMONIC.sub("", text, count=1) if key else text


def _with_mnemonic(text: str, key: str | None) -> str:
    """The translation with its access key marked: on a word starting with the same letter, else on its first letter."""
    if not key or "_" in text:
        return text
    starts = [m.start() for m in re.finditer(r"(?<!\w)[^\W\d_]", text)]
    same = [i for i in starts if text[i].lower() == key.lower()]
    if not starts:
        return text
    at = (same or starts)[0]
    return text[:at] + "_" + text[at:]


CONFIDENCE_COMMENT = "nmt confidence"  # how our translator comment starts; a later run replaces it


REORDERED_COMMENT = f"nmt flags: {REORDERED} (the conversions come in another order than the msgid's)"
UNTRANSLATED_COMMENT = f"nmt flags: {UNTRANSLATED} (the translation is the msgid as it was)"


def _with_confidence_comment(comment: str, assessed: TextConfidence) -> str:
    """The entry's translator comment with our line giving its confidence and flags (the translators' lines kept)."""
    flags = f"; flags: {', '.join(assessed.flags)}" if assessed.flags else ""
    return _with_comment(comment, f"{CONFIDENCE_COMMENT} {assessed.confidence:.2f}{flags}")


GLOSSARY_COMMENT = "nmt glossary:"  # how our line naming the glossary terms applied starts; a later run replaces it


def _with_glossary_comment(comment: str, applied: list[tuple[str, str]]) -> str:
    """The translator comment with our line naming the glossary terms the translation was made to use (an earlier
    one of ours replaced, the translators' lines kept; none applied: no line)."""
    kept = [old for old in comment.split("\n") if old and not old.startswith(GLOSSARY_COMMENT)] if comment else []
    if applied:
        kept.append(f"{GLOSSARY_COMMENT} " + "; ".join(f"{source} = {target}" for source, target in applied))
    return "\n".join(kept)


def _with_comment(comment: str, line: str) -> str:
    """The translator comment with our ``line`` (an earlier line of ours replaced, the translators' kept)."""
    ours = ("nmt confidence", "nmt flags")
    kept = [old for old in comment.split("\n") if old and not old.startswith(ours)] if comment else []
    return "\n".join([*kept, line])


def _unwrapped_as_written(catalogue) -> str:  # type: ignore[no-untyped-def]
    text = str(catalogue)
    return text if text.endswith("\n") else text + "\n"


# A typographic character's nearest form as a catalogue's strings write it (a quote escaped).
NEAREST_IN_PO = {char: form.replace('"', '\\"') for char, form in NEAREST.items()}


def with_utf8_charset(text: str) -> str:
    """A catalogue's text with its header declaring UTF-8 (what it is written in when its charset cannot hold
    the translation)."""
    return re.sub(r"(charset=)[A-Za-z0-9_.:-]+", r"\1UTF-8", text, count=1)


def declared_charset(data: bytes) -> str | None:
    """The charset a catalogue's header declares (``Content-Type: text/plain; charset=ISO-8859-1``)."""
    match = re.search(rb"charset=([A-Za-z0-9_.:-]+)", data[:4096])
    if not match or match.group(1).upper() == b"CHARSET":
        return None
    return match.group(1).decode("ascii")


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def translate_document(data: bytes, request: DocumentRequest) -> tuple[bytes, int]:
    """A catalogue's bytes translated, in the charset its header declares (UTF-8 where that cannot hold the
    translation)."""
    source = TextFile.decode(data, request.name, declared_charset)
    text, count = translate_po(
        source, request.translate, request.source_language, request.target_language, request.fuzzy,
        request.retranslate, request.fuzzy_below,
    )  # fmt: skip
    return source.encode(text, as_utf8=with_utf8_charset, nearest=NEAREST_IN_PO), count
