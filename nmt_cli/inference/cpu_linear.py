"""Faster matrix products for a model loaded for inference on the CPU.

PyTorch multiplies fp32 matrices on the CPU through its BLAS (MKL in the official x86 wheels), as
``F.linear(x, W)`` = x W^T. A decoder step multiplies a few rows (beam x batch) by every weight, and
there MKL is slow on processors other than Intel's; oneDNN's inner product, which PyTorch also ships,
is faster, and (W x^T)^T through MKL, whose kernels for a narrow right operand are fast where those
for a short left one are not, faster still at a few rows. CTranslate2 makes the same vendor choice.

Given a weight in PyTorch's layout, oneDNN reorders it into its own blocked layout on every call; a
copy packed once into that layout (what PyTorch's compiler does) saves the reorder. So, where the
kernels below are chosen: one row through oneDNN with the plain weight, more rows through oneDNN with
the packed copy, and on processors without AVX-512 from ``BLAS_MIN_ROWS`` rows on through the BLAS
again (with AVX-512 the packed product stays ahead at every size). The packed copies cost the
weights' size in memory again. A model in bf16 on a processor that multiplies bf16 in hardware
(AVX512-BF16, AMX) gets the same treatment, one row included: PyTorch's own bf16 product reorders the
weight on every call.

One row (greedy decoding of one sentence, a server answering one request, a beam search's first step)
is another case: each weight is read from memory once per product, so memory bandwidth bounds it, and
neither MKL's one-row product nor oneDNN's uses both cores' share of it. On processors without AVX-512,
one row runs instead as a batch of products over parts of the input (one part per thread), each part
times its block of rows of W^T, then the products summed: MKL's batched product gives each thread a
part. The weight is stored transposed for this, so the blocks are views (no copy).

Every figure behind these choices is in docs/choices.md (``benchmarks/studies/bench_cpu_linear.py`` measures them).

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
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import NmtError
from ..utils.cpu import cpu_vendor, native_bf16_cpu

# Input rows for which a product runs as W @ x^T through the BLAS; others go through oneDNN: at a few rows
# the BLAS wins, from 8 oneDNN is as fast (measured: docs/choices.md).
SWAPPED_OPERANDS_ROWS = range(2, 8)
CHOICES = ("auto", "onednn", "packed", "blas")
# oneDNN's blocked weight layout is chosen for an expected number of rows; one layout packed for 16 serves
# 1-64 rows about as well as one packed for each (docs/choices.md), and one copy is all the memory it takes.
PACKED_FOR_ROWS = 16
# From this many input rows on (an encoder's groups of sources, default-batched beam search's first
# steps), the BLAS's product beats oneDNN's on processors without AVX-512; with AVX-512 the packed product
# stays ahead at every size, see blas_min_rows (``benchmarks/studies/bench_cpu_linear.py --micro``; figures in
# docs/choices.md).
BLAS_MIN_ROWS = 512


def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear(x, weight, bias)`` through oneDNN's inner product (fp32, CPU, no gradient); ``weight``
    in PyTorch's layout or packed by :func:`onednn_packed_weight`."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def onednn_linear_relu(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``relu(F.linear(x, weight, bias))`` in one oneDNN call (the ReLU applied as the product's results
    are written)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "relu", [], "")


def onednn_linear_add(x: Tensor, residual: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear(x, weight, bias) + residual`` in one oneDNN call."""
    return torch.ops.mkldnn._linear_pointwise.binary(x, residual, weight, bias, "add")


