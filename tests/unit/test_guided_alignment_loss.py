"""Guided alignment: the symmetrisation of the aligner's links, the batches' links, the guided head's loss and
the alignments read from that head."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from nmt_cli.config import ModelConfig
from nmt_cli.data.align import LINK_DTYPE, grow_diag_final_and, load_links, parse_links
from nmt_cli.data.batches import ParallelData, collate
from nmt_cli.data.binary import TokenArray, TokenArrayWriter
from nmt_cli.model.guided import GUIDED_HEAD, alignment_loss, guided_layer
from nmt_cli.model.transformer import build_model


def tiny(decoder_layers: int = 3):
    config = ModelConfig(layers=2, decoder_layers=decoder_layers, d_model=32, n_heads=4, d_ff=64, dropout=0.0)
    torch.manual_seed(0)
    return build_model(config, 40, 40)


# ---------------------------------------------------------------- symmetrisation


def test_grow_diag_final_and_keeps_agreement_and_grows_only_into_unaligned_words():
    forward = parse_links("0-0 1-1 2-3")
    reverse = parse_links("0-0 1-1 1-2 3-3")
    # intersection {0-0, 1-1}; 1-2 neighbours 1-1 and target 2 is unaligned: grown; 2-3 and 3-3 are union links
    # not next to the intersection until 1-2 is in: 2-3 is diagonal to 1-2 with source 2 unaligned: grown; 3-3
    # then touches 2-3 with source 3 unaligned: grown
    assert grow_diag_final_and(forward, reverse) == [(0, 0), (1, 1), (1, 2), (2, 3), (3, 3)]


def test_grow_diag_final_and_adds_isolated_links_only_between_unaligned_words():
    forward = parse_links("0-0 2-2")
    reverse = parse_links("0-0 3-2 3-3")
    links = grow_diag_final_and(forward, reverse)
    assert (0, 0) in links and (3, 3) in links and (2, 2) in links
    assert (3, 2) not in links  # target 2 is aligned by the time 3-2 is considered (forward's 2-2 comes first)
    assert links == sorted(links, key=lambda link: (link[1], link[0]))


def test_grow_diag_final_and_of_nothing_is_nothing():
    assert grow_diag_final_and(set(), set()) == []


# ---------------------------------------------------------------- batches


def write_array(prefix: Path, rows: list[list[int]], dtype: np.dtype = np.dtype("<u2")) -> TokenArray:
    writer = TokenArrayWriter(prefix, dtype)
    for row in rows:
        writer.append(np.asarray(row, dtype=np.int64), np.asarray([len(row)]))
    writer.commit()
    return TokenArray(prefix, dtype)


def test_collate_turns_each_pairs_links_into_row_target_source(tmp_path):
    src = write_array(tmp_path / "train.en", [[5, 6, 7], [8, 9]])
    tgt = write_array(tmp_path / "train.de", [[10, 11], [12, 13, 14]])
    links = write_array(tmp_path / "train.align", [[0, 0, 2, 1], [1, 2]], LINK_DTYPE)
    assert len(load_links(tmp_path / "train.align")) == 2
    batch = collate(ParallelData(src, tgt, links), np.asarray([1, 0]))
    assert batch.alignment is not None
    # batch row 0 is pair 1 (link source 1 -> target 2), row 1 is pair 0 (0->0, 2->1)
    assert batch.alignment.tolist() == [[0, 2, 1], [1, 0, 0], [1, 1, 2]]
    assert collate(ParallelData(src, tgt), np.asarray([0])).alignment is None


# ---------------------------------------------------------------- the loss


def test_alignment_loss_is_the_cross_entropy_against_evenly_spread_links():
    weights = torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.2, 0.7]]])  # (B=1, T=2, S=3)
    alignment = torch.tensor([[0, 0, 0], [0, 1, 1], [0, 1, 2]])  # t0 -> s0; t1 -> s1 and s2
    expected = -(np.log(0.5) + 0.5 * np.log(0.2) + 0.5 * np.log(0.7))
    assert alignment_loss(weights, alignment).item() == pytest.approx(expected, rel=1e-6)
    assert alignment_loss(weights, torch.zeros((0, 3), dtype=torch.long)).item() == 0.0


def test_guided_layer_is_the_penultimate_or_the_only_one():
    assert guided_layer(6) == 4 and guided_layer(2) == 0 and guided_layer(1) == 0


def test_the_guided_heads_weights_are_the_ones_the_layer_applies():
    model = tiny().eval()
    layer = model.decoder_layers[guided_layer(3)]
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[1, ..., 5:] = False
    head = layer.cross_attn.head_weights(x, memory, mask, GUIDED_HEAD)
    torch.testing.assert_close(head, layer.cross_attn.attention_map(x, memory, mask)[:, GUIDED_HEAD])
    assert head[1, :, 5:].abs().max() == 0  # padding gets no weight


def test_guided_training_adds_the_weighted_alignment_loss_and_moves_the_guided_head():
    model = tiny().train()
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt_in = torch.tensor([[1, 10, 11, 12], [1, 13, 14, 0]])
    tgt_out = torch.tensor([[10, 11, 12, 2], [13, 14, 2, 0]])
    alignment = torch.tensor([[0, 0, 0], [0, 1, 1], [0, 2, 2], [1, 0, 1], [1, 1, 0]])
    plain, _, n = model.loss(src, tgt_in, tgt_out, 0.1)
    guided, nll, _ = model.loss(src, tgt_in, tgt_out, 0.1, None, alignment, 0.5)
    memory, src_mask = model.encode(src)
    hidden, head = model.decode_aligned(tgt_in, memory, src_mask)
    torch.testing.assert_close(hidden, model.decode(tgt_in, memory, src_mask))
    assert head.shape == (2, 4, 4)
    torch.testing.assert_close(guided - plain, 0.5 * alignment_loss(head, alignment))
    # a few steps on the alignment loss alone move the guided head onto the links
    optimiser = torch.optim.Adam(model.parameters(), lr=0.01)
    before = alignment_loss(head, alignment).item()
    for _ in range(30):
        memory, src_mask = model.encode(src)
        loss = alignment_loss(model.decode_aligned(tgt_in, memory, src_mask)[1], alignment)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    assert loss.item() < before / 4
    memory, src_mask = model.encode(src)
    head = model.decode_aligned(tgt_in, memory, src_mask)[1]
    assert head[0, 1].argmax().item() == 1 and head[1, 0].argmax().item() == 1
