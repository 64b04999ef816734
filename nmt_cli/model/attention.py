"""Multi-head scaled dot-product attention (Vaswani et al. 2017, section 3.2).

:func:`attention` is the pure function every caller uses; it picks one of three computations
(:func:`attention_kernel`): PyTorch's fused kernel (``F.scaled_dot_product_attention``),
:func:`attention_reference`, the formula written out, which also handles relative positions (Shaw
et al. 2018) because those need the attention weights themselves, and the same formula for
inference with its scores updated in place. Transformer-XL's relative attention (Dai et al. 2019) adds a
position term to the scores (``bias``), which the fast path takes as a float mask. Tests check
that the paths agree.

Masks are boolean and broadcast to ``(B, H, Tq, Tk)``; ``True`` means "may attend".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig
from .dropout import apply_dropout
from .packing import Layout, Packing, has_variable_length_kernel
from .positions import sinusoids
from .recurrence import Past, SentenceBlocks

KeyValuePair = tuple[Tensor, Tensor]  # one self-attention input's keys and values, each (B, H, T, d_k)


@dataclass
class RelativeTerms:
    """Relative position embeddings gathered for one (Tq, Tk) grid: each (Tq, Tk, d_k)."""

    keys: Tensor
    values: Tensor


def future(t_q: int, t_k: int, device: torch.device) -> Tensor:
    """The causal mask, True where a key lies in a query's future: (Tq, Tk), the queries being the last Tq of
    the Tk positions (it aligns bottom-right: incremental decoding's queries follow its cached keys)."""
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).triu(t_k - t_q + 1)


def attention_weights(
    q: Tensor,
    k: Tensor,
    mask: Tensor | None = None,
    causal: bool = False,
    relative: RelativeTerms | None = None,
    bias: Tensor | None = None,
    in_place: bool = False,
) -> Tensor:
    """softmax(q k^T / sqrt(d_k) + rel + bias) in fp32: (B, H, Tq, Tk), the formula every computation but
    PyTorch's kernels runs. ``in_place`` (inference: no gradient, no relative terms) scales and masks the
    scores where they lie instead of making copies."""
    scores = q @ k.transpose(-2, -1)  # (B, H, Tq, Tk)
    if in_place:
        assert relative is None and bias is None and not causal
        scores.mul_(1 / math.sqrt(q.size(-1)))
        return (scores if mask is None else scores.masked_fill_(mask.logical_not(), float("-inf"))).softmax(dim=-1)
    if relative is not None:
        scores = scores + torch.einsum("bhqd,qkd->bhqk", q, relative.keys)
    scores = scores / math.sqrt(q.size(-1))
    if bias is not None:
        scores = scores + bias
    if causal:
        scores = scores.masked_fill(future(scores.size(-2), scores.size(-1), q.device), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.float().softmax(dim=-1)  # softmax in fp32 under autocast


def attention_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout: float = 0.0,
    causal: bool = False,
    relative: RelativeTerms | None = None,
    bias: Tensor | None = None,
) -> Tensor:
    """softmax(q k^T / sqrt(d_k) + rel + bias) v, written out. q (B,H,Tq,d_k), k/v (B,H,Tk,d_k)."""
    weights = apply_dropout(attention_weights(q, k, mask, causal, relative, bias), dropout, training=True).to(v.dtype)
    out = weights @ v  # (B, H, Tq, d_k)
    if relative is not None:
        out = out + torch.einsum("bhqk,qkd->bhqd", weights, relative.values)
    return out


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout: float = 0.0,
    causal: bool = False,
    relative: RelativeTerms | None = None,
    bias: Tensor | None = None,
) -> Tensor:
    """softmax(q k^T / sqrt(d_k) + rel + bias) v: the one entry point, which picks the kernel
    (:func:`attention_kernel`). q (B, H, Tq, d_k), k/v (B, H, Tk, d_k); ``bias`` (B, H, Tq, Tk) is added
    to the scaled scores (Transformer-XL's position term)."""
    kernel = attention_kernel(q, k, dropout, causal, relative, bias)
    if kernel == "written out":
        return attention_reference(q, k, v, mask, dropout, causal, relative, bias)
    if kernel == "in place":
        return torch.matmul(attention_weights(q, k, mask, in_place=True), v)  # (B, H, Tq, d_k)
    if bias is not None:  # one float mask: the position term, -inf where a key is hidden
        mask, causal = _as_float_mask(bias.to(q.dtype), mask, causal), False
    t_q, t_k = q.size(-2), k.size(-2)
    if causal and t_q != t_k:
        # Queries are the last t_q positions of t_k (incremental decoding): the causal mask aligns
        # bottom-right, as in the reference. One new query may see every cached key (no mask at all);
        # SDPA's is_causal would align top-left, so several are masked explicitly.
        causal = False
        if t_q > 1:
            seen = ~future(t_q, t_k, q.device)
            mask = seen if mask is None else mask & seen
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal)


