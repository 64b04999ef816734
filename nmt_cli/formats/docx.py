"""Word documents (``.docx``, the ``docx`` extra: python-docx): paragraph text translated, runs kept.

Every paragraph of the body, its tables (nested ones too), text boxes, headers and footers is translated
as one text. Word keeps a paragraph's formatting in *runs* (bold from here to there, a font, a colour);
each run becomes an element of a markup fragment (``markup.py``), so after translation each run holds
the target words aligned to its own words and keeps its formatting. Neighbouring runs with the same
formatting (Word splits runs for spell-checking and revision marks) are read as one. Runs without text
(pictures, fields, tabs) stay where they were, beside their neighbour word. Nothing else in the file
changes, except that the document's language property says the target language.
"""

from __future__ import annotations

import html
import io
import re
import zipfile

from ..errors import NmtError, reason
from .document import DocumentRequest
from .markup import translate_fragments
from .segments import Sentences, TranslateSentences, as_sentences
from .unpack import UnpackLimits, check_zip

PIECE = re.compile(r'<r data-i="(\d+)">(.*?)</r>|<x-run data-i="(\d+)"/>', re.DOTALL)
# Runs directly in a paragraph, or inside the wrappers Word puts around some (links, revisions, smart tags).
RUNS = "./w:r | ./w:hyperlink/w:r | ./w:ins/w:r | ./w:smartTag/w:r | ./w:fldSimple/w:r"


def translate_docx(
    data: bytes,
    translate: TranslateSentences | Sentences,
    source_language: str,
    target_language: str,
    name: str,
    limits: UnpackLimits = UnpackLimits(),
) -> tuple[bytes, int]:
    """A .docx file's bytes translated (the module's docstring); returns its bytes and how many paragraphs.
    What the archive declares is checked against ``limits`` before any part is unpacked."""
    try:
        import docx
        from docx.oxml.ns import qn
    except ImportError:
        raise NmtError(f"{name}: Word documents need python-docx: pip install 'nmt-cli[docx]'") from None
    check_zip(data, name, limits, "Word (.docx) document")
    try:
        document = docx.Document(io.BytesIO(data))
    except (zipfile.BadZipFile, KeyError, ValueError) as err:
        raise NmtError(
            f"{name}: not a Word (.docx) document ({reason(err)}); save it as .docx, Word 2007 or later"
        ) from None
    paragraphs = []
    for part in _parts(document):
        for paragraph in part.iter(qn("w:p")):
            groups = _run_groups(paragraph, qn)
            if any(_text(group[0], qn).strip() for group in groups if group):
                paragraphs.append(groups)
    fragments = [_fragment(groups, qn) for groups in paragraphs]
    translated = translate_fragments(fragments, as_sentences(translate), source_language)
    for groups, fragment in zip(paragraphs, translated):
        order, texts = _read_back(fragment, ["".join(_text(run, qn) for run in group) for group in groups])
        for k, text in texts.items():
            _set_text(groups[k], text, qn)
        _reorder(groups, order)
    document.core_properties.language = target_language
    out = io.BytesIO()
    document.save(out)
    return out.getvalue(), len(paragraphs)


def _parts(document):
    """The XML trees with paragraphs: the body, and each section's headers and footers."""
    yield document.element.body
    seen = set()
    for section in document.sections:
        for part in (
            section.header,
            section.footer,
            section.first_page_header,
            section.first_page_footer,
            section.even_page_header,
            section.even_page_footer,
        ):
            if not part.is_linked_to_previous and id(part._element) not in seen:
                seen.add(id(part._element))
                yield part._element


def _run_groups(paragraph, qn) -> list[list]:
    """The paragraph's runs, neighbours with the same formatting together (one text for the model)."""
    groups: list[list] = []
    last_format = None
    for run in paragraph.xpath(RUNS):
        properties = run.find(qn("w:rPr"))
        formatting = properties.xml if properties is not None else ""
        has_text = run.find(qn("w:t")) is not None
        if groups and has_text and formatting == last_format and groups[-1][0].getparent() is run.getparent():
            groups[-1].append(run)
            continue
        groups.append([run])
        last_format = formatting if has_text else None
    return groups


def _text(run, qn) -> str:
    return "".join(t.text or "" for t in run.iter(qn("w:t")))


def _fragment(groups: list[list], qn) -> str:
    """A paragraph as markup: each run group an element around its text, a run without text a lone tag."""
    pieces = []
    for k, group in enumerate(groups):
        text = "".join(_text(run, qn) for run in group)
        if text:
            pieces.append(f'<r data-i="{k}">{html.escape(text, quote=False)}</r>')
        else:
            pieces.append(f'<x-run data-i="{k}"/>')
    return "".join(pieces)


def _read_back(fragment: str, sources: list[str]) -> tuple[list[int], dict[int, str]]:
    """The run groups in the translation's order, and each text group's new text. Text between two runs
    (spaces, punctuation the tags left outside) goes to the run after it when that run's source text
    started with a space, else to the run before it."""
    order: list[int] = []
    texts: dict[int, str] = {}
    at, last, pending = 0, None, ""
    for match in PIECE.finditer(fragment):
        pending += html.unescape(fragment[at : match.start()])
        k = int(match.group(1) or match.group(3))
        order.append(k)
        if match.group(1) is not None:
            body = html.unescape(match.group(2))
            if last is None or sources[k][:1].isspace():
                texts[k] = pending + body
            else:
                texts[last] += pending
                texts[k] = body
            pending, last = "", k
        at = match.end()
    if last is not None:
        texts[last] += pending + html.unescape(fragment[at:])
    return order, texts


def _reorder(groups: list[list], order: list[int]) -> None:
    """The runs moved into the translation's order, when they are all children of one paragraph (runs in
    links or revisions stay where they are)."""
    runs = [run for k in dict.fromkeys(order) for run in groups[k]]
    if not runs or order == sorted(order):
        return
    parent = runs[0].getparent()
    if parent is None or any(run.getparent() is not parent for run in runs):
        return
    # the runs go where the first of them stands in the document: after the element before it, never one of them
    anchor = min(runs, key=parent.index).getprevious()
    for run in runs:
        parent.remove(run)
    position = parent.index(anchor) + 1 if anchor is not None else _first_run_position(parent)
    for offset, run in enumerate(runs):
        parent.insert(position + offset, run)


def _first_run_position(paragraph) -> int:
    """Where a paragraph's content starts: after its properties (``w:pPr`` must stay first)."""
    first = paragraph[0] if len(paragraph) else None
    return 1 if first is not None and first.tag.endswith("}pPr") else 0


def _set_text(group: list, text: str, qn) -> None:
    """A run group's text replaced: the first run's first ``w:t`` holds it, the group's other text is cleared."""
    first = True
    for run in group:
        for t in run.findall(qn("w:t")):
            if first:
                t.text = text
                t.set("{http://www.w3.org/XML/1998/namespace}space", "preserve")
                first = False
            else:
                run.remove(t)


def translate_document(data: bytes, request: DocumentRequest) -> tuple[bytes, int]:
    return translate_docx(
        data, request.translate, request.source_language, request.target_language, str(request.name), request.limits
    )
