"""Segment-level recurrence (model.recurrence): the past a layer attends to is the previous sentence's own keys
and values, placed just before the sentence."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from nmt_cli.config import ModelConfig
from nmt_cli.data.batches import ParallelData, collate, make_batches, target_tokens
from nmt_cli.data.chains import Chains
from nmt_cli.inference.step import IncrementalDecoder
from nmt_cli.model.recurrence import batch_pasts, sentence_pasts
from nmt_cli.model.transformer import build_model

CONFIG = ModelConfig(layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0, positions="xl", recurrence=1)


def _model(norm: str = "post", recurrence: int = 1):
    torch.manual_seed(0)
    return build_model(dataclasses.replace(CONFIG, norm=norm, recurrence=recurrence), 50, 50, 0).eval()


def _past_of(model, tokens: torch.Tensor, decoder: bool = False):
    """The one-row past a sentence (or a target read after BOS) leaves: its own keys/values, no past of its own."""
    with torch.no_grad():
        memory, mask, kept_encoder = model.encode_kept(tokens)
        _, kept_decoder = model.decode_kept(tokens, memory, mask)
    left = sentence_pasts(kept_encoder, kept_decoder, [tokens.size(1)], [tokens.size(1)])
    return batch_pasts([left], "decoder" if decoder else "encoder", len(model.encoder), tokens.float())


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_the_decoder_with_the_previous_sentence_as_past_is_the_decoder_over_both(norm):
    """Causal attention over [previous; current] in one pass gives the current positions exactly what the
    current sentence alone gives with the previous one's keys/values as its past: XL's positions are relative,
    and causal attention leaves the previous positions' states their own."""
    model = _model(norm)
    src = torch.tensor([[5, 6, 7, 3]])
    previous, current = torch.tensor([[2, 8, 9, 10]]), torch.tensor([[11, 12, 13]])
    with torch.no_grad():
        memory, mask = model.encode(src)
        whole = model.decode(torch.cat([previous, current], dim=1), memory, mask)[:, previous.size(1) :]
        _, kept = model.decode_kept(previous, memory, mask)
        left = sentence_pasts(kept, kept, [previous.size(1)], [previous.size(1)])
        alone = model.decode(current, memory, mask, past=batch_pasts([left], "decoder", 2, memory))
    torch.testing.assert_close(alone, whole, rtol=1e-5, atol=1e-5)


def test_padding_in_a_batch_of_pasts_changes_nothing():
    """Rows whose pasts differ in length, batched (right-aligned, padding hidden), read what each reads alone."""
    model = _model()
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    previous = [torch.tensor([[2, 14, 15, 16, 17]]), torch.tensor([[2, 18]])]
    with torch.no_grad():
        pasts = []
        for prev in previous:
            memory, mask, kept_encoder = model.encode_kept(prev)
            _, kept_decoder = model.decode_kept(prev, memory, mask)
            pasts.extend(sentence_pasts(kept_encoder, kept_decoder, [prev.size(1)], [prev.size(1)]))
        encoder = batch_pasts([[p] for p in pasts], "encoder", 2, src.float())
        batched, _ = model.encode(src, past=encoder)
        for row in range(2):
            own = batch_pasts([[pasts[row]]], "encoder", 2, src.float())
            width = int((src[row] != 0).sum())
            alone, _ = model.encode(src[row : row + 1, :width], past=own)
            torch.testing.assert_close(batched[row : row + 1, :width], alone, rtol=1e-5, atol=1e-5)


def test_a_hidden_past_is_no_past():
    model = _model()
    src = torch.tensor([[5, 6, 7, 3]])
    with torch.no_grad():
        hidden = _past_of(model, torch.tensor([[9, 10, 11, 3]]))
        for past in hidden:
            past.visible[:] = False
        torch.testing.assert_close(model.encode(src, past=hidden)[0], model.encode(src)[0], rtol=1e-5, atol=1e-5)


