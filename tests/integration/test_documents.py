"""Documents end to end on real manual pages: a model that reads context (concatenation, recurrence) trains on
documents, translates them with --docids or blank lines, and scores pairs in and out of context."""

from __future__ import annotations

import gzip
import itertools
import json
import re
from pathlib import Path

import pytest
from conftest import DATA, need, tiny_recipe_yaml
from typer.testing import CliRunner

from nmt_cli.cli import app
from nmt_cli.config import load_recipe
from nmt_cli.data.prepare import prepare
from nmt_cli.train.loop import train

MANPAGES = DATA / "manpages"
runner = CliRunner()
TEST_START = 50  # the test paragraphs taken: the end of one page, two short ones, the start of a fourth


def _lines(name: str, n: int, start: int = 0) -> list[str]:
    with gzip.open(MANPAGES / f"{name}.gz", "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in itertools.islice(handle, start, start + n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The first 500 training paragraphs of the EN-DE manual pages (a few pages), and 40 test paragraphs of
    several pages."""
    need(MANPAGES)
    folder = tmp_path_factory.mktemp("manpages")
    for split, n, start in (("train", 500, 0), ("test", 40, TEST_START)):
        for suffix in ("en", "de", "docids"):
            lines = _lines(f"{split}.en-de.{suffix}", n, start)
            (folder / f"{split}.{suffix}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return folder


def _trained(corpus: Path, folder: Path, model: str) -> Path:
    text = tiny_recipe_yaml(corpus, folder / "data", folder / "run").replace("valid: [val]\n", "valid: [test]\n")
    text = text.replace("  max_positions: 128\n", f"  max_positions: 512\n  positions: xl\n{model}")
    (folder / "r.yaml").write_text(text)
    recipe = load_recipe(folder / "r.yaml", ["train.max_steps=4", "train.save_every=4"])
    prepare(recipe, log=lambda _m: None, progress=False)
    train(recipe, resume=None, log=lambda _m: None)
    return folder / "run"


@pytest.fixture(scope="module")
def concat_model(corpus, tmp_path_factory) -> Path:
    return _trained(corpus, tmp_path_factory.mktemp("concat"), "  concat: 1\n  concat_target: true\n")


@pytest.fixture(scope="module")
def sentence_model(corpus, tmp_path_factory) -> Path:
    return _trained(corpus, tmp_path_factory.mktemp("sentence"), "")


@pytest.fixture(scope="module")
def recurrent_model(corpus, tmp_path_factory) -> Path:
    return _trained(corpus, tmp_path_factory.mktemp("recurrence"), "  recurrence: 1\n")


def _translate(model: Path, *args: str, stdin: str | None = None) -> list[str]:
    short = ["--max-len-a", "0", "--max-len-b", "8"]  # an untrained model runs to its length limit
    result = runner.invoke(app, ["translate", "-m", str(model), "--beam", "2", *short, *args], input=stdin)
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_prepare_marks_the_documents_and_adds_the_break_piece(concat_model):
    data = concat_model.parent / "data"
    ids = (data / "test.docs.txt").read_text().split()
    assert len(ids) == 40 and 1 < len(set(ids)) < 40
    from nmt_cli.data.vocab import DOC_BREAK, load_vocab

    assert load_vocab(data / "spm.model").IdToPiece(load_vocab(data / "spm.model").PieceToId(DOC_BREAK)) == DOC_BREAK


@pytest.mark.parametrize("which", ["concat_model", "recurrent_model"])
def test_documents_translate_the_same_by_ids_by_blank_lines_and_across_chunks(which, request, corpus):
    model = request.getfixturevalue(which)
    source = corpus / "test.en"
    ids = corpus / "test.docids"
    by_ids = _translate(model, "-i", str(source), "--docids", str(ids))
    assert len(by_ids) == 40
    assert _translate(model, "-i", str(source), "--docids", str(ids), "--chunk-lines", "7") == by_ids
    # the same documents as blank-line-separated text: a blank line out for each one in
    lines, names = source.read_text().splitlines(), ids.read_text().splitlines()
    text = "".join(("\n" if i and names[i] != names[i - 1] else "") + line + "\n" for i, line in enumerate(lines))
    out = _translate(model, stdin=text)
    assert [line for line in out if line] == [line for line in by_ids if line]
    # each line a document of its own: read without context, as a sentence-level model reads it
    alone = _translate(model, "-i", str(source), "--docids", str(_numbered(corpus, 40)))
    first_lines = [i for i in range(40) if i == 0 or names[i] != names[i - 1]]
    assert [alone[i] for i in first_lines] == [by_ids[i] for i in first_lines]


def _numbered(folder: Path, n: int) -> Path:
    path = folder / "each_alone.docids"
    path.write_text("".join(f"{i}\n" for i in range(n)))
    return path


def test_recurrence_scores_its_own_translation_in_context_as_the_search_did(recurrent_model, corpus):
    """Forced scoring in context reads the pasts that translation leaves: greedy search's outputs, sentence by
    sentence with the previous one's keys/values, score what the search scored them."""
    from dataclasses import replace

    import torch

    from nmt_cli.data.batches import pad_rows
    from nmt_cli.data.vocab import EOS_ID
    from nmt_cli.decode.context import search_with_pasts
    from nmt_cli.decode.forced import forced_scores_with_pasts
    from nmt_cli.decode.loading import load_model
    from nmt_cli.decode.translator import Translator

    loaded = load_model(recurrent_model)
    config = replace(loaded.recipe.decode, beam=1, max_len_a=0.0, max_len_b=12)
    translator = Translator(loaded, config)
    sources = loaded.src_vocab.encode(_lines("test.en-de.en", 6, 60), out_type=int)
    pasts: list = []
    pairs, scores = [], []
    for ids in sources:
        found, left = search_with_pasts(loaded.model, pad_rows([ids + [EOS_ID]]), None, [pasts], translator._run)
        pairs.append((ids, found[0][0].tokens))
        scores.append(found[0][0].score)
        pasts = [left[0]]
    forced = forced_scores_with_pasts(loaded.model, pairs, [True] + [False] * 5, config, torch.device("cpu"))
    assert [f.normalised for f in forced] == pytest.approx(scores, abs=1e-3)
    alone = forced_scores_with_pasts(loaded.model, pairs, [True] * 6, config, torch.device("cpu"))
    assert alone[0].total == pytest.approx(forced[0].total, abs=1e-4)
    assert any(abs(a.total - f.total) > 1e-3 for a, f in zip(alone[1:], forced[1:]))  # the past is read
    # a pair whose source is empty is a blank line to translation: it reads and leaves nothing, its neighbours
    # read past it (forced scoring is scheduled by translation's in_document_order)
    gap = [*pairs[:3], ([], pairs[3][1]), *pairs[3:]]
    around = forced_scores_with_pasts(loaded.model, gap, [True] + [False] * 6, config, torch.device("cpu"))
    blank = forced_scores_with_pasts(loaded.model, [gap[3]], [True], config, torch.device("cpu"))[0]
    assert around[3].total == pytest.approx(blank.total, abs=1e-4)
    assert [a.total for a in around[4:]] == pytest.approx([f.total for f in forced[3:]], abs=1e-4)


@pytest.mark.parametrize("which", ["concat_model", "recurrent_model"])
def test_scores_in_context_differ_only_after_the_first_sentence_and_give_cxmi(which, request, corpus):
    """--docids scores each pair in context and alone; the first sentence of a document has no context, so the
    two agree there; CXMI is the mean gain a token, with a bootstrap interval around it."""
    model = request.getfixturevalue(which)
    source, reference, ids = corpus / "test.en", corpus / "test.de", corpus / "test.docids"
    in_context = runner.invoke(app, ["score", "--model", str(model), str(source), str(reference), "--docids", str(ids)])
    alone = runner.invoke(app, ["score", "--model", str(model), str(source), str(reference)])
    assert in_context.exit_code == 0 and alone.exit_code == 0, in_context.output + alone.output
    names = ids.read_text().splitlines()
    records = [json.loads(line) for line in in_context.stdout.splitlines()]
    for i, (a, b) in enumerate(zip(records, alone.stdout.splitlines())):
        b = json.loads(b)
        assert a["tokens"] == b["tokens"]  # the context is read, never scored
        assert a["alone"] == pytest.approx(b["total"], abs=1e-3)  # "alone" is the score without --docids
        if i == 0 or names[i] != names[i - 1]:
            assert a["total"] == pytest.approx(a["alone"], abs=1e-3)
    assert any(abs(r["total"] - r["alone"]) > 1e-3 for r in records)  # the context is read
    found = re.search(r"CXMI ([-+][\d.]+) nats a token over ([\d,]+) sentences .* interval ([-+][\d.]+) to ([-+][\d.]+)",
                      in_context.stderr)  # fmt: skip
    assert found, in_context.stderr
    value, low, high = float(found[1]), float(found[3]), float(found[4])
    expected = sum(r["total"] - r["alone"] for r in records) / sum(r["tokens"] for r in records)
    assert value == pytest.approx(expected, abs=2e-3) and low <= value <= high and low < high
    assert int(found[2].replace(",", "")) == len(records)


def test_context_options_refused_where_they_cannot_apply(concat_model, corpus, overfit):
    ids = corpus / "test.docids"
    sentence_level = overfit[0]
    result = runner.invoke(
        app, ["translate", "-m", str(sentence_level), "-i", str(corpus / "test.en"), "--docids", str(ids)]
    )
    assert result.exit_code != 0 and "drop --docids" in result.output
    short = corpus / "short.docids"
    short.write_text("a\nb\n")
    result = runner.invoke(
        app, ["translate", "-m", str(concat_model), "-i", str(corpus / "test.en"), "--docids", str(short)]
    )
    assert result.exit_code != 0 and "2 document ids for the 40 lines" in result.output
    # nmt score --model refuses alike: the same check for both commands
    source, reference = str(corpus / "test.en"), str(corpus / "test.de")
    result = runner.invoke(app, ["score", "--model", str(sentence_level), source, reference, "--docids", str(ids)])
    assert result.exit_code != 0 and "drop --docids" in result.output
    result = runner.invoke(app, ["score", "--model", str(concat_model), source, reference, "--docids", str(short)])
    assert result.exit_code != 0 and "2 document ids for the 40 lines" in result.output
    result = runner.invoke(app, ["export", str(concat_model), str(corpus / "ct2")])
    assert result.exit_code != 0 and "document context" in result.output


def test_the_server_reads_a_requests_lines_as_one_document(recurrent_model, corpus, tmp_path):
    import urllib.request

    from conftest import start_server

    lines = (corpus / "test.en").read_text().splitlines()[6:10]  # four paragraphs, read as one document
    source = tmp_path / "four.en"
    source.write_text("".join(line + "\n" for line in lines))
    ids = tmp_path / "four.docids"
    ids.write_text("page\n" * 4)
    result = runner.invoke(app, ["translate", "-m", str(recurrent_model), "-i", str(source), "--docids", str(ids)])
    assert result.exit_code == 0, result.output
    process, url, log, _ = start_server(recurrent_model, "--threads", "1", "--log-level", "warning")
    try:
        body = json.dumps({"q": lines, "source": "en", "target": "de"}).encode()
        request = urllib.request.Request(url + "/translate", body, {"Content-Type": "application/json"})
        answer = json.loads(urllib.request.urlopen(request, timeout=120).read())
    finally:
        process.kill()
        process.wait()
    assert answer["translatedText"] == result.output.splitlines()


@pytest.mark.parametrize("context_dropout", [0.0, 0.3])
def test_recurrence_resumes_exactly(recurrent_model, context_dropout):
    """The past is recomputed from the data each batch: a run stopped at a checkpoint and resumed ends with the
    weights of a run that went straight through, the tokens train.context_dropout drops included."""
    import torch

    from nmt_cli.train import checkpoint

    path = recurrent_model.parent / "r.yaml"
    overrides = ["train.max_steps=4", "train.save_every=2", "train.keep_last=0", "model.dropout=0.1"]
    overrides += [f"train.context_dropout={context_dropout}"]
    runs = recurrent_model.parent / f"dropout{context_dropout}"  # each case's own run folders
    straight = load_recipe(path, [*overrides, f"train.dir={runs / 'straight'}"])
    train(straight, resume=None, log=lambda _m: None)
    halves = load_recipe(path, [*overrides, f"train.dir={runs / 'halves'}", "train.max_steps=2"])
    train(halves, resume=None, log=lambda _m: None)
    resumed = load_recipe(path, [*overrides, f"train.dir={runs / 'halves'}"])
    train(resumed, resume=True, log=lambda _m: None)
    a = checkpoint.load(checkpoint.step_path(runs / "straight", 4))["model"]
    b = checkpoint.load(checkpoint.step_path(runs / "halves", 4))["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
    if context_dropout:  # and the dropout is there: two updates without it end elsewhere
        plain = load_recipe(
            path, [*overrides, "train.context_dropout=0", f"train.dir={runs / 'plain'}", "train.max_steps=2"]
        )
        train(plain, resume=None, log=lambda _m: None)
        c = checkpoint.load(checkpoint.step_path(runs / "plain", 2))["model"]
        d = checkpoint.load(checkpoint.step_path(runs / "halves", 2))["model"]
        assert any(not torch.equal(c[key], d[key]) for key in c)


@pytest.mark.parametrize("context", [["model.recurrence=1"], ["model.concat=1", "model.concat_target=true"]])
def test_a_sentence_level_model_fine_tunes_into_a_context_model(sentence_model, corpus, tmp_path, context):
    """The two-stage recipe of document-level MT: train.init_from a sentence-level model into a context model,
    with nothing else changed; the run starts from the parent's weights (one Adam step moves each by at most the
    learning rate) and translates documents in context."""
    from nmt_cli.train import checkpoint

    parent = sentence_model
    overrides = [*context, f"train.init_from={parent}", f"train.dir={tmp_path / 'child'}", "train.max_steps=1"]
    child = load_recipe(parent.parent / "r.yaml", overrides)
    messages: list[str] = []
    train(child, resume=None, log=messages.append)
    assert any(m.startswith("fine-tuning from") for m in messages)
    before = checkpoint.load(parent / "model.pt")["model"]
    after = checkpoint.load(tmp_path / "child" / "model.pt")["model"]
    assert before.keys() == after.keys()
    assert max(float((after[k].float() - before[k].float()).abs().max()) for k in before) <= child.train.lr * 1.01
    assert (
        len(
            _translate(
                tmp_path / "child" / "model.pt",
                "--docids",
                str(corpus / "test.docids"),
                stdin=(corpus / "test.en").read_text(),
            )
        )
        == 40
    )


@pytest.mark.parametrize("which", ["concat_model", "recurrent_model"])
def test_a_file_of_any_format_is_read_as_one_document(which, request, corpus, tmp_path):
    model = request.getfixturevalue(which)
    paragraphs = (corpus / "test.en").read_text().splitlines()[10:14]
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n" + "\n\n".join(paragraphs) + "\n", encoding="utf-8")
    out = tmp_path / "page.de.md"
    result = runner.invoke(
        app, ["translate", "-m", str(model), "-i", str(page), "-o", str(out), "--max-len-a", "0", "--max-len-b", "6"]
    )
    assert result.exit_code == 0, result.output
    blocks = out.read_text(encoding="utf-8").strip().split("\n\n")
    assert len(blocks) == 5 and blocks[0].startswith("# ")
