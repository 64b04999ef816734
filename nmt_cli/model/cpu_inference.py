"""Faster matrix products for a model loaded for inference on the CPU in fp32.

PyTorch multiplies fp32 matrices on the CPU through its BLAS (MKL in the official x86 wheels), as
``F.linear(x, W)`` = x W^T. A decoder step multiplies a few rows (beam x batch) by every weight, and
there MKL is slow on processors other than Intel's: on an AMD EPYC, the products of one decoder step
of a base-size model (all weights, one after another, 4 rows) took 23 ms through ``F.linear``, 12.6 ms
through oneDNN's inner product, which PyTorch also ships, and 8.5 ms as (W x^T)^T through MKL, whose
kernels for a narrow right operand are fast where those for a short left one are not. CTranslate2
makes the same vendor choice (MKL on Intel processors, oneDNN on others: ``CT2_VERBOSE=1``).

Given a weight in PyTorch's layout, oneDNN reorders it into its own blocked layout on every call; a
copy packed once into that layout (what PyTorch's compiler does) saves the reorder: on an AMD EPYC of
the Zen 3 generation (AVX2), products of 4-64 rows 1.2-2.5x faster than with the plain weight and
faster than W x^T at 4 rows; level at one row. So, where the kernels below are chosen: one row through
oneDNN with the plain weight, more rows through oneDNN with the packed copy (``benchmarks/bench_cpu_linear.py``
and ``docs/benchmarks.md`` hold the measurements). The packed copies cost the weights' size in memory again.

One row (greedy decoding of one sentence, a server answering one request) is another case: each
weight is read from memory once per product, so memory bandwidth bounds it, and neither MKL's one-row
product nor oneDNN's uses both cores' share of it. On processors without AVX-512 (Zen 3 measured), one
row runs instead as a batch of products over parts of the weight's output rows (one part per thread, at
least two), each part stored transposed: MKL's batched product gives each thread a part. The parts are
a copy of the weight, made at the first one-row product, so a model that never multiplies one row does
not hold it (a beam search's first step does: one row per sentence). Measured over a decoder step's
weights in sequence (AMD EPYC Zen 3, 2 threads): small model 976 -> 637 us, base 8.4 -> 6.6 ms; greedy
decoding at batch 1 1.23x (small) and 1.07x (base) faster end to end (median of 3 alternating runs),
the same translations. It also avoids oneDNN's 30-50 us a call before any arithmetic.

``NMT_CPU_LINEAR`` overrides the choice: ``packed`` (oneDNN by rows on any processor, one row
included), ``onednn`` (the previous kernels: 2-7 rows as W x^T through the BLAS, else oneDNN
with the plain weight; no copies), ``blas`` (always ``F.linear``), ``auto`` (the default: ``packed``
where the BLAS is MKL and the processor is not Intel's, with one row through the BLAS in parts where it
has no AVX-512). With ``blas``, the output weight is instead stored transposed, the BLAS's
faster layout for few rows. None changes a weight's values, name or tying, and none is used in training:
oneDNN's operator has no gradient.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import NmtError

# Input rows for which a product runs as W @ x^T through the BLAS; others go through oneDNN. Measured
# over a decoder step's weights in sequence (AMD EPYC, AVX-512, 2 threads), small and base models:
# 2-4 rows 1.4-1.6x faster than oneDNN and 2.4-4x faster than F.linear; level with oneDNN at 8.
SWAPPED_OPERANDS_ROWS = range(2, 8)
CHOICES = ("auto", "onednn", "packed", "blas")
# oneDNN's blocked weight layout is chosen for an expected number of rows; one layout packed for 16
# served 1-64 rows within a few per cent of a layout packed for each (AMD EPYC Zen 3).
PACKED_FOR_ROWS = 16
# The fewest parts a weight is cut into for one-row products, where ``one_row_in_parts()``; there are
# as many as threads (MKL's batched product gives each thread its own part), at least this many: on
# 2 threads (AMD EPYC Zen 3) 2 parts beat 4, and on 1 thread 2 parts still beat the whole weight
# through MKL or oneDNN (small model's step 1.46 against 2.18 ms), by the transposed layout.
MIN_ONE_ROW_PARTS = 2


def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear(x, weight, bias)`` through oneDNN's inner product (fp32, CPU, no gradient); ``weight``
    in PyTorch's layout or packed by :func:`onednn_packed_weight`."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def onednn_packed_weight(weight: Tensor) -> Tensor:
    """A copy of ``weight`` in oneDNN's own blocked layout (an opaque tensor), so that an inner product
    does not reorder the weight on every call."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACKED_FOR_ROWS)


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
            expected = F.linear(x, weight, bias)
            plain = onednn_linear(x, weight, bias)
            packed = onednn_linear(x, onednn_packed_weight(weight), bias)
            return bool(torch.allclose(plain, expected, atol=1e-4) and torch.allclose(packed, expected, atol=1e-4))
    except (RuntimeError, TypeError, AttributeError):
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


