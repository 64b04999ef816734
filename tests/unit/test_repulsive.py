"""Repulsive multi-head attention (An et al. 2020): the SVGD update, its effect on collapsed heads, off by default."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from nmt_cli.config import ModelConfig
from nmt_cli.model.transformer import build_model
from nmt_cli.train.repulsive import head_similarity, repulse_heads, svgd_direction


def test_svgd_direction_is_the_formula_pair_by_pair():
    torch.manual_seed(0)
    particles, gradients, weight = torch.randn(4, 6), torch.randn(4, 6), 0.3
    squared = {(i, j): float(((particles[i] - particles[j]) ** 2).sum()) for i in range(4) for j in range(4)}
    h = sorted(squared.values())[(16 - 1) // 2] / (2 * math.log(5))  # torch's median: the lower middle value
    expected = torch.zeros(4, 6)
    for i, j in itertools.product(range(4), range(4)):
        k = math.exp(-squared[(i, j)] / (2 * h))
        expected[i] += (k * gradients[j] - weight * k * (particles[i] - particles[j]) / h) / 4
    torch.testing.assert_close(svgd_direction(particles, gradients, weight), expected, atol=1e-5, rtol=1e-5)


def collapsed_model():
    """Every head of every Q/K/V projection a copy of head 0, plus a little noise: attention collapse."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(layers=1, d_model=32, n_heads=4, d_ff=64, dropout=0.0), 40, 40).eval()
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "input_projections"):
                for projection in module.input_projections():
                    for block in projection.weight.split(32):
                        heads = block.view(4, -1)
                        heads.copy_(heads[0].expand_as(heads) + 1e-3 * torch.randn_like(heads))
    return model


def head_spread(model) -> float:
    """Mean distance between two heads' Q/K/V weight slices."""
    distances = []
    for module in model.modules():
        if hasattr(module, "input_projections"):
            for projection in module.input_projections():
                for block in projection.weight.split(32):
                    distances.append(torch.pdist(block.reshape(4, -1)).mean())
    return float(torch.stack(distances).mean().detach())


def test_repulsion_pulls_collapsed_heads_apart_and_makes_their_attention_differ():
    model = collapsed_model()
    pairs = [([5, 6, 7, 8, 9, 10], [11, 12, 13, 14]), ([20, 21, 22], [23, 24, 25, 26, 27])]
    before_spread, before_alike = head_spread(model), head_similarity(model, pairs)
    for _ in range(100):  # no data gradient: only the repulsion moves the heads
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        repulse_heads(model, weight=1.0)
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.05 * p.grad
    after_spread, after_alike = head_spread(model), head_similarity(model, pairs)
    assert after_spread > 3 * before_spread
    assert before_alike > 0.99 and after_alike < before_alike - 0.01


def identical_heads_model():
    model = collapsed_model()
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "input_projections"):
                for projection in module.input_projections():
                    for block in projection.weight.split(32):
                        heads = block.view(4, -1)
                        heads.copy_(heads[0].expand_as(heads))
    return model


def test_off_by_default_and_plain_gradients_for_identical_heads():
    assert ModelConfig().repulsive == 0.0
    model = identical_heads_model()
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.5)
    repulse_heads(model, weight=1.0)  # identical particles: kernel 1, no repulsion, the gradient itself
    qkv = model.encoder[0].self_attn.qkv.weight.grad
    torch.testing.assert_close(qkv, torch.full_like(qkv, 0.5))


def test_head_similarity_is_one_for_identical_heads():
    assert head_similarity(identical_heads_model(), [([5, 6, 7], [8, 9])]) == pytest.approx(1.0, abs=1e-5)


def test_head_similarity_of_a_one_head_model_is_none_not_nan():
    """One head has no pair to compare: nothing is logged (NaN would not be valid JSON in metrics.jsonl)."""
    model = build_model(ModelConfig(layers=1, d_model=16, n_heads=1, d_ff=32), 30, 30).eval()
    assert head_similarity(model, [([5, 6, 7], [8, 9])]) is None
