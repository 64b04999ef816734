"""Lines that carry nothing, or far too much, reach no assertion: every output format and every option that
changes the decoding path (confidence, n-best, alignments, markup, documents) gets empty, blank,
whitespace-only and 1,000-token lines among ordinary ones, and answers one output per input line."""

from __future__ import annotations

import json

import pytest
from conftest import nmt_in_process

HOSTILE = ["", " ", "\t \t", "   ", " ".join(["word"] * 1000)]


def lines_of(src: list[str]) -> list[str]:
    return [src[0], *HOSTILE[:2], src[1], *HOSTILE[2:], src[2]]


# Every output format with every option that changes the decoding path, and the three together in each format.
CASES = [
    ("text", []),
    ("text", ["--confidence"]),
    ("text", ["--alignments"]),
    ("text", ["--nbest", "2", "--beam", "2", "--confidence", "--alignments"]),
    ("jsonl", ["--confidence"]),
    ("jsonl", ["--nbest", "2", "--beam", "2", "--confidence", "--alignments"]),
    ("tsv", ["--alignments"]),
    ("tsv", ["--nbest", "2", "--beam", "2", "--confidence", "--alignments"]),
]


@pytest.mark.parametrize(
    ("output_format", "options"), CASES, ids=lambda case: " ".join(case) if isinstance(case, list) else case
)
def test_every_format_and_option_answers_each_line(overfit, output_format, options, tmp_path):
    run, src, _ = overfit
    lines = lines_of(src)
    out = tmp_path / "out.txt"
    result = nmt_in_process(
        "translate", "-m", str(run), "--format", output_format, *options, "-o", str(out), stdin="\n".join(lines) + "\n"
    )
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "out.txt.partial").exists()
    written = out.read_text(encoding="utf-8").splitlines()
    nbest = 2 if "--nbest" in options else 1
    if output_format == "jsonl":
        records = [json.loads(line) for line in written]
        assert sorted({r["line"] for r in records}) == list(range(len(lines)))
        for r in records:
            if not lines[r["line"]].strip():
                assert r["translation"] == ""
                if "--confidence" in options:
                    assert r["confidence"] == 1.0 and r["flags"] == []
    elif output_format == "tsv":
        assert sorted({int(row.split("\t")[0]) for row in written}) == list(range(len(lines)))
    elif nbest == 1:
        assert len(written) == len(lines)
        for line, output in zip(lines, written):
            if not line.strip():
                assert output.split("\t")[0] == ""
    else:
        assert sorted({int(row.split("\t")[0]) for row in written}) == list(range(len(lines)))


@pytest.mark.parametrize("options", [["--markup"], ["--markup", "--keep-tags", "b"]])
def test_markup_lines_that_are_blank_or_only_tags(overfit, options):
    run, src, _ = overfit
    lines = ["", "  ", "<b></b>", "<br/>", f"<b>{src[0]}</b>", " ".join(["<i>word</i>"] * 300)]
    result = nmt_in_process("translate", "-m", str(run), *options, stdin="\n".join(lines) + "\n")
    assert result.returncode == 0, result.stderr
    written = result.stdout.splitlines()
    assert len(written) == len(lines)
    assert written[0].split("\t")[0] == "" and written[2].startswith("<b></b>") and written[3].startswith("<br/>")


@pytest.mark.parametrize("suffix", [".txt", ".md", ".html", ".srt"])
def test_documents_of_blank_lines_and_one_huge_line(overfit, tmp_path, suffix):
    pytest.importorskip("markdown_it")
    run, src, _ = overfit
    body = {
        ".txt": f"\n\n   \n{src[0]}\n\n{' '.join(['word'] * 1000)}\n",
        ".md": f"\n\n   \n# {src[0]}\n\n{' '.join(['word'] * 1000)}\n",
        ".html": f"<html><body><p> </p><p></p><p>{src[0]}</p><p>{' '.join(['word'] * 1000)}</p></body></html>\n",
        ".srt": f"1\n00:00:01,000 --> 00:00:02,000\n{src[0]}\n\n2\n00:00:03,000 --> 00:00:04,000\n \n\n",
    }[suffix]
    source = tmp_path / f"doc{suffix}"
    source.write_text(body, encoding="utf-8")
    out = tmp_path / f"out{suffix}"
    result = nmt_in_process("translate", "-m", str(run), "-i", str(source), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert out.is_file() and source.read_text(encoding="utf-8") == body
