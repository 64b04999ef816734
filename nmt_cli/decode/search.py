"""The search: one loop over the open source sentences, read top to bottom, and the strategies it runs.

Sentences join the loop (:class:`SearchLoop`) between steps. Every step it asks the decoder for the next token's
logits of every open row (``steppers.py``), binds the search's rules to the step (``steering.py``: PAD and BOS
never, no empty output, only EOS at a sentence's length limit, only the prefix's token where a target prefix is
forced, and the caller's rules, a multilingual model's tags never written), and hands both to the *strategy*,
which turns the logits into log-probabilities through the rules, chooses each row's token and the rows that go on,
keeps the finished outputs and says which sentences are done; done sentences' hypotheses are taken and they leave.
:func:`run_search` joins a whole batch and steps until it is empty; the server's continuous batching
(``continuous.py``) joins sentences as requests arrive. The strategies: :class:`Greedy` (the best token),
:class:`Beam` (beam search, :func:`beam_step`), sampling (``sampling.py``) and lexically constrained beam search
(``constrained.py``). :func:`reference_beam_search`, at the end, is beam search written plainly for one sentence,
the reference the batched one is tested against (as ``attention_reference`` sits next to ``attention``).

Scores are sums of log-probabilities; finished hypotheses are ranked by ``score / length_penalty(|Y|)`` where |Y|
counts the EOS. When a sentence stops is ``decode.stop`` (:func:`sentence_done`); it always stops at its limit.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, overload

import torch
from torch import Tensor
from torch.nn import functional as F

from ..config import DecodeConfig
from ..data.vocab import BOS_ID, EOS_ID, PAD_ID
from ..model.transformer import Transformer
from .ensemble import Ensemble
from .steering import ForcedTokens, Steering, StepProcessor, StepRows, search_rules
from .steppers import CachedSteps, Encoded, RowLogits, Stepper, search_steps, step_logits
from .top_k import top_k_rows


@dataclass(frozen=True)
class Hypothesis:
    """One output: token ids (no BOS/EOS) and its length-normalised score; for a sentence's best, where the search
    kept them (a model with ``model.recurrence``), each decoder layer's self-attention keys/values of BOS and its
    tokens, (H, 1 + len(tokens), d_k) each: what the sentence leaves the next as its past."""

    tokens: list[int]
    score: float
    kept: list[tuple[Tensor, Tensor]] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class BeamStep:
    """What one step chose for n open sentences of R rows each: each (n, R) but ``done`` (n,)."""

    scores: Tensor | None  # the rows' summed log-probabilities, best first (None: the strategy keeps its own)
    parents: Tensor | None  # the row each extends, an index into the step's rows (None: each row goes on itself)
    tokens: Tensor  # the token each adds
    done: Tensor  # sentences that stop searching after this step
    # (n,) per sentence the row (an index into the step's rows) whose hypothesis became the sentence's best
    # finished one at this step, -1 where none did; None: none did, or the strategy does not say
    best_from: Tensor | None = None


@dataclass(frozen=True)
class BeamLists:
    """A beam search's lists at one step, as :func:`beam_step` reads and updates them: the open hypotheses'
    summed log-probabilities ``scores`` (n, rows) and tokens so far ``history`` (n * rows, H); the finished lists
    ``fin_scores`` (N, K) and ``fin_tokens`` (N, K, W), updated in place, rows ``sentences`` of them for the n open
    sentences (None: all, in order)."""

    scores: Tensor
    history: Tensor
    fin_scores: Tensor
    fin_tokens: Tensor
    sentences: Tensor | None = None


class Strategy(Protocol):
    """What the loop asks of a search strategy (see the module docstring). A strategy keeps its state by open
    sentence, in the loop's order: sentences join at the end and leave from anywhere."""

    first_rows: int  # rows per sentence that starts a batch (a beam fans out from one BOS row)
    rows: int  # rows per sentence after its first step; a sentence joining a running batch has as many

    def join(self, count: int, rows: int, width: int, terms: Sequence[Any] | None = None) -> None:
        """``count`` sentences join at their first step with ``rows`` rows each; ``width`` is the room their
        outputs need (tokens and EOS); ``terms`` per sentence, what a constrained search must place
        (``constrained.py``; other strategies take none)."""
        ...

    def choose(self, logits: Tensor | RowLogits, t: int | Tensor, max_len: Tensor, steering: Steering) -> BeamStep:
        """The step's choice for the open sentences from their rows' ``logits``, made log-probabilities by
        ``steering`` (the search's rules at this step); ``t`` counts each sentence's tokens so far (one number
        while they all joined together), ``max_len`` (n,) their limits."""
        ...

    def take(self, done: list[int]) -> list[list[Hypothesis]]:
        """The hypotheses of the open sentences at places ``done``, best first (they leave at :meth:`advance`)."""
        ...

    def advance(self, chosen: BeamStep, keep: Tensor | None, rows: Tensor | None, t: int | Tensor) -> None:
        """Follow the choice: ``keep`` the sentences that go on (None: all), ``rows`` the rows they go on with
        (None: each its own), ``t`` their tokens before this step's."""
        ...


