"""The encoder-decoder Transformer (Vaswani et al. 2017), with its published variants.

Read top-down: embeddings -> encoder -> decoder -> output projection -> loss, all over whole
sequences; decoding one token at a time reads the same weights in ``inference/step.py``. Departures
from the paper are opt-in through ``ModelConfig`` (positions, residual arrangement, initialisation,
tying).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator, Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..config import ModelConfig
from .dropout import Dropout
from .guided import GUIDED_HEAD, alignment_loss, guided_layer
from .layers import DecoderLayer, EncoderLayer, Residual
from .loss import label_smoothed_nll, output_loss
from .packing import Layout, Packing
from .positions import LearnedPositions, SinusoidalPositions
from .recurrence import Kept, Past, SentenceBlocks, cross_blocks


class Transformer(nn.Module):
    """Encoder-decoder Transformer over integer token ids (pad id 0 unless told otherwise)."""

    def __init__(self, config: ModelConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0) -> None:
        super().__init__()
        self.config = config
        self.pad_id = pad_id
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        d = config.d_model
        if config.share_embeddings and src_vocab != tgt_vocab:
            raise ValueError("share_embeddings needs one joint vocabulary")
        self.src_embed = nn.Embedding(src_vocab, d, padding_idx=pad_id)
        self.tgt_embed = self.src_embed if config.share_embeddings else nn.Embedding(tgt_vocab, d, padding_idx=pad_id)
        self.embed_scale = math.sqrt(d)
        self.positions: SinusoidalPositions | LearnedPositions | None = _positions(config)
        self.embed_dropout = Dropout(config.dropout)
        arrangement = config.arrangement
        self.encoder = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))
        if arrangement == "rezero" and config.rezero_per == "layer":
            _share_rezero_alpha(self.encoder, self.decoder)
        # Pre-norm stacks end in a LayerNorm, else the last residual sum is never normalised.
        self.encoder_norm = nn.LayerNorm(d) if arrangement == "pre" else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d) if arrangement == "pre" else nn.Identity()
        self.output = nn.Linear(d, tgt_vocab, bias=config.output_bias)
        if config.tie_output:
            self.output.weight = self.tgt_embed.weight
        self.activation_checkpointing = False
        self.packed = False  # train.packed: training batches without padding (packing.py); the trainer sets it
        _initialise(self, config)

    # ----------------------------------------------------------------- embeddings

    def _embed(self, embedding: nn.Embedding, tokens: Tensor) -> Tensor:
        positions = self.positions(tokens.size(1)) if self.positions is not None else None
        return self._scaled_with_positions(embedding(tokens), positions)  # (B, T, D)

    def _embed_packed(self, embedding: nn.Embedding, tokens: Tensor, layout: Layout) -> Tensor:
        """:meth:`_embed` of the real tokens of ``tokens`` (B, T) alone, laid end to end: (1, N, D)."""
        positions = self.positions.at(layout.positions) if self.positions is not None else None
        return self._scaled_with_positions(embedding(layout.pack(tokens)), positions).unsqueeze(0)

    def _scaled_with_positions(self, x: Tensor, positions: Tensor | None) -> Tensor:
        """Embeddings scaled by sqrt(d_model), plus the absolute positions' (section 3.4), then dropout."""
        x = x * self.embed_scale
        if positions is not None:
            x = x + (positions if positions.dtype == x.dtype else positions.to(x.dtype))
        return self.embed_dropout(x) if self.training else x

    @property
    def encoder_layers(self) -> list[EncoderLayer]:
        """The encoder's layers, typed (``nn.ModuleList`` items are plain ``Module``s to a type checker)."""
        return cast("list[EncoderLayer]", list(self.encoder))

    @property
    def decoder_layers(self) -> list[DecoderLayer]:
        return cast("list[DecoderLayer]", list(self.decoder))

    # ----------------------------------------------------------------- encoder / decoder

    def encode(self, src: Tensor, past: list[Past] | None = None) -> tuple[Tensor, Tensor]:
        """Encode ``src`` (B, S) to memory (B, S, D); also return the key mask (B, 1, 1, S). With ``past`` (per
        layer, segment-level recurrence: ``recurrence.py``) each layer attends to the previous sentences too.

        At inference on the CPU, sources are encoded in groups of similar length and at most
        ``ENCODE_GROUP_MAX_TOKENS`` positions (:func:`length_groups`), each only as wide as its longest:
        the products skip most of the padding (a quarter of Multi30k test 2016's positions at the
        default 6,000-token batches) and a group's activations stay in the processor's cache. Memory at
        padded positions then differs (zero beyond a group's width); it is never attended to."""
        memory, src_mask, _ = self._encoded_in_groups(src, past, keep=False)
        return memory, src_mask

    def encode_kept(self, src: Tensor, past: list[Past] | None = None) -> tuple[Tensor, Tensor, Kept]:
        """:meth:`encode`, and each layer's self-attention keys/values of ``src`` (detached): the next sentence's
        past (``model.recurrence``); zero at padded positions."""
        return self._encoded_in_groups(src, past, keep=True)

    def _encoded_in_groups(self, src: Tensor, past: list[Past] | None, keep: bool) -> tuple[Tensor, Tensor, Kept]:
        """:meth:`encode` (and with ``keep`` :meth:`encode_kept`), in groups of similar length where it pays: each
        group's past only as wide as the group's longest."""
        src_mask = (src != self.pad_id)[:, None, None, :]
        grouped = not (self.training or torch.is_grad_enabled() or src.device.type != "cpu")
        positions = torch.arange(1, src.size(1) + 1, device=src.device)
        widths = (src_mask[:, 0, 0] * positions).amax(dim=1).clamp(min=1).tolist() if grouped else []  # to the last token
        groups = length_groups(widths)
        if len(groups) <= 1:
            whole, whole_kept = self._encoded(src, src_mask, past, keep)
            return whole, src_mask, whole_kept
        memory: Tensor | None = None
        kept: Kept = []
        for rows in groups:
            width, index = widths[rows[0]], torch.tensor(rows, device=src.device)
            group_past = [layer.rows(index) for layer in past] if past is not None else None
            part, part_kept = self._encoded(src[index, :width], src_mask[index, :, :, :width], group_past, keep)
            if memory is None:
                memory = part.new_zeros((*src.shape, part.size(-1)))
                shape = (len(src), self.config.n_heads, src.size(1), part.size(-1) // self.config.n_heads)
                kept = [(part.new_zeros(shape), part.new_zeros(shape)) for _ in part_kept]
            memory[index, :width] = part
            for (keys, values), (k, v) in zip(kept, part_kept):
                keys[index, :, :width], values[index, :, :width] = k, v
        assert memory is not None
        return memory, src_mask, kept

    def decode(self, tgt_in: Tensor, memory: Tensor, src_mask: Tensor, past: list[Past] | None = None) -> Tensor:
        """Decoder hidden states (B, T, D) for the whole shifted target (training, scoring); ``past`` as
        :meth:`encode`'s, for the decoder's self-attention."""
        return self._decoded(tgt_in, memory, src_mask, past)[0]

    def decode_kept(
        self, tgt_in: Tensor, memory: Tensor, src_mask: Tensor, past: list[Past] | None = None
    ) -> tuple[Tensor, Kept]:
        """:meth:`decode`, and each layer's self-attention keys/values of ``tgt_in`` (as :meth:`encode_kept`)."""
        hidden, kept, _ = self._decoded(tgt_in, memory, src_mask, past, keep=True)
        return hidden, kept

    def decode_aligned(
        self, tgt_in: Tensor, memory: Tensor, src_mask: Tensor, past: list[Past] | None = None
    ) -> tuple[Tensor, Tensor]:
        """:meth:`decode`, and the guided head's cross-attention weights (B, T, S) (guided alignment)."""
        hidden, _, weights = self._decoded(tgt_in, memory, src_mask, past, align_at=guided_layer(len(self.decoder)))
        assert weights is not None
        return hidden, weights

    def _packed_hidden(self, src: Tensor, tgt_in: Tensor, packing: Packing) -> Tensor:
        """:meth:`encode` then :meth:`decode` of a packed batch: the decoder states of the target's real
        positions, (1, N, D) in ``packing.target``'s order."""
        x = self._embed_packed(self.src_embed, src, packing.source)
        memory = self.encoder_norm(self._through(self.encoder_layers, x, packing.source)[0])
        y = self._embed_packed(self.tgt_embed, tgt_in, packing.target)
        return self.decoder_norm(self._through(self.decoder_layers, y, memory, packing)[0])

    # ----------------------------------------------------------------- the one route through the layers

    def _encoded(
        self, src: Tensor, src_mask: Tensor, past: list[Past] | None = None, keep: bool = False
    ) -> tuple[Tensor, Kept]:
        x, kept, _ = self._through(self.encoder_layers, self._embed(self.src_embed, src), src_mask, past=past, keep=keep)
        return self.encoder_norm(x), kept

    def _decoded(
        self,
        tgt_in: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        past: list[Past] | None = None,
        keep: bool = False,
        align_at: int | None = None,
    ) -> tuple[Tensor, Kept, Tensor | None]:
        x = self._embed(self.tgt_embed, tgt_in)
        y, kept, weights = self._through(self.decoder_layers, x, memory, src_mask, past=past, keep=keep, align_at=align_at)
        return self.decoder_norm(y), kept, weights

    def _through(
        self,
        layers: Sequence[EncoderLayer] | Sequence[DecoderLayer],
        x: Tensor,
        *inputs: Tensor | Layout | Packing,
        past: Sequence[Past | SentenceBlocks] | None = None,
        keep: bool = False,
        align_at: int | None = None,
    ) -> tuple[Tensor, Kept, Tensor | None]:
        """``x`` through a stack of layers (whose other ``inputs`` are the mask, or the memory and its mask):
        its output; with ``keep`` each layer's self-attention keys/values of its input (detached), for the next
        sentence's past; with ``align_at`` that layer's guided head's cross-attention weights (guided alignment).
        Activation checkpointing recomputes a layer in the backward pass (not one whose keys/values are kept:
        they are a result, not a step to redo)."""
        kept: Kept = []
        weights: Tensor | None = None
        recompute = self.activation_checkpointing and self.training and not keep
        for n, layer in enumerate(layers):
            options: dict[str, Any] = {} if past is None else {"past": past[n]}
            if n == align_at:
                options["align_head"] = GUIDED_HEAD
            if recompute:
                out = checkpoint(layer, x, *inputs, use_reentrant=False, **options)
            else:
                out = layer(x, *inputs, **options)
            x = out.hidden
            if keep:
                kept.append((out.keys_values[0].detach(), out.keys_values[1].detach()))
            if out.alignment is not None:
                weights = out.alignment
        return x, kept, weights

    def _chained_hidden(self, src: Tensor, tgt_in: Tensor, blocks: tuple[Tensor, Tensor]) -> Tensor:
        """A batch of chains (``model.recurrence`` in training, ``data/chains.py``): each row consecutive
        sentences of a document, ``blocks`` each position's sentence number (source, target). One pass in which
        every sentence reads its own source and attends, in each self-attention layer, to its own tokens and
        to its N predecessors' keys/values without gradient: the past translation gives it. The decoder states."""
        src_blocks, tgt_blocks = blocks
        n = self.config.recurrence
        encoder = [SentenceBlocks.of(src_blocks, n, causal=False)] * len(self.encoder)
        decoder = [SentenceBlocks.of(tgt_blocks, n, causal=True)] * len(self.decoder)
        src_mask = (src != self.pad_id)[:, None, None, :]  # (what SentenceBlocks says is what is read)
        x = self._through(self.encoder_layers, self._embed(self.src_embed, src), src_mask, past=encoder)[0]
        memory = self.encoder_norm(x)
        y = self._embed(self.tgt_embed, tgt_in)
        cross = cross_blocks(tgt_blocks, src_blocks)
        return self.decoder_norm(self._through(self.decoder_layers, y, memory, cross, past=decoder)[0])

    def _output_loss(self, hidden: Tensor, tgt_out: Tensor, epsilon: float, target_tokens: int) -> tuple[Tensor, Tensor]:
        """Summed label-smoothed loss and NLL of the non-padding positions of ``tgt_out`` under decoder states
        ``hidden`` (B, T, D), of which there are ``target_tokens``. Only those positions go through the output
        projection, the most expensive matrix product of the model for large vocabularies, fused with the loss
        block by block (:func:`..model.loss.output_loss`)."""
        keep = (tgt_out != self.pad_id).flatten()  # (B*T,)
        positions = keep.nonzero_static(size=target_tokens).squeeze(1)  # (N,), no host read
        hidden = hidden.flatten(0, 1).index_select(0, positions)  # (N, D)
        target = tgt_out.flatten().index_select(0, positions)  # (N,)
        if self.output.bias is not None:  # the fused loss is for the paper's bias-free output: the plain path here
            return label_smoothed_nll(self.output(hidden), target, epsilon)
        return output_loss(hidden, self.output.weight, target, epsilon)

    def logits(self, hidden: Tensor) -> Tensor:
        """Unnormalised scores over the target vocabulary: (..., D) -> (..., V). What a search may write of them is
        the search's business (``decode/steering.py``)."""
        return self.output(hidden)

    def loss(
        self,
        src: Tensor,
        tgt_in: Tensor,
        tgt_out: Tensor,
        epsilon: float,
        target_tokens: int | None = None,
        alignment: Tensor | None = None,
        alignment_weight: float = 0.0,
        blocks: tuple[Tensor, Tensor] | None = None,
        source_tokens: int | None = None,
    ) -> tuple[Tensor, Tensor, int]:
        """(summed label-smoothed loss, summed NLL, number of target tokens) of a batch; with ``alignment``
        (the batch's word links, :class:`..data.batches.Batch`) and a weight, the loss adds that weight times
        the guided head's alignment loss (:mod:`.guided`); with ``blocks`` (``model.recurrence``) the rows are
        chains of sentences (:meth:`_chained_hidden`).

        ``target_tokens``, the number of non-padding targets when the caller knows it, saves a wait for the GPU:
        selecting an unknown number of positions must first read that number back from it. ``source_tokens``
        likewise: a packed batch (``self.packed``, training) finds its real tokens with both counts.
        """
        if self.packed and self.training:
            assert target_tokens is not None and source_tokens is not None, "a packed batch needs its token counts"
            assert blocks is None and not (alignment is not None and alignment_weight > 0), "train.packed refuses them"
            packing = Packing(Layout.of(src, self.pad_id, source_tokens), Layout.of(tgt_in, self.pad_id, target_tokens))
            hidden = self._packed_hidden(src, tgt_in, packing)  # (1, N, D)
            loss, nll = self._output_loss(hidden, packing.target.pack(tgt_out)[None], epsilon, target_tokens)
            return loss, nll, target_tokens
        guided = alignment is not None and alignment_weight > 0
        if blocks is not None:
            assert not guided, "the recipe refuses guided alignment with model.recurrence"
            hidden = self._chained_hidden(src, tgt_in, blocks)
        else:
            memory, src_mask = self.encode(src)
            if guided:
                hidden, head = self.decode_aligned(tgt_in, memory, src_mask)  # (B, T, D), (B, T, S)
            else:
                hidden = self.decode(tgt_in, memory, src_mask)  # (B, T, D)
        if target_tokens is None:
            target_tokens = int((tgt_out != self.pad_id).sum())
        loss, nll = self._output_loss(hidden, tgt_out, epsilon, target_tokens)
        if guided:
            assert alignment is not None
            loss = loss + alignment_weight * alignment_loss(head, alignment)
        return loss, nll, target_tokens

    forward = loss  # the training forward pass is the loss (so DistributedDataParallel, which calls it, can wrap it)


def _share_rezero_alpha(*stacks: nn.ModuleList) -> None:
    """One ReZero alpha per layer, shared by its residual branches (the official ReZero code)."""
    for stack in stacks:
        for layer in stack:
            branches = [m for m in layer.children() if isinstance(m, Residual)]
            for branch in branches[1:]:
                branch.alpha = branches[0].alpha


# How Transformer.encode groups sources at inference on the CPU: widest first, a group takes the next
# source while it is at least ENCODE_GROUP_MIN_FILL of the group's widest (so little of a group is
# padding) and the group stays within ENCODE_GROUP_MAX_TOKENS padded positions (so its activations,
# 1,024 x 2,048 fp32 = 8 MiB in a base model's feed-forward layer, stay in the processor's cache; the
# measurements: docs/choices.md).
ENCODE_GROUP_MIN_FILL = 0.8
ENCODE_GROUP_MAX_TOKENS = 1024


def length_groups(widths: list[int]) -> list[list[int]]:
    """Row indices grouped by similar width (see ``ENCODE_GROUP_MIN_FILL``), widest first; every row in
    exactly one group, each group's first row its widest."""
    groups: list[list[int]] = []
    for row in sorted(range(len(widths)), key=lambda row: -widths[row]):
        group = groups[-1] if groups else None
        if (
            group is not None
            and (len(group) + 1) * widths[group[0]] <= ENCODE_GROUP_MAX_TOKENS
            and widths[row] >= ENCODE_GROUP_MIN_FILL * widths[group[0]]
        ):
            group.append(row)
        else:
            groups.append([row])
    return groups


def _positions(config: ModelConfig) -> SinusoidalPositions | LearnedPositions | None:
    if config.positions == "sinusoidal":
        return SinusoidalPositions(config.max_positions, config.d_model, config.sinusoids)
    if config.positions == "learned":
        return LearnedPositions(config.max_positions, config.d_model)
    return None  # relative positions live inside self-attention


def _initialise(model: Transformer, config: ModelConfig) -> None:
    """Xavier-uniform linear layers, N(0, d^-1/2) embeddings; ``fairseq`` and T-Fixup adjust on top.

    ``fairseq`` (fairseq's ``MultiheadAttention.reset_parameters`` and ``nn.Linear`` feed-forward):
    each of Q, K and V is Xavier-uniform with gain 1/sqrt(2) as its own d x d matrix, with
    PyTorch's default biases; the feed-forward layers keep PyTorch's default uniform(+-1/sqrt(fan_in)),
    which makes W2 about half as large as Xavier's.

    T-Fixup (Huang et al. 2020): see :func:`_tfixup_init`.
    """
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    for embedding in {model.src_embed, model.tgt_embed}:
        nn.init.normal_(embedding.weight, std=config.d_model**-0.5)
        with torch.no_grad():
            embedding.weight[model.pad_id].zero_()
    if config.init == "fairseq":
        _fairseq_init(model)
    if config.init == "tfixup":
        _tfixup_init(model, config)


def _tfixup_init(model: Transformer, config: ModelConfig) -> None:
    """T-Fixup as in the paper (section 3.3, steps 1-3) and its official code.

    Every projection starts as Xavier-uniform of its own shape: the fused Q|K|V (self) and K|V
    (cross) matrices are initialised block by block, as separate d x d matrices, since Xavier of the
    fused matrix would start V 1/sqrt(2) (self) or sqrt(2/3) (cross) too small (the official code
    multiplies v_proj by sqrt(2) for this). Then, with no LayerNorm anywhere:
    decoder V and output projections and feed-forward weights x (9 N_dec)^-1/4; encoder ones
    x 0.67 N_enc^-1/4; both input embeddings, N(0, d^-1/2), x (9 N_dec)^-1/4. Q and K stay Xavier.
    """
    dec_scale = (9 * config.n_decoder_layers) ** -0.25
    enc_scale = 0.67 * config.n_encoder_layers**-0.25
    with torch.no_grad():
        stacks: list[tuple[list[EncoderLayer] | list[DecoderLayer], float]] = [
            (model.encoder_layers, enc_scale),
            (model.decoder_layers, dec_scale),
        ]
        for layers, scale in stacks:
            for layer in layers:
                for attn in (layer.self_attn, getattr(layer, "cross_attn", None)):
                    if attn is None:
                        continue
                    for projection in attn.input_projections():
                        _xavier_per_block(projection.weight, gain=1.0)
                    for weight in attn.value_and_output_weights():
                        weight.mul_(scale)
                layer.ffn.w1.weight.mul_(scale)
                layer.ffn.w2.weight.mul_(scale)
        for embedding in {model.src_embed, model.tgt_embed}:
            embedding.weight.mul_(dec_scale)


def _fairseq_init(model: Transformer) -> None:
    """fairseq's initialisation of the attention input projections and the feed-forward layers."""
    layers: list[EncoderLayer | DecoderLayer] = [*model.encoder_layers, *model.decoder_layers]
    for layer in layers:
        layer.ffn.w1.reset_parameters()  # PyTorch's default: uniform(+-1/sqrt(fan_in)), biases too
        layer.ffn.w2.reset_parameters()
        for attn in (layer.self_attn, getattr(layer, "cross_attn", None)):
            if attn is not None:
                for projection in attn.input_projections():
                    projection.reset_parameters()  # default biases
                    _xavier_per_block(projection.weight, gain=2**-0.5)


def _xavier_per_block(weight: Tensor, gain: float) -> None:
    """Xavier-uniform on each (d x d) block of a fused (k*d x d) projection, as if it were k separate ones."""
    d = weight.size(1)
    with torch.no_grad():
        for block in weight.split(d, dim=0):
            nn.init.xavier_uniform_(block, gain=gain)


def build_model(
    config: ModelConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0, initialise: bool = True
) -> Transformer:
    """Construct a freshly initialised Transformer; with ``initialise=False``, one whose weights hold
    whatever their memory held, for a caller that loads every weight next (or builds on the meta device)."""
    with _BUILDING:
        with contextlib.nullcontext() if initialise else _initialisers_skipped():
            return Transformer(config, src_vocab, tgt_vocab, pad_id)


# torch.nn.init's functions are module attributes shared by every thread: a build that skips them and
# one that needs them must not overlap.
_BUILDING = threading.Lock()
_INITIALISERS = (
    "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
    "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_",
)  # fmt: skip


@contextlib.contextmanager
def _initialisers_skipped() -> Iterator[None]:
    """torch.nn.init's functions, which our layers and PyTorch's own (``reset_parameters``) call, made to
    return their tensor untouched for a while, as HuggingFace's ``no_init_weights`` does. Random weights
    that a checkpoint's overwrite next are wasted work, and on the meta device (the shape check before loading)
    ``normal_`` first imports torch._dynamo (the costs: docs/choices.md, "Memory")."""
    saved = {name: getattr(nn.init, name) for name in _INITIALISERS}
    try:
        for name in _INITIALISERS:
            setattr(nn.init, name, _untouched)
        yield
    finally:
        for name, function in saved.items():
            setattr(nn.init, name, function)


def _untouched(tensor: Tensor, *args: object, **kwargs: object) -> Tensor:
    return tensor


def count_parameters(model: nn.Module) -> int:
    """Number of distinct trainable parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())