def test_incremental_steps_with_a_past_follow_the_whole_sequence():
    """Beam search's steps read the past from their cache as the whole-sequence decoder reads it."""
    model = _model()
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    tgt_in = torch.tensor([[2, 11, 12, 13], [2, 14, 15, 16]])
    with torch.no_grad():
        memory, mask = model.encode(src)
        _, kept = model.decode_kept(torch.tensor([[2, 20, 21, 22], [2, 23, 0, 0]]), memory, mask)
        past = batch_pasts([[p] for p in sentence_pasts(kept, kept, [4, 2], [4, 2])], "decoder", 2, memory)
        whole = model.decode(tgt_in, memory, mask, past=past)
        decoder = IncrementalDecoder(model)
        state = decoder.start(memory, mask, past=past)
        steps = torch.stack([decoder.hidden(tgt_in[:, t], state) for t in range(tgt_in.size(1))], dim=1)
    torch.testing.assert_close(steps, whole, rtol=1e-4, atol=1e-4)


def test_hypotheses_read_their_sentence_past_through_reorders_and_departures():
    """A sentence's hypotheses (rows n*G .. n*G+G-1) share one copy of its past: each row's steps equal the whole
    sequence decoded after that sentence's past, after the rows are reordered within their sentences and after a
    sentence leaves the batch."""
    model = _model()
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    torch.manual_seed(1)
    tgt_in = torch.cat([torch.full((6, 1), 2), torch.randint(4, 50, (6, 3))], dim=1)  # 2 sentences x 3 hypotheses
    with torch.no_grad():
        memory, mask = model.encode(src)
        _, kept = model.decode_kept(torch.tensor([[2, 20, 21, 22, 24], [2, 23, 0, 0, 0]]), memory, mask)
        left = sentence_pasts(kept, kept, [5, 2], [5, 2])
        whole = torch.cat(
            [
                model.decode(tgt_in[r : r + 1], memory[r // 3 : r // 3 + 1], mask[r // 3 : r // 3 + 1],
                             past=batch_pasts([[left[r // 3]]], "decoder", 2, memory))
                for r in range(6)
            ]
        )  # fmt: skip
        decoder = IncrementalDecoder(model)
        state = decoder.start(memory, mask, past=batch_pasts([[p] for p in left], "decoder", 2, memory))
        rows = torch.arange(6)
        steps = [decoder.hidden(tgt_in[rows, t], state) for t in range(2)]
        torch.testing.assert_close(torch.stack(steps, dim=1), whole[:, :2], rtol=1e-4, atol=1e-4)
        order = torch.tensor([2, 0, 1, 3, 5, 4])  # reordered within each sentence
        state.select(order)
        rows = rows[order]
        torch.testing.assert_close(decoder.hidden(tgt_in[rows, 2], state), whole[rows, 2], rtol=1e-4, atol=1e-4)
        state.select(torch.tensor([3, 4, 5]), torch.tensor([1]))  # the first sentence is done
        rows = rows[3:]
        torch.testing.assert_close(decoder.hidden(tgt_in[rows, 3], state), whole[rows, 3], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sampling"])
def test_what_a_sentence_leaves_is_its_translation_read_after_its_past(strategy):
    """The decoder keys/values a sentence leaves the next are those of its chosen translation read teacher-forced
    after its past, whether the search kept them (greedy, beam: no second reading) or the translation is read
    again (sampling)."""
    from nmt_cli.config import DecodeConfig
    from nmt_cli.data.batches import pad_rows
    from nmt_cli.decode.context import search_with_pasts
    from nmt_cli.decode.sampling import Sampling
    from nmt_cli.decode.search import Beam, Greedy, length_limits, run_search

    model = _model()
    config = DecodeConfig(beam=1 if strategy == "greedy" else 3, max_len_a=0.0, max_len_b=7)
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0], [10, 11, 12, 3]])

    def search(m, source, prefix, encoded):
        chosen = {
            "greedy": lambda: Greedy(config, source.device),
            "beam": lambda: Beam(config, 2, source.device),
            "sampling": lambda: Sampling(1, config, torch.Generator().manual_seed(0), source.device),
        }[strategy]()
        limits = length_limits(source, config, m.config.max_positions)
        return run_search(m, source, config, chosen, limits, prefix=prefix, encoded=encoded)

    with torch.no_grad():
        memory, mask, kept_encoder = model.encode_kept(torch.tensor([[13, 14, 3], [15, 3, 0], [16, 17, 3]]))
        _, kept_decoder = model.decode_kept(torch.tensor([[2, 20, 21, 22], [2, 23, 0, 0], [2, 24, 25, 0]]), memory, mask)
        pasts = [[p] for p in sentence_pasts(kept_encoder, kept_decoder, [3, 2, 3], [4, 2, 3])]
        found, left = search_with_pasts(model, src, None, pasts, search)
        assert all(hyps[0].kept is not None for hyps in found) == (strategy != "sampling")
        memory, mask = model.encode(src, past=batch_pasts(pasts, "encoder", 2, memory))
        chosen = [[2] + hyps[0].tokens for hyps in found]
        decoder_past = batch_pasts(pasts, "decoder", 2, memory)
        _, reread = model.decode_kept(pad_rows(chosen), memory, mask, decoder_past)
    for row, (past, tokens) in enumerate(zip(left, chosen)):
        for layer, (keys, values) in enumerate(past.decoder):
            assert keys.shape == (4, len(tokens), 8)
            torch.testing.assert_close(keys, reread[layer][0][row, :, : len(tokens)], rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(values, reread[layer][1][row, :, : len(tokens)], rtol=1e-4, atol=1e-4)


class Tokens:
    """A TokenArray stand-in over given rows."""

    def __init__(self, rows: list[list[int]]) -> None:
        self.rows = [np.array(r, dtype=np.int64) for r in rows]
        self.lengths = np.array([len(r) for r in rows])

    def __getitem__(self, i: int) -> np.ndarray:
        return self.rows[i]

    def __len__(self) -> int:
        return len(self.rows)


def test_chains_stay_in_their_document_and_begin_with_their_leads():
    documents = np.array([0, 0, 0, 0, 0, 1, 2, 2])
    widths = np.array([3, 3, 3, 9, 3, 3, 3, 3])
    chains = Chains.of(documents, widths, sentences=1, row_tokens=6)
    # (first read, first scored, end): runs of <= 6 tokens, cut at every document start; a run inside its document
    # begins with the pair before it, read for its keys/values only; a pair wider than the limit is a run alone
    assert list(zip(chains.first, chains.scored, chains.end)) == [
        (0, 0, 2),
        (1, 2, 3),
        (2, 3, 4),
        (3, 4, 5),
        (5, 5, 6),
        (6, 6, 8),
    ]
    assert chains.document_starts.tolist() == [True, False, False, False, False, True, True, False]
    two = Chains.of(documents, widths, sentences=2, row_tokens=6)
    assert two.first.tolist() == [0, 0, 1, 2, 5, 6]  # two leads where the document has them
    every = [p for s, e in zip(chains.scored, chains.end) for p in range(s, e)]
    assert every == list(range(len(documents)))  # every pair scored exactly once


@pytest.mark.parametrize("recurrence", [1, 2])
def test_a_chain_trains_each_pair_on_the_past_translation_gives_it(recurrence):
    """One pass over a chain gives each scored pair the loss it has read alone after its predecessors' keys/values
    as translation carries them (each computed with its own past), and the gradients of those losses: the past
    carries none."""
    model = _model(recurrence=recurrence)
    model.eval()  # no dropout, so the passes below compute the same function; gradients still flow
    src = Tokens([[5, 6], [7, 8, 9], [10, 11], [12, 13, 14, 15], [16]])
    tgt = Tokens([[20, 21, 22], [23], [24, 25], [26, 27], [28, 29, 30]])
    documents = np.zeros(5, dtype=np.int64)
    chains = Chains.of(documents, np.maximum(src.lengths, tgt.lengths) + 1, recurrence, row_tokens=11)
    data = ParallelData(src, tgt, chains=chains)  # type: ignore[arg-type]
    row = int(np.flatnonzero(chains.scored > chains.first)[0])  # a chain with leads
    batch = collate(data, np.array([row]))
    assert batch.target_tokens == target_tokens(data, np.array([row]))
    loss, _, n = model.loss(batch.src, batch.tgt_in, batch.tgt_out, 0.1, batch.target_tokens, blocks=batch.blocks)
    chain_grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)

    history, expected, scored = [], torch.zeros(()), 0
    for i in range(int(chains.first[row]), int(chains.end[row])):
        source = torch.tensor([list(src[i]) + [3]])
        target_in, target_out = torch.tensor([[2] + list(tgt[i])]), torch.tensor([list(tgt[i]) + [3]])
        like = model.output.weight
        memory, mask, kept_encoder = model.encode_kept(source, batch_pasts([history], "encoder", 2, like))
        hidden, kept_decoder = model.decode_kept(target_in, memory, mask, batch_pasts([history], "decoder", 2, like))
        if i >= chains.scored[row]:
            expected = expected + model._output_loss(hidden, target_out, 0.1, target_out.numel())[0]
            scored += target_out.numel()
        history = (history + sentence_pasts(kept_encoder, kept_decoder, [source.size(1)], [target_in.size(1)]))[-recurrence:]
    assert n == scored
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    for got, want in zip(chain_grads, torch.autograd.grad(expected, list(model.parameters()), allow_unused=True)):
        assert (got is None) == (want is None)
        if got is not None:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_chains_batched_with_padding_score_as_each_alone():
    model = _model()
    src = Tokens([[5, 6], [7, 8, 9, 10, 11], [12], [13, 14], [15]])
    tgt = Tokens([[20], [21, 22], [23, 24, 25, 26], [27], [28, 29]])
    documents = np.array([0, 0, 0, 1, 1])
    data = ParallelData(src, tgt, chains=Chains.of(documents, np.array([3, 6, 5, 3, 3]), 1, row_tokens=100))  # type: ignore[arg-type]
    assert len(data.chains) == 2 and data.pair_lengths.tolist() == [11, 5]  # the widths the batcher packs by
    assert [b.tolist() for b in make_batches(data.pair_lengths, 100, 1024, seed=None)] == [[1, 0]]

    def loss_of(rows):
        batch = collate(data, np.array(rows))
        with torch.no_grad():
            return model.loss(batch.src, batch.tgt_in, batch.tgt_out, 0.0, blocks=batch.blocks)[0]

    torch.testing.assert_close(loss_of([0, 1]), loss_of([0]) + loss_of([1]), rtol=1e-5, atol=1e-5)


def test_inference_reads_xl_distance_keys_from_a_table_that_follows_the_weights():
    """Without gradient XL's projected distance keys come from a table of a range of distances (decoding asks at
    every step): the same values as the projection itself, for any query and key count, and a new table once an
    optimizer step has changed W_R."""
    from nmt_cli.model.attention import XLPositions

    torch.manual_seed(0)
    xl = XLPositions(32, 4)
    for t_q, t_k in [(1, 1), (1, 7), (5, 5), (1, 300), (3, 40), (200, 200)]:
        with torch.no_grad():
            cached = xl.distance_keys(t_q, t_k, torch.float32)
        torch.testing.assert_close(cached, xl.distance_keys(t_q, t_k, torch.float32), rtol=1e-5, atol=1e-6)
    optimizer = torch.optim.SGD(xl.parameters(), lr=0.5)
    xl.distance_keys(2, 9, torch.float32).sum().backward()
    optimizer.step()
    with torch.no_grad():
        after = xl.distance_keys(2, 9, torch.float32)
    torch.testing.assert_close(after, xl.distance_keys(2, 9, torch.float32), rtol=1e-5, atol=1e-6)


def test_the_xl_table_stays_the_size_asked_for_across_weight_changes():
    """The table is as long as the longest range asked for: it once doubled at every rebuild, for new weights (every
    validation after optimizer steps) or a longer batch, and a validation of long paragraphs grew it past memory."""
    from nmt_cli.model.attention import XLPositions

    torch.manual_seed(0)
    xl = XLPositions(16, 2)
    optimizer = torch.optim.SGD(xl.parameters(), lr=0.1)
    for _ in range(12):
        xl.distance_keys(2, 9, torch.float32).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            for t_k in range(1, 100):  # an incremental decode of 99 steps
                xl.distance_keys(1, t_k, torch.float32)
    assert xl._table is not None
    assert xl._table[3].size(1) <= 2 * (99 + 1)
    with torch.no_grad():  # validation's batches, each a little longer than the one before: queries and keys grow
        for length in range(1, 13):
            xl.distance_keys(length, length, torch.float32)
    assert xl._table[3].size(1) <= 2 * (99 + 12)