def onednn_packed_weight(weight: Tensor) -> Tensor:
    """A copy of ``weight`` in oneDNN's own blocked layout (an opaque tensor), so that an inner product
    does not reorder the weight on every call."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACKED_FOR_ROWS)


@functools.cache
def onednn_usable(dtype: torch.dtype = torch.float32) -> bool:
    """Whether this PyTorch has oneDNN's linear operator and it computes what ``F.linear`` does in
    ``dtype`` (fp32, or bf16 within its rounding).

    The operator is private (PyTorch's compiler emits it), so its presence and meaning are checked
    here, once per process and dtype, instead of trusted.
    """
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    generator = torch.Generator().manual_seed(0)
    x, weight, bias = (torch.randn(shape, generator=generator).to(dtype) for shape in ((3, 2, 16), (24, 16), (24,)))
    atol, rtol = (1e-4, 1.3e-6) if dtype == torch.float32 else (0.05, 0.02)
    try:
        with torch.inference_mode():
            expected = F.linear(x.float(), weight.float(), bias.float())
            plain = onednn_linear(x, weight, bias)
            packed_weight = onednn_packed_weight(weight)
            packed = onednn_linear(x, packed_weight, bias)
            relu = onednn_linear_relu(x, packed_weight, bias)
            added = onednn_linear_add(x, x[..., :1].expand(expected.shape).contiguous(), packed_weight, bias)
            wanted = ((plain, expected), (packed, expected), (relu, expected.relu()), (added, expected + x[..., :1].float()))
            return all(got.dtype == dtype and torch.allclose(got.float(), want, rtol, atol) for got, want in wanted)
    except (RuntimeError, TypeError, AttributeError):
        return False


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


def blas_min_rows() -> int | None:
    """From how many input rows on a product leaves oneDNN for the BLAS: ``BLAS_MIN_ROWS`` on processors
    without AVX-512, never with it (where each was measured: docs/choices.md)."""
    return None if "AVX512" in torch.backends.cpu.get_cpu_capability() else BLAS_MIN_ROWS


def packs_bf16_weights() -> bool:
    """Whether a bf16 model's linear layers read oneDNN-packed copies of their weights: under ``auto``
    or ``packed``, where the processor multiplies bf16 in hardware and oneDNN computes it: ``F.linear``
    reorders a bf16 weight on every call, a packed copy does it once (docs/choices.md)."""
    return cpu_linear_choice() in ("auto", "packed") and native_bf16_cpu() and onednn_usable(torch.bfloat16)


def one_row_in_parts() -> bool:
    """Whether one input row runs through the BLAS as a batch of products over parts of the input
    rather than through oneDNN: under ``auto``, on processors without AVX-512 (where it was measured
    faster; see the module's text)."""
    return cpu_linear_choice() == "auto" and "AVX512" not in torch.backends.cpu.get_cpu_capability()


class InferenceLinear(nn.Linear):
    """An ``nn.Linear`` whose product is chosen by the number of input rows (see the module's text);
    same parameters, same state-dict names."""

    packed_weight: Tensor | None = None
    one_row_parts: bool = False
    blas_from_rows: int | None = BLAS_MIN_ROWS  # None: oneDNN at every row count
    # forward() as a function over plain tensors, made at the first product (the threads are known
    # then): a module's parameters are looked up through ``nn.Module.__getattr__`` on every access, and
    # at one row the look-ups and checks of a method are a large share of a product (docs/choices.md).
    _product: Callable[[Tensor], Tensor] | None = None
    # product_relu() and product_add() as plain functions, made with them (see product_add)
    _fused: tuple[Callable[[Tensor], Tensor], Callable[[Tensor, Tensor], Tensor]] | None = None

    @classmethod
    def sharing(
        cls,
        linear: nn.Linear,
        packed: bool = False,
        one_row_parts: bool = False,
        blas_from_rows: int | None = BLAS_MIN_ROWS,
    ) -> InferenceLinear:
        """An InferenceLinear holding ``linear``'s own parameter objects (so tied weights stay tied),
        with a oneDNN-packed copy of the weight if ``packed`` (read by products of 2 or more rows in
        fp32, of every row count in bf16), one row through the BLAS in parts if ``one_row_parts`` (the
        weight then stored transposed), and products of ``blas_from_rows`` rows or more through the BLAS."""
        fast = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        fast.weight = linear.weight
        fast.bias = linear.bias
        fast.packed_weight = onednn_packed_weight(linear.weight) if packed else None
        fast.blas_from_rows = blas_from_rows
        if one_row_parts:
            store_weight_transposed(fast)  # the parts are then views of W^T; oneDNN reads the packed copy
            fast.one_row_parts = fast.weight.t().is_contiguous()
        return fast

    def forward(self, x: Tensor) -> Tensor:
        return self.product()(x)

    def __getstate__(self) -> dict[str, object]:
        """Copies and pickles leave the product function out: it holds this layer's tensors (a copy's
        would read the original's) and is made again at the copy's first product."""
        state = dict(self.__dict__)
        state.pop("_product", None)
        state.pop("_fused", None)
        return state

    def product(self) -> Callable[[Tensor], Tensor]:
        """:meth:`forward` as a plain function (what the flat decoder step calls)."""
        if self._product is None:
            self._product = self._make_product()
        return self._product

    def product_relu(self) -> Callable[[Tensor], Tensor]:
        """``relu(forward(x))`` as a plain function: one oneDNN call where the packed weight serves
        (several rows, fewer than ``BLAS_MIN_ROWS``), else the product then the ReLU."""
        return self._fused_products()[0]

    def product_add(self) -> Callable[[Tensor, Tensor], Tensor]:
        """``forward(x) + residual`` as a plain function of (x, residual), fused as :meth:`product_relu`.

        At a decoder step's few rows each PyTorch call costs microseconds of dispatch whatever its size
        (and with translation workers, a hand-over of Python's lock): the flat decoder step
        (:mod:`.decoder_step`) makes three fewer calls per layer with these two.
        """
        return self._fused_products()[1]

    def _fused_products(self) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor, Tensor], Tensor]]:
        if self._fused is None:
            self._fused = self._make_fused_products()
        return self._fused

    def _packed_rows(self) -> range:
        """The input row counts whose products read the packed weight: from 2 rows in fp32 (at one row
        oneDNN is as fast with the plain weight), from 1 in bf16 (packed is faster there: docs/choices.md),
        up to ``blas_from_rows``; none without a packed copy."""
        if self.packed_weight is None:
            return range(0)
        first = 2 if self.weight.dtype == torch.float32 else 1
        return range(first, self.blas_from_rows or torch.iinfo(torch.int64).max)

    def _make_fused_products(self) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor, Tensor], Tensor]]:
        product, bias, packed, in_features = self.product(), self.bias, self.packed_weight, self.in_features
        if packed is None:
            return (lambda x: F.relu(product(x))), (lambda x, residual: residual + product(x))
        packed_weight, packed_rows = packed, self._packed_rows()

        def fused(x: Tensor) -> bool:  # where product() would take the packed weight
            return x.numel() // in_features in packed_rows and not torch.is_grad_enabled()

        def product_relu(x: Tensor) -> Tensor:
            return onednn_linear_relu(x, packed_weight, bias) if fused(x) else F.relu(product(x))

        def product_add(x: Tensor, residual: Tensor) -> Tensor:
            return onednn_linear_add(x, residual, packed_weight, bias) if fused(x) else residual + product(x)

        return product_relu, product_add

    def _make_product(self) -> Callable[[Tensor], Tensor]:
        weight, bias, packed, in_features = self.weight, self.bias, self.packed_weight, self.in_features
        one_row = one_row_product(weight, bias) if self.one_row_parts else None
        packed_rows, blas_from_rows = self._packed_rows(), self.blas_from_rows or torch.iinfo(torch.int64).max
        packed_weight = weight if packed is None else packed  # packed_rows is empty without a packed copy

        def product(x: Tensor) -> Tensor:
            if torch.is_grad_enabled() and weight.requires_grad:  # oneDNN's operator has no gradient
                return F.linear(x, weight, bias)
            rows = x.numel() // in_features
            if rows == 1 and one_row is not None:
                return one_row(x)
            if rows in packed_rows:
                return onednn_linear(x, packed_weight, bias)
            if rows >= blas_from_rows:
                return F.linear(x, weight, bias)
            if rows in SWAPPED_OPERANDS_ROWS:
                return swapped_operands_linear(x, weight, bias)
            return onednn_linear(x, weight, bias)

        return product


