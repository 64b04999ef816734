"""What steers a step: processors that change a step's scores before a search strategy chooses from them.

Every step of every search (greedy, beam, sampling, constrained, the server's continuous batch) goes the same way:
the decoder's logits of the open rows, the processors that act *before normalising* (tokens that are not in the
output vocabulary at all: the distribution is renormalised without them), the log-softmax, the processors that act
*after* it (what this search allows: the scores of what stays allowed remain the model's own, so a forced prefix
or a length limit never changes a hypothesis's score), then the strategy's choice. This is HF's
``LogitsProcessor`` and CTranslate2's logits processors: one class per rule, a list of them per search.

A processor is asked once per step (:meth:`StepProcessor.at`) for its *edit* of that step, or None when it changes
nothing then (most rules act at a few steps only, and a step's bookkeeping is a sizeable share of it at a few
rows). The edit is then applied to the step's rows a block at a time (``search.ROW_BLOCK``), so it takes the
scores of some rows and which rows of the step they are.

The rules every search keeps (:func:`search_rules`): :class:`Specials` (PAD and BOS are never written),
:class:`NoEmptyOutput`, :class:`LengthLimit`, :class:`ForcedTokens` (a target prefix; a decoder-side target tag);
a model's own (:func:`model_rules`): :class:`NeverWritten` (a multilingual model's target tags, read from the
source, never written). A new rule is a class with ``before_normalising`` and ``at``, and one line where the
searches get their rules: a caller's rules go in the ``rules`` argument of ``search.run_search`` (and of
``continuous.ContinuousSearch``); :class:`NeverWritten` is the example to copy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from ..data.vocab import BOS_ID, EOS_ID, PAD_ID

Rows = slice | Tensor  # which rows of the step a block of scores is: a slice, or their indices
Edit = Callable[[Tensor, Rows], Tensor]  # (a block of rows' scores (R, V), which rows) -> the scores (in place)


@dataclass(frozen=True)
class StepRows:
    """What a rule may read of a step: its open sentences and their rows (each sentence's rows are consecutive)."""

    t: int | Tensor  # each open sentence's tokens so far: one number, or (n,) where sentences joined at different steps
    sentences: Tensor  # (n,) the open sentences: their places in the batch (0..n-1)
    rows_per_sentence: int
    max_len: Tensor  # (n,) each open sentence's length limit (tokens before the EOS)


class StepProcessor(Protocol):
    """One rule of what a step may choose (see the module docstring)."""

    before_normalising: bool  # True: the tokens it removes are not in the output vocabulary (renormalised without)

    def at(self, step: StepRows) -> Edit | None:
        """This step's edit of the rows' scores, or None when the rule changes nothing at this step."""
        ...


class Steering:
    """A search's rules bound to one step: turns a block of rows' logits into the log-probabilities a strategy
    chooses from (``steering(logits, rows)``)."""

    def __init__(self, rules: Sequence[StepProcessor], step: StepRows) -> None:
        edits = [(rule.before_normalising, rule.at(step)) for rule in rules]
        self.before = [edit for before, edit in edits if before and edit is not None]
        self.after = [edit for before, edit in edits if not before and edit is not None]

    def __call__(self, logits: Tensor, rows: Rows = slice(None)) -> Tensor:
        """The log-probabilities of the step's ``rows`` from their ``logits`` (R, V), every rule applied."""
        for edit in self.before:
            logits = edit(logits, rows)
        log_probs = logits.log_softmax(dim=-1)
        for edit in self.after:
            log_probs = edit(log_probs, rows)
        return log_probs

    def of_rows(self, rows: Tensor) -> Steering:
        """This steering for a subset of the step's rows (their indices): its row 0 is the step's ``rows[0]``."""
        subset = Steering((), _NO_STEP)
        subset.before = [_on_rows(edit, rows) for edit in self.before]
        subset.after = [_on_rows(edit, rows) for edit in self.after]
        return subset


def _on_rows(edit: Edit, subset: Tensor) -> Edit:
    return lambda scores, rows: edit(scores, subset[rows])


_NO_STEP = StepRows(0, torch.zeros(0, dtype=torch.long), 1, torch.zeros(0, dtype=torch.long))


def _per_row(step: StepRows, per_sentence: Tensor) -> Tensor:
    return per_sentence if step.rows_per_sentence == 1 else per_sentence.repeat_interleave(step.rows_per_sentence)


# --------------------------------------------------------------------------- the rules every search keeps


_SPECIALS: dict[torch.device, Tensor] = {}


def _never_emitted(device: torch.device) -> Tensor:
    """PAD and BOS as an index tensor made once per device."""
    ids = _SPECIALS.get(device)
    if ids is None:
        ids = _SPECIALS.setdefault(device, torch.tensor([PAD_ID, BOS_ID], device=device))
    return ids


class Specials:
    """PAD and BOS are never written (after normalising, as fairseq and Marian mask them: the model's scores of
    the rest stay its own)."""

    before_normalising = False

    def at(self, step: StepRows) -> Edit:
        return _mask_specials


def _mask_specials(scores: Tensor, rows: Rows) -> Tensor:
    return scores.index_fill_(1, _never_emitted(scores.device), float("-inf"))  # one call for both columns


class NoEmptyOutput:
    """A sentence's first token is never EOS: an empty translation of a sentence is never right, and beam search
    finds one where every long hypothesis scores worse than stopping at once (1.4% of Multi30k's training captions
    with a 10-minute model at beam 4); fairseq's min_len 1 and CTranslate2's min_decoding_length 1 do this."""

    before_normalising = False

    def at(self, step: StepRows) -> Edit | None:
        if isinstance(step.t, int):
            return _no_eos if step.t == 0 else None
        first = _per_row(step, step.t == 0)
        return lambda scores, rows: _eos_where(scores, first[rows])


def _no_eos(scores: Tensor, rows: Rows) -> Tensor:
    scores[:, EOS_ID] = float("-inf")
    return scores


def _eos_where(scores: Tensor, masked: Tensor) -> Tensor:
    scores[:, EOS_ID].masked_fill_(masked, float("-inf"))
    return scores


class LengthLimit:
    """A row at its sentence's length limit may only end (it always stops there)."""

    before_normalising = False

    def __init__(self) -> None:
        # one search's: before this step no sentence is at its limit (its sentences leave, none joins)
        self.first_limit: int | None = None

    def at(self, step: StepRows) -> Edit | None:
        if isinstance(step.t, int):
            if self.first_limit is None:
                self.first_limit = int(step.max_len.min())
            if step.t < self.first_limit:
                return None
        at_limit = _per_row(step, step.t >= step.max_len)
        return lambda scores, rows: _only_eos(scores, at_limit[rows])


def _only_eos(scores: Tensor, at_limit: Tensor) -> Tensor:
    if at_limit.any():
        eos = scores[at_limit, EOS_ID].clone()
        scores[at_limit] = float("-inf")
        scores[at_limit, EOS_ID] = eos
    return scores


class ForcedTokens:
    """Each sentence's output starts with given tokens: a target prefix (``--prefix``), a multilingual model's
    target tag where its decoder reads it first. ``tokens`` (N, P) by open sentence, PAD-padded."""

    before_normalising = False

    def __init__(self, tokens: Tensor) -> None:
        self.tokens = tokens

    def at(self, step: StepRows) -> Edit | None:
        width = self.tokens.size(1)
        if isinstance(step.t, int):
            if step.t >= width:
                return None
            wanted = self.tokens[step.sentences, step.t]
        else:
            inside = step.t < width
            wanted = torch.where(inside, self.tokens[step.sentences, step.t.clamp(max=width - 1)], PAD_ID)
        forced = _per_row(step, wanted)
        return lambda scores, rows: _only(scores, forced[rows])


def _only(scores: Tensor, forced: Tensor) -> Tensor:
    """Rows with a forced token (not PAD) may only write it, at the model's score for it."""
    rows = (forced != PAD_ID).nonzero().flatten()
    if len(rows):
        tokens = forced[rows]
        kept = scores[rows, tokens].clone()
        scores[rows] = float("-inf")
        scores[rows, tokens] = kept
    return scores


def search_rules() -> list[StepProcessor]:
    """The rules every search keeps but a forced prefix (which the loop adds while it has one): new for each batch
    (a rule may remember what it worked out for the batch's first step)."""
    return [Specials(), NoEmptyOutput(), LengthLimit()]


# --------------------------------------------------------------------------- a model's own rules


class NeverWritten:
    """Tokens the model reads but never writes: a multilingual model's target tags where they are read from the
    source (``decode/targets.py``); an untrained or confused model would otherwise answer ">>fr<<>>fr<<". Not in
    the output vocabulary, so removed before normalising (teacher-forced scores, ``forced.py``, do the same)."""

    before_normalising = True

    def __init__(self, ids: Sequence[int]) -> None:
        self.ids = tuple(ids)
        self._on: dict[torch.device, Tensor] = {}

    def at(self, step: StepRows) -> Edit:
        return self.edit

    def edit(self, scores: Tensor, rows: Rows = slice(None)) -> Tensor:
        ids = self._on.get(scores.device)
        if ids is None:
            ids = self._on.setdefault(scores.device, torch.tensor(self.ids, device=scores.device))
        return scores.index_fill(-1, ids, float("-inf"))


def model_rules(unwritten: Sequence[int]) -> list[StepProcessor]:
    """A loaded model's own rules (``LoadedModel.unwritten``)."""
    return [NeverWritten(unwritten)] if unwritten else []


__all__ = [
    "Edit",
    "ForcedTokens",
    "LengthLimit",
    "NeverWritten",
    "NoEmptyOutput",
    "Specials",
    "StepProcessor",
    "StepRows",
    "Steering",
    "model_rules",
    "search_rules",
]
