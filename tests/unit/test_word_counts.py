"""BPE vocabularies learned from word counts: the same model as from the sentences, in bounded memory;
unigram ones from sentences, checked to fit in memory first."""

from __future__ import annotations

import gzip
import random
from importlib import resources
from pathlib import Path

import pytest
import sentencepiece as spm

from nmt_cli.config import VocabConfig
from nmt_cli.data import unigram_sample, vocab, word_counts
from nmt_cli.data.unigram_sample import UnigramSample
from nmt_cli.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, learn_vocab
from nmt_cli.errors import DataError
from nmt_cli.utils import memory


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
    learned_from = learn_vocab([english], tmp_path / "u.model", VocabConfig(type="unigram", size=400, threads=1))
    assert isinstance(learned_from, UnigramSample) and learned_from.lines == 300  # a file under the probe: exact
    assert "about 300 lines" in learned_from.summary()
    assert spm.SentencePieceProcessor(model_file=str(tmp_path / "u.model")).GetPieceSize() == 400


def test_unigram_sample_estimated_from_the_files_start(tmp_path, monkeypatch):
    """Lines and characters per line of files larger than the probe are estimated from their first bytes:
    multi-byte characters count once; more lines than input_sentence_size are sampled."""
    monkeypatch.setattr(unigram_sample, "PROBE_BYTES", 4096)
    rng = random.Random(0)
    words = ["Straße", "façade", "日本語", "cat", "dog"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 20))) for _ in range(5000)]
    path = tmp_path / "t.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    sample = unigram_sample.estimate_sample([path, path], 7000)
    assert abs(sample.lines - 10_000) < 1000 and sample.sampled == 7000
    true_characters = sum(len(line) + 1 for line in lines) / len(lines)
    assert abs(sample.characters_per_line - true_characters) < 0.1 * true_characters
    assert "a sample of 7,000 of about" in sample.summary()


def test_unigram_sample_too_large_for_memory_stops_before_sentencepiece(tmp_path, monkeypatch):
    """A sample that cannot fit is a one-line error naming the input_sentence_size that fits, raised before
    SentencePiece starts; no model is written."""
    english = tmp_path / "en.txt"
    english.write_text("".join(f"sentence number {i} of the corpus\n" for i in range(20_000)), encoding="utf-8")
    sample = unigram_sample.estimate_sample([english], 10_000_000)
    needed = sample.needed_bytes()
    monkeypatch.setattr(vocab, "available_memory", lambda: needed - 1)
    monkeypatch.setattr(vocab.spm.SentencePieceTrainer, "train", lambda **_: pytest.fail("SentencePiece started"))
    config = VocabConfig(type="unigram", size=400, threads=1)
    with pytest.raises(DataError) as caught:
        learn_vocab([english], tmp_path / "u.model", config)
    message = str(caught.value)
    fit = sample.lines_that_fit(needed - 1)
    assert message.startswith(f"{tmp_path}: a unigram vocabulary from 20,000 lines needs about")
    assert f"set vocab.input_sentence_size to {fit:,} or less" in message and "\n" not in message
    share = unigram_sample.SUGGESTION_SHARE * (needed - 1)  # the advice leaves room: free memory moves
    unit = 10 ** (len(str(fit)) - 2)  # two significant digits
    assert 1000 <= fit < 20_000 and fit % unit == 0
    assert unigram_sample.estimate_sample([english], fit).needed_bytes() <= share
    assert unigram_sample.estimate_sample([english], fit + unit).needed_bytes() > share
    assert not (tmp_path / "u.model").exists()
    unigram_sample.check_fits(sample, [english], needed)  # exactly enough: no error
    unigram_sample.check_fits(sample, [english], None)  # unknown: not checked
    with pytest.raises(DataError, match="free memory, or use vocab.type: bpe"):
        unigram_sample.check_fits(sample, [english], 1 << 20)  # not even 1,000 lines fit


def test_available_memory_takes_the_lower_of_the_system_and_the_cgroups(tmp_path, monkeypatch):
    """MemAvailable, lowered to what is left under the tightest limit from this process's cgroup up
    (v1 or v2), where reclaimable page cache does not count as used."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:    8000000 kB\n")
    own = tmp_path / "proc-self-cgroup"
    root = tmp_path / "cgroup"
    monkeypatch.setattr(memory, "_MEMINFO", meminfo)
    monkeypatch.setattr(memory, "_OWN_CGROUPS", own)
    monkeypatch.setattr(memory, "_CGROUP_ROOT", root)

    def cgroup(folder: Path, files: tuple[str, str], limit: str, used: int, inactive: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / files[0]).write_text(limit + "\n")
        (folder / files[1]).write_text(f"{used}\n")
        (folder / "memory.stat").write_text(f"cache 5\n{inactive} {1 << 30}\nrss 7\n")

    own.write_text("4:memory:/job/step\n1:cpu:/job/step\n0::/\n")  # cgroup v1, as on this machine
    cgroup(root / "memory", memory._V1_FILES, str(2**63 - 4096), 9 << 30, "total_inactive_file")
    cgroup(root / "memory" / "job", memory._V1_FILES, str(4 << 30), 2 << 30, "total_inactive_file")
    cgroup(root / "memory" / "job" / "step", memory._V1_FILES, str(2**63 - 4096), 2 << 30, "total_inactive_file")
    assert memory.available_memory() == 3 << 30  # the job's 4 GiB, 2 GiB used of which 1 GiB is cache
    own.write_text("0::/user.slice\n")  # cgroup v2
    cgroup(root / "user.slice", memory._V2_FILES, "max", 1 << 30, "inactive_file")
    assert memory.available_memory() == 8_000_000 * 1024  # no limit: the system's figure
    cgroup(root / "user.slice", memory._V2_FILES, str(5 << 30), 1 << 30, "inactive_file")
    assert memory.available_memory() == 5 << 30  # all of the usage reclaimable
    monkeypatch.setattr(memory, "_MEMINFO", tmp_path / "absent")
    own.unlink()
    assert memory.available_memory() is None


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
