"""Subtitles (``formats/subtitles.py``): cue texts translated, times and everything else kept; a sentence
that runs over cues is translated whole and spread back over the same cues."""

from __future__ import annotations

from pathlib import Path

import pytest

srt = pytest.importorskip("srt", reason="srt is in the files extra")
webvtt = pytest.importorskip("webvtt", reason="webvtt-py is in the files extra")

from nmt_cli.errors import NmtError  # noqa: E402
from nmt_cli.formats import translate_bytes  # noqa: E402
from nmt_cli.formats.segments import Sentences  # noqa: E402

SRT = """1
00:00:01,000 --> 00:00:04,000
I never thought that

2
00:00:04,500 --> 00:00:06,250
we would see <i>this place</i> again.

3
00:01:07,000 --> 00:01:09,000
- Tom & Jerry?
- Yes.

"""

VTT = """WEBVTT Kind: captions

NOTE kept as it is

STYLE
::cue { color: red }

intro
00:00:01.000 --> 00:00:04.000 position:10% align:start
<v Roger>Hello there, this is

00:00:04.500 --> 00:00:06.000
a sentence over two cues.
"""


def upper(sentences: list[str]) -> list[str]:
    return [s.upper() for s in sentences]


def test_cue_numbers_and_times_are_kept_and_a_sentence_over_cues_is_translated_whole():
    calls: list[list[str]] = []

    def translate(sentences: list[str]) -> list[str]:
        calls.append(sentences)
        return upper(sentences)

    out, count = translate_bytes(SRT.encode(), Path("a.srt"), translate, "en", "de")
    assert count == 3
    assert calls == [["I never thought that we would see this place again.", "- Tom & Jerry?", "- Yes."]]
    source, target = list(srt.parse(SRT)), list(srt.parse(out.decode()))
    assert [(c.index, c.start, c.end) for c in source] == [(c.index, c.start, c.end) for c in target]
    assert [c.content for c in target] == [
        "I NEVER THOUGHT THAT",
        "WE WOULD SEE <i>THIS PLACE</i> AGAIN.",
        "- TOM & JERRY?\n- YES.",
    ]


def test_cues_get_the_words_aligned_to_their_own_and_are_wrapped_to_the_files_width():
    text = "1\n00:00:01,000 --> 00:00:02,000\nthe red\n\n2\n00:00:02,000 --> 00:00:03,000\ncar is here.\n\n"

    def align(sentences: list[str]):
        assert sentences == ["the red car is here."]
        # "das Auto ist hier, das rote": the cue 'the red' gets its aligned words wherever they are in order
        return [
            (
                "das rote Auto ist hier angekommen und wartet",
                [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (4, 5), (4, 6), (4, 7)],
            )
        ]

    out, _ = translate_bytes(text.encode(), Path("b.srt"), Sentences(lambda xs: [], align), "en", "de")
    cues = list(srt.parse(out.decode()))
    assert cues[0].content == "das rote"
    assert all(len(line) <= len("car is here.") or " " not in line for line in cues[1].content.split("\n"))
    assert " ".join(cues[1].content.split()) == "Auto ist hier angekommen und wartet"


def test_webvtt_keeps_its_header_notes_styles_settings_and_identifiers_in_utf16_with_crlf():
    data = b"\xff\xfe" + VTT.replace("\n", "\r\n").encode("utf-16-le")
    out, count = translate_bytes(data, Path("a.vtt"), upper, "en", "de")
    assert count == 2 and out.startswith(b"\xff\xfe")
    text = out[2:].decode("utf-16-le")
    assert "\r\n" in text and "\n" not in text.replace("\r\n", "")
    text = text.replace("\r\n", "\n")
    for kept in (
        "WEBVTT Kind: captions\n",
        "NOTE kept as it is\n",
        "::cue { color: red }\n",
        "intro\n00:00:01.000 --> 00:00:04.000 position:10% align:start\n<v Roger>",
    ):
        assert kept in text, kept
    assert "HELLO THERE, THIS IS" in text and "A SENTENCE OVER TWO CUES." in text


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("bad.srt", "1\nnot a time\nhello\n", "bad.srt:1:"),
        ("bad.vtt", "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nok\n\n00:01.000 --> soon\nhi\n", "bad.vtt:6:"),
        ("bad.vtt", "not a header\n", "bad.vtt: not a valid WebVTT file"),
    ],
)
def test_a_malformed_subtitle_file_is_one_line_naming_where(name, text, where):
    with pytest.raises(NmtError, match=where):
        translate_bytes(text.encode(), Path(name), upper, "en", "de")


@pytest.mark.parametrize(
    "text, line",
    [
        # a timing with no arrow: webvtt-py drops the cue without a word
        ("WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nA.\n\n2\n00:00:03.000 - 00:00:04.000\nB.\n", 7),
        # a comma (SubRip's) in the second of three cues: reported there, not at the first
        (
            "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nA.\n\n00:00:03,000 --> 00:00:04.000\nB.\n\n"
            "00:05.000 --> 00:06.000\nC.\n",
            6,
        ),
    ],
)
def test_a_webvtt_cue_with_a_broken_timing_is_refused_at_its_line(text, line):
    with pytest.raises(NmtError, match=rf"^bad\.vtt:{line}: not a WebVTT cue timing"):
        translate_bytes(text.encode(), Path("bad.vtt"), lambda s: s, "en", "de")


def test_cues_without_hours_identifiers_and_notes_are_read_whole():
    text = "WEBVTT\n\nNOTE hello\n\nid-1\n00:01.000 --> 00:02.000 align:start\nA dog.\n\n00:03.000 --> 00:04.000\nA cat.\n"
    out, count = translate_bytes(text.encode(), Path("ok.vtt"), lambda s: [x.upper() for x in s], "en", "de")
    assert count == 2 and "A DOG." in out.decode() and "A CAT." in out.decode() and "id-1" in out.decode()
