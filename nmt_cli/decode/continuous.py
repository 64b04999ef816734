"""The search loop that sentences join while it runs: continuous batching for ``nmt serve``.

:func:`.search.run_search` joins a whole batch to the search loop (:class:`.search.SearchLoop`) and steps it until
every sentence is done. A server cannot wait for that: requests arrive while a batch is being decoded. Here the
batch stays open. Between two decoder steps, :meth:`ContinuousSearch.add` encodes new sentences and joins them to
the running loop; every :meth:`ContinuousSearch.step` extends all open sentences by one token and returns the
sentences that finished, which leave at once.

Each sentence is searched exactly as the command line searches it: the same loop and strategy (greedy, beam,
constrained), the same rules (``steering.py``). What a running batch adds is bookkeeping, all of it the loop's
and the stepper's:

- every sentence keeps its own step count, so its length limit, length penalty and position embeddings are its
  own;
- a sentence that joins a running beam has K rows from its first step (rows 2..K start at -inf, so the first step
  ranks only the BOS row's tokens, as a batch's one-row first step does);
- self-attention caches of rows that joined late are padded on the left and the padding is masked
  (:class:`JoinableSteps`); relative distances stay right because all rows share one time axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

from ..config import DecodeConfig
from ..data.batches import pad_rows
from ..data.vocab import EOS_ID, PAD_ID
from ..inference.caches import DecoderState, JoinableKeysValues
from ..inference.step import IncrementalDecoder
from ..model.transformer import Transformer
from .constrained import Constrained, Constraint, constraint_room
from .sampling import Sampling, sample_rows
from .search import Beam, Greedy, Hypothesis, SearchLoop, Strategy, length_limits
from .steering import StepProcessor


class JoinableSteps:
    """Cached decoder steps over a batch that new sentences can join between steps.

    All rows share one time axis (the cache's columns); a row that joined at column c has its
    columns before c hidden by ``visible`` (N, 1, 1, T) and counts its positions from 0
    (``DecoderState.row_steps``). Columns no open row can see are cut off after each step; while
    every row sees every column (all joined together), no mask is applied at all.
    """

    def __init__(self, model: Transformer) -> None:
        self.decoder = IncrementalDecoder(model)
        self.clear()

    def clear(self) -> None:
        """No rows: the next sentences to join start a batch."""
        self.state: DecoderState | None = None
        self.visible = torch.zeros((0, 1, 1, 0), dtype=torch.bool)  # (N, 1, 1, T)

    def join(self, memory: Tensor, src_mask: Tensor, rows_per_sentence: int) -> None:
        """Append the sentences of ``memory`` (B, S, D) with ``rows_per_sentence`` rows each (the batch's)."""
        fresh = self.decoder.start(memory, src_mask, joinable=True)
        rows = memory.size(0) * rows_per_sentence
        fresh.row_steps = torch.zeros(rows, dtype=torch.long, device=memory.device)
        if self.state is None:
            self.state, self.visible = fresh, torch.zeros((rows, 1, 1, 0), dtype=torch.bool, device=memory.device)
            return
        old = self.state
        assert old.row_steps is not None
        width = max(old.src_mask.size(-1), src_mask.size(-1))
        old.src_mask = torch.cat([_pad_last(old.src_mask, width, False), _pad_last(src_mask, width, False)])
        old.row_steps = torch.cat([old.row_steps, fresh.row_steps])
        self.visible = torch.cat([self.visible, self.visible.new_zeros((rows, *self.visible.shape[1:]))])
        for layer, new in zip(old.caches, fresh.caches):
            _joinable(layer.self_attention).add_rows(rows)
            layer.cross_attention.join(new.cross_attention, width)

    def __call__(self, tokens: Tensor) -> Tensor:
        assert self.state is not None
        self.visible = F.pad(self.visible, (0, 1), value=True)  # this step's column: visible to every row
        visible = None if bool(self.visible.all()) else self.visible  # no mask while every row sees every column
        for layer in self.state.caches:
            _joinable(layer.self_attention).visible = visible
        return self.decoder.logits(tokens, self.state).float()  # (N, V) logits

    def select(self, rows: Tensor, sentences: Tensor | None) -> None:
        assert self.state is not None and self.state.row_steps is not None
        self.state.select(rows, sentences)  # keys and values; the mask is the stepper's
        self.visible = self.visible.index_select(0, rows)
        row_steps = self.state.row_steps
        assert row_steps is not None
        unseen = self.visible.size(-1) - int(row_steps.max())  # leading columns no open row sees
        if unseen > 0:
            self.visible = self.visible[..., unseen:]
            for layer in self.state.caches:
                _joinable(layer.self_attention).drop_columns(unseen)


def _joinable(cache: object) -> JoinableKeysValues:
    assert isinstance(cache, JoinableKeysValues)
    return cache


def _pad_last(mask: Tensor, width: int, value: bool) -> Tensor:
    return F.pad(mask, (0, width - mask.size(-1)), value=value)


@dataclass
class Finished:
    """A sentence that left the batch: its key (given to :meth:`ContinuousSearch.add`) and n-best."""

    key: Any
    hypotheses: list[Hypothesis]


class ContinuousSearch:
    """The search loop (``search.SearchLoop``) over a batch that grows between steps (see the module docstring),
    with the strategy the command line runs for the same settings: sampling where asked (from ``generator``: its
    draws then depend on which sentences share a step, so a server that promises a seed's samples runs sampling
    apart), greedy at beam 1, else beam search, constrained where a sentence has terms.

    All sentences share one ``config``, ``nbest`` and the model's ``rules`` (step processors, ``steering.py``,
    kept with those every search keeps); a server keeps one instance per setting.
    """

    def __init__(
        self,
        model: Transformer,
        config: DecodeConfig,
        nbest: int = 1,
        rules: Sequence[StepProcessor] = (),
        generator: torch.Generator | None = None,
    ) -> None:
        self.model, self.config, self.nbest = model, config, nbest
        self.device = next(model.parameters()).device
        strategy: Strategy
        if config.sampling:
            strategy = Sampling(sample_rows(nbest), config, generator, self.device)
        elif config.beam == 1:
            strategy = Greedy(config, self.device)
        else:
            strategy = Constrained(Beam(config, nbest, self.device))
        self.steps = JoinableSteps(model)
        self.loop = SearchLoop(self.steps, strategy, rules, self.device)
        self.skips: dict[Any, int] = {}  # per open key, the forced tokens its translation leaves out

    def __len__(self) -> int:
        """Open sentences."""
        return len(self.loop)

    @property
    def keys(self) -> list[Any]:
        """The open sentences' keys, in batch order."""
        return self.loop.keys

    @torch.inference_mode()
    def add(
        self,
        sources: list[list[int]],
        keys: list[Any],
        constraints: list[tuple[Constraint, ...]] | None = None,
        first_tokens: list[int] | None = None,
    ) -> None:
        """Encode sentences (source ids, no EOS, within the model's length) and append them; ``constraints``, per
        sentence, what its output must hold (glossary terms: decode/constrained.py; greedy search takes none);
        ``first_tokens``, per sentence, a token its output must start with and leaves out of its hypotheses (-1:
        none): a multilingual model's target tag read by its decoder, as the offline search forces it
        (decode/translator.py)."""
        if not sources:
            return
        assert constraints is None or not any(constraints) or isinstance(self.loop.strategy, Constrained), (
            "terms need a beam"
        )
        src = pad_rows([ids + [EOS_ID] for ids in sources]).to(self.device)
        memory, src_mask = self.model.encode(src)
        room = constraint_room(constraints, self.device) if constraints is not None else None
        max_len = length_limits(src, self.config, self.model.config.max_positions, None, room)
        firsts = first_tokens if first_tokens is not None else [-1] * len(sources)
        prefix = torch.tensor([[f if f >= 0 else PAD_ID] for f in firsts], dtype=torch.long, device=self.device)
        rows = self.loop.join(keys, max_len, prefix if any(f >= 0 for f in firsts) else None, constraints)
        self.steps.join(memory, src_mask, rows)
        self.skips.update((key, int(f >= 0)) for key, f in zip(keys, firsts))

    @torch.inference_mode()
    def step(self, cancelled: set[Any] | None = None) -> list[Finished]:
        """One token for every open sentence; returns the sentences that are done (they leave).

        Sentences whose key is in ``cancelled`` leave too, without a result.
        """
        if not len(self.loop):
            return []
        finished = self.loop.step(cancelled or ())
        if not len(self.loop):
            self.steps.clear()
        for key in cancelled or ():
            self.skips.pop(key, None)
        return [Finished(key, _skipped(hyps[: self.nbest], self.skips.pop(key))) for key, hyps in finished]


def _skipped(hypotheses: list[Hypothesis], skip: int) -> list[Hypothesis]:
    """The hypotheses without their first ``skip`` tokens (forced, not part of the translation)."""
    return [Hypothesis(h.tokens[skip:], h.score) for h in hypotheses] if skip else hypotheses
