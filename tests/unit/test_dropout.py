"""Dropout with the CPU's cheaper mask: its rate, expectation, gradient, seeding and the no-op cases."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nmt_cli.model.dropout import Dropout, apply_dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_keep_rate_is_one_minus_p_in_every_piece_of_a_random_word(p):
    torch.manual_seed(0)
    keep, _ = keep_mask(torch.Size([400_000]), p)
    # Each 64-bit word gives 4 neighbouring elements; a word whose top bit were always 0 would keep
    # every 4th element far more often than the others.
    by_piece = keep.view(-1, 4).float().mean(dim=0)
    sigma = (p * (1 - p) / 100_000) ** 0.5
    assert torch.all((by_piece - (1 - p)).abs() < 5 * sigma), by_piece


def test_output_keeps_the_input_expectation_and_zeros_the_rest():
    torch.manual_seed(1)
    x = torch.full((1000, 999), 2.0)  # not a multiple of 4 elements
    y = apply_dropout(x, 0.25, training=True)
    kept = y != 0
    assert y.shape == x.shape
    assert torch.all(y[kept] == y[kept][0])  # one scale for every kept element
    assert abs(y.mean().item() - 2.0) < 0.01
    assert abs(kept.float().mean().item() - 0.75) < 0.005


def test_gradient_passes_exactly_where_the_output_was_kept():
    torch.manual_seed(2)
    x = torch.randn(64, 33, requires_grad=True)
    y = apply_dropout(x, 0.2, training=True)
    upstream = torch.randn_like(y)
    (y * upstream).sum().backward()
    assert x.grad is not None
    kept = y.detach() != 0
    scale = (y.detach()[kept] / x.detach()[kept]).mean()
    assert torch.allclose(x.grad, torch.where(kept, upstream * scale, torch.zeros(())))
    assert torch.allclose(y.detach(), torch.where(kept, x.detach() * scale, torch.zeros(())))


def test_the_same_seed_gives_the_same_mask_and_another_does_not():
    x = torch.ones(50, 50)
    masks = []
    for seed in (7, 7, 8):
        torch.manual_seed(seed)
        masks.append(apply_dropout(x, 0.5, training=True) != 0)
    assert torch.equal(masks[0], masks[1])
    assert not torch.equal(masks[0], masks[2])


def test_no_op_cases_and_full_drop():
    x = torch.randn(5, 7)
    assert apply_dropout(x, 0.3, training=False) is x
    assert apply_dropout(x, 0.0, training=True) is x
    assert torch.equal(apply_dropout(x, 1.0, training=True), torch.zeros_like(x))
    module = Dropout(0.3).eval()
    assert module(x) is x
    with pytest.raises(ValueError):
        Dropout(1.5)


def test_bf16_input_stays_bf16_and_matches_the_fp32_mask():
    x = torch.randn(20, 40)
    torch.manual_seed(3)
    y32 = apply_dropout(x, 0.1, training=True)
    torch.manual_seed(3)
    y16 = apply_dropout(x.bfloat16(), 0.1, training=True)
    assert y16.dtype == torch.bfloat16
    assert torch.equal(y16 != 0, y32 != 0)
    assert torch.allclose(y16.float(), y32, rtol=1e-2)


def test_rate_matches_f_dropout_statistically():
    torch.manual_seed(4)
    x = torch.ones(300_000)
    ours = (apply_dropout(x, 0.1, training=True) == 0).float().mean().item()
    theirs = (F.dropout(x, 0.1, training=True) == 0).float().mean().item()
    assert abs(ours - theirs) < 0.003
