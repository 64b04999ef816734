"""``nmt translate --markup``: tagged lines through a real model keep every tag, on the aligned words.

The tiny model has memorised 64 Multi30k pairs; tagged lines are built from those sentences. The text
a tagged line comes back with must be exactly the translation of its plain sentence (tags cost nothing
in what the model reads), and every line must have the source's tag tree.
"""

from __future__ import annotations

import pytest
from conftest import nmt_in_process

from nmt_cli.formats.markup import strip
from nmt_cli.formats.markup_tree import tag_tree


def tagged(sentence: str, k: int) -> str:
    """A sentence with markup of the kinds real tagged text has, varied by ``k``."""
    words = sentence.split()
    if len(words) < 4:
        return f"<b>{sentence}</b>"
    shapes = [
        lambda w: f"<b>{w[0]}</b> " + " ".join(w[1:]),
        lambda w: " ".join(w[:2]) + f' <a href="/x?a=1&amp;b=2">{" ".join(w[2:4])}</a> ' + " ".join(w[4:]),
        lambda w: f'<span class="x">{" ".join(w[:3])} <i>{w[3]}</i></span> ' + " ".join(w[4:]),
        lambda w: " ".join(w[:2]) + "<br/>" + " ".join(w[2:]),
        lambda w: f"<p>{' '.join(w[:-1])} <em>{w[-1]}</em></p>",
    ]
    return shapes[k % len(shapes)](words)


@pytest.fixture(scope="module")
def plain(overfit):
    run, src, _ = overfit
    result = nmt_in_process("translate", "-m", str(run), stdin="\n".join(src[:20]) + "\n")
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_tagged_lines_keep_their_tags_and_the_plain_translation(overfit, plain, tmp_path):
    run, src, _ = overfit
    lines = [tagged(sentence, k) for k, sentence in enumerate(src[:20])]
    source = tmp_path / "tagged.en"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = tmp_path / "tagged.de"
    result = nmt_in_process("translate", "-m", str(run), "-i", str(source), "-o", str(output), "--markup")
    assert result.returncode == 0, result.stderr
    out = output.read_text(encoding="utf-8").splitlines()
    assert len(out) == len(lines)
    for line, translated, expected in zip(lines, out, plain):
        assert tag_tree(translated) == tag_tree(line), (line, translated)
        assert strip(translated).split() == expected.split(), (line, translated)
    # from stdin too, the same lines
    piped = nmt_in_process("translate", "-m", str(run), "--markup", stdin="\n".join(lines) + "\n")
    assert piped.returncode == 0 and piped.stdout.splitlines() == out


def test_markup_refuses_what_it_cannot_mean(overfit):
    run = str(overfit[0])
    for flag in (["--nbest", "2", "--beam", "2"], ["--alignments"]):
        result = nmt_in_process("translate", "-m", run, "--markup", *flag, stdin="<b>x</b>\n")
        assert result.returncode == 1 and "--markup" in result.stderr and "Traceback" not in result.stderr


def test_an_html_page_comes_back_with_its_markup_and_each_block_translated(overfit, plain, tmp_path):
    run, src, _ = overfit
    blocks = [tagged(sentence, k) for k, sentence in enumerate(src[:6])]
    page = (
        '<!DOCTYPE html>\n<html lang="en">\n<head><title>x</title><script>var keep = "as is";</script></head>\n'
        "<body>\n" + "\n".join(f"<p>{block}</p>" for block in blocks) + "\n<pre>keep this</pre>\n</body></html>\n"
    )
    source = tmp_path / "page.html"
    source.write_text(page, encoding="utf-8")
    output = tmp_path / "page.de.html"
    result = nmt_in_process("translate", "-m", str(run), "-i", str(source), "-o", str(output))
    assert result.returncode == 0, result.stderr
    out = output.read_text(encoding="utf-8")
    assert '<html lang="de">' in out and 'var keep = "as is";' in out and "<pre>keep this</pre>" in out
    assert tag_tree(out) == tag_tree(page.replace('lang="en"', 'lang="de"').replace("<title>x</title>", "<title></title>"))
    paragraphs = [line for line in out.splitlines() if line.startswith("<p>")]
    for paragraph, expected in zip(paragraphs, plain[:6]):
        assert strip(paragraph).split() == expected.split()


def test_keep_tags_keeps_the_named_elements_as_written(overfit, tmp_path):
    run, src, _ = overfit
    line = f"<keyword>{src[0]}</keyword> and <b>{src[1]}</b>"
    kept = nmt_in_process("translate", "-m", str(run), "--markup", "--keep-tags", "keyword", stdin=line + "\n")
    assert kept.returncode == 0, kept.stderr
    assert f"<keyword>{src[0]}</keyword>" in kept.stdout and "<b>" in kept.stdout
    page = tmp_path / "page.html"
    page.write_text(f"<html><body><p><keyword>{src[0]}</keyword> {src[1]}</p></body></html>\n", encoding="utf-8")
    out = tmp_path / "out.html"
    done = nmt_in_process("translate", "-m", str(run), "-i", str(page), "-o", str(out), "--keep-tags", "keyword")
    assert done.returncode == 0, done.stderr
    assert f"<keyword>{src[0]}</keyword>" in out.read_text(encoding="utf-8")
    bad = nmt_in_process("translate", "-m", str(run), "--markup", "--keep-tags", "a b", stdin="x\n")
    assert bad.returncode != 0 and "--keep-tags: 'a b' is not an element name" in bad.stderr
