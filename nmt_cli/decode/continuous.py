"""Beam search that sentences join while it runs: continuous batching for ``nmt serve``.

:func:`.search.beam_search` takes a batch, searches until every sentence is done, and returns.
A server cannot wait for that: requests arrive while a batch is being decoded. Here the batch
stays open. Between two decoder steps, :meth:`ContinuousBeamSearch.add` encodes new sentences and
appends them to the running batch; every :meth:`ContinuousBeamSearch.step` extends all open
sentences by one token and returns the sentences that finished, which leave at once.

Each sentence is searched exactly as :func:`.search.beam_search` searches it (the same candidate
ranking, finished lists and stopping rule, shared from that module); what changes is bookkeeping:

- every sentence keeps its own step count, so its length limit, length penalty and position
  embeddings are its own;
- a sentence has K rows from its first step (rows 2..K start at -inf, so the first step ranks
  only the BOS row's tokens, as the offline search's one-row first step does);
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
from ..data.vocab import BOS_ID, EOS_ID, PAD_ID
from ..inference.caches import DecoderState, JoinableKeysValues
from ..inference.step import IncrementalDecoder
from ..model.transformer import Transformer
from .constrained import Constraint, constrained_step, constraint_room, searches_for
from .search import BeamLists, Hypothesis, beam_step, best_finished, length_limits
from .steering import ForcedTokens, LengthLimit, NoEmptyOutput, Specials, Steering, StepProcessor, StepRows


class JoinableSteps:
    """Cached decoder steps over a batch that new sentences can join between steps.

    All rows share one time axis (the cache's columns); a row that joined at column c has its
    columns before c hidden by ``visible`` (N, 1, 1, T) and counts its positions from 0
    (``DecoderState.row_steps``). Columns no open row can see are cut off after each step; while
    every row sees every column (all joined together), no mask is applied at all.
    """

    def __init__(self, model: Transformer, rows_per_sentence: int) -> None:
        self.decoder = IncrementalDecoder(model)
        self.per_sentence = rows_per_sentence
        self.state: DecoderState | None = None
        self.visible = torch.zeros((0, 1, 1, 0), dtype=torch.bool)  # (N, 1, 1, T)

    def join(self, memory: Tensor, src_mask: Tensor) -> None:
        """Append the sentences of ``memory`` (B, S, D) with ``rows_per_sentence`` rows each."""
        fresh = self.decoder.start(memory, src_mask, joinable=True)
        rows = memory.size(0) * self.per_sentence
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
        if len(rows) == 0:
            self.state = None
            return
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
    """A sentence that left the batch: its key (given to :meth:`ContinuousBeamSearch.add`) and n-best."""

    key: Any
    hypotheses: list[Hypothesis]


class ContinuousBeamSearch:
    """Beam search over a batch that grows between steps (see the module docstring).

    All sentences share one ``config``, ``nbest`` and the model's ``rules`` (step processors, ``steering.py``,
    kept with those every search keeps); a server keeps one instance per setting.
    """

    def __init__(
        self, model: Transformer, config: DecodeConfig, nbest: int = 1, rules: Sequence[StepProcessor] = ()
    ) -> None:
        self.model, self.config, self.nbest = model, config, nbest
        self.rules: list[StepProcessor] = [Specials(), LengthLimit(), *rules]
        self.first_rules: list[StepProcessor] = [NoEmptyOutput()]  # while sentences are at their first step
        self.k = config.beam
        self.device = next(model.parameters()).device
        self.steps = JoinableSteps(model, self.k)
        self.keys: list[Any] = []  # per open sentence, in batch order
        self.searches: list[Any] = []  # per open sentence, its constrained search (glossary terms) or None
        self._reset()

    def _reset(self) -> None:
        device, k = self.device, self.k
        self.scores = torch.zeros((0, k), device=device)  # (n, K) open hypotheses' summed log-probs
        self.tokens = torch.zeros(0, dtype=torch.long, device=device)  # (n * K,) last tokens
        self.history = torch.zeros((0, 1), dtype=torch.long, device=device)  # (n * K, W) PAD after each row
        self.lengths = torch.zeros(0, dtype=torch.long, device=device)  # (n,) tokens chosen so far
        self.joined = False  # whether sentences joined since the last step
        self.max_len = torch.zeros(0, dtype=torch.long, device=device)  # (n,)
        self.first = torch.zeros(0, dtype=torch.long, device=device)  # (n,) the token each must emit first; -1: free
        self.fin_scores = torch.zeros((0, k), device=device)  # (n, K) normalised, best first
        self.fin_tokens = torch.zeros((0, k, 1), dtype=torch.long, device=device)  # (n, K, W)

    def __len__(self) -> int:
        """Open sentences."""
        return len(self.keys)

    @torch.inference_mode()
    def add(
        self,
        sources: list[list[int]],
        keys: list[Any],
        constraints: list[tuple[Constraint, ...]] | None = None,
        first_tokens: list[int] | None = None,
    ) -> None:
        """Encode sentences (source ids, no EOS, within the model's length) and append them; ``constraints``, per
        sentence, what its output must hold (glossary terms: decode/constrained.py); ``first_tokens``, per
        sentence, a token its output must start with and leaves out of its hypotheses (-1: none): a multilingual
        model's target tag read by its decoder, as the offline search forces it (decode/translator.py)."""
        if not sources:
            return
        device, k, m = self.device, self.k, len(sources)
        src = pad_rows([ids + [EOS_ID] for ids in sources]).to(device)
        memory, src_mask = self.model.encode(src)
        self.steps.join(memory, src_mask)
        wanted: list[tuple[Constraint, ...]] = constraints if constraints is not None else [() for _ in sources]
        room = constraint_room(wanted, device)
        max_len = length_limits(src, self.config, self.model.config.max_positions, None, room)
        width = max(self.history.size(1), int(max_len.max()) + 1)  # room for the tokens and the EOS
        first = torch.full((m, k), float("-inf"), device=device)
        first[:, 0] = 0.0  # one live row: the others would repeat it
        self.scores = torch.cat([self.scores, first])
        self.tokens = torch.cat([self.tokens, torch.full((m * k,), BOS_ID, dtype=torch.long, device=device)])
        self.history = torch.cat(
            [_pad_cols(self.history, width), torch.full((m * k, width), PAD_ID, dtype=torch.long, device=device)]
        )
        self.lengths = torch.cat([self.lengths, torch.zeros(m, dtype=torch.long, device=device)])
        self.max_len = torch.cat([self.max_len, max_len])
        firsts = first_tokens if first_tokens is not None else [-1] * m
        self.first = torch.cat([self.first, torch.tensor(firsts, dtype=torch.long, device=device)])
        self.joined = True  # sentences at their first step: the next step masks them (a flag: no device read)
        self.fin_scores = torch.cat([self.fin_scores, torch.full((m, k), float("-inf"), device=device)])
        self.fin_tokens = torch.cat(
            [_pad_cols(self.fin_tokens, width), torch.full((m, k, width), PAD_ID, dtype=torch.long, device=device)]
        )
        self.keys.extend(keys)
        self.searches.extend(searches_for(wanted, rows=k))  # K rows from the first step, as here

    @torch.inference_mode()
    def step(self, cancelled: set[Any] | None = None) -> list[Finished]:
        """One token for every open sentence; returns the sentences that are done (they leave).

        Sentences whose key is in ``cancelled`` leave too, without a result.
        """
        if not self.keys:
            return []
        k, n, device = self.k, len(self.keys), self.device
        logits = self.steps(self.tokens)
        rules = self.rules
        if self.joined:  # a sentence's first step: its first token where it has one, else never EOS
            first = torch.where(self.first >= 0, self.first, PAD_ID)[:, None]  # (n, 1): PAD, free
            rules = [*rules, *self.first_rules, ForcedTokens(first)]
            self.joined = False  # every open sentence has a token after this step
        steering = Steering(rules, StepRows(self.lengths, torch.arange(n, device=device), k, self.max_len))
        lists = BeamLists(self.scores, self.history, self.fin_scores, self.fin_tokens)
        if any(search is not None for search in self.searches):
            chosen = constrained_step(
                logits, lists, self.lengths, self.max_len, self.searches, self.config, self.nbest, steering
            )
        else:
            chosen = beam_step(logits, lists, self.lengths, self.max_len, self.config, self.nbest, steering)
        open_scores, parent, new_tokens, done = chosen.scores, chosen.parents, chosen.tokens, chosen.done
        assert open_scores is not None and parent is not None  # a beam's step names both
        if cancelled:
            done |= torch.tensor([key in cancelled for key in self.keys], device=device)
        finished = self._results(done.nonzero().flatten().tolist(), cancelled or set())
        keep = (~done).nonzero().flatten()
        rows = parent[keep].flatten()  # (n_keep * K,)
        history = self.history.index_select(0, rows)
        history.scatter_(1, self.lengths[keep].repeat_interleave(k)[:, None], new_tokens[keep].reshape(-1, 1))
        self.steps.select(rows, sentences=keep if len(keep) < n else None)
        self.history, self.scores, self.tokens = history, open_scores[keep], new_tokens[keep].flatten()
        self.lengths, self.max_len, self.first = self.lengths[keep] + 1, self.max_len[keep], self.first[keep]
        self.fin_scores, self.fin_tokens = self.fin_scores[keep], self.fin_tokens[keep]
        self.keys = [self.keys[i] for i in keep.tolist()]
        self.searches = [self.searches[i] for i in keep.tolist()]
        if not self.keys:
            self._reset()
        return finished

    def _results(self, done: list[int], cancelled: set[Any]) -> list[Finished]:
        if not done:
            return []
        picked = torch.tensor(done, device=self.device)
        nbest = best_finished(self.fin_scores[picked], self.fin_tokens[picked], self.nbest)
        skips = (self.first[picked] >= 0).long().tolist()  # the forced first token: not part of the translation
        return [
            Finished(self.keys[i], [Hypothesis(h.tokens[skip:], h.score) for h in hyps])
            for i, hyps, skip in zip(done, nbest, skips)
            if self.keys[i] not in cancelled
        ]


def _pad_cols(tensor: Tensor, width: int) -> Tensor:
    """Token ids padded with PAD along the last dimension to ``width``."""
    return F.pad(tensor, (0, width - tensor.size(-1)), value=PAD_ID)
