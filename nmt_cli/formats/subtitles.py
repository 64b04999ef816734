"""Subtitles (``.srt`` with the srt package, ``.vtt`` with webvtt-py): cue texts translated, nothing else.

Numbers, times, cue settings, identifiers, WebVTT's header, NOTE and STYLE blocks are kept; only the
text of each cue changes.

A sentence often runs over two or three cues ("I never thought that" / "we would see this place again."):
translated cue by cue, each half is nonsense. So consecutive cues are grouped until one ends a sentence
(at most ``MAX_CUES`` cues or ``MAX_WORDS`` words), the group is translated as one text, and its
translation is spread back over the same cues: each cue's text is an element of one markup fragment
(``markup.py``), so each cue gets the target words aligned to its own words, in order. A cue the
alignment leaves empty borrows a word from its neighbour. Formatting tags inside cues (``<i>``, ``<b>``,
``<font>``, WebVTT's ``<v Speaker>`` and ``<c.class>``) come back on their words.

Each cue is then wrapped to the file's line length (its longest source line, tags not counted), never
inside a tag.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from ..errors import NmtError
from .document import DocumentRequest, text_document
from .markup import translate_fragments
from .segments import Sentences, TranslateSentences, as_sentences

MAX_CUES = 4
MAX_WORDS = 80
DEFAULT_WIDTH = 42  # the usual broadcast limit, for a file whose lines give none
SENTENCE_END = re.compile(r"""[.!?…。！？♪]["'”’»)\]]*\s*$""")
TAG = re.compile(r"</?[A-Za-z][^<>]*>")
DASHES = ("-", "\u2013", "\u2014")
CUE = re.compile(r'<x-cue data-i="(\d+)">(.*?)</x-cue>', re.DOTALL)


def translate_srt(text: str, translate: TranslateSentences | Sentences, source_language: str, name: str) -> tuple[str, int]:
    """A SubRip file's cues translated (the module's docstring); returns it and how many cues there were."""
    try:
        import srt
    except ImportError:
        raise NmtError("subtitle files need the srt package: pip install 'nmt-cli[files]'") from None
    try:
        cues = list(srt.parse(text))
    except srt.SRTParseError as err:
        line = text[: err.expected_start].count("\n") + 1
        raise NmtError(f"{name}:{line}: not a SubRip cue (number, then 'start --> end', then text)") from None
    except srt.TimestampParseError as err:
        raise NmtError(f"{name}: a cue's time is not HH:MM:SS,mmm ({err})") from None
    for cue, translated in zip(cues, translate_cues([c.content for c in cues], translate, source_language)):
        cue.content = translated
    eol = "\r\n" if "\r\n" in text else "\n"
    return srt.compose(cues, reindex=False, strict=False, eol=eol), len(cues)


def translate_vtt(text: str, translate: TranslateSentences | Sentences, source_language: str, name: str) -> tuple[str, int]:
    """A WebVTT file's cues translated (the module's docstring); returns it and how many cues there were."""
    try:
        import webvtt
        from webvtt.errors import MalformedCaptionError, MalformedFileError
    except ImportError:
        raise NmtError("subtitle files need webvtt-py: pip install 'nmt-cli[files]'") from None
    try:
        document = webvtt.from_string(text)
    except (MalformedFileError, MalformedCaptionError) as err:
        raise NmtError(f"{name}: not a valid WebVTT file ({err}); it must start with 'WEBVTT'") from None
    cues = list(document.captions)
    _check_all_read(text, cues, name)
    for cue, translated in zip(cues, translate_cues([c.raw_text for c in cues], translate, source_language)):
        cue.lines = translated.split("\n")
    out = document.content
    return (out if out.endswith("\n") or not text.endswith("\n") else out + "\n"), len(cues)


_VTT_TIMING = re.compile(r"\s*(?:\d{2,}:)?[0-5]\d:[0-5]\d\.\d{3}\s+-->\s+(?:\d{2,}:)?[0-5]\d:[0-5]\d\.\d{3}(?:\s|$)")


def _check_all_read(text: str, cues: list, name: str) -> None:
    """webvtt-py skips a cue whose timing it cannot read; dropping it from the translation would lose it. Each
    block after the header that is not a NOTE, STYLE or REGION is a cue: its first line (or the one after its
    identifier) must be a timing, and the first that is not is refused at its line."""
    blocks: list[tuple[int, list[str]]] = []
    for number, line in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        if not line.strip():
            blocks.append((number + 1, []))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            blocks.append((number, [line]))
    cue_blocks = [
        (number, lines) for number, lines in blocks[1:] if lines and not lines[0].startswith(("NOTE", "STYLE", "REGION"))
    ]
    if len(cue_blocks) == len(cues) and all(_has_timing(lines) for _, lines in cue_blocks):
        return
    for number, lines in cue_blocks:
        if not _has_timing(lines):
            at = number + (1 if len(lines) > 1 and "-->" not in lines[0] else 0)
            break
    else:
        at = cue_blocks[0][0] if cue_blocks else 1
    raise NmtError(f"{name}:{at}: not a WebVTT cue timing (HH:MM:SS.mmm --> HH:MM:SS.mmm, hours optional)")


