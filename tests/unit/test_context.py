"""Document context by concatenation (model.concat): the rows training, scoring and translation read."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from nmt_cli.config import ModelConfig
from nmt_cli.data.batches import ParallelData, collate
from nmt_cli.data.context import Context, context_starts, join_context, pairs_in_context
from nmt_cli.data.vocab import BOS_ID, EOS_ID, PAD_ID
from nmt_cli.decode.context import Chunk, DocumentContext
from nmt_cli.decode.translation import Translation

BRK_SRC, BRK_TGT = 90, 91


class Rows:
    """A TokenArray stand-in: row i is [i*10 + 1 ... i*10 + length]."""

    def __init__(self, lengths: list[int]) -> None:
        self.rows = [np.arange(i * 10 + 1, i * 10 + 1 + n, dtype=np.int64) for i, n in enumerate(lengths)]
        self.lengths = np.array(lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.rows[i]

    def __len__(self) -> int:
        return len(self.rows)


def test_context_starts_stay_inside_documents():
    documents = np.array([0, 0, 0, 0, 1, 2, 2])
    assert context_starts(documents, 2).tolist() == [0, 0, 0, 1, 4, 5, 5]
    assert context_starts(documents, 1).tolist() == [0, 0, 1, 2, 4, 5, 5]
    assert context_starts(np.array([], dtype=np.int64), 3).tolist() == []


def test_training_rows_read_the_previous_pair_and_score_the_current_one():
    src, tgt = Rows([2, 3, 1, 2]), Rows([1, 2, 2, 3])
    documents = np.array([0, 0, 0, 1])
    two_to_one = ParallelData(src, tgt, context=Context.of(documents, 1, BRK_SRC, None))  # type: ignore[arg-type]
    batch = collate(two_to_one, np.array([1, 3]))
    assert batch.src[0].tolist() == [1, 2, BRK_SRC, 11, 12, 13, EOS_ID]  # pair 0, <brk>, pair 1
    assert batch.src[1].tolist()[:3] == [31, 32, EOS_ID]  # first of its document: no context
    assert batch.tgt_out[0].tolist() == [11, 12, EOS_ID, PAD_ID]
    # widths count the context: the padded size batching plans with
    assert two_to_one.pair_lengths.tolist() == [3, 7, 6, 4]

    two_to_two = ParallelData(src, tgt, context=Context.of(documents, 2, BRK_SRC, BRK_TGT))  # type: ignore[arg-type]
    batch = collate(two_to_two, np.array([2]))
    assert batch.src[0].tolist() == [1, 2, BRK_SRC, 11, 12, 13, BRK_SRC, 21, EOS_ID]
    assert batch.tgt_in[0].tolist() == [BOS_ID, 1, BRK_TGT, 11, 12, BRK_TGT, 21, 22]
    # the context's positions are padding in the output: the loss counts the current sentence alone
    assert batch.tgt_out[0].tolist() == [PAD_ID] * 5 + [21, 22, EOS_ID]
    assert batch.target_tokens == 3
    assert two_to_two.pair_lengths.tolist() == [3, 7, 9, 4]


def test_join_context_drops_the_oldest_sentence_first_never_the_current():
    assert join_context([[1, 2], [3]], [4, 5], 9, 100) == ([1, 2, 9, 3, 9, 4, 5], 5)
    assert join_context([[1, 2], [3]], [4, 5], 9, 5) == ([3, 9, 4, 5], 2)
    assert join_context([[1, 2]], [4, 5, 6, 7], 9, 3) == ([4, 5, 6, 7], 0)


def test_scoring_pairs_in_context_matches_training(tmp_path):
    vocab = _vocab(tmp_path)
    brk_src = brk_tgt = vocab.PieceToId("<brk>")
    pairs = [([5, 6], [7]), ([8], [9, 10]), ([11], [12])]
    model = ModelConfig(concat=1, concat_target=True)
    rows, skips = pairs_in_context(pairs, [True, False, True], model, vocab, vocab)
    assert rows[0] == ([5, 6], [7]) and skips[0] == 0
    assert rows[1] == ([5, 6, brk_src, 8], [7, brk_tgt, 9, 10]) and skips[1] == 2
    assert rows[2] == ([11], [12]) and skips[2] == 0  # a new document


class Recorder:
    """A translate_encoded stand-in: records what it was asked, answers each row with 'out<last source id>'."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[list[int]], list[list[int]] | None, list[tuple[int, int]] | None]] = []
        self.counted: list[list[bool]] = []  # per call, which rows are lines of the input (not leads)

    def translate_encoded(self, rows, prefixes=None, contexts=None, counted=None):
        self.calls.append((rows, prefixes, list(contexts) if contexts is not None else None))
        self.counted.append(list(counted) if counted is not None else [True] * len(rows))
        return [[Translation(f"out{row[-1]}" if row else "", 0.0)] for row in rows]


