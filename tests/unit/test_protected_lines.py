"""Plain lines keep their paths, URLs, numbers and names: a line whose translation lost one is translated again
with them masked, so the engine never reads them then (decode/protected.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pytest

from nmt_cli.decode.protected import ProtectedEngine
from nmt_cli.decode.translation import Translation, TranslationStats
from nmt_cli.formats.protect import mask_line

LINES = {
    "Cannot open file /etc/passwd": ["/etc/passwd"],
    "Download https://example.org/a.tar.gz and run ./configure --prefix=/usr/local": [
        "https://example.org/a.tar.gz",
        "./configure",
        "--prefix=/usr/local",
    ],
    "Found 3 errors in 1,024 files since 2019.": ["3", "1,024", "2019"],
    "Write to admin@example.com about X.509 certificates.": ["admin@example.com", "X.509"],
    "A dog runs in the park.": [],
}


class Garbling:
    """An engine that mangles every word it reads and loses the last mask of a line, as a weak model may."""

    def __init__(self, terms=None) -> None:
        self.read: list[str] = []
        self.config = None
        self.stats = TranslationStats()
        self.languages, self.max_positions, self.terms, self.context_sentences = ("en", "de"), 64, terms, 0

    def new_document(self) -> None:
        pass

    def translate(
        self,
        lines: Iterable[str],
        prefixes: Iterable[str] | None = None,
        first_line: int = 0,
        documents: Iterable[str] | None = None,
    ) -> Iterator[list[Translation]]:
        for line in lines:
            self.read.append(line)
            self.stats.sentences += 1
            words = [w if w.startswith("%") else w[::-1] + "x" for w in line.split()]
            masks = [i for i, w in enumerate(words) if w.startswith("%")]
            if len(masks) > 1:
                del words[masks[-1]]
            yield [Translation(" ".join(words), -1.0), Translation(" ".join(reversed(words)), -2.0)]


def test_spans_come_back_byte_for_byte_whatever_the_model_does():
    """The garbling engine loses spans: each such line goes again masked (the engine never sees its spans then),
    and every hypothesis of its n-best list has each span back as often as the line has it."""
    inner = Garbling()
    engine = ProtectedEngine(inner)
    outputs = list(engine.translate(iter(LINES)))
    assert len(outputs) == len(LINES)
    spanned = [line for line, spans in LINES.items() if spans]
    assert inner.read[: len(LINES)] == list(LINES)  # first as written
    masked_reads = inner.read[len(LINES) :]
    assert len(masked_reads) == len(spanned)  # then again, masked, only the lines that have spans
    for (line, spans), hyps in zip(LINES.items(), outputs):
        for span in spans:
            assert not any(span in read for read in masked_reads)
            for hyp in hyps:
                assert hyp.text.count(span) == line.count(span), (span, hyp.text)
    assert inner.stats.sentences == len(LINES)  # a line translated again is counted once


class Copying(Garbling):
    """An engine that keeps every word but the first (a model that handles codes well)."""

    def translate(self, lines, prefixes=None, first_line=0, documents=None):
        for line in lines:
            self.read.append(line)
            words = line.split()
            yield [Translation(" ".join([words[0].upper(), *words[1:]]), -1.0)]


def test_a_line_whose_translation_keeps_its_spans_is_read_once_as_written():
    inner = Copying()
    outputs = list(ProtectedEngine(inner).translate(list(LINES)))
    assert inner.read == list(LINES)
    assert [hyps[0].text for hyps in outputs] == [f"{line.split()[0].upper()} {line.split(' ', 1)[1]}" for line in LINES]


def test_a_stream_is_read_as_the_engine_asks_for_it():
    inner = Garbling()
    inner.chunk_lines = 1  # the lines an engine reads before it translates
    engine = ProtectedEngine(inner)
    results = engine.translate(iter(["See /tmp/a.", "See /tmp/b."]))
    first = next(results)
    assert inner.read == ["See /tmp/a.", "See %s."] and "/tmp/a" in first[0].text
    assert "/tmp/b" in next(results)[0].text


def test_what_it_reports_is_the_engines():
    inner = Garbling()
    engine = ProtectedEngine(inner)
    assert engine.config is inner.config and engine.languages == ("en", "de") and engine.max_positions == 64
    list(engine.translate(["See /tmp/a."]))  # read twice (garbled, then masked), counted once
    assert engine.stats is inner.stats and engine.stats.sentences == 1


@pytest.mark.parametrize("line", ["Name:\tValue", "a  b\tc"])
def test_a_mask_never_holds_a_space_so_word_positions_stay(line):
    masked = mask_line(line + " /etc/hosts 42")
    assert len(masked.text.split()) == len((line + " /etc/hosts 42").split())


@pytest.mark.parametrize("line", ["twenty five past %0", "at 100%1 now"])
def test_a_number_right_after_a_percent_sign_is_never_masked_apart_from_it(line):
    masked = mask_line(line)
    assert "%%" not in masked.text
    assert masked.restore(masked.text) == line


def test_a_line_with_more_spans_than_printf_masks_masks_them_all():
    line = " ".join(f"/srv/{i}" for i in range(300))
    masked = mask_line(line)
    assert len(masked.originals) == 300 and "/srv/" not in masked.text
    assert masked.restore(masked.text) == line