def one_row_product(weight: Tensor, bias: Tensor | None) -> Callable[[Tensor], Tensor]:
    """``F.linear(x, weight, bias)`` for an ``x`` of one row, as a batch of products over parts of
    the input: part p of the row times block p of W^T's rows, then the parts' products summed.
    ``weight`` is stored transposed (W^T contiguous), so the blocks are views of it."""
    weight_t = weight.detach().t()  # (in, out), contiguous
    in_features, out_features = weight_t.shape
    whole, bias = weight.detach(), (None if bias is None else bias.detach())
    # The parts follow the calling thread's thread count (a translation worker may run on one of
    # them: decode/parallel.py), each cut a view made once.
    views: dict[int, Tensor] = {}

    def product(x: Tensor) -> Tensor:
        parts = one_row_parts_for(in_features)
        if parts == 1:
            return F.linear(x, whole, bias)  # W^T contiguous: MKL's faster layout for one row
        weight_parts = views.get(parts)
        if weight_parts is None:
            weight_parts = views.setdefault(parts, weight_t.view(parts, -1, out_features))  # (parts, in / parts, out)
        row = torch.bmm(x.reshape(parts, 1, -1), weight_parts).sum(0)  # (1, out)
        if bias is not None:
            row.add_(bias)
        return row.view(*x.shape[:-1], out_features)

    return product


def one_row_parts_for(in_features: int) -> int:
    """How many parts one-row products cut an input of ``in_features`` into: one per thread where that
    divides it, else 2 where there are 2 threads or more and that divides it, else 1.

    Fewer, larger parts won on 2 threads, and one whole product with W^T stored contiguous on 1
    (docs/choices.md).
    """
    threads = torch.get_num_threads()
    for parts in (threads, 2):
        if parts <= threads and in_features % parts == 0:
            return parts
    return 1