def step_heads(qkv: Tensor, heads: int) -> tuple[Tensor, ...]:
    """One new position per row (incremental decoding): a fused Q|K|V projection (N, 3 D) as queries, keys and
    values (N, H, 1, d_k) each, without a copy."""
    n, width = qkv.shape
    return qkv.view(n, 3, heads, 1, width // (3 * heads)).unbind(1)


def grouped_queries(q: Tensor, groups: int, heads: int) -> Tensor:
    """Queries (N, D) of ``groups`` sentences, N / groups rows each, as (groups, H, N / groups, d_k): a sentence's
    rows are query positions over one copy of its keys and values."""
    n, d_model = q.shape
    return q.view(groups, n // groups, heads, d_model // heads).transpose(1, 2)


def as_rows(context: Tensor) -> Tensor:
    """Attention's output (B, H, G, d_k) back to rows (B x G, D), the heads side by side."""
    b, h, g, d_k = context.shape
    return context.reshape(b, h * d_k) if g == 1 else context.transpose(1, 2).reshape(b * g, h * d_k)


def key_count(keys: Tensor) -> int:
    """How many key positions ``keys`` (B, H, T, d_k) hold."""
    return keys.size(2)


def packed_attention(q: Tensor, k: Tensor, v: Tensor, queries: Layout, keys: Layout, causal: bool) -> Tensor:
    """:func:`attention` within each sentence of a packed batch (``packing.py``): q (1, H, Nq, d_k) laid out
    by ``queries``, k and v (1, H, Nk, d_k) by ``keys``; the i-th query sentence sees the i-th key sentence
    alone. On CUDA in half precision, PyTorch's variable-length flash-attention kernel (no padding, no mask);
    elsewhere :func:`attention` itself over the padded layout (unpacked for it, packed again)."""
    q_rows, k_rows, v_rows = (t[0].transpose(0, 1) for t in (q, k, v))  # (N, H, d_k)
    if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and has_variable_length_kernel():
        from torch.nn.attention.varlen import varlen_attn  # PyTorch 2.9 on

        out = varlen_attn(
            q_rows, k_rows, v_rows, queries.offsets, keys.offsets, queries.width, keys.width,
            window_size=(-1, 0) if causal else (-1, -1),
        )  # fmt: skip
        assert isinstance(out, Tensor)  # no auxiliary outputs asked for
        return out.transpose(0, 1).unsqueeze(0)

    def padded(rows: Tensor, layout: Layout) -> Tensor:
        return layout.unpack(rows).transpose(1, 2)  # (B, H, T, d_k)

    mask = keys.mask[:, None, None, :]
    out = attention(padded(q_rows, queries), padded(k_rows, keys), padded(v_rows, keys), mask, causal=causal)
    return queries.pack(out.transpose(1, 2)).transpose(0, 1).unsqueeze(0)  # (1, H, Nq, d_k)


Kernel = Literal["fused", "written out", "in place"]

# On the CPU, PyTorch's flash-attention kernel is built for long sequences; NMT's are short. In fp32
# training it runs written out up to this many keys, where that is faster and the weights (B, H, Tq, Tk)
# kept for the backward pass stay small (the measurements: docs/choices.md).
WRITTEN_OUT_MAX_KEYS = 64
# Without gradients (inference, validation) it runs written out with the scores updated in place from
# this many query rows (B x H x Tq) on, up to this many queries per block: encoder blocks, a decoder
# step's one query per hypothesis, a beam's hypotheses over their sentence's source. Below, the
# kernel's fixed cost is the smaller; for long square blocks its tiling wins (docs/choices.md).
IN_PLACE_MIN_QUERY_ROWS = 64
IN_PLACE_MAX_QUERIES = 64


def attention_kernel(
    q: Tensor, k: Tensor, dropout: float, causal: bool, relative: RelativeTerms | None, bias: Tensor | None
) -> Kernel:
    """Which computation :func:`attention` runs: PyTorch's fused kernel, the formula written out (Shaw's
    relative positions need the weights themselves; bf16 and short keys in training on the CPU), or the
    formula written out for inference, its scores updated in place."""
    if relative is not None:
        return "written out"
    if q.device.type != "cpu":
        return "fused"
    if q.dtype == torch.bfloat16:
        # PyTorch's CPU flash-attention kernel is slow in bf16, its backward most; the formula written
        # out runs its products in bf16 and beat the kernel fed fp32 copies (docs/choices.md).
        return "written out"
    needs_gradient = torch.is_grad_enabled() and q.requires_grad
    if needs_gradient:
        return "written out" if k.size(-2) <= WRITTEN_OUT_MAX_KEYS else "fused"
    b, h, t_q, _ = q.shape
    in_place = (
        q.dtype == torch.float32
        and dropout == 0.0
        and bias is None
        and (not causal or t_q == 1)  # one new query sees every key: no causal mask
        and t_q <= IN_PLACE_MAX_QUERIES
        and b * h * t_q >= IN_PLACE_MIN_QUERY_ROWS
    )
    return "in place" if in_place else "fused"


def _as_float_mask(bias: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
    if causal:
        bias = bias.masked_fill(future(bias.size(-2), bias.size(-1), bias.device), float("-inf"))
    if mask is not None:
        bias = bias.masked_fill(~mask, float("-inf"))
    return bias


def relative_shift(by_distance: Tensor, t_k: int) -> Tensor:
    """Scores by distance -> scores by key, without a copy (Transformer-XL's relative shift, as a strided view).

    ``by_distance`` (B, H, Tq, Tq + Tk - 1) holds each query's scores for the distances
    Tk - 1, Tk - 2, ..., -(Tq - 1) (largest first); the queries are the last Tq of the Tk positions.
    Query i (at position Tk - Tq + i) and key j are ``Tk - Tq + i - j`` apart, which is column
    ``j + Tq - 1 - i``: each row starts one column further left than the row below it, so a row
    stride of one less than the row length reads every row's window.
    """
    b, h, t_q, length = by_distance.shape
    by_distance = by_distance.contiguous()
    return by_distance.as_strided(
        (b, h, t_q, t_k), (h * t_q * length, t_q * length, length - 1, 1), by_distance.storage_offset() + t_q - 1
    )


_TABLE_STEP = 64


def _rounded_up(count: int) -> int:
    return -(-count // _TABLE_STEP) * _TABLE_STEP


class XLPositions(nn.Module):
    """Transformer-XL's relative attention terms (Dai et al. 2019, section 3.3) for one attention layer.

    Scores are (q_i + u)^T k_j + (q_i + v)^T W_R R_(i-j): content, global content bias u, position
    through a separate projection W_R of the sinusoid R of the distance i - j, and global position
    bias v. Distances may be negative (the encoder attends both ways). u and v are per layer (the
    paper's code shares them across layers by default, ``untie_r`` unties them).
    """

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.position_keys = nn.Linear(d_model, d_model, bias=False)  # W_R
        self.content_bias = nn.Parameter(torch.zeros(n_heads, 1, self.d_k))  # u
        self.position_bias = nn.Parameter(torch.zeros(n_heads, 1, self.d_k))  # v
        nn.init.normal_(self.content_bias, std=0.02)  # as the paper's code
        nn.init.normal_(self.position_bias, std=0.02)
        # inference: W_R R for a range of distances, (weights' identity, longest t_k, longest t_q, keys)
        self._table: tuple[tuple[int, int, torch.dtype], int, int, Tensor] | None = None

    def distance_keys(self, t_q: int, t_k: int, dtype: torch.dtype) -> Tensor:
        """W_R R for the distances t_k - 1 down to -(t_q - 1): (H, t_q + t_k - 1, d_k).

        Without gradient the projection is taken once for a range of distances and sliced: incremental decoding
        asks for it at every step of every layer, and with a past (segment-level recurrence) over hundreds of
        keys, where the projection cost as much as the rest of a small batch's step. The table is rebuilt when the
        weights change (an optimizer step between validations) or a wider range is asked for."""
        if torch.is_grad_enabled():
            return self._projected(torch.arange(t_k - 1, -t_q, -1, device=self.position_keys.weight.device), dtype)
        weight = self.position_keys.weight
        key = (weight.data_ptr(), weight._version, dtype)
        table = self._table
        if table is None or table[0] != key or table[1] < t_k or table[2] < t_q:
            # Sized by what is asked for, rounded up so that decoding, whose key count grows by one a step, rebuilds
            # once every _TABLE_STEP steps; a rebuild for new weights keeps the size (never grows it by itself).
            most_k = _rounded_up(max(t_k, table[1] if table and table[0] == key else 1))
            most_q = _rounded_up(max(t_q, table[2] if table and table[0] == key else 1))
            distances = torch.arange(most_k - 1, -most_q, -1, device=weight.device)
            table = self._table = (key, most_k, most_q, self._projected(distances, dtype))
        start = table[1] - t_k  # the table starts at distance most_k - 1
        return table[3][:, start : start + t_k + t_q - 1]

    def _projected(self, distances: Tensor, dtype: torch.dtype) -> Tensor:
        keys = self.position_keys(sinusoids(distances, self.position_keys.in_features).to(dtype))
        return keys.view(-1, self.n_heads, self.d_k).transpose(0, 1)

    def scores(self, q: Tensor, t_k: int) -> Tensor:
        """The position term (q + v)^T W_R R_(i-j) / sqrt(d_k) for queries q (B, H, Tq, d_k): (B, H, Tq, Tk)."""
        b, h, t_q, d_k = q.shape
        keys = self.distance_keys(t_q, t_k, q.dtype)  # (H, Tq + Tk - 1, d_k), the same for every row
        # One product per head over all rows' queries: a matmul broadcasting the keys over the batch would copy
        # them once per row (per hypothesis, when decoding), which cost more than the product itself.
        queries = (q + self.position_bias.to(q.dtype)).transpose(0, 1).reshape(h, b * t_q, d_k)
        by_distance = torch.bmm(queries, keys.transpose(1, 2)).view(h, b, t_q, -1).transpose(0, 1)
        return relative_shift(by_distance, t_k) / math.sqrt(self.d_k)


class RelativePositions(nn.Module):
    """Learned relative position embeddings a^K and a^V, clipped at distance ``k`` (Shaw et al. 2018)."""

    def __init__(self, d_k: int, max_distance: int) -> None:
        super().__init__()
        self.max_distance = max_distance
        self.keys = nn.Embedding(2 * max_distance + 1, d_k)
        self.values = nn.Embedding(2 * max_distance + 1, d_k)
        nn.init.xavier_uniform_(self.keys.weight)
        nn.init.xavier_uniform_(self.values.weight)

    def forward(self, t_q: int, t_k: int) -> RelativeTerms:
        """Terms for queries at positions t_k - t_q .. t_k - 1 against keys 0 .. t_k - 1."""
        device = self.keys.weight.device
        q_pos = torch.arange(t_k - t_q, t_k, device=device)
        k_pos = torch.arange(t_k, device=device)
        distance = (k_pos[None, :] - q_pos[:, None]).clamp(-self.max_distance, self.max_distance)
        index = distance + self.max_distance  # (Tq, Tk)
        return RelativeTerms(self.keys(index), self.values(index))


class _Heads(nn.Module):
    """What self- and cross-attention share: the split into heads, dropout, the output projection."""

    out: nn.Linear  # the output projection, made by each subclass after its input projections

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.d_k = config.n_heads, config.d_model // config.n_heads
        self.dropout = config.attention_dropout

    def _split(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.d_k).transpose(1, 2)  # (B, H, T, d_k)

    def _merge(self, context: Tensor) -> Tensor:
        """(B, H, T, d_k) -> the output projection of the heads side by side, (B, T, D)."""
        b, _, t, _ = context.shape
        return self.out(context.transpose(1, 2).reshape(b, t, self.n_heads * self.d_k))

    def _attention_dropout(self) -> float:
        return self.dropout if self.training else 0.0


class SelfAttention(_Heads):
    """Self-attention with one fused Q|K|V projection and, by ``config.positions``, relative
    positions: Shaw et al.'s learned ones or Transformer-XL's. Over whole sequences; decoding one
    token at a time reads the same weights and :meth:`position_terms` (``inference/step.py``)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        # created in this order (qkv, out, positions): the order draws the initial weights from the seed
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)
        shaw = config.positions == "relative"
        self.relative = RelativePositions(self.d_k, config.max_relative_position) if shaw else None
        self.xl = XLPositions(config.d_model, config.n_heads) if config.positions == "xl" else None

    def forward(
        self,
        x: Tensor,
        mask: Tensor | Layout | None = None,
        causal: bool = False,
        past: Past | SentenceBlocks | None = None,
    ) -> tuple[Tensor, KeyValuePair]:
        """Attention of ``x`` (B, T, D) over itself, and over ``past``'s keys/values first where given
        (segment-level recurrence, ``recurrence.py``: no gradient through them); returns its output and this
        input's keys and values (B, H, T, d_k), the next sentence's past. A packed batch's ``x`` is (1, N, D) and
        its ``mask`` the sentences' :class:`Layout`. A batch of chains (recurrence in training) gives its
        :class:`SentenceBlocks` as ``past``: they say what each position attends to, mask and causality included."""
        q, k, v = (self._split(t) for t in self.qkv(x).chunk(3, dim=-1))  # each (B, H, T, d_k)
        if isinstance(mask, Layout):  # a packed batch (packing.py): absolute positions only, no past
            return self._merge(packed_attention(q, k, v, mask, mask, causal)), (k, v)
        own = k, v
        if isinstance(past, SentenceBlocks):
            q, _, bias = self.position_terms(q, k.size(2))
            return self._merge(past.attention(q, k, v, bias, self._attention_dropout())), own
        if past is not None:
            mask = past.mask(mask, x.size(0), k.size(2))
            k, v = torch.cat([past.keys.to(k.dtype), k], dim=2), torch.cat([past.values.to(v.dtype), v], dim=2)
        q, relative, bias = self.position_terms(q, k.size(2))
        context = attention(q, k, v, mask, self._attention_dropout(), causal, relative, bias)  # (B, H, T, d_k)
        return self._merge(context), own  # (B, T, D)

    def attention_map(self, x: Tensor, mask: Tensor | None = None, causal: bool = False) -> Tensor:
        """The attention weights (B, H, T, T) that :meth:`forward` applies to the same input (no cache)."""
        q, k, _ = (self._split(t) for t in self.qkv(x).chunk(3, dim=-1))
        q, relative, bias = self.position_terms(q, k.size(2))
        return attention_weights(q, k, mask, causal, relative, bias)

    def position_terms(self, q: Tensor, t_k: int) -> tuple[Tensor, RelativeTerms | None, Tensor | None]:
        """What relative positions add for queries q (B, H, Tq, d_k), the last Tq of t_k positions: the
        queries with XL's content bias u added, Shaw's terms, and XL's position term (B, H, Tq, Tk)."""
        relative = self.relative(q.size(2), t_k) if self.relative is not None else None
        if self.xl is None:
            return q, relative, None
        bias = self.xl.scores(q, t_k)  # uses q before u is added: (q + v) W_R R
        return q + self.xl.content_bias.to(q.dtype), relative, bias

    def input_projections(self) -> list[nn.Linear]:
        """The fused Q|K|V projection of the input."""
        return [self.qkv]

    def value_and_output_weights(self) -> list[Tensor]:
        """The value and output projection weights (scaled by T-Fixup)."""
        return [self.qkv.weight[2 * self.out.in_features :], self.out.weight]


class CrossAttention(_Heads):
    """Attention from the decoder over the encoder output: Q of the decoder state, fused K|V of the memory."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.q = nn.Linear(config.d_model, config.d_model)
        self.kv = nn.Linear(config.d_model, 2 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)

    def memory_keys_values(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of the encoder output ``memory`` (B, S, D): each (B, H, S, d_k)."""
        k, v = self.kv(memory).chunk(2, dim=-1)
        return self._split(k), self._split(v)

    def forward(self, x: Tensor, memory: Tensor, mask: Tensor | Packing | None = None) -> Tensor:
        """``x`` (B, T, D) over ``memory`` (B, S, D); a packed batch's are (1, N, D) and its ``mask`` the
        :class:`Packing` of its two sides."""
        q = self._split(self.q(x))  # (B, H, T, d_k)
        k, v = self.memory_keys_values(memory)  # (B, H, S, d_k)
        if isinstance(mask, Packing):
            return self._merge(packed_attention(q, k, v, mask.target, mask.source, causal=False))
        return self._merge(attention(q, k, v, mask, self._attention_dropout()))  # (B, T, D)

    def attention_map(self, x: Tensor, memory: Tensor, mask: Tensor | None = None) -> Tensor:
        """The attention weights (B, H, Tq, S) that :meth:`forward` applies to the same inputs."""
        q, (k, _) = self._split(self.q(x)), self.memory_keys_values(memory)
        return attention_weights(q, k, mask)

    def head_weights(self, x: Tensor, memory: Tensor, mask: Tensor | None, head: int) -> Tensor:
        """The attention weights (B, Tq, S) of one head, from that head's slices of the projections alone:
        what guided alignment trains (the fused forward pass never materialises them)."""
        rows = slice(head * self.d_k, (head + 1) * self.d_k)
        q = F.linear(x, self.q.weight[rows], self.q.bias[rows])  # (B, Tq, d_k)
        k = F.linear(memory, self.kv.weight[rows], self.kv.bias[rows])  # the keys are kv's first half
        return attention_weights(q.unsqueeze(1), k.unsqueeze(1), mask)[:, 0]

    def input_projections(self) -> list[nn.Linear]:
        """The query projection and the fused K|V projection of the memory."""
        return [self.q, self.kv]

    def value_and_output_weights(self) -> list[Tensor]:
        """The value and output projection weights (scaled by T-Fixup)."""
        return [self.kv.weight[self.out.in_features :], self.out.weight]


Attention = SelfAttention | CrossAttention