# --------------------------------------------------------------------------- the loop


class SearchLoop:
    """The one search loop: sentences join between steps (:meth:`join`), every :meth:`step` extends each open
    sentence by one token and returns those that are done, which leave. :func:`run_search` joins a whole batch and
    steps until it is empty; the server's continuous batching (``continuous.py``) joins sentences as requests
    arrive, over a stepper they can join (``JoinableSteps``).

    A sentence counts its own steps: its length limit, forced prefix and position are its own. While every open
    sentence joined at once (the offline search) that count is one number, and rules skip the steps they change
    nothing at (``steering.py``)."""

    def __init__(
        self,
        steps: Stepper,
        strategy: Strategy,
        rules: Sequence[StepProcessor],
        device: torch.device,
        keep_present: bool = False,
    ) -> None:
        """``keep_present``: each sentence's best hypothesis carries its decoder keys/values (``Hypothesis.kept``),
        where the strategy says which row it ended in and the stepper keeps them (:class:`.steppers.CachedSteps`)."""
        self.steps, self.strategy, self.rules, self.device = steps, strategy, list(rules), device
        self.keep_present = keep_present and isinstance(steps, CachedSteps)
        self.present: dict[Any, list[tuple[Tensor, Tensor]]] = {}  # by sentence key: its best hypothesis's
        self._empty()

    def _empty(self) -> None:
        self.keys: list[Any] = []  # per open sentence, in batch order
        self.t: int | Tensor = 0  # tokens so far: one number while all joined at once, else (n,)
        self.max_len = torch.zeros(0, dtype=torch.long, device=self.device)  # (n,) length limits
        self.prefix: Tensor | None = None  # (n, P) forced first tokens, PAD-padded
        self.tokens = torch.zeros(0, dtype=torch.long, device=self.device)  # (n * rows,) each row's last token
        self.rows_per_sentence = self.strategy.first_rows
        self.kept_rules: list[StepProcessor] = search_rules()  # new per batch: a rule may remember its first step
        self._places = torch.zeros(0, dtype=torch.long, device=self.device)

    def __len__(self) -> int:
        """Open sentences."""
        return len(self.keys)

    def join(
        self, keys: Sequence[Any], max_len: Tensor, prefix: Tensor | None = None, terms: Sequence[Any] | None = None
    ) -> int:
        """Sentences ``keys`` join at their first step with length limits ``max_len`` (m,), forced first tokens
        ``prefix`` (m, P) where given and ``terms`` for a constrained strategy; returns the rows each has (the
        stepper must give them as many): ``first_rows`` where they start a batch, else the batch's."""
        m, device, rows = len(keys), self.device, self.rows_per_sentence
        if not self.keys:
            self._empty()
            rows = self.rows_per_sentence
        elif isinstance(self.t, int):
            self.t = torch.full((len(self.keys),), self.t, dtype=torch.long, device=device)
        if isinstance(self.t, Tensor):
            self.t = torch.cat([self.t, torch.zeros(m, dtype=torch.long, device=device)])
        self.prefix = _joined_prefix(self.prefix, len(self.keys), prefix, m, device)
        self.max_len = torch.cat([self.max_len, max_len])
        self.tokens = torch.cat([self.tokens, torch.full((m * rows,), BOS_ID, dtype=torch.long, device=device)])
        self.keys.extend(keys)
        self._places = torch.arange(len(self.keys), device=device)
        self.strategy.join(m, rows, int(max_len.max()) + 1, terms)
        return rows

    def step(self, cancelled: Collection[Any] = ()) -> list[tuple[Any, list[Hypothesis]]]:
        """One token for every open sentence; returns the done ones' keys and hypotheses (they leave). Sentences
        whose key is in ``cancelled`` leave too, without a result.

        At a few rows a step's bookkeeping is dozens of calls of a few microseconds each, a sizeable share of the
        step, so the calls that change nothing in most steps are skipped: a rule's edit at the steps it changes
        nothing (the length limit before any sentence reaches it), the forced prefix after it, and the selection
        of the sentences that go on while all do."""
        strategy, t = self.strategy, self.t
        rules = self.kept_rules + self.rules
        if self.prefix is not None and (int(self.prefix.size(1)) > t if isinstance(t, int) else True):
            rules.append(ForcedTokens(self.prefix))
        steering = Steering(rules, StepRows(t, self._places, self.rows_per_sentence, self.max_len))
        chosen = strategy.choose(step_logits(self.steps, self.tokens), t, self.max_len, steering)
        if self.keep_present and chosen.best_from is not None:
            self._keep_present(chosen.best_from, t)
        done = chosen.done
        if cancelled:
            done = done | torch.tensor([key in cancelled for key in self.keys], device=self.device)
        keep = (~done).nonzero().flatten()
        finished = self._leaving(done, len(keep), cancelled)
        if len(keep) == 0:  # the strategy left empty too: sentences joining later start afresh
            strategy.advance(chosen, keep, keep, t if isinstance(t, int) else t[keep])
            self._empty()
            return finished
        new_tokens, parents = chosen.tokens, chosen.parents
        self.rows_per_sentence = per_sentence = new_tokens.size(1)
        if len(keep) == len(self.keys):  # every sentence goes on
            rows = None if parents is None else parents.flatten()
            strategy.advance(chosen, None, rows, t)
            if rows is not None:
                self.steps.select(rows, sentences=None)
        else:  # the done ones' rows leave
            rows = (keep[:, None] * per_sentence + torch.arange(per_sentence, device=self.device)).flatten()
            rows = rows if parents is None else parents[keep].flatten()
            t = t if isinstance(t, int) else t[keep]
            strategy.advance(chosen, keep, rows, t)
            self.steps.select(rows, sentences=keep)
            new_tokens, self.max_len = new_tokens[keep], self.max_len[keep]
            self.prefix = None if self.prefix is None else self.prefix[keep]
            self.keys = [self.keys[i] for i in keep.tolist()]
            self._places = torch.arange(len(self.keys), device=self.device)
        self.t, self.tokens = t + 1, new_tokens.flatten()
        return finished

    def _leaving(self, done: Tensor, staying: int, cancelled: Collection[Any]) -> list[tuple[Any, list[Hypothesis]]]:
        if staying == len(self.keys):
            return []
        places = done.nonzero().flatten().tolist()
        found = self.strategy.take(places)
        kept = [self.present.pop(self.keys[p], None) for p in places] if self.keep_present else [None] * len(places)
        return [
            (self.keys[p], _with_kept(hyps, kv)) for p, hyps, kv in zip(places, found, kept) if self.keys[p] not in cancelled
        ]

    def _keep_present(self, best_from: Tensor, t: int | Tensor) -> None:
        """Keep the decoder keys/values of the rows whose hypotheses became their sentences' best finished ones
        this step: BOS and the t tokens before this step's EOS (the cache is about to be reordered)."""
        places = (best_from >= 0).nonzero().flatten()
        if len(places) == 0:
            return
        lengths = [t + 1] * len(places) if isinstance(t, int) else (t[places] + 1).tolist()
        assert isinstance(self.steps, CachedSteps)
        for place, kept in zip(places.tolist(), self.steps.present(best_from[places], lengths)):
            self.present[self.keys[place]] = kept