def _has_timing(lines: list[str]) -> bool:
    """Whether a cue block's first line, or the line after its identifier, is a timing."""
    identified = len(lines) > 1 and "-->" not in lines[0]  # an identifier never holds "-->"
    return bool(_VTT_TIMING.match(lines[1] if identified else lines[0]))


def translate_cues(texts: Sequence[str], translate: TranslateSentences | Sentences, language: str) -> list[str]:
    """Each cue's text translated, sentences that run over cues translated whole and spread back."""
    sentences = as_sentences(translate)
    width = _width(texts)
    # The units spread over: a cue's text, or each line of a dialogue cue ("- Hi." / "- Hello."), one speaker each.
    units = [(k, part) for k, text in enumerate(texts) for part in _speakers(text)]
    groups = _groups([part for _, part in units])
    fragments = [
        " ".join(f'<x-cue data-i="{u}">{_escaped(" ".join(units[u][1].split()))}</x-cue>' for u in group) for group in groups
    ]
    parts: list[str] = [part for _, part in units]
    for group, translated in zip(groups, translate_fragments(fragments, sentences, language)):
        pieces = {int(u): html.unescape(body).strip() for u, body in CUE.findall(translated)}
        for u, piece in zip(group, _filled([pieces.get(u, "") for u in group])):
            parts[u] = _wrap(piece, width) if units[u][1].strip() else units[u][1]
    out = [""] * len(texts)
    for (k, _), part in zip(units, parts):
        out[k] = f"{out[k]}\n{part}" if out[k] else part
    return [out[k] if texts[k].strip() else texts[k] for k in range(len(texts))]


def _speakers(text: str) -> list[str]:
    """A dialogue cue's lines (each starts with a dash), or the cue's text as one."""
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) > 1 and all(TAG.sub("", line).lstrip().startswith(DASHES) for line in lines):
        return lines
    return [text]


def _escaped(text: str) -> str:
    """Cue text as markup: its own tags kept, a bare '&' or '<' as the character it is."""
    out, at = [], 0
    for match in TAG.finditer(text):
        out.append(html.escape(text[at : match.start()], quote=False))
        out.append(match.group(0))
        at = match.end()
    out.append(html.escape(text[at:], quote=False))
    return "".join(out)


def _width(texts: Sequence[str]) -> int:
    lengths = [len(TAG.sub("", line)) for text in texts for line in text.split("\n") if line.strip()]
    return max(lengths, default=DEFAULT_WIDTH)


def _groups(texts: Sequence[str]) -> list[list[int]]:
    """Runs of consecutive cues that together end a sentence (bounded in cues and words)."""
    groups: list[list[int]] = []
    current: list[int] = []
    words = 0
    for k, text in enumerate(texts):
        plain = TAG.sub("", text).strip()
        if current and plain.startswith(DASHES):  # a new speaker
            groups.append(current)
            current, words = [], 0
        current.append(k)
        words += len(plain.split())
        if SENTENCE_END.search(plain) or len(current) >= MAX_CUES or words >= MAX_WORDS or not plain:
            groups.append(current)
            current, words = [], 0
    if current:
        groups.append(current)
    return groups


def _filled(pieces: list[str]) -> list[str]:
    """No cue left empty when its group has words to share: an empty one takes its neighbour's edge word."""
    for k, piece in enumerate(pieces):
        if piece:
            continue
        for neighbour, take_last in ((k - 1, True), (k + 1, False)):
            if 0 <= neighbour < len(pieces) and len(pieces[neighbour].split()) > 1:
                words = pieces[neighbour].split(" ")
                moved = words.pop() if take_last else words.pop(0)
                pieces[neighbour], pieces[k] = " ".join(words), moved
                break
    return pieces


def _wrap(text: str, width: int) -> str:
    """``text`` over lines of at most ``width`` visible characters (tags do not count; textwrap would count
    them), cut only at spaces outside tags; a word longer than a line gets a line of its own."""
    words = TAG.sub(lambda m: m.group(0).replace(" ", "\0"), text).split()
    lines: list[list[str]] = []
    used = 0
    for word in words:
        visible = len(TAG.sub("", word.replace("\0", " ")))
        if lines and used + 1 + visible <= width:
            lines[-1].append(word)
            used += 1 + visible
        else:
            lines.append([word])
            used = visible
    return "\n".join(" ".join(line).replace("\0", " ") for line in lines)


def translate_srt_document(data: bytes, request: DocumentRequest) -> tuple[bytes, int]:
    name = str(request.name)
    return text_document(data, request, lambda text: translate_srt(text, request.translate, request.source_language, name))


def translate_vtt_document(data: bytes, request: DocumentRequest) -> tuple[bytes, int]:
    name = str(request.name)
    return text_document(data, request, lambda text: translate_vtt(text, request.translate, request.source_language, name))
