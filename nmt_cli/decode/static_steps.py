"""Incremental decoding with fixed shapes, recorded once as a CUDA graph and replayed every step.

On a GPU the cached decoder step is tiny work spread over about 20 kernels per layer; launching
them one by one from Python takes longer than running them (the H100 was busy 18% of the time
decoding Transformer base with beam 4, batches of 64). A CUDA graph launches the whole step at
once, but it replays fixed shapes and fixed memory. So here, unlike :class:`.search.CachedSteps`:

- every sentence keeps ``rows_per_sentence`` slots (its beam) for the whole batch, including
  its first step and after it finished: slots are never removed, only ignored;
- self-attention keys/values are preallocated for the longest output, written at the step's
  position and hidden beyond it by a mask (:class:`..inference.caches.StaticKeysValues`);
- the step's position is a device tensor that the recorded step advances itself.

The search keeps its own view (open rows only, as with :class:`.search.CachedSteps`): ``rows``
maps its rows to slots, and :meth:`select` moves caches between slots. Without a graph (the CPU,
or ``use_graph=False``) the same fixed-shape step runs eagerly, which is how the CPU tests check it
against :class:`.search.CachedSteps`.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

from ..data.vocab import BOS_ID
from ..inference.caches import LayerCache, StaticKeysValues
from ..inference.step import IncrementalDecoder
from ..model.transformer import Transformer

WARMUP_STEPS = 2  # eager runs on a side stream before recording (cuBLAS and kernel set-up)


def supports_static_steps(model: Transformer) -> bool:
    """Relative positions (Shaw et al.) need per-step terms and decode eagerly."""
    return model.positions is not None


class StaticSteps:
    """Decoder steps over ``sentences x rows_per_sentence`` fixed slots (see the module docstring)."""

    def __init__(
        self, model: Transformer, memory: Tensor, src_mask: Tensor, rows_per_sentence: int, max_steps: int, use_graph: bool
    ) -> None:
        n_sent, device = memory.size(0), memory.device
        self.per_sentence = rows_per_sentence
        slots = n_sent * rows_per_sentence
        config = model.config
        self.keys, self.values = StaticKeysValues.buffers(
            len(model.decoder), slots, config.n_heads, config.d_model, max_steps, memory
        )
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.slot_positions = torch.arange(max_steps, device=device)
        self.visible = torch.zeros((1, 1, 1, max_steps), dtype=torch.bool, device=device)
        self.tokens = torch.full((slots,), BOS_ID, dtype=torch.long, device=device)
        self.src_mask = src_mask
        self.decoder = IncrementalDecoder(model)
        state = self.decoder.start(memory, src_mask)  # cross-attention keys/values, one row per sentence
        self.caches = [
            LayerCache(StaticKeysValues(self.keys[i], self.values[i], self.position, self.visible), layer.cross_attention)
            for i, layer in enumerate(state.caches)
        ]
        self.sentence_slots = torch.arange(n_sent, device=device)  # slot group of each open sentence
        self.rows = self.sentence_slots * rows_per_sentence  # slot of each open row (first step: one per sentence)
        self.steps_done = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: Tensor | None = None
        if use_graph:
            self._record()

    def _step(self) -> Tensor:
        """The recorded work: one decoder step for every slot, then advance the position."""
        self.visible.copy_((self.slot_positions <= self.position)[None, None, None, :])
        logits = self.decoder.logits_at(self.tokens, self.position, self.src_mask, self.caches).float()
        self.position.add_(1)
        return logits  # (slots, V)

    def _record(self) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with _graph_safe_attention(), torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with _graph_safe_attention(), torch.cuda.graph(self.graph):
            self.logits = self._step()
        self.position.zero_()  # the warm-up and the recording wrote only slots that step 0 rewrites

    def __call__(self, tokens: Tensor) -> Tensor:
        """Logits (n_open_rows, V) of the next token after ``tokens``, one per open row."""
        self.tokens.index_copy_(0, self.rows, tokens)
        if self.graph is not None:
            self.graph.replay()
            logits = self.logits
        else:
            with _graph_safe_attention():
                logits = self._step()
        self.steps_done += 1
        assert logits is not None
        return logits.index_select(0, self.rows)

    def select(self, rows: Tensor, sentences: Tensor | None) -> None:
        """Open row i continues the search's old row ``rows[i]``; ``sentences`` are the ones still open."""
        if sentences is not None:
            self.sentence_slots = self.sentence_slots.index_select(0, sentences)
        per_sentence = rows.numel() // self.sentence_slots.numel()  # 1 on the first step of a beam search
        source = self.rows.index_select(0, rows)
        target = (
            self.sentence_slots[:, None] * self.per_sentence + torch.arange(per_sentence, device=rows.device)
        ).flatten()
        written = slice(0, self.steps_done)
        self.keys[:, target, :, written] = self.keys[:, source, :, written]
        self.values[:, target, :, written] = self.values[:, source, :, written]
        self.rows = target


def _graph_safe_attention() -> contextlib.AbstractContextManager[None]:
    """Attention kernels that a CUDA graph records (the cuDNN path is left out)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


__all__ = ["StaticSteps", "supports_static_steps"]