def _with_kept(hyps: list[Hypothesis], kept: list[tuple[Tensor, Tensor]] | None) -> list[Hypothesis]:
    """The n-best list with its best hypothesis carrying ``kept`` (None: as it is)."""
    if kept is None or not hyps:
        return hyps
    return [replace(hyps[0], kept=kept), *hyps[1:]]


def _joined_prefix(old: Tensor | None, n: int, new: Tensor | None, m: int, device: torch.device) -> Tensor | None:
    """The open sentences' forced prefixes after ``m`` sentences joined ``n`` (PAD where a sentence has none)."""
    if old is None and (new is None or new.size(1) == 0):
        return None
    width = max(0 if old is None else old.size(1), 0 if new is None else new.size(1))
    old = old if old is not None else torch.full((n, width), PAD_ID, dtype=torch.long, device=device)
    new = new if new is not None else torch.full((m, width), PAD_ID, dtype=torch.long, device=device)
    return torch.cat([pad_columns(old, width), pad_columns(new, width)])


def pad_columns(tokens: Tensor, width: int) -> Tensor:
    """Token ids padded with PAD along the last dimension to ``width``."""
    return F.pad(tokens, (0, width - tokens.size(-1)), value=PAD_ID)


@torch.inference_mode()
def run_search(
    model: Transformer | Ensemble,
    src: Tensor,
    config: DecodeConfig,
    strategy: Strategy,
    max_len: Tensor,
    cached: bool = True,
    prefix: Tensor | None = None,
    encoded: Encoded | None = None,
    rules: Sequence[StepProcessor] = (),
    terms: Sequence[Any] | None = None,
) -> list[list[Hypothesis]]:
    """Search ``src`` (n, S) with ``strategy`` until every sentence is done or at its length limit ``max_len``
    (n,) (:func:`length_limits`): the whole batch joins a :class:`SearchLoop`, which steps until it is empty.
    Outputs start with ``prefix`` (n, P) where given. ``encoded`` is ``src`` as the decoder reads it
    (:class:`.steppers.Encoded`: the encoder output, and a recurrent model's past) when the caller has it
    already; ``rules`` the caller's step processors (``steering.py``), kept with those every search keeps;
    ``terms`` what a constrained strategy needs per sentence."""
    n = src.size(0)
    encoded = encoded if encoded is not None else Encoded(*model.encode(src))
    steps = search_steps(model, encoded, config, cached, strategy.rows, int(max_len.max()) + 1)
    recurrent = isinstance(model, Transformer) and bool(model.config.recurrence)  # its sentences leave their keys
    loop = SearchLoop(steps, strategy, rules, src.device, keep_present=recurrent)
    rows = loop.join(range(n), max_len, prefix, terms)
    if rows > 1:
        steps.select(torch.arange(n, device=src.device).repeat_interleave(rows), None)
    results: list[list[Hypothesis]] = [[] for _ in range(n)]
    while loop:
        for key, hyps in loop.step():
            results[key] = hyps
    return results