def cpu_linear_choice() -> str:
    """``NMT_CPU_LINEAR``, validated: one of ``CHOICES`` (unset or empty: ``auto``)."""
    choice = os.environ.get("NMT_CPU_LINEAR", "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise NmtError(f"NMT_CPU_LINEAR={choice!r} is not one of {', '.join(CHOICES)}; unset it to let nmt choose")
    return choice


def use_onednn() -> bool:
    """Whether linear layers run through oneDNN here: ``NMT_CPU_LINEAR``, else only where the BLAS
    is MKL and the processor is not Intel's (elsewhere the BLAS is tuned for it, or unmeasured);
    with packed weights unless ``NMT_CPU_LINEAR=onednn``."""
    choice = cpu_linear_choice()
    if choice == "blas":
        return False
    if not onednn_usable():
        if choice in ("onednn", "packed"):
            raise NmtError(f"NMT_CPU_LINEAR={choice}: this PyTorch has no usable oneDNN linear operator; unset it")
        return False
    vendor = cpu_vendor()
    return choice in ("onednn", "packed") or (torch.backends.mkl.is_available() and vendor not in ("", "GenuineIntel"))


def one_row_in_parts() -> bool:
    """Whether one input row runs through the BLAS as a batch of products over parts of the weight
    rather than through oneDNN: under ``auto``, on processors without AVX-512 (where it was measured
    faster; see the module's text)."""
    return cpu_linear_choice() == "auto" and "AVX512" not in torch.backends.cpu.get_cpu_capability()


class InferenceLinear(nn.Linear):
    """An ``nn.Linear`` whose product is chosen by the number of input rows (see the module's text);
    same parameters, same state-dict names."""

    packed_weight: Tensor | None = None
    one_row_parts: bool = False
    # The weight's output rows cut into parts, each stored transposed: (parts, in, out / parts); made
    # at the first one-row product.
    weight_parts: Tensor | None = None

    @classmethod
    def sharing(cls, linear: nn.Linear, packed: bool = False, one_row_parts: bool = False) -> InferenceLinear:
        """An InferenceLinear holding ``linear``'s own parameter objects (so tied weights stay tied),
        with a oneDNN-packed copy of the weight for products of 2 or more rows if ``packed``, and one
        row through the BLAS in parts if ``one_row_parts``."""
        fast = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        fast.weight = linear.weight
        fast.bias = linear.bias
        fast.packed_weight = onednn_packed_weight(linear.weight) if packed else None
        fast.one_row_parts = one_row_parts
        return fast

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled() and self.weight.requires_grad:  # oneDNN's operator has no gradient
            return F.linear(x, self.weight, self.bias)
        rows = x.numel() // self.in_features
        if rows == 1 and self.one_row_parts:
            return self.one_row_product(x)
        if self.packed_weight is not None and rows > 1:
            return onednn_linear(x, self.packed_weight, self.bias)
        if rows in SWAPPED_OPERANDS_ROWS:
            return swapped_operands_linear(x, self.weight, self.bias)
        return onednn_linear(x, self.weight, self.bias)

    def one_row_product(self, x: Tensor) -> Tensor:
        """``F.linear(x, weight, bias)`` for an ``x`` of one row, as a batch of products over parts of
        the weight: (1, in) x (in, out / parts) for each part, side by side the output row."""
        if self.weight_parts is None:
            self.weight_parts = weight_in_parts(self.weight.detach(), one_row_parts_for(self.out_features))
        parts = self.weight_parts.size(0)
        row = x.reshape(1, 1, self.in_features).expand(parts, 1, self.in_features)
        if self.bias is None:
            product = torch.bmm(row, self.weight_parts)
        else:
            product = torch.baddbmm(self.bias.view(parts, 1, -1), row, self.weight_parts)
        return product.view(*x.shape[:-1], self.out_features)  # (parts, 1, out / parts) is the row in order


def one_row_parts_for(out_features: int) -> int:
    """How many parts a weight of ``out_features`` output rows is cut into for one-row products: one
    per thread (at least ``MIN_ONE_ROW_PARTS``) where that divides the rows, else 2, else 1."""
    for parts in (max(MIN_ONE_ROW_PARTS, torch.get_num_threads()), MIN_ONE_ROW_PARTS):
        if out_features % parts == 0:
            return parts
    return 1


def weight_in_parts(weight: Tensor, parts: int) -> Tensor:
    """``weight`` (out, in) as ``parts`` consecutive blocks of output rows, each transposed and
    contiguous: (parts, in, out / parts), a copy."""
    return weight.reshape(parts, -1, weight.size(1)).transpose(1, 2).contiguous()


def swapped_operands_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear(x, weight, bias)`` computed as (W x^T)^T: the BLAS sees a narrow right operand."""
    columns = x.reshape(-1, x.size(-1)).t()  # (in, rows)
    product = torch.mm(weight, columns) if bias is None else torch.addmm(bias[:, None], weight, columns)
    return product.t().contiguous().view(*x.shape[:-1], weight.size(0))


def prepare_for_cpu_inference(model: nn.Module, output: nn.Linear) -> None:
    """Give ``model``'s linear layers the products chosen by the number of rows where
    :func:`use_onednn`, else store the ``output`` projection's weight transposed. For a model on the
    CPU in fp32 that only runs inference."""
    if not use_onednn():
        store_weight_transposed(output)
        return
    packed = cpu_linear_choice() != "onednn"
    in_parts = one_row_in_parts()
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, InferenceLinear.sharing(child, packed, in_parts))


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
