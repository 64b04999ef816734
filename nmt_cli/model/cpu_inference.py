"""Faster matrix products for a model loaded for inference on the CPU in fp32.

PyTorch multiplies fp32 matrices on the CPU through its BLAS (MKL in the official x86 wheels).
A decoder step multiplies a few rows (beam x batch) by every weight, and there MKL is slow on
processors other than Intel's: on an AMD EPYC, 4 rows against a 32,000 x 512 output weight took
11.8 ms through MKL and 5.5 ms through oneDNN, which PyTorch also ships. CTranslate2 makes the same
choice for the same reason (MKL on Intel processors, oneDNN on others: ``CT2_VERBOSE=1``). oneDNN has
a fixed cost per call (about 15 us), so small weights, which stay in the core's cache, go through it
only from a few rows on, and the smallest never (:data:`ONEDNN_FROM_ROWS`;
``benchmarks/bench_cpu_linear.py`` and ``docs/benchmarks.md`` hold the measurements).

``NMT_CPU_LINEAR`` overrides the choice: ``onednn`` (on any processor), ``blas`` (never oneDNN),
``auto`` (the default). Without oneDNN, the output weight is instead stored transposed, BLAS's faster
layout for few rows. Neither changes a weight's values, name or tying, and neither is used in
training: oneDNN's operator has no gradient.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import NmtError

# Weight size (elements) -> fewest rows for which oneDNN beat MKL at every measured row count
# (1, 4, 16, 64, 256; AMD EPYC, AVX-512, 2 threads). Smaller weights stay with the BLAS.
ONEDNN_FROM_ROWS = {
    512 * 1024: 1,  # 1024x512 .. 32000x512: 1.1-2.3x from one row on
    256 * 1024: 4,  # 512x512, 1024x256, 256x1024: 0.7-0.9x at one row, 1.03-1.24x from four
}
CHOICES = ("auto", "onednn", "blas")


def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear(x, weight, bias)`` through oneDNN's inner product (fp32, CPU, no gradient)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


@functools.cache
def onednn_usable() -> bool:
    """Whether this PyTorch has oneDNN's linear operator and it computes what ``F.linear`` does.

    The operator is private (PyTorch's compiler emits it), so its presence and meaning are checked
    here, once per process, instead of trusted.
    """
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    generator = torch.Generator().manual_seed(0)
    x, weight, bias = (torch.randn(shape, generator=generator) for shape in ((3, 2, 16), (24, 16), (24,)))
    try:
        with torch.inference_mode():
            return bool(torch.allclose(onednn_linear(x, weight, bias), F.linear(x, weight, bias), atol=1e-4))
    except (RuntimeError, TypeError):
        return False


def cpu_vendor() -> str:
    """The processor's vendor string (``GenuineIntel``, ``AuthenticAMD``, ...), or "" where unknown."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def use_onednn() -> bool:
    """Whether linear layers run through oneDNN here: ``NMT_CPU_LINEAR``, else only where the BLAS
    is MKL and the processor is not Intel's (elsewhere the BLAS is tuned for it, or unmeasured)."""
    choice = os.environ.get("NMT_CPU_LINEAR", "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise NmtError(f"NMT_CPU_LINEAR={choice!r} is not one of {', '.join(CHOICES)}; unset it to let nmt choose")
    if choice == "blas":
        return False
    if not onednn_usable():
        if choice == "onednn":
            raise NmtError("NMT_CPU_LINEAR=onednn: this PyTorch has no usable oneDNN linear operator; unset it")
        return False
    vendor = cpu_vendor()
    return choice == "onednn" or (torch.backends.mkl.is_available() and vendor not in ("", "GenuineIntel"))


class OneDnnLinear(nn.Linear):
    """An ``nn.Linear`` whose forward pass runs through oneDNN from ``from_rows`` input rows on;
    same parameters, same state-dict names."""

    from_rows = 1

    @classmethod
    def sharing(cls, linear: nn.Linear, from_rows: int) -> OneDnnLinear:
        """A OneDnnLinear holding ``linear``'s own parameter objects (so tied weights stay tied)."""
        fast = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        fast.weight = linear.weight
        fast.bias = linear.bias
        fast.from_rows = from_rows
        return fast

    def forward(self, x: Tensor) -> Tensor:
        few_rows = x.numel() < self.from_rows * self.in_features
        if few_rows or (torch.is_grad_enabled() and self.weight.requires_grad):  # oneDNN's has no gradient
            return F.linear(x, self.weight, self.bias)
        return onednn_linear(x, self.weight, self.bias)


def prepare_for_cpu_inference(model: nn.Module, output: nn.Linear) -> None:
    """Route ``model``'s larger linear layers through oneDNN where :func:`use_onednn`, else store the
    ``output`` projection's weight transposed. For a model on the CPU in fp32 that only runs inference."""
    if not use_onednn():
        store_weight_transposed(output)
        return
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and (from_rows := onednn_from_rows(child.weight.numel())) is not None:
                setattr(parent, name, OneDnnLinear.sharing(child, from_rows))


def onednn_from_rows(weight_elements: int) -> int | None:
    """Fewest input rows for which a weight of this size goes through oneDNN; None: never."""
    for size, rows in sorted(ONEDNN_FROM_ROWS.items(), reverse=True):
        if weight_elements >= size:
            return rows
    return None


def store_weight_transposed(linear: nn.Linear) -> None:
    """Keep ``linear``'s weight (out, in) as the transpose of a contiguous (in, out) matrix.

    ``F.linear(h, W)`` multiplies ``h`` by ``W.T``; stored this way ``W.T`` is a plain contiguous
    matrix, which MKL multiplies faster when ``h`` has few rows: 1.1-2.6x for 1-64 rows against a
    32,000 x 512 weight, level from 128 rows on; no consistent difference for small weights.
    Values, shape, name and tying do not change. Calling it again changes nothing.
    """
    weight = linear.weight
    if weight.is_contiguous():
        with torch.no_grad():
            weight.data = weight.data.t().contiguous().t()