# --------------------------------------------------------------------------- shared pieces


def max_output_lengths(src: Tensor, config: DecodeConfig, max_positions: int) -> Tensor:
    """Largest number of output tokens (EOS excluded) per sentence: a * |src| + b, within the model."""
    src_len = (src != PAD_ID).sum(dim=1) - 1  # the source ends in EOS
    limit = (config.max_len_a * src_len.double() + config.max_len_b).floor().long()
    return limit.clamp(min=1, max=max_positions - 1)


def length_limits(
    src: Tensor, config: DecodeConfig, max_positions: int, prefix: Tensor | None = None, room: Tensor | None = None
) -> Tensor:
    """Each sentence's length limit (:func:`max_output_lengths`), leaving room for its target ``prefix`` and
    ``room`` more tokens after it (a constrained search's terms) where given, within the model."""
    max_len = max_output_lengths(src, config, max_positions)
    if prefix is None and room is None:
        return max_len
    needed = room if room is not None else torch.zeros_like(max_len)
    if prefix is not None:
        needed = needed + (prefix != PAD_ID).sum(dim=1)
    return torch.maximum(max_len, needed).clamp(max=max_positions - 1)


@overload
def length_penalty(length: Tensor, config: DecodeConfig) -> Tensor: ...
@overload
def length_penalty(length: float, config: DecodeConfig) -> float: ...
def length_penalty(length: Tensor | float, config: DecodeConfig) -> Tensor | float:
    """GNMT ((5 + |Y|) / 6) ** alpha (the paper's), or |Y| ** alpha (fairseq's 'average')."""
    if config.length_penalty == "gnmt":
        return ((5.0 + length) / 6.0) ** config.alpha
    return length**config.alpha


ROW_BLOCK = 128  # rows of (rows x vocabulary) scores handled at once, so they stay in the CPU cache


def _best_tokens(logits: Tensor | RowLogits, count: int, steering: Steering) -> tuple[Tensor, Tensor]:
    """Log-probabilities and ids of the ``count`` best allowed tokens of every row (``steering``: the step's
    rules): each (N, count).

    Normalises, steers and ranks a block of rows at a time: on a CPU, a whole batch of
    hypotheses x 8,000+ pieces is tens of MB, and passing over it three times costs more
    than the ranking itself. ``logits`` (N, V) is a tensor, or a :class:`RowLogits` that makes
    each block's rows as they are read.
    """
    count = min(count, logits.size(1))
    block = ROW_BLOCK if logits.device.type == "cpu" else logits.size(0)  # a GPU takes all rows at once
    blocks = []
    for start in range(0, logits.size(0), block):
        rows = slice(start, start + block)
        blocks.append(top_k_rows(steering(logits[rows], rows), count))
    if len(blocks) == 1:
        return blocks[0]
    return torch.cat([b[0] for b in blocks]), torch.cat([b[1] for b in blocks])


