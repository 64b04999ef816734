"""Segment-level recurrence (model.recurrence): the past a layer attends to is the previous sentence's own keys
and values, placed just before the sentence."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from nmt_cli.config import ModelConfig
from nmt_cli.inference.step import IncrementalDecoder
from nmt_cli.model.recurrence import batch_pasts, right_aligned, sentence_pasts
from nmt_cli.model.transformer import build_model

CONFIG = ModelConfig(layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0, positions="xl", recurrence=1)


def _model(norm: str = "post"):
    torch.manual_seed(0)
    return build_model(dataclasses.replace(CONFIG, norm=norm), 50, 50, 0).eval()


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
        past = right_aligned(kept, torch.tensor([previous.size(1)]), torch.tensor([True]))
        alone = model.decode(current, memory, mask, past=past)
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
        _, _, kept = model.encode_kept(torch.tensor([[9, 10, 11, 3]]))
        hidden = right_aligned(kept, torch.tensor([4]), torch.tensor([False]))
        torch.testing.assert_close(model.encode(src, past=hidden)[0], model.encode(src)[0], rtol=1e-5, atol=1e-5)


def test_incremental_steps_with_a_past_follow_the_whole_sequence():
    """Beam search's steps read the past from their cache as the whole-sequence decoder reads it."""
    model = _model()
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    tgt_in = torch.tensor([[2, 11, 12, 13], [2, 14, 15, 16]])
    with torch.no_grad():
        memory, mask = model.encode(src)
        _, kept = model.decode_kept(torch.tensor([[2, 20, 21, 22], [2, 23, 0, 0]]), memory, mask)
        past = right_aligned(kept, torch.tensor([4, 2]), torch.tensor([True, True]))
        whole = model.decode(tgt_in, memory, mask, past=past)
        decoder = IncrementalDecoder(model)
        state = decoder.start(memory, mask, past=past)
        steps = torch.stack([decoder.hidden(tgt_in[:, t], state) for t in range(tgt_in.size(1))], dim=1)
    torch.testing.assert_close(steps, whole, rtol=1e-4, atol=1e-4)


def test_training_trains_the_previous_pairs_and_attends_to_their_detached_keys_values():
    from test_context import Rows

    from nmt_cli.data.batches import ParallelData, collate, target_tokens

    model = _model().train()
    src, tgt = Rows([2, 3, 1]), Rows([2, 2, 1])
    data = ParallelData(src, tgt, previous=torch.tensor([0, 0, 2]).numpy(), train_previous=True)  # type: ignore[arg-type]
    indices = torch.tensor([1, 2]).numpy()
    batch = collate(data, indices)
    assert batch.previous is not None and len(batch.previous) == 1
    prev_src, prev_tgt, prev_out, present, scored = batch.previous[0]
    assert prev_src[0].tolist() == [1, 2, 3] and present.tolist() == [True, False]
    assert prev_tgt[1].tolist()[0] == 2  # the stand-in row a pair without a previous one reads: BOS alone
    assert prev_out[1].eq(0).all() and scored == 3  # the stand-in is never scored; pair 0: 2 tokens + EOS
    previous = [(prev_src % 50, prev_tgt % 50, prev_out % 50, present, scored)]
    model.eval()  # no dropout in the layers, so the three passes below compute the same function
    model.training = True  # but the model itself trains: the previous pairs are scored
    loss, _, n = model.loss(batch.src % 50, batch.tgt_in % 50, batch.tgt_out % 50, 0.1, previous=previous)
    # the update's normaliser counts what the loss counts: both pairs' targets
    assert n == target_tokens(data, indices) == batch.target_tokens + 3
    alone, _, _ = model.loss(prev_src[:1] % 50, prev_tgt[:1] % 50, prev_out[:1] % 50, 0.1)
    with torch.no_grad():
        model.training = False
        in_context, _, m = model.loss(batch.src % 50, batch.tgt_in % 50, batch.tgt_out % 50, 0.1, previous=previous)
    assert m == batch.target_tokens  # validation scores the current pairs only
    torch.testing.assert_close(loss, alone + in_context, rtol=1e-5, atol=1e-5)
    model.training = True
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad and p.dim() > 1)
    # train.train_previous off (the default): the previous pairs give their keys/values, unscored
    data.train_previous = False
    plain = collate(data, indices)
    assert plain.previous is not None and plain.previous[0][4] == 0
    assert target_tokens(data, indices) == plain.target_tokens
    model.zero_grad()
    unscored, _, k = model.loss(plain.src % 50, plain.tgt_in % 50, plain.tgt_out % 50, 0.1, previous=[
        (prev_src % 50, prev_tgt % 50, prev_out % 50, present, 0)
    ])  # fmt: skip
    assert k == plain.target_tokens
    torch.testing.assert_close(unscored, in_context, rtol=1e-5, atol=1e-5)
