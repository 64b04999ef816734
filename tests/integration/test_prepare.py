"""``nmt prepare`` on real Multi30k slices: round trip, metadata, re-runs, and bad input."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import read_lines, tiny_recipe_yaml, write_slice

from nmt_cli.config import load_recipe
from nmt_cli.data.binary import TokenArray
from nmt_cli.data.prepare import prepare
from nmt_cli.data.vocab import load_vocab
from nmt_cli.errors import DataError, NmtError


def make_recipe(tmp_path: Path, root: Path, extra: str = "", tgt: str = "de"):
    path = tmp_path / "r.yaml"
    path.write_text(tiny_recipe_yaml(root, tmp_path / "out", tmp_path / "run", tgt=tgt, extra=extra))
    return load_recipe(path)


def corpus_recipe(tmp_path: Path):
    """A recipe over tmp_path/c, after adding one-line val and test splits beside its train files."""
    for split in ("val", "test"):
        write_slice(tmp_path / "c", split, {"en": ["a"], "de": ["a"]})
    return make_recipe(tmp_path, tmp_path / "c")


def quiet(recipe, **kw):
    return prepare(recipe, log=lambda _m: None, progress=False, **kw)


def test_round_trip_and_metadata(prepared):
    out = prepared.data_dir
    meta = json.loads((out / "meta.json").read_text())
    vocab = load_vocab(out / "spm.model")
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            array = TokenArray(out / f"{split}.{lang}", np.dtype(meta["splits"][split]["dtypes"][0]))
            text = (out / "text" / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
            assert len(array) == len(text) == meta["splits"][split]["kept"]
            decoded = vocab.decode([array[i].tolist() for i in range(len(array))])
            assert decoded == text
    assert meta["splits"]["train"]["dtypes"] == ["uint16", "uint16"]
    assert meta["splits"]["train"]["read"] == 3000
    assert sum(row[2] for row in meta["buckets"]["table"]) == meta["splits"]["train"]["kept"]
    assert meta["buckets"]["bounds"] == sorted(meta["buckets"]["bounds"])
    assert len(meta["inputs_sha256"]) == 6


def test_cleaning_counts_each_step(tmp_path):
    pairs = {
        "en": ["a b c", "", "one two three four five six", "x", "same pair", "same pair", " padded  text "],
        "de": ["a b c", "leer", "eins", "x", "gleich paar", "gleich paar", "gepolstert text"],
    }
    write_slice(tmp_path / "c", "train", pairs)
    corpus_recipe(tmp_path)
    recipe = load_recipe(
        tmp_path / "r.yaml",
        ["data.clean.dedup=true", "data.clean.max_ratio=1.5", "vocab.size=40", "vocab.byte_fallback=false"],
    )
    meta = quiet(recipe)
    train = meta["splits"]["train"]
    assert train["dropped"] == {"empty": 1, "ratio": 1, "duplicate": 1}
    assert train["kept"] == 4
    text = (recipe.data_dir / "text" / "train.en").read_text().splitlines()
    assert text == ["a b c", "x", "same pair", "padded text"]


def test_rerun_skips_and_force_redoes(prepared, tmp_path):
    # a copy: the shared dataset is read by tests running beside this one, and --force learns a new vocabulary
    shutil.copytree(prepared.data_dir, tmp_path / "data")
    recipe = dataclasses.replace(prepared, data=dataclasses.replace(prepared.data, output=str(tmp_path / "data")))
    logs: list[str] = []
    prepare(recipe, log=logs.append, progress=False)
    assert all(line.startswith("[skip]") for line in logs) and len(logs) == 7
    logs.clear()
    prepare(recipe, force=True, log=logs.append, progress=False)
    assert not any(line.startswith("[skip]") for line in logs)


def test_parallel_encoding_gives_identical_arrays(tmp_path, m30k_slice, prepared):
    make_recipe(tmp_path, m30k_slice)
    recipe = load_recipe(tmp_path / "r.yaml", ["data.workers=2", "data.chunk_lines=700"])
    quiet(recipe)
    for name in ("train.en.bin", "train.de.idx", "valid.de.bin"):
        assert (recipe.data_dir / name).read_bytes() == (prepared.data_dir / name).read_bytes()


def assert_nothing_complete(recipe):
    assert not (recipe.data_dir / "meta.json").exists()
    leftovers = [p for p in recipe.data_dir.rglob("*") if p.name.startswith(".") and ".tmp" in p.name]
    assert leftovers == []


def test_missing_file(tmp_path):
    recipe = make_recipe(tmp_path, tmp_path / "nowhere")
    with pytest.raises(DataError, match=r"nowhere/train.en: file not found \(also tried .*train.en.gz\)"):
        quiet(recipe)
    assert not (recipe.data_dir / "meta.json").exists()


def test_line_count_mismatch_names_both_counts(tmp_path, multi30k):
    write_slice(
        tmp_path / "c",
        "train",
        {"en": read_lines(multi30k / "train.en.gz", 50), "de": read_lines(multi30k / "train.de.gz", 47)},
    )
    recipe = corpus_recipe(tmp_path)
    with pytest.raises(DataError, match=r"train.en has 50 lines but .*train.de has 47"):
        quiet(recipe)
    assert_nothing_complete(recipe)
    assert not (recipe.data_dir / "text" / "train.en").exists()


def test_invalid_utf8_names_the_line_and_replace_goes_on(tmp_path, multi30k):
    src = read_lines(multi30k / "train.en.gz", 200)
    tgt = read_lines(multi30k / "train.de.gz", 200)
    write_slice(tmp_path / "c", "train", {"en": src, "de": tgt})
    for split in ("val", "test"):
        write_slice(tmp_path / "c", split, {"en": src[:5], "de": tgt[:5]})
    path = tmp_path / "c" / "train.de"
    lines = path.read_bytes().split(b"\n")
    lines[36] = lines[36] + b" \xff\xfe"
    path.write_bytes(b"\n".join(lines))
    make_recipe(tmp_path, tmp_path / "c")
    recipe = load_recipe(tmp_path / "r.yaml", ["vocab.size=500"])
    with pytest.raises(DataError, match=r"train.de:37: invalid UTF-8 .*--encoding-errors replace"):
        quiet(recipe)
    assert_nothing_complete(recipe)
    recipe = load_recipe(tmp_path / "r.yaml", ["vocab.size=500", "data.encoding_errors=replace"])
    meta = quiet(recipe)
    assert meta["splits"]["train"]["kept"] > 150
    assert "\ufffd" in (recipe.data_dir / "text" / "train.de").read_text()


def test_empty_after_filtering(tmp_path):
    write_slice(tmp_path / "c", "train", {"en": ["", "a"], "de": ["x", "a b c d e"]})
    recipe = corpus_recipe(tmp_path)
    with pytest.raises(
        DataError,
        match=r"the train split is empty \(2 lines read, 0 kept\); data.clean dropped 1 empty, "
        r"1 ratio; check the files or relax data.clean",
    ):
        quiet(recipe)
    assert_nothing_complete(recipe)


def test_vocabulary_too_large_is_translated(tmp_path, m30k_slice):
    make_recipe(tmp_path, m30k_slice)
    recipe = load_recipe(tmp_path / "r.yaml", ["vocab.size=90000"])
    with pytest.raises(DataError, match=r"vocab.size=90000 is too large for this data; set vocab.size to at most \d+"):
        quiet(recipe)
    assert_nothing_complete(recipe)
    assert not (recipe.data_dir / "spm.model").exists()
    recipe = load_recipe(tmp_path / "r.yaml", ["vocab.size=100"])
    with pytest.raises(DataError, match=r"vocab.size=100 is too small: .* need \d+; raise vocab.size"):
        quiet(recipe)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_output_folder_non_root(tmp_path, m30k_slice):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    recipe = load_recipe(_write(tmp_path, m30k_slice, locked / "out"))
    with pytest.raises(NmtError, match="cannot create the output folder"):
        quiet(recipe)


def test_unwritable_output_folder(tmp_path, m30k_slice):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    recipe = load_recipe(_write(tmp_path, m30k_slice, blocker / "out"))
    with pytest.raises(NmtError, match="cannot create the output folder"):
        quiet(recipe)


def _write(tmp_path: Path, root: Path, out: Path) -> Path:
    path = tmp_path / "u.yaml"
    path.write_text(tiny_recipe_yaml(root, out, tmp_path / "run"))
    return path


def test_encoding_splits_lines_at_line_feeds_only(tmp_path):
    """Validation text is only stripped: U+2028, U+0085 and form feeds stay inside its lines, empty lines stay lines."""
    words = [" ".join(chr(97 + (i * j + j) % 26) * (1 + j % 3) for j in range(6)) for i in range(60)]
    write_slice(tmp_path / "c", "train", {"en": words, "de": words[::-1]})
    write_slice(tmp_path / "c", "val", {"en": ["a\u2028b", "", "b\x85c\x0cd", "c"], "de": ["b", "a", "", "a\u2028a"]})
    write_slice(tmp_path / "c", "test", {"en": ["a"], "de": ["a"]})
    make_recipe(tmp_path, tmp_path / "c")
    recipe = load_recipe(
        tmp_path / "r.yaml", ["vocab.size=60", "vocab.byte_fallback=false", "data.workers=2", "data.chunk_lines=3"]
    )
    meta = quiet(recipe)
    lengths = {}
    for lang in ("en", "de"):
        array = TokenArray(recipe.data_dir / f"valid.{lang}", np.dtype(meta["splits"]["valid"]["dtypes"][0]))
        lengths[lang] = [len(array[i]) for i in range(len(array))]
    assert len(lengths["en"]) == len(lengths["de"]) == meta["splits"]["valid"]["kept"] == 4
    assert [n == 0 for n in lengths["en"]] == [False, True, False, False]
    assert [n == 0 for n in lengths["de"]] == [False, False, True, False]
    assert not list(recipe.data_dir.rglob(".*.tmp*"))  # the word counts file is gone too


def test_separate_vocabularies_are_learned_from_each_side(tmp_path, m30k_slice):
    make_recipe(tmp_path, m30k_slice)
    recipe = load_recipe(tmp_path / "r.yaml", ["vocab.joint=false", "model.share_embeddings=false"])
    logs: list[str] = []
    meta = prepare(recipe, log=logs.append, progress=False)
    assert sum("learned from" in line for line in logs) == 2
    for side, lang in ((0, "en"), (1, "de")):
        vocab = load_vocab(recipe.data_dir / f"spm.{lang}.model")
        array = TokenArray(recipe.data_dir / f"train.{lang}", np.dtype(meta["splits"]["train"]["dtypes"][side]))
        text = (recipe.data_dir / "text" / f"train.{lang}").read_text(encoding="utf-8").splitlines()
        assert vocab.decode([array[i].tolist() for i in range(len(array))]) == text
    pieces = {
        lang: {v.IdToPiece(i) for i in range(v.GetPieceSize())}
        for lang, v in ((lang, load_vocab(recipe.data_dir / f"spm.{lang}.model")) for lang in ("en", "de"))
    }
    german_words = {"▁und", "▁ein", "▁Mann"}
    assert german_words <= pieces["de"] and not german_words & pieces["en"]


def test_a_killed_vocabulary_process_is_a_one_line_error(tmp_path, m30k_slice, monkeypatch):
    from nmt_cli.data import vocab_process

    suicidal = tmp_path / "python"
    suicidal.write_text("#!/bin/sh\nkill -9 $$\n")
    suicidal.chmod(0o755)
    monkeypatch.setattr(vocab_process.sys, "executable", str(suicidal))
    recipe = make_recipe(tmp_path, m30k_slice)
    with pytest.raises(DataError, match=r"the process learning the vocabulary was killed by signal 9; nothing .*again"):
        quiet(recipe)
    assert_nothing_complete(recipe)
    assert not (recipe.data_dir / "spm.model").exists()


def test_a_gzip_bomb_of_one_endless_line_is_refused_without_reading_it_whole(tmp_path):
    """A corpus line past data.max_line_bytes is refused with its file and line; memory stays near the cap."""
    import gzip
    import tracemalloc

    from nmt_cli.data.corpus import HashingReader
    from nmt_cli.errors import TooLarge

    bomb = tmp_path / "bomb.en.gz"
    with gzip.open(bomb, "wb") as handle:
        handle.write(b"a first line\n")
        for _ in range(256):  # 256 MiB with no line break, 250 KB packed
            handle.write(b"a" * (1 << 20))
    assert bomb.stat().st_size < 1 << 20
    tracemalloc.start()
    with pytest.raises(TooLarge, match=r"bomb.en.gz:2: a line longer than 1,048,576 bytes .*data.max_line_bytes"):
        for _ in HashingReader(bomb, "strict"):
            pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 << 20  # the cap and the decompressor's buffers, not the 256 MiB


def test_documents_follow_their_pairs_through_cleaning(tmp_path, multi30k):
    """A .docids file beside a corpus marks its documents; a dropped pair leaves its document whole; a corpus
    without one holds documents of one pair; a bad ids file is one line naming it."""
    from nmt_cli.data.documents import load_documents

    en, de = read_lines(multi30k / "train.en.gz", 300), read_lines(multi30k / "train.de.gz", 300)
    de[5] = ""  # dropped by the cleaning: document "a" goes on around it
    write_slice(tmp_path / "c", "docs", {"en": en[:200], "de": de[:200]})
    ids = ["a"] * 10 + ["b"] * 90 + ["a"] * 100  # "a" again later: another document
    (tmp_path / "c" / "docs.docids").write_text("".join(i + "\n" for i in ids), encoding="utf-8")
    write_slice(tmp_path / "c", "plain", {"en": en[200:300], "de": de[200:300]})
    for split in ("val", "test"):
        write_slice(tmp_path / "c", split, {"en": en[:20], "de": de[:20]})
    recipe_text = tiny_recipe_yaml(tmp_path / "c", tmp_path / "data", tmp_path / "run").replace(
        "train: [train]", "train: [docs, plain]"
    )
    (tmp_path / "r.yaml").write_text(recipe_text)
    recipe = load_recipe(tmp_path / "r.yaml", ["data.clean.max_ratio=0"])
    meta = prepare(recipe, log=lambda _m: None, progress=False)
    train = meta["splits"]["train"]
    assert train["sentences"] == 299 and train["documents"] == 3 + 100
    numbers = load_documents(tmp_path / "data" / "train", train["sentences"])
    assert list(numbers[:9]) == [0] * 9 and numbers[9] == 1 and numbers[99] == 2 and numbers[198] == 2
    assert list(numbers[199:]) == list(range(3, 103))  # the corpus without ids: one pair a document
    assert meta["splits"]["valid"]["documents"] == 20

    (tmp_path / "c" / "docs.docids").write_text("".join(i + "\n" for i in ids[:150]), encoding="utf-8")
    with pytest.raises(DataError, match=r"docs.docids: 150 document ids for 200 pairs"):
        prepare(recipe, log=lambda _m: None, progress=False)
    (tmp_path / "c" / "docs.docids").write_text("".join(i + "\n" for i in ["a"] * 3 + [" "] + ids[4:]), encoding="utf-8")
    with pytest.raises(DataError, match=r"docs.docids:4: a blank document id"):
        prepare(recipe, log=lambda _m: None, progress=False)