# --------------------------------------------------------------------------- greedy


class Greedy:
    """The most probable token at every step, until EOS or the length limit."""

    first_rows = rows = 1

    def __init__(self, config: DecodeConfig, device: torch.device) -> None:
        self.config = config
        self.outputs = torch.zeros((0, 1), dtype=torch.long, device=device)  # (n, W) by open sentence, PAD after
        self.lengths = torch.zeros(0, dtype=torch.long, device=device)  # tokens before the EOS
        self.scores = torch.zeros(0, device=device)  # summed log-probabilities

    def join(self, count: int, rows: int, width: int, terms: Sequence[Any] | None = None) -> None:
        width = max(width, self.outputs.size(1))
        self.outputs = torch.cat([pad_columns(self.outputs, width), self.outputs.new_full((count, width), PAD_ID)])
        self.lengths = torch.cat([self.lengths, self.lengths.new_zeros(count)])
        self.scores = torch.cat([self.scores, self.scores.new_zeros(count)])

    def choose(self, logits: Tensor | RowLogits, t: int | Tensor, max_len: Tensor, steering: Steering) -> BeamStep:
        best, tokens = _best_tokens(logits, 1, steering)  # (n, 1)
        write_at(self.outputs, t, tokens[:, 0])
        self.scores += best[:, 0]
        done = tokens[:, 0] == EOS_ID
        self.lengths[done] = t if isinstance(t, int) else t[done]
        rows = torch.arange(len(done), device=done.device)
        return BeamStep(None, None, tokens, done, best_from=rows.masked_fill(~done, -1))

    def take(self, done: list[int]) -> list[list[Hypothesis]]:
        lengths = self.lengths[done]
        normalised = self.scores[done] / length_penalty(lengths.double() + 1, self.config).float()  # |Y| counts EOS
        return [
            [Hypothesis(row[:length], score)]
            for row, length, score in zip(self.outputs[done].tolist(), lengths.tolist(), normalised.tolist())
        ]

    def advance(self, chosen: BeamStep, keep: Tensor | None, rows: Tensor | None, t: int | Tensor) -> None:
        if keep is not None:  # each row goes on with its own token, already written
            self.outputs, self.lengths, self.scores = self.outputs[keep], self.lengths[keep], self.scores[keep]


def write_at(outputs: Tensor, t: int | Tensor, tokens: Tensor) -> None:
    """``tokens`` (N,) written into each row of ``outputs`` (N, W) at its column ``t``."""
    if isinstance(t, int):
        outputs[:, t] = tokens
    else:
        outputs.scatter_(1, t[:, None], tokens[:, None])


def greedy_search(model: Transformer, src: Tensor, config: DecodeConfig, cached: bool = True) -> list[list[Hypothesis]]:
    """Greedy search (:class:`Greedy`) whatever ``config.beam`` says; :func:`search` takes every option."""
    return search(model, src, replace(config, beam=1), cached=cached)


# --------------------------------------------------------------------------- beam