class Vocab:
    def encode(self, text: str, out_type=int) -> list[int]:
        return [int(text[3:]) + 1000]


def _vocab(tmp_path):
    import sentencepiece as spm

    text = tmp_path / "t.txt"
    text.write_text("".join(f"word{i} other{i % 7} thing\n" for i in range(200)))
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(tmp_path / "v"), vocab_size=30, user_defined_symbols=["<brk>"],
        pad_id=0, unk_id=1, bos_id=2, eos_id=3, minloglevel=2,
    )  # fmt: skip
    return spm.SentencePieceProcessor(model_file=str(tmp_path / "v.model"))


def _context(target: bool, sentences: int = 1, segment: int = 0) -> DocumentContext:
    return DocumentContext(sentences, BRK_SRC, BRK_TGT if target else None, 100, 50, Vocab(), segment)  # type: ignore[arg-type]


def test_two_to_one_reads_the_sources_before_in_one_call_and_across_chunks():
    context, record = _context(False), Recorder()
    out = context.translate(record, Chunk([[1], [2], [], [3]], None, [True, False, False, True]))
    rows, _, contexts = record.calls[0]
    assert rows == [[1], [1, BRK_SRC, 2], [], [3]]  # the blank line translates as blank; line 3 begins a document
    assert contexts == [(0, 0), (2, 0), (0, 0), (0, 0)]
    assert [hyps[0].text for hyps in out] == ["out1", "out2", "", "out3"]
    context.translate(record, Chunk([[4]], None, [False]))  # the next chunk goes on with the document of line 3
    assert record.calls[-1][0] == [[3, BRK_SRC, 4]]


def test_two_to_two_forces_its_own_earlier_translations_one_sentence_of_each_document_at_a_time():
    context, record = _context(True), Recorder()
    out = context.translate(record, Chunk([[1], [2], [5], [6], [7]], None, [True, False, True, False, False]))
    assert len(record.calls) == 3  # the longest document has three sentences
    first, second, third = record.calls
    assert first[0] == [[1], [5]] and first[1] == [[], []]
    assert second[0] == [[1, BRK_SRC, 2], [5, BRK_SRC, 6]]
    assert second[1] == [[1001, BRK_TGT], [1005, BRK_TGT]]  # "out1" and "out5" encoded afresh, then <brk>
    assert second[2] == [(2, 2), (2, 2)]
    assert third[0] == [[6, BRK_SRC, 7]] and third[1] == [[1006, BRK_TGT]]
    assert [hyps[0].text for hyps in out] == ["out1", "out2", "out5", "out6", "out7"]
    assert context.carried.history == deque([([7], [1007])])


def _read(record: Recorder) -> dict[int, tuple[list[int], list[int]]]:
    """Per input sentence (its last source id), the source and forced target it was translated with."""
    read = {}
    for (rows, prefixes, _), counted in zip(record.calls, record.counted):
        for row, prefix, line in zip(rows, prefixes or [[]] * len(rows), counted):
            if line and row:
                read[row[-1]] = (row, prefix)
    return read


def test_segments_of_a_document_go_side_by_side_each_after_its_leads():
    """decode.context_segment 2: a document of five sentences is three segments side by side; a segment that does
    not begin the document first translates the sentence before it again (a lead, not counted, its translation
    dropped) so that its first sentence reads the context it would read in order. Three waves, not five."""
    context, record = _context(True, segment=2), Recorder()
    out = context.translate(record, Chunk([[1], [2], [3], [4], [5]], None, [True] + [False] * 4))
    assert len(record.calls) == 3
    assert record.calls[0][0] == [[1], [2], [4]] and record.counted[0] == [True, False, False]
    assert record.calls[1][0] == [[1, BRK_SRC, 2], [2, BRK_SRC, 3], [4, BRK_SRC, 5]]
    assert record.calls[1][1] == [[1001, BRK_TGT], [1002, BRK_TGT], [1004, BRK_TGT]]
    assert record.counted[1] == [True, True, True]
    assert record.calls[2][0] == [[3, BRK_SRC, 4]] and record.counted[2] == [True]
    assert [hyps[0].text for hyps in out] == ["out1", "out2", "out3", "out4", "out5"]


