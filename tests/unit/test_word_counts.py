"""BPE vocabularies learned from word counts: the same model as from the sentences, in bounded memory."""

from __future__ import annotations

import gzip
from importlib import resources
from pathlib import Path

import sentencepiece as spm

from nmt_cli.config import VocabConfig
from nmt_cli.data import vocab, word_counts
from nmt_cli.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, learn_vocab


def _sample_text(tmp_path: Path) -> list[Path]:
    """The packaged sample corpus, whitespace collapsed as `nmt prepare`'s cleaning leaves it."""
    paths = []
    for lang in ("en", "de"):
        packaged = resources.files("nmt_cli") / "sample" / "en-de" / f"train.{lang}.gz"
        lines = gzip.decompress(packaged.read_bytes()).decode("utf-8").splitlines()
        path = tmp_path / f"train.{lang}"
        path.write_text("".join(" ".join(line.split()) + "\n" for line in lines), encoding="utf-8")
        paths.append(path)
    return paths


def _pieces(path: Path) -> list[tuple[str, float]]:
    model = spm.SentencePieceProcessor(model_file=str(path))
    return [(model.IdToPiece(i), model.GetScore(i)) for i in range(model.GetPieceSize())]


def test_bpe_from_word_counts_equals_bpe_from_the_sentences(tmp_path):
    inputs = _sample_text(tmp_path)
    for coverage in (1.0, 0.999):
        config = VocabConfig(size=600, character_coverage=coverage, threads=1)
        words = learn_vocab(inputs, tmp_path / "counts.model", config, symbols=["<BT>"])
        spm.SentencePieceTrainer.train(
            input=[str(p) for p in inputs],
            model_prefix=str(tmp_path / "sentences"),
            vocab_size=600,
            model_type="bpe",
            character_coverage=coverage,
            num_threads=1,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            normalization_rule_name="identity",
            byte_fallback=True,
            user_defined_symbols=["<BT>"],
            max_sentence_length=1 << 16,
            minloglevel=2,
        )
        assert _pieces(tmp_path / "counts.model") == _pieces(tmp_path / "sentences.model")
        lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in inputs)
        assert words is not None and words.lines == words.counted == lines and words.distinct > 600
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "counts.model",
        "sentences.model",
        "sentences.vocab",
        "train.de",
        "train.en",
    ]  # the counts file is gone


def test_unigram_is_still_learned_from_sentences(tmp_path, monkeypatch):
    def no_counts(*_args):
        raise AssertionError("unigram must not be learned from word counts")

    monkeypatch.setattr(vocab, "count_words", no_counts)
    english = tmp_path / "en.txt"
    english.write_text("".join(line + "\n" for line in _sample_text(tmp_path)[0].read_text().splitlines()[:300]))
    assert learn_vocab([english], tmp_path / "u.model", VocabConfig(type="unigram", size=400, threads=1)) is None
    assert spm.SentencePieceProcessor(model_file=str(tmp_path / "u.model")).GetPieceSize() == 400


def test_more_lines_than_the_limit_are_sampled_evenly(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("".join(f"common w{i}\n" for i in range(10_000)) + "last", encoding="utf-8")  # no final line end
    counts = word_counts.count_words([path], max_lines=2_500)
    assert counts.lines == 10_001
    assert counts.counted == len(range(0, 10_001, 5)) == 2_001  # every 5th line, from the first to the last
    assert counts.counts["common"] == 2_000 and counts.counts["last"] == 1
    assert {w for w in counts.counts if w.startswith("w")} == {f"w{i}" for i in range(0, 10_000, 5)}
    assert "2,001 of 10,001 lines" in counts.summary()
    everything = word_counts.count_words([path], max_lines=20_000)
    assert everything.counted == 10_001 and everything.counts["common"] == 10_000


def test_past_the_limit_of_distinct_words_the_rarest_are_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(word_counts, "MAX_DISTINCT_WORDS", 400)
    monkeypatch.setattr(word_counts, "_BATCH_BYTES", 1_000)  # many batches: pruned again and again on the way
    frequent = [f"f{i}" for i in range(50)]
    path = tmp_path / "t.txt"
    with open(path, "w", encoding="utf-8") as handle:
        for line in range(4_000):
            handle.write(" ".join(frequent[line % 10 :: 10] + [f"rare{line}"]) + "\n")
    counts = word_counts.count_words([path], max_lines=10_000)
    assert counts.pruned_below >= 1
    assert len(counts.counts) <= 400
    assert all(counts.counts[w] == 400 for w in frequent)  # seen often enough: never dropped, counts exact
    assert "dropped" in counts.summary()