class Beam:
    """Beam search: every step extends each open hypothesis by one token, keeps the 2K best candidates of each
    sentence, moves those ending in EOS (among the K best) to the sentence's finished list and carries the K best
    others on (:func:`beam_step`). A sentence that starts a batch runs one row at its first step (all its
    hypotheses would be the same BOS), and the loop's ``select`` fans it out to its K best continuations; one that
    joins a running batch has K rows from the first, all but one at -inf, which ranks the same candidates."""

    first_rows = 1

    def __init__(self, config: DecodeConfig, nbest: int, device: torch.device) -> None:
        k = self.rows = config.beam
        self.config, self.nbest = config, nbest
        self.scores = torch.zeros((0, 1), device=device)  # (n, rows per sentence) the open rows' sums
        self.history = torch.zeros((0, 1), dtype=torch.long, device=device)  # (n * rows, W) tokens, PAD after
        self.fin_scores = torch.zeros((0, k), device=device)  # (n, K) normalised, best first
        self.fin_tokens = torch.zeros((0, k, 1), dtype=torch.long, device=device)  # (n, K, W)

    def join(self, count: int, rows: int, width: int, terms: Sequence[Any] | None = None) -> None:
        k, width = self.rows, max(width, self.history.size(1))
        first = self.scores.new_full((count, rows), float("-inf"))
        first[:, 0] = 0.0  # one live row: the others would repeat it
        open_scores = self.scores if len(self.scores) else self.scores.new_zeros((0, rows))  # none open: a new batch
        self.scores = torch.cat([open_scores, first])
        fresh = self.history.new_full((count * rows, width), PAD_ID)
        self.history = torch.cat([pad_columns(self.history, width), fresh])
        self.fin_scores = torch.cat([self.fin_scores, self.fin_scores.new_full((count, k), float("-inf"))])
        self.fin_tokens = torch.cat(
            [pad_columns(self.fin_tokens, width), self.fin_tokens.new_full((count, k, width), PAD_ID)]
        )

    def choose(self, logits: Tensor | RowLogits, t: int | Tensor, max_len: Tensor, steering: Steering) -> BeamStep:
        return beam_step(logits, self.lists(), t, max_len, self.config, self.nbest, steering)

    def lists(self) -> BeamLists:
        """This beam's lists."""
        return BeamLists(self.scores, self.history, self.fin_scores, self.fin_tokens)

    def take(self, done: list[int]) -> list[list[Hypothesis]]:
        return best_finished(self.fin_scores[done], self.fin_tokens[done], self.nbest)

    def advance(self, chosen: BeamStep, keep: Tensor | None, rows: Tensor | None, t: int | Tensor) -> None:
        assert chosen.scores is not None and rows is not None
        tokens = chosen.tokens if keep is None else chosen.tokens[keep]
        self.history = self.history.index_select(0, rows)
        per_sentence = tokens.size(1)
        write_at(self.history, t if isinstance(t, int) else t.repeat_interleave(per_sentence), tokens.flatten())
        self.scores = chosen.scores if keep is None else chosen.scores[keep]
        if keep is not None:
            self.fin_scores, self.fin_tokens = self.fin_scores[keep], self.fin_tokens[keep]


def beam_search(
    model: Transformer, src: Tensor, config: DecodeConfig, nbest: int = 1, cached: bool = True
) -> list[list[Hypothesis]]:
    """Batched beam search (:class:`Beam`): each sentence's ``nbest`` best finished hypotheses (``config.beam`` of
    1 too: a beam of one); :func:`search` takes every option."""
    max_len = length_limits(src, config, model.config.max_positions)
    return run_search(model, src, config, Beam(config, nbest, src.device), max_len, cached)


def beam_step(
    logits: Tensor | RowLogits,
    beam: BeamLists,
    lengths: int | Tensor,
    max_len: Tensor,
    config: DecodeConfig,
    nbest: int,
    steering: Steering,
) -> BeamStep:
    """One step of beam search over n open sentences (the offline search's and the continuous one's).

    ``logits`` (n * rows, V) of the open rows (``steering``: the step's rules), ``beam`` their lists;
    ``lengths`` (an int, or (n,) when sentences joined at different steps) counts each sentence's tokens so far,
    ``max_len`` (n,) its limit. Each sentence keeps its 2K best candidates; those ending in EOS among the K best
    are merged into its finished lists (in place, ranked by normalised score as in fairseq), and the K best
    others go on.
    """
    scores, history, fin_scores, fin_tokens = beam.scores, beam.history, beam.fin_scores, beam.fin_tokens
    k = config.beam
    n, rows_per_sent = scores.shape
    # A sentence's 2K best candidates are among the 2K best tokens of each of its rows (adding the
    # row's score does not reorder a row), so only those are scored.
    row_log_probs, row_tokens = _best_tokens(logits, 2 * k, steering)  # (n * rows, 2K)
    top_scores, origin, token = _rank_candidates(scores, row_log_probs, row_tokens, k)  # (n, 2K) each
    is_eos = token == EOS_ID
    finished = slice(None) if beam.sentences is None else beam.sentences
    first_rows = torch.arange(0, n * rows_per_sent, rows_per_sent, device=scores.device)  # each sentence's first row
    best_from = None
    if is_eos[:, :k].any():
        eos_ranked = is_eos.clone()
        eos_ranked[:, k:] = False
        ended_at = lengths if isinstance(lengths, Tensor) else torch.full((n,), lengths, device=scores.device)
        history = history.view(n, rows_per_sent, history.size(-1))
        new_best = _collect_finished(
            finished, fin_scores, fin_tokens, history, origin, top_scores, eos_ranked, ended_at, config
        )
        best_from = torch.where(new_best >= 0, origin.gather(1, new_best.clamp(min=0)[:, None])[:, 0] + first_rows, -1)
    open_scores, pick = top_scores.masked_fill(is_eos, float("-inf")).topk(min(k, top_scores.size(1)), dim=1)
    parents = origin.gather(1, pick) + first_rows[:, None]
    done = sentence_done(config, fin_scores[finished], open_scores[:, 0], is_eos[:, 0], nbest, max_len, lengths)
    return BeamStep(open_scores, parents, token.gather(1, pick), done, best_from)


