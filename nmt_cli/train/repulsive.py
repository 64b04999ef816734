"""Repulsive multi-head attention (An et al., EMNLP 2020), as their official fairseq code applies it.

The heads of an attention layer are read as particles approximating a posterior, and updated
with Stein variational gradient descent (SVGD) instead of independently: after the backward pass,
the gradient of every head's slice of W_Q, of W_K and of W_V (its d_k rows of each d x d matrix,
flattened: the **parameter space**, as the official trainer does it) becomes

    g_i  <-  1/M * sum_j [ k(θ_j, θ_i) g_j  -  w * k(θ_j, θ_i) (θ_i - θ_j) / h ]

over the M heads: a kernel-weighted average of the heads' loss gradients (the driving force) and a
repulsion that pushes each head away from the heads close to it (the optimizer subtracts the
gradient). k is the RBF kernel exp(-||θ_i - θ_j||^2 / (2h)) with the median heuristic
h = median ||θ_i - θ_j||^2 / (2 log(M + 1)); w is ``model.repulsive`` (the official scripts use 0.01).
Encoder and decoder self-attention and cross-attention are all updated; biases and output
projections are not. The official code also multiplies these gradients by a step size (0.01-0.1)
before Adam, which normalises such a factor away, so it is left out here.

:func:`head_similarity` measures what the method is for: how alike the heads' attention maps are.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import Tensor

from ..decode.attention_maps import attention_maps
from ..model.attention import CrossAttention, SelfAttention
from ..model.transformer import Transformer


def svgd_direction(particles: Tensor, gradients: Tensor, weight: float) -> Tensor:
    """The SVGD update (M, P) for M particles (M, P) with loss gradients (M, P) (see the module docstring)."""
    count = particles.size(0)
    squared = (particles[:, None, :] - particles[None, :, :]).pow(2).sum(-1)  # (M, M)
    bandwidth = (squared.median() / (2 * math.log(count + 1))).clamp_min(1e-12)
    kernel = torch.exp(-squared / (2 * bandwidth))  # (M, M), symmetric
    repulsion = (particles * kernel.sum(1, keepdim=True) - kernel @ particles) / bandwidth  # sum_j k_ij (θ_i - θ_j) / h
    return (kernel @ gradients - weight * repulsion) / count


@torch.no_grad()
def repulse_heads(model: Transformer, weight: float) -> None:
    """Replace the gradients of every attention layer's Q, K and V weights by their SVGD update over heads."""
    for attention in (m for m in model.modules() if isinstance(m, (SelfAttention, CrossAttention))):
        for projection in attention.input_projections():  # fused Q|K|V, or Q and K|V
            if projection.weight.grad is None:
                continue
            d_model = projection.weight.size(1)
            for block, grad in zip(projection.weight.split(d_model), projection.weight.grad.split(d_model)):
                heads = attention.n_heads  # a head's rows of a (d, d) block: its particle
                update = svgd_direction(block.reshape(heads, -1).float(), grad.reshape(heads, -1).float(), weight)
                grad.copy_(update.view_as(grad))


@torch.inference_mode()
def head_similarity(model: Transformer, pairs: list[tuple[list[int], list[int]]]) -> float | None:
    """Mean cosine similarity between the attention maps of two heads of one layer, over all pairs of
    heads, all attention layers (encoder, decoder, cross) and the given (source, target) id pairs.
    1: every head attends alike (collapse); lower: more diverse heads. None with one head (no pairs)."""
    similarities = []
    for source, target in pairs:
        maps = attention_maps(model, source, target)
        for layer in [*maps.encoder, *maps.decoder, *maps.cross]:  # (H, Tq, Tk)
            flat = torch.nn.functional.normalize(layer.flatten(1), dim=1)
            for i, j in itertools.combinations(range(flat.size(0)), 2):
                similarities.append(float(flat[i] @ flat[j]))
    return sum(similarities) / len(similarities) if similarities else None
