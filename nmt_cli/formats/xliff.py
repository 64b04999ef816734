"""XLIFF 1.2 and 2.x (``.xlf``, ``.xliff``): each source segment translated into its target, inline codes kept.

Read and written with lxml, with a parser that never loads a DTD, resolves an entity or touches the
network (an XLIFF file comes from outside). What changes:

- XLIFF 1.2: every ``<trans-unit>`` whose ``<target>`` is missing or empty gets one (``retranslate``: every
  unit), with ``state="needs-review-translation"`` and ``state-qualifier="mt-suggestion"`` (``fuzzy=False``:
  ``state="translated"``); ``<file target-language>`` is set.
- XLIFF 2.x: every ``<segment>`` likewise, with ``state="initial"`` (``fuzzy=False``: ``"translated"``); the
  root's ``trgLang`` is set.
- Units under ``translate="no"`` are left alone; so is everything else in the file (notes, groups,
  skeletons, attributes, comments).

Inline codes are markup of the segment (``markup.py``): ``<g>``, ``<mrk>``, ``<pc>`` wrap the target words
aligned to the words they wrapped; ``<x/>``, ``<bx/>``, ``<ex/>``, ``<ph/>``, ``<sc/>``, ``<ec/>`` stay beside
their neighbour word; the native code inside ``<ph>``, ``<bpt>``, ``<ept>``, ``<it>`` is kept as written.
"""

from __future__ import annotations

from ..errors import NmtError
from .document import DocumentRequest
from .markup import translate_fragments
from .segments import Sentences, TranslateSentences, as_sentences

V1 = "urn:oasis:names:tc:xliff:document:1.2"
V2 = "urn:oasis:names:tc:xliff:document:2.0"
NATIVE_CODE = frozenset({"ph", "bpt", "ept", "it"})  # 1.2 elements whose content is the document's own code


def _lxml():
    try:
        from lxml import etree
    except ImportError:
        raise NmtError("XLIFF files need lxml: pip install 'nmt-cli[files]'") from None
    return etree


def translate_xliff(
    data: bytes,
    translate: TranslateSentences | Sentences,
    source_language: str,
    target_language: str,
    name: str,
    fuzzy: bool = True,
    retranslate: bool = False,
    keep_tags: frozenset[str] = frozenset(),
) -> tuple[bytes, int]:
    """An XLIFF file's bytes translated (the module's docstring); returns its bytes and how many segments."""
    etree = _lxml()
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, remove_blank_text=False)
    try:
        tree = etree.fromstring(data, parser).getroottree()
    except etree.XMLSyntaxError as err:
        raise NmtError(f"{name}:{err.lineno}: not well-formed XML ({err.msg}); an XLIFF file is XML") from None
    root = tree.getroot()
    namespace = etree.QName(root).namespace
    if etree.QName(root).localname != "xliff" or namespace not in (V1, V2):
        raise NmtError(f"{name}: not an XLIFF 1.2 or 2.x document (its root is <{etree.QName(root).localname}>)")
    pairs = list(_segments(root, namespace, retranslate))
    fragments = [_inner(etree, source) for source, _ in pairs]
    translated = translate_fragments(
        fragments,
        as_sentences(translate),
        source_language,
        xml=True,
        is_opaque=lambda tag, _attrs: tag in keep_tags,
        hidden=NATIVE_CODE,
    )
    for (source, target), fragment in zip(pairs, translated):
        target = target if target is not None else _new_target(etree, source)
        _fill(etree, target, fragment, namespace)
        _mark(target if namespace == V1 else target.getparent(), namespace, fuzzy)
    if namespace == V1:
        for file in root.iter(f"{{{V1}}}file"):
            file.set("target-language", target_language)
    else:
        root.set("trgLang", target_language)
    docinfo = tree.docinfo
    out = etree.tostring(tree, xml_declaration=False, encoding=docinfo.encoding or "UTF-8")
    if data.startswith(b"<?xml"):  # the declaration as the source wrote it (lxml would change its quotes)
        end = data.index(b"?>") + 2
        out = data[:end] + data[end : len(data) - len(data[end:].lstrip())] + out
    if b"\r\n" in data[:4096] or "\r\n".encode(docinfo.encoding or "utf-8") in data:
        encoding = docinfo.encoding or "utf-8"
        out = out.decode(encoding).replace("\r\n", "\n").replace("\n", "\r\n").encode(encoding)
    if data.endswith(b"\n") and not out.endswith(b"\n"):
        out += b"\r\n" if b"\r\n" in data else b"\n"
    return out, len(pairs)


def _segments(root, namespace: str, retranslate: bool):
    """(source, target or None) of every segment to translate, in document order."""
    unit_name = f"{{{namespace}}}trans-unit" if namespace == V1 else f"{{{namespace}}}segment"
    for unit in root.iter(unit_name):
        if _untranslatable(unit):
            continue
        source, target = unit.find(f"{{{namespace}}}source"), unit.find(f"{{{namespace}}}target")
        if source is None or not "".join(source.itertext()).strip():
            continue
        if target is not None and "".join(target.itertext()).strip() and not retranslate:
            continue
        yield source, target


def _untranslatable(element) -> bool:
    """``translate="no"`` on the element or any of its ancestors (1.2 and 2.x both inherit it)."""
    while element is not None:
        if (element.get("translate") or "").lower() == "no":
            return True
        element = element.getparent()
    return False


def _inner(etree, element) -> str:
    """An element's content (text and inline codes) as an XML fragment, without its own tags."""
    whole = etree.tostring(element, encoding="unicode", with_tail=False)
    start = whole.index(">") + 1
    if whole.endswith("/>") and start == len(whole):
        return ""
    return whole[start : whole.rindex("</")]


def _new_target(etree, source):
    """A ``<target>`` right after ``source``, indented like it."""
    target = etree.Element(etree.QName(source).text.replace("source", "target"))
    before = source.getprevious().tail if source.getprevious() is not None else source.getparent().text
    source.addnext(target)
    target.tail = source.tail
    source.tail = before if before is not None and not before.strip() else source.tail
    return target


def _fill(etree, target, fragment: str, namespace: str) -> None:
    """``target``'s content replaced by ``fragment`` (text and inline codes)."""
    tail = target.tail
    for child in list(target):
        target.remove(child)
    try:
        parsed = etree.fromstring(f'<target xmlns="{namespace}">{fragment}</target>')
    except etree.XMLSyntaxError:  # cannot happen for well-formed input; never write a broken target
        target.text = "".join(etree.fromstring(f"<t>{fragment}</t>", etree.HTMLParser()).itertext())
        return
    target.text = parsed.text
    for child in parsed:
        target.append(child)
    target.tail = tail


def _mark(element, namespace: str, fuzzy: bool) -> None:
    """The state of a machine translation: for review unless ``fuzzy`` is off."""
    if namespace == V1:
        element.set("state", "needs-review-translation" if fuzzy else "translated")
        if fuzzy:
            element.set("state-qualifier", "mt-suggestion")
    else:
        element.set("state", "initial" if fuzzy else "translated")


def translate_document(data: bytes, request: DocumentRequest) -> tuple[bytes, int]:
    return translate_xliff(
        data, request.translate, request.source_language, request.target_language, str(request.name),
        request.fuzzy, request.retranslate, request.keep_tags,
    )  # fmt: skip