def _rank_candidates(scores: Tensor, row_log_probs: Tensor, row_tokens: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """Each sentence's 2K best candidates, best first: their summed scores, the row of the sentence each
    extends, and its token, each (n, 2K). ``scores`` (n, rows) are the open rows' sums; ``row_log_probs``
    and ``row_tokens`` (n * rows, 2K) each row's best tokens: a sentence's 2K best candidates are among
    them, since adding a row's score does not reorder that row."""
    n, per_row = scores.size(0), row_tokens.size(1)
    candidates = (scores.view(-1, 1) + row_log_probs).view(n, -1)  # (n, rows * 2K)
    top_scores, top_index = candidates.topk(min(2 * k, candidates.size(1)), dim=1)
    return top_scores, top_index // per_row, row_tokens.view(n, -1).gather(1, top_index)


def sentence_done(
    config: DecodeConfig,
    finished: Tensor,
    best_open: Tensor,
    best_is_eos: Tensor,
    nbest: int,
    max_len: Tensor,
    t: int | Tensor,
) -> Tensor:
    """Which sentences stop searching after step ``t`` (see ``DecodeConfig.stop``).

    ``finished`` (n, K) holds each sentence's best finished scores, sorted; ``best_open`` (n,) the
    raw score of its best open hypothesis; ``best_is_eos`` whether its best candidate this step ended.
    """
    k = finished.size(1)
    full = finished[:, k - 1] > float("-inf")  # K finished
    if config.stop == "beam":
        done = full
    elif config.stop == "top":
        done = full | (best_is_eos & (finished[:, min(nbest, k) - 1] > float("-inf")))
    else:
        # An open hypothesis's score only falls as it grows, so the best it can still reach
        # is its current score over the largest length penalty within the limit.
        bound = best_open / length_penalty(max_len.double() + 1, config).float()
        done = full & (finished[:, k - 1] >= bound)
    return done | (t >= max_len) | (best_open == float("-inf"))


def one_sentence_done(
    config: DecodeConfig, finished: list[float], best_open: float, best_is_eos: bool, nbest: int, max_len: int, t: int
) -> bool:
    """:func:`sentence_done` for one sentence whose finished scores (best first) are a list."""
    k = config.beam
    kept = finished[:k] + [float("-inf")] * (k - len(finished[:k]))
    done = sentence_done(
        config, torch.tensor([kept]), torch.tensor([best_open]), torch.tensor([best_is_eos]), nbest,
        torch.tensor([max_len]), t,
    )  # fmt: skip
    return bool(done[0])


def _collect_finished(
    sent: Tensor | slice,
    fin_scores: Tensor,
    fin_tokens: Tensor,
    history: Tensor,
    origin: Tensor,
    top_scores: Tensor,
    eos_ranked: Tensor,
    lengths: Tensor,
    config: DecodeConfig,
) -> Tensor:
    """Merge this step's EOS candidates into each sentence's K best finished hypotheses; returns per sentence the
    candidate (an index into its 2K) that became its best finished hypothesis, -1 where the best stayed.

    ``history`` (n, rows, H) holds each row's tokens so far, PAD after them; ``lengths`` (n,) counts each
    sentence's tokens before this step's EOS (all equal here; they differ where sentences joined a
    running batch at different steps, decode/continuous.py).
    """
    n, two_k = origin.shape
    k, width = fin_tokens.shape[1:]
    penalty = length_penalty(lengths.double() + 1, config).float()[:, None]  # |Y| counts the EOS
    normalised = (top_scores / penalty).masked_fill(~eos_ranked, float("-inf"))
    paths = history.gather(1, origin[:, :, None].expand(n, two_k, history.size(2)))  # (n, 2K, H)
    new_tokens = torch.full((n, two_k, width), PAD_ID, dtype=torch.long, device=origin.device)
    new_tokens[:, :, : history.size(2)] = paths
    new_tokens.scatter_(2, lengths[:, None, None].expand(n, two_k, 1), EOS_ID)
    all_scores = torch.cat([fin_scores[sent], normalised], dim=1)  # (n, 3K)
    all_tokens = torch.cat([fin_tokens[sent], new_tokens], dim=1)  # (n, 3K, width)
    best, pick = all_scores.topk(k, dim=1)  # sorted, best first
    fin_scores[sent] = best
    fin_tokens[sent] = all_tokens.gather(1, pick[:, :, None].expand(n, k, width))
    return torch.where(pick[:, 0] >= k, pick[:, 0] - k, -1)  # the first K were the finished list before


def best_finished(fin_scores: Tensor, fin_tokens: Tensor, nbest: int) -> list[list[Hypothesis]]:
    """Each sentence's ``nbest`` best finished hypotheses from its finished lists (N, K) and (N, K, W)."""
    results = []
    for scores, paths in zip(fin_scores.tolist(), fin_tokens.tolist()):
        hyps = []
        for score, path in zip(scores[:nbest], paths[:nbest]):
            if score == float("-inf"):
                break
            hyps.append(Hypothesis(path[: path.index(EOS_ID)], score))
        results.append(hyps)
    return results


def search(
    model: Transformer,
    src: Tensor,
    config: DecodeConfig,
    nbest: int = 1,
    prefix: Tensor | None = None,
    encoded: Encoded | None = None,
    rules: Sequence[StepProcessor] = (),
    cached: bool = True,
) -> list[list[Hypothesis]]:
    """Greedy search (:class:`Greedy`) when the beam is 1, else beam search (:class:`Beam`): each sentence's
    ``nbest`` best hypotheses; the other arguments as :func:`run_search` takes them."""
    max_len = length_limits(src, config, model.config.max_positions, prefix)
    return run_search(model, src, config, strategy_for(config, nbest, src.device), max_len, cached, prefix, encoded, rules)


def strategy_for(config: DecodeConfig, nbest: int, device: torch.device) -> Greedy | Beam:
    """Greedy search (:class:`Greedy`) when the beam is 1, else beam search (:class:`Beam`)."""
    return Greedy(config, device) if config.beam == 1 else Beam(config, nbest, device)


# --------------------------------------------------------------------------- the plain reference


@torch.inference_mode()
def reference_beam_search(model: Transformer, src: Tensor, config: DecodeConfig, nbest: int) -> list[Hypothesis]:
    """:func:`beam_search` for one sentence (``src`` is (1, S)), written plainly: the full
    log-softmax over every open prefix, no cache, Python lists. Slow; tests compare the two."""
    k = config.beam
    memory, mask = model.encode(src)
    max_len = int(max_output_lengths(src, config, model.config.max_positions)[0])
    hyps: list[tuple[list[int], float]] = [([], 0.0)]  # open: (tokens, summed log-probability)
    finished: list[tuple[float, list[int]]] = []  # (normalised score, tokens), best first
    for t in range(max_len + 1):
        prefixes = torch.tensor([[BOS_ID] + tokens for tokens, _ in hyps], device=src.device)
        hidden = model.decode(prefixes, memory.expand(len(hyps), -1, -1), mask.expand(len(hyps), -1, -1, -1))
        log_probs = torch.log_softmax(model.logits(hidden[:, -1]).float(), dim=-1)  # (open, V)
        log_probs[:, [PAD_ID, BOS_ID]] = float("-inf")
        if t == 0:  # never an empty translation (steering.NoEmptyOutput)
            log_probs[:, EOS_ID] = float("-inf")
        if t >= max_len:  # at the limit only EOS may follow
            log_probs[:, [v for v in range(log_probs.size(1)) if v != EOS_ID]] = float("-inf")
        total = torch.tensor([score for _, score in hyps], device=src.device)[:, None] + log_probs
        values, index = total.flatten().topk(2 * k)
        vocab = log_probs.size(1)
        top = [(value, i // vocab, i % vocab) for value, i in zip(values.tolist(), index.tolist())]
        for value, row, token in top[:k]:  # EOS among the K best: finished
            if token == EOS_ID and value > float("-inf"):
                finished.append((value / float(length_penalty(float(t + 1), config)), hyps[row][0]))
        finished = sorted(finished, key=lambda f: -f[0])[:k]
        hyps = [(hyps[row][0] + [token], value) for value, row, token in top if token != EOS_ID][:k]
        best_open = hyps[0][1] if hyps else float("-inf")
        if one_sentence_done(config, [f[0] for f in finished], best_open, top[0][2] == EOS_ID, nbest, max_len, t):
            break
    return [Hypothesis(tokens, score) for score, tokens in finished[:nbest]]