def swapped_operands_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear(x, weight, bias)`` computed as (W x^T)^T: the BLAS sees a narrow right operand."""
    columns = x.reshape(-1, x.size(-1)).t()  # (in, rows)
    product = torch.mm(weight, columns) if bias is None else torch.addmm(bias[:, None], weight, columns)
    return product.t().contiguous().view(*x.shape[:-1], weight.size(0))


@functools.cache
def int8_usable() -> bool:
    """Whether this PyTorch has the fbgemm int8 operators :class:`Int8Linear` runs on (PyTorch marks its quantized
    tensors deprecated; their absence is a one-line refusal, not a crash) and they compute ``F.linear``
    within int8 rounding. Checked once per process, as :func:`onednn_usable`."""
    generator = torch.Generator().manual_seed(0)
    x, weight, bias = (torch.randn(shape, generator=generator) for shape in ((3, 2, 16), (24, 16), (24,)))
    try:
        with torch.inference_mode():
            product = int8_product(weight, bias)
            expected = F.linear(x, weight, bias)
            return bool((product(x) - expected).abs().max() <= 0.1 * expected.abs().max())
    except (RuntimeError, AttributeError, TypeError, NotImplementedError):
        return False


def int8_product(weight: Tensor, bias: Tensor | None) -> Callable[[Tensor], Tensor]:
    """``F.linear(x, weight, bias)`` with the weight in int8 (one scale per output row) and each input quantized
    to int8 as it comes (dynamic quantization: fbgemm, what ``torch.ao.quantization.quantize_dynamic`` runs,
    CTranslate2's int8 on the CPU alike). At a decoder step's few rows it is 1.3x fp32's product for a 128x128
    weight and about 3x for a 256x8000 output layer (docs/cpu-decoding.md)."""
    import warnings

    w = weight.detach().float()
    scales = (w.abs().amax(dim=1) / 127).clamp_min(1e-12).double()
    with warnings.catch_warnings():  # PyTorch's notice that quantized tensors will move to torchao
        warnings.simplefilter("ignore")
        quantized = torch.quantize_per_channel(w, scales, torch.zeros_like(scales, dtype=torch.long), 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(quantized, None if bias is None else bias.detach().float())
    # reduce_range: 7-bit activations, so that AVX2's 16-bit accumulation of two products cannot saturate
    return lambda x: torch.ops.quantized.linear_dynamic(x, packed, True)


class Int8Linear(InferenceLinear):
    """An ``nn.Linear`` whose products run in int8 (:func:`int8_product`), for ``--dtype int8`` on the CPU; its
    float parameters stay (the state dict, tied embeddings and anything reading the weight see them unchanged)."""

    @classmethod
    def of(cls, linear: nn.Linear) -> Int8Linear:
        fast = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        fast.weight, fast.bias = linear.weight, linear.bias
        fast.packed_weight = None
        return fast

    def _make_product(self) -> Callable[[Tensor], Tensor]:
        weight, bias, int8 = self.weight, self.bias, int8_product(self.weight, self.bias)

        def product(x: Tensor) -> Tensor:
            if torch.is_grad_enabled() and weight.requires_grad:
                return F.linear(x, weight, bias)
            return int8(x)

        return product


def quantize_linears(model: nn.Module) -> None:
    """Every linear layer of an inference model on the CPU computes in int8 (:class:`Int8Linear`)."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and not isinstance(child, Int8Linear):
                setattr(parent, name, Int8Linear.of(child))


def prepare_for_cpu_inference(model: nn.Module, output: nn.Linear, dtype: torch.dtype = torch.float32) -> None:
    """Give ``model``'s linear layers the products chosen by the number of rows. For a model on the
    CPU that only runs inference, its weights in ``dtype``: in fp32 where :func:`use_onednn`, else
    the ``output`` projection's weight is stored transposed; in bf16 with packed weights where
    :func:`packs_bf16_weights`; otherwise as they are."""
    if dtype == torch.bfloat16:
        if packs_bf16_weights():
            _replace_linears(model, packed=True, in_parts=False)
        return
    if dtype != torch.float32:
        return
    if not use_onednn():
        store_weight_transposed(output)
        return
    _replace_linears(model, packed=cpu_linear_choice() != "onednn", in_parts=one_row_in_parts())


def _replace_linears(model: nn.Module, packed: bool, in_parts: bool) -> None:
    blas_from_rows = blas_min_rows()
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, InferenceLinear.sharing(child, packed, in_parts, blas_from_rows))


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