@pytest.mark.parametrize("cut", [1, 2, 3, 4])
def test_where_a_chunk_ends_changes_no_sentences_context(cut):
    """Segments begin at fixed positions of their document, and a document that goes on in the next chunk carries
    its last sentences along for the leads: every sentence reads what it reads in one chunk."""
    sentences = [[1], [2], [3], [4], [5], [6]]
    whole, record = _context(True, segment=2), Recorder()
    whole.translate(record, Chunk(sentences, None, [True] + [False] * 5))
    parts, cut_record = _context(True, segment=2), Recorder()
    parts.translate(cut_record, Chunk(sentences[:cut], None, [True] + [False] * (cut - 1)))
    parts.translate(cut_record, Chunk(sentences[cut:], None, [False] * (6 - cut)))
    assert _read(cut_record) == _read(record) and len(_read(record)) == 6


def test_a_user_prefix_follows_the_forced_context():
    context, record = _context(True), Recorder()
    context.translate(record, Chunk([[1], [2]], [[], [44]], [True, False]))
    assert record.calls[1][1] == [[1001, BRK_TGT, 44]]


@pytest.mark.parametrize("target", [False, True])
def test_a_document_of_one_sentence_reads_no_context(target):
    context, record = _context(target, sentences=3), Recorder()
    context.translate(record, Chunk([[1], [2], [3]], None, [True, True, True]))
    for rows, prefixes, contexts in record.calls:
        assert all(len(row) == 1 for row in rows) and all(c == (0, 0) for c in contexts or [])
        assert prefixes is None or all(p == [] for p in prefixes)


def test_context_word_dropout_drops_only_the_sentence_being_translated():
    """CoWord dropout: tokens after a row's last <brk> become <unk> at about the rate asked; its context, the
    breaks, EOS and PAD never do; a row without a break (a recurrence chain) is all sentence."""
    import torch

    from nmt_cli.data.context import context_word_dropout
    from nmt_cli.data.vocab import EOS_ID, PAD_ID, UNK_ID

    brk = 9
    torch.manual_seed(0)
    context, current = list(range(10, 60)), list(range(60, 260))
    row = torch.tensor([context + [brk] + current + [EOS_ID, PAD_ID]] * 20)
    dropped = context_word_dropout(row, 0.3, brk)
    changed = dropped != row
    split = len(context) + 1
    assert not changed[:, :split].any() and not changed[:, -2:].any()  # context, break, EOS, PAD kept
    assert (dropped[changed] == UNK_ID).all()
    assert 0.25 < changed[:, split:-2].float().mean() < 0.35
    chain = torch.tensor([current + [EOS_ID]] * 20)
    assert 0.25 < (context_word_dropout(chain, 0.3, None) != chain)[:, :-1].float().mean() < 0.35
    assert torch.equal(context_word_dropout(row, 0.0, brk), row)


def test_context_word_dropout_in_a_chain_keeps_each_dropped_sentences_past_whole():
    """A recurrence chain's sentences are each the next one's past: tokens are dropped from the odd-numbered
    sentences only (at about the rate asked), so every sentence that lost tokens reads a whole predecessor."""
    import torch

    from nmt_cli.data.context import context_word_dropout
    from nmt_cli.data.vocab import EOS_ID, PAD_ID

    torch.manual_seed(0)
    sentences = [list(range(10 + 40 * n, 50 + 40 * n)) + [EOS_ID] for n in range(4)]
    chain = torch.tensor([sum(sentences, []) + [PAD_ID] * 3] * 30)
    blocks = torch.tensor([[n for n, sentence in enumerate(sentences) for _ in sentence] + [1 << 20] * 3] * 30)
    changed = context_word_dropout(chain, 0.3, None, blocks) != chain
    odd = (blocks % 2 == 1) & (chain > EOS_ID)
    assert not changed[~odd].any()  # even sentences, EOS and padding kept
    assert 0.25 < changed[odd].float().mean() < 0.35
