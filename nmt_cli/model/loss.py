"""The training loss: label-smoothed cross-entropy (Szegedy et al. 2016; the paper's section 5.4).

:func:`label_smoothed_nll` is the formula over given logits. :func:`output_loss` is what
training runs: the output projection and the loss in one pass over blocks of target positions,
so the (tokens x vocabulary) logits never exist whole. For m30k-small a 4,096-token batch has
about 3,800 x 8,000 logits (120 MB in fp32); the unfused path writes and reads tensors of that
size about ten times (log-softmax, its mean, the gather, and their backward passes), while a
block of 256 rows stays in the processor's cache. The gradient with respect to the logits is
known in closed form, ``softmax - (1 - eps) * onehot - eps / V``, so it is computed during the
forward pass, block by block, and the backward pass only scales it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

BLOCK_ROWS = 256  # 256 x 8,000 fp32 logits = 8 MB: in cache on the processors we measured
GPU_BLOCK_ELEMENTS = 1 << 28  # on a GPU, blocks of up to 1 GiB of fp32 logits: few, large kernels


def block_rows(vocab: int, device: torch.device) -> int:
    """Rows per block: cache-sized on the CPU; on a GPU as many as 1 GiB of logits holds, since
    there each block costs a dozen kernel launches and small blocks leave the GPU idle between them."""
    if device.type == "cuda":
        return max(BLOCK_ROWS, GPU_BLOCK_ELEMENTS // vocab)
    return BLOCK_ROWS


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL of ``target`` (N,) under ``logits`` (N, V).

    The smoothing mass ``epsilon`` is spread uniformly over the whole vocabulary:
    ``loss = (1 - eps) * nll + eps / V * sum_v(-log p_v)``.
    """
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (N, V)
    nll = -log_probs.gather(-1, target[:, None]).squeeze(-1)  # (N,)
    if epsilon == 0:
        return nll.sum(), nll.sum()
    uniform = -log_probs.mean(dim=-1)  # (N,) = sum_v(-log p_v) / V
    loss = (1.0 - epsilon) * nll + epsilon * uniform
    return loss.sum(), nll.sum()


class _FusedOutputLoss(torch.autograd.Function):
    """``label_smoothed_nll(hidden @ weight.T, target, eps)`` with gradients computed block by block."""

    @staticmethod
    def forward(ctx: Any, hidden: Tensor, weight: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        vocab = weight.size(0)
        dtype = _gradient_product_dtype(hidden.device.type)
        weight_c = weight.to(dtype)
        loss_sum = hidden.new_zeros((), dtype=torch.float32)
        nll_sum = hidden.new_zeros((), dtype=torch.float32)
        grad_hidden = torch.empty(hidden.shape, dtype=torch.float32, device=hidden.device) if need_grad else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_grad else None
        step = block_rows(vocab, hidden.device)
        # On the CPU in fp32, the forward product reads the weight as a contiguous (D, V) matrix: MKL
        # runs that layout faster than the transposed view (docs/choices.md).
        weight_t = weight.t().contiguous() if _cpu_fp32(hidden, dtype) else weight.t()
        for start in range(0, hidden.size(0), step):
            rows = slice(start, start + step)
            logits = (hidden[rows] @ weight_t).float()  # (n, V); autocast may run the product in bf16
            # log-sum-exp with one exp over the block, in place: exp(logits - max) is also the
            # unnormalised softmax the gradient needs
            top = logits.amax(dim=-1)  # (n,)
            target_logit = logits.gather(-1, target[rows, None]).squeeze(-1)  # (n,)
            mean_logit = logits.mean(dim=-1)  # (n,)
            unnormalised = logits.sub_(top[:, None]).exp_()  # (n, V), in place of the logits
            total = unnormalised.sum(dim=-1)  # (n,)
            normaliser = top + total.log()  # (n,) log-sum-exp
            nll = normaliser - target_logit
            uniform = normaliser - mean_logit  # sum_v(-log p_v) / V
            loss_sum += ((1.0 - epsilon) * nll + epsilon * uniform).sum()
            nll_sum += nll.sum()
            if grad_hidden is None or grad_weight is None:  # no backward pass will need them
                continue
            # d loss / d logits = softmax - (1 - eps) * onehot - eps / V, built in place
            grad_logits = unnormalised.mul_(total.reciprocal()[:, None]).sub_(epsilon / vocab)  # (n, V)
            grad_logits.scatter_add_(-1, target[rows, None], grad_logits.new_full((nll.size(0), 1), epsilon - 1.0))
            with torch.autocast(hidden.device.type, enabled=False):
                grad_logits = grad_logits.to(dtype)
                h = hidden[rows].to(dtype)  # (n, D)
                if dtype == torch.float32:
                    torch.mm(grad_logits, weight_c, out=grad_hidden[rows])  # (n, D)
                    grad_weight.addmm_(grad_logits.t(), h)  # (V, D)
                else:
                    grad_hidden[rows] = grad_logits @ weight_c
                    grad_weight += (grad_logits.t() @ h).float()
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.input_dtypes = (hidden.dtype, weight.dtype)
        ctx.mark_non_differentiable(nll_sum)
        return loss_sum, nll_sum

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor | None, ...]:
        grad_hidden, grad_weight = ctx.saved_tensors
        hidden_dtype, weight_dtype = ctx.input_dtypes
        return ((grad_hidden * grad_loss).to(hidden_dtype), (grad_weight * grad_loss).to(weight_dtype), None, None)


def _cpu_fp32(hidden: Tensor, product_dtype: torch.dtype) -> bool:
    return hidden.device.type == "cpu" and product_dtype == torch.float32 and hidden.dtype == torch.float32


def _gradient_product_dtype(device_type: str) -> torch.dtype:
    """bf16 under bf16 autocast (as the forward product); fp32 otherwise, fp16 included: the gradient
    products run before the loss scale is applied, so fp16 could underflow there."""
    if torch.is_autocast_enabled(device_type) and torch.get_autocast_dtype(device_type) == torch.bfloat16:
        return torch.bfloat16
    return torch.float32


def output_loss(hidden: Tensor, weight: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed loss and summed NLL of ``target`` (N,) under ``hidden`` (N, D) @ ``weight`` (V, D)^T.

    Equal to ``label_smoothed_nll(hidden @ weight.T, target, epsilon)``, in blocks (see the module docstring).
    The NLL is for reporting only and carries no gradient.
    """
    loss, nll = _FusedOutputLoss.apply(hidden, weight, target, epsilon)  # type: ignore[no-untyped-call]
    return loss, nll
