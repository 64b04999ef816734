"""Lexically constrained beam search: every glossary term's translation in the output.

Dynamic beam allocation (Post & Vilar 2018) as Hu et al. (2019) batch it: each hypothesis tracks how far it
has met its sentence's constraints (:class:`ConstraintState`); each step a sentence's candidates are its rows'
best tokens *and* every token that starts or continues one of its constraints, all scored from one
log-softmax; the K survivors are dealt from *banks* -- candidates grouped by how many constraint tokens they
have met -- the most advanced bank first, one from each bank in turn, so hypotheses that have met more
constraints stay in the beam while those that met fewer keep the fluent continuations. A hypothesis may end
only when it has met every constraint; one that reaches the length limit without them ends anyway and the
caller flags the sentence (``--glossary`` reports it).

A constraint is one term occurrence of the source: one of its translations (``alternatives``, token ids),
generated whole, is required; two occurrences of a term are two constraints. ``mode="soft"`` keeps the plain
beam (no banks, ending allowed) and adds ``SOFT_BONUS`` to the score of every token that advances a
constraint, a step rule (:class:`TermBonus`, ``steering.py``) as any other bias of a step: for users who prefer
fluency to the guarantee.

Sentences without constraints go through :func:`.search.beam_step`, the plain search's own step, on the same
logits, so their outputs are those of unconstrained decoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import sentencepiece as spm
import torch
from torch import Tensor

from ..config import DecodeConfig
from ..data.vocab import EOS_ID, PAD_ID
from ..model.transformer import Transformer
from ..terms.matching import TermMatcher
from .ensemble import Ensemble
from .search import (
    ROW_BLOCK,
    Beam,
    BeamLists,
    BeamStep,
    Hypothesis,
    beam_step,
    length_limits,
    length_penalty,
    one_sentence_done,
    run_search,
)
from .steering import Edit, Rows, Steering, StepProcessor, StepRows
from .steppers import Encoded, RowLogits
from .top_k import top_k_rows

SOFT_BONUS = 2.0  # log-probability added per constraint token in soft mode: e^2, about 7 times as likely

GlossaryMode = Literal["hard", "soft"]
# Banks deal the beam by constraint progress: with one row, the most advanced bank would take it at every step
# and each term would be forced in at once; a search with constraints runs with at least this beam (Hu et al.
# 2019 widen the beam with the constraints too).
CONSTRAINED_MIN_BEAM = 4


@dataclass(frozen=True)
class Constraint:
    """One term occurrence's required target: any one of ``alternatives`` (target token ids), whole."""

    alternatives: tuple[tuple[int, ...], ...]
    source: str = ""  # the source term, for messages
    targets: tuple[str, ...] = ()  # the alternatives as text: the output is checked for one of them

    def met_by(self, text: str) -> bool:
        """Whether a translation holds one of the term's translations, beginning a word."""
        return self.found_in(text) is not None

    def found_in(self, text: str) -> str | None:
        """The term's translation that a translation holds (beginning a word), or None."""
        return next((target for target in self.targets if _holds(text, target)), None)

    @property
    def length(self) -> int:
        """The tokens it takes to meet it (its shortest alternative): its weight in the banks."""
        return min(len(a) for a in self.alternatives)


def term_constraints(matcher: TermMatcher, tgt_vocab: spm.SentencePieceProcessor, text: str) -> tuple[Constraint, ...]:
    """The constraints of one source sentence: each glossary term it holds, with its translations as target
    pieces (a translation is encoded alone, so its first piece begins a word)."""
    return tuple(
        Constraint(tuple(tuple(tgt_vocab.encode(t, out_type=int)) for t in m.term.targets), m.term.source, m.term.targets)
        for m in matcher.find(text)
    )


@dataclass(frozen=True)
class ConstraintState:
    """How far one hypothesis has met its sentence's constraints: which are met, and the one under way (its
    index, -1 for none, and the tokens of it generated so far)."""

    met: tuple[bool, ...]
    current: int = -1
    matched: tuple[int, ...] = ()

    @classmethod
    def start(cls, constraints: tuple[Constraint, ...]) -> ConstraintState:
        return cls(tuple(False for _ in constraints))

    @property
    def done(self) -> bool:
        return all(self.met)

    def progress(self, constraints: tuple[Constraint, ...]) -> int:
        """Constraint tokens met: whole constraints, and the one under way (its bank)."""
        whole = sum(c.length for c, met in zip(constraints, self.met) if met)
        if self.current < 0:
            return whole
        return whole + min(len(self.matched), constraints[self.current].length - 1)

    def wanted(self, constraints: tuple[Constraint, ...]) -> set[int]:
        """The tokens that advance it: the next of the constraint under way, and the first of every unmet one."""
        tokens = {a[0] for c, met in zip(constraints, self.met) if not met for a in c.alternatives}
        if self.current >= 0:
            n = len(self.matched)
            tokens |= {a[n] for a in constraints[self.current].alternatives if a[:n] == self.matched and len(a) > n}
        return tokens

    def advance(self, token: int, constraints: tuple[Constraint, ...]) -> ConstraintState:
        """The state after ``token``: the constraint under way goes on, is met, or is broken off (its tokens
        then count for nothing and ``token`` may start another)."""
        if self.current >= 0:
            matched = (*self.matched, token)
            going_on = self._follow(self.current, matched, constraints)
            if going_on is not None:
                return going_on
        for index, (constraint, met) in enumerate(zip(constraints, self.met)):
            if not met and any(a[0] == token for a in constraint.alternatives):
                return self._follow(index, (token,), constraints) or self
        return ConstraintState(self.met)

    def _follow(self, index: int, matched: tuple[int, ...], constraints: tuple[Constraint, ...]) -> ConstraintState | None:
        alternatives = constraints[index].alternatives
        if any(a == matched for a in alternatives):  # met (a longer alternative may still go on: free text then)
            return ConstraintState(tuple(m or i == index for i, m in enumerate(self.met)))
        if any(a[: len(matched)] == matched for a in alternatives):
            return ConstraintState(self.met, index, matched)
        return None


@dataclass(frozen=True)
class _StateTable:
    """One state's moves, as the vectorized step reads them (see :meth:`_Sentence.table`)."""

    wanted: list[int]  # the tokens that advance the state
    after: list[int]  # the state (number) each of them leads to
    after_progress: list[int]  # and that state's progress
    fallback: int  # the state any other token (but EOS) leads to
    fallback_progress: int


@dataclass
class _Sentence:
    """One open sentence's search in constrained mode: its constraints, each open row's state, its finished
    hypotheses, and what it has worked out about states already. A beam meets the same few states again and
    again, so each distinct state gets a number once, and moves, progress and wanted tokens are looked up by it
    (hashing a small int, not a state, every candidate of every step)."""

    constraints: tuple[Constraint, ...]
    states: list[int]  # per open row, its state's number
    finished: list[tuple[float, list[int]]] = field(default_factory=list)  # (normalised score, tokens), best first
    unmet: list[tuple[float, list[int]]] = field(default_factory=list)  # ended at the limit lacking a constraint
    ended: bool = False  # a hypothesis ended this step: the finished lists changed
    _known: dict[ConstraintState, int] = field(default_factory=dict)
    _state: list[ConstraintState] = field(default_factory=list)
    progress: list[int] = field(default_factory=list)  # per state number: constraint tokens met (its bank)
    done: list[bool] = field(default_factory=list)  # per state number: every constraint met
    wanted: list[list[int]] = field(default_factory=list)  # per state number: the tokens that advance it
    _moves: list[dict[int, int]] = field(default_factory=list)  # per state number: token -> next state's number
    _tables: dict[int, _StateTable] = field(default_factory=dict)  # per state number, once asked for

    @classmethod
    def start(cls, constraints: tuple[Constraint, ...], rows: int) -> _Sentence:
        search = cls(constraints, [])
        search.states = [search._number(ConstraintState.start(constraints))] * rows
        return search

    def advance(self, state: int, token: int) -> int:
        moves = self._moves[state]
        after = moves.get(token)
        if after is None:
            after = moves[token] = self._number(self._state[state].advance(token, self.constraints))
        return after

    def table(self, state: int) -> _StateTable:
        """Where each token leads from ``state``: its wanted tokens to their own states, EOS nowhere (it ends the
        hypothesis), every other token to the fallback state (the constraint under way broken off)."""
        table = self._tables.get(state)
        if table is None:
            wanted = self.wanted[state]
            after = [self.advance(state, token) for token in wanted]
            fallback = self._number(ConstraintState(self._state[state].met))
            table = self._tables[state] = _StateTable(
                wanted, after, [self.progress[a] for a in after], fallback, self.progress[fallback]
            )
        return table

    def _number(self, state: ConstraintState) -> int:
        number = self._known.get(state)
        if number is None:
            number = self._known[state] = len(self._state)
            self._state.append(state)
            self.progress.append(state.progress(self.constraints))
            self.done.append(state.done)
            self.wanted.append(sorted(state.wanted(self.constraints)))
            self._moves.append({})
        return number


class TermBonus:
    """Soft glossary mode's rule: ``SOFT_BONUS`` added to every token that advances a row's constraints (after
    normalising: the bonus is the search's preference, not the model's distribution), read from the constrained
    strategy's own states (:attr:`Constrained.searches`, by open sentence)."""

    before_normalising = False

    def __init__(self, strategy: Constrained) -> None:
        self.strategy = strategy

    def at(self, step: StepRows) -> Edit | None:
        per_sentence, rows, tokens = step.rows_per_sentence, [], []
        for place, search in enumerate(self.strategy.searches):
            for row, state in enumerate(search.states if search is not None else []):
                assert search is not None
                table, now = search.table(state), search.progress[state]
                for token, progress in zip(table.wanted, table.after_progress):
                    if progress > now:  # breaking off a term under way for another's first token is no advance
                        rows.append(place * per_sentence + row)
                        tokens.append(token)
        if not rows:
            return None
        device = step.sentences.device
        bonus_rows, bonus_tokens = torch.tensor(rows, device=device), torch.tensor(tokens, device=device)
        total = len(step.sentences) * per_sentence
        return lambda scores, which: _add_bonus(scores, which, bonus_rows, bonus_tokens, total)


def _add_bonus(scores: Tensor, which: Rows, rows: Tensor, tokens: Tensor, total: int) -> Tensor:
    """``SOFT_BONUS`` at (``rows``, ``tokens``) of the step, for the block of its rows ``which`` holds."""
    if isinstance(which, slice):
        start, stop, _ = which.indices(total)
        local, keep = rows - start, (rows >= start) & (rows < stop)
    else:
        place = torch.full((total,), -1, dtype=torch.long, device=rows.device)
        place[which] = torch.arange(len(which), device=rows.device)
        local = place[rows]
        keep = local >= 0
    scores[local[keep], tokens[keep]] += SOFT_BONUS
    return scores


class Constrained:
    """The constrained search as a strategy of the search loop (``search.SearchLoop``): :class:`.search.Beam` with
    each step taken by :func:`constrained_step` while a sentence has terms to place (``terms`` at :meth:`join`),
    the finished lists those of the plain beam."""

    first_rows = 1

    def __init__(self, beam: Beam, mode: GlossaryMode = "hard") -> None:
        self.beam, self.mode = beam, mode
        self.rows = beam.rows
        self.searches: list[_Sentence | None] = []  # by open sentence: its constrained search, or None (no terms)

    def join(self, count: int, rows: int, width: int, terms: Sequence[Any] | None = None) -> None:
        self.beam.join(count, rows, width)
        self.searches.extend(searches_for(list(terms) if terms is not None else [()] * count, rows))

    def choose(self, logits: Tensor | RowLogits, t: int | Tensor, max_len: Tensor, steering: Steering) -> BeamStep:
        beam = self.beam
        if all(search is None for search in self.searches):
            return beam.choose(logits, t, max_len, steering)
        return constrained_step(
            logits, beam.lists(), t, max_len, self.searches, beam.config, beam.nbest, steering, self.mode
        )

    def take(self, done: list[int]) -> list[list[Hypothesis]]:
        return self.beam.take(done)

    def advance(self, chosen: BeamStep, keep: Tensor | None, rows: Tensor | None, t: int | Tensor) -> None:
        self.beam.advance(chosen, keep, rows, t)
        if keep is not None:
            self.searches = [self.searches[i] for i in keep.tolist()]


def constrained_beam_search(
    model: Transformer | Ensemble,
    src: Tensor,
    config: DecodeConfig,
    constraints: list[tuple[Constraint, ...]],
    nbest: int = 1,
    mode: GlossaryMode = "hard",
    encoded: Encoded | None = None,
    prefix: Tensor | None = None,
    rules: Sequence[StepProcessor] = (),
) -> list[list[Hypothesis]]:
    """Beam search whose outputs meet each sentence's ``constraints`` (one tuple per row of ``src``; empty:
    none) and start with its ``prefix`` where given ((n, P) target ids, PAD-padded; a term the prefix holds is
    met by it). Returns each sentence's ``nbest`` best finished hypotheses, as :func:`.search.beam_search` does;
    ``rules`` as it takes them."""
    max_positions = model.config.max_positions
    max_len = length_limits(src, config, max_positions, prefix, constraint_room(constraints, src.device))
    strategy = Constrained(Beam(config, nbest, src.device), mode)
    if mode == "soft":
        rules = [*rules, TermBonus(strategy)]
    return run_search(model, src, config, strategy, max_len, True, prefix, encoded, rules, constraints)


def searches_for(constraints: list[tuple[Constraint, ...]], rows: int = 1) -> list[_Sentence | None]:
    """Each sentence's constrained search (None: it has no constraints, the plain search's step serves it), its
    ``rows`` first rows at the start state."""
    return [_Sentence.start(c, rows) if c else None for c in constraints]


def constraint_room(constraints: list[tuple[Constraint, ...]], device: torch.device) -> Tensor:
    """The tokens each sentence's constraints take (their longest alternatives, one after another): room its length
    limit must leave."""
    return torch.tensor([sum(max(len(a) for a in c.alternatives) for c in cs) for cs in constraints], device=device)


def constrained_step(
    logits: Tensor | RowLogits,
    beam: BeamLists,
    lengths: int | Tensor,
    max_len: Tensor,
    searches: list[_Sentence | None],
    config: DecodeConfig,
    nbest: int,
    steering: Steering,
    mode: GlossaryMode = "hard",
) -> BeamStep:
    """One step of beam search over n open sentences, some of them constrained (``searches``, one per open
    sentence; None: free): what :func:`.search.beam_step` is to the plain search, with the same arguments and
    answer, for the offline search and the continuous one alike. Free sentences go through ``beam_step`` on the
    same logits; the others' survivors are dealt from their banks, and their finished hypotheses (those with every
    constraint first) are written into their rows of the finished lists."""
    scores, history, fin_scores, fin_tokens, sentences = (
        beam.scores, beam.history, beam.fin_scores, beam.fin_tokens, beam.sentences
    )  # fmt: skip
    k = config.beam
    n, rows_per_sent = scores.shape
    device = scores.device
    whole = _whole(logits)  # (n * rows, V), as the plain search's blocks make them
    plain = [p for p, search in enumerate(searches) if search is None]
    bound = [p for p, search in enumerate(searches) if search is not None]
    ended_at = lengths.tolist() if isinstance(lengths, Tensor) else [lengths] * n
    new_scores = scores.new_full((n, k), float("-inf"))
    parents = torch.zeros((n, k), dtype=torch.long, device=device)
    new_tokens = torch.full((n, k), EOS_ID, dtype=torch.long, device=device)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    fin_rows = sentences if sentences is not None else torch.arange(n, device=device)
    if plain:
        at = torch.tensor(plain, device=device)
        rows = (at[:, None] * rows_per_sent + torch.arange(rows_per_sent, device=device)).flatten()
        free = BeamLists(scores[at], history[rows], fin_scores, fin_tokens, fin_rows[at])
        chosen = beam_step(
            whole[rows], free, lengths if isinstance(lengths, int) else lengths[at], max_len[at], config, nbest,
            steering.of_rows(rows),
        )  # fmt: skip
        assert chosen.scores is not None and chosen.parents is not None  # a beam's step names both
        width_k = chosen.scores.size(1)
        new_scores[at, :width_k], new_tokens[at, :width_k] = chosen.scores, chosen.tokens
        parents[at, :width_k] = rows[chosen.parents.flatten()].view(len(plain), width_k)
        done[at] = chosen.done
    if bound:
        limits = max_len.tolist()
        dealt = _deal_banks(whole, scores, bound, rows_per_sent, searches, ended_at, limits, steering, config, mode)
        rows_out: list[list[tuple[float, int, int]]] = []
        ended_out: list[bool] = []
        for p, candidates in zip(bound, dealt):
            search = searches[p]
            assert search is not None
            picked, ended = _settle(search, candidates, history, ended_at[p], limits[p], config, nbest)
            rows_out.append(picked[:k] + [(float("-inf"), 0, EOS_ID)] * (k - len(picked[:k])))
            ended_out.append(ended)
            if search.ended:
                _write_finished(search, fin_scores, fin_tokens, int(fin_rows[p]))
        at = torch.tensor(bound, device=device)
        new_scores[at] = torch.tensor([[c[0] for c in row] for row in rows_out], device=device, dtype=new_scores.dtype)
        parents[at] = torch.tensor([[c[1] for c in row] for row in rows_out], device=device)
        new_tokens[at] = torch.tensor([[c[2] for c in row] for row in rows_out], device=device)
        done[at] = torch.tensor(ended_out, device=device)
    return BeamStep(new_scores, parents, new_tokens, done)


def _write_finished(search: _Sentence, fin_scores: Tensor, fin_tokens: Tensor, row: int) -> None:
    """A constrained sentence's finished hypotheses into its row of the finished lists, those holding every
    constraint first (an output without a term only where none has them all)."""
    ranked = (search.finished + search.unmet)[: fin_scores.size(1)]
    fin_scores[row] = float("-inf")
    fin_tokens[row] = PAD_ID
    for j, (score, path) in enumerate(ranked):
        fin_scores[row, j] = score
        fin_tokens[row, j, : len(path)] = torch.tensor(path, dtype=torch.long)
        fin_tokens[row, j, len(path)] = EOS_ID


def _holds(text: str, target: str) -> bool:
    """``target`` in ``text`` where a word begins (a German compound or an inflection may go on after it, as
    the search, which places the term's word-initial pieces, lets it)."""
    start = text.find(target)
    while start >= 0:
        if start == 0 or not (text[start - 1].isalnum() and target[0].isalnum()):
            return True
        start = text.find(target, start + 1)
    return False


def _whole(logits: Tensor | RowLogits) -> Tensor:
    """A step's logits as one tensor, made in the plain search's blocks of rows (``ROW_BLOCK``: the same rows, the
    same products, so each row's logits are the plain search's)."""
    if isinstance(logits, Tensor):
        return logits
    return torch.cat([logits[slice(start, start + ROW_BLOCK)] for start in range(0, logits.size(0), ROW_BLOCK)])


def _deal_banks(
    logits: Tensor,
    scores: Tensor,
    bound: list[int],
    rows_per_sent: int,
    searches: list[_Sentence | None],
    lengths: list[int],
    max_len: list[int],
    steering: Steering,
    config: DecodeConfig,
    mode: GlossaryMode,
) -> list[list[Candidate]]:
    """The constrained sentences' candidates dealt from their banks, for all of them at once in tensors (Hu et
    al. 2019): per sentence (positions ``bound`` among the open ones), up to 2K candidates in the order dealt.

    Each row's candidates (:func:`_row_candidates`) lead to states whose progress is their bank (hard; soft: one
    bank, the bonus in the score); :func:`_dealt` deals each sentence's candidates from its banks."""
    device = logits.device
    open_searches = [s for s in (searches[p] for p in bound) if s is not None]
    rows = torch.tensor([p * rows_per_sent + r for p in bound for r in range(rows_per_sent)], device=device)
    log_probs = steering(logits[rows], rows)
    states = [state for search in open_searches for state in search.states]
    progress_now = [search.progress[state] for search in open_searches for state in search.states]
    if mode == "hard":  # no ending before every constraint is met, except at the length limit
        unmet = [
            not search.done[state] and lengths[p] < max_len[p]
            for p, search in zip(bound, open_searches)
            for state in search.states
        ]
        log_probs[torch.tensor(unmet, device=device), EOS_ID] = float("-inf")
    tables = [search.table(state) for search in open_searches for state in search.states]
    now = torch.tensor(progress_now, device=device)[:, None]
    totals = scores.view(-1)[rows][:, None]  # (R, 1)
    cand_scores, cand_tokens, cand_states, cand_progress = _row_candidates(
        log_probs, totals, tables, torch.tensor(states, device=device)[:, None], now, config.beam
    )
    if mode == "soft":  # one bank: the plain beam, the bonus already in the scores (TermBonus)
        banks = torch.zeros_like(cand_progress)
    else:
        banks = cand_progress
    n, per_row = len(open_searches), cand_scores.size(1)
    cand_rows = (
        torch.tensor(bound, device=device)[:, None, None] * rows_per_sent
        + torch.arange(rows_per_sent, device=device)[None, :, None]
    ).expand(n, rows_per_sent, per_row)
    width = rows_per_sent * per_row
    return _dealt(
        cand_scores.reshape(n, width), cand_tokens.reshape(n, width), cand_states.reshape(n, width),
        banks.reshape(n, width), cand_rows.reshape(n, width), 2 * config.beam,
    )  # fmt: skip


def _row_candidates(
    log_probs: Tensor, totals: Tensor, tables: list[_StateTable], own: Tensor, now: Tensor, k: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Each row's candidates, (R, K + W) each: summed score, token, the state it leads to and that state's
    progress. Its K best tokens (EOS keeps the row's state ``own``, any other token not wanted leads to the
    fallback state), then every token its state wants (padding: -inf)."""
    device = log_probs.device
    top_values, top_tokens = top_k_rows(log_probs, min(k, log_probs.size(1)))  # (R, K)
    is_eos = top_tokens == EOS_ID
    fallback = torch.tensor([t.fallback for t in tables], device=device)[:, None]
    fallback_progress = torch.tensor([t.fallback_progress for t in tables], device=device)[:, None]
    columns = [
        totals + top_values,
        top_tokens,
        torch.where(is_eos, own, fallback),
        torch.where(is_eos, now, fallback_progress),
    ]
    width = max(len(t.wanted) for t in tables)
    if not width:
        return columns[0], columns[1], columns[2], columns[3]
    pad = [width - len(t.wanted) for t in tables]
    wanted = torch.tensor([t.wanted + [PAD_ID] * n for t, n in zip(tables, pad)], device=device)  # (R, W)
    valid = torch.tensor([[True] * len(t.wanted) + [False] * n for t, n in zip(tables, pad)], device=device)
    after = torch.tensor([t.after + [0] * n for t, n in zip(tables, pad)], device=device)
    after_progress = torch.tensor([t.after_progress + [0] * n for t, n in zip(tables, pad)], device=device)
    # a best token that is also wanted is one candidate, the wanted one (it leads to its own state)
    also_wanted = ((top_tokens[:, :, None] == wanted[:, None, :]) & valid[:, None, :]).any(dim=2)
    columns[0] = columns[0].masked_fill(also_wanted, float("-inf"))
    wanted_scores = (totals + log_probs.gather(1, wanted)).masked_fill(~valid, float("-inf"))
    scores, tokens, states, progress = (
        torch.cat([column, extra], dim=1) for column, extra in zip(columns, (wanted_scores, wanted, after, after_progress))
    )
    return scores, tokens, states, progress


def _dealt(scores: Tensor, tokens: Tensor, states: Tensor, banks: Tensor, rows: Tensor, count: int) -> list[list[Candidate]]:
    """Each sentence's candidates (one row of each (n, C) argument) dealt from its banks: ranked by score, each
    gets its depth in its bank (how many of its bank rank above it), and they are dealt by depth, the most
    advanced bank first at each depth (the round-robin of Post & Vilar's allocation); the first ``count``."""
    by_score = scores.argsort(dim=1, descending=True, stable=True)
    scores, tokens, states, banks, rows = (t.gather(1, by_score) for t in (scores, tokens, states, banks, rows))
    usable = scores > float("-inf")
    top_bank = int(banks.max()) + 1
    members = torch.nn.functional.one_hot(banks, top_bank) * usable[:, :, None]  # (n, C, banks)
    depth = (members.cumsum(dim=1) - members).gather(2, banks[:, :, None]).squeeze(2)
    turn = (depth * top_bank + (top_bank - 1 - banks)).masked_fill(~usable, torch.iinfo(torch.long).max)
    order = turn.argsort(dim=1, stable=True)[:, :count]
    dealt = [t.gather(1, order).tolist() for t in (scores, rows, tokens, states)]
    kept = usable.gather(1, order).tolist()
    return [
        [(score, row, token, state) for score, row, token, state, ok in zip(*columns, oks) if ok]
        for *columns, oks in zip(*dealt, kept)
    ]


def _settle(
    search: _Sentence, dealt: list[Candidate], history: Tensor, t: int, limit: int, config: DecodeConfig, nbest: int
) -> tuple[list[tuple[float, int, int]], bool]:
    """One constrained sentence's step from its dealt candidates: as the plain search keeps 2K candidates, lets
    those ending in EOS among the K best finish and carries the K best others on, so here the EOS candidates
    among the first K dealt finish and the first K others go on (best first); returns those survivors
    (summed score, row, token) and whether the sentence is done."""
    k = config.beam
    search.ended = any(token == EOS_ID for _, _, token, _ in dealt[:k])
    for score, row, token, state in dealt[:k]:
        if token == EOS_ID:
            into = search.finished if search.done[state] else search.unmet  # unmet: only at the length limit
            into.append((score / float(length_penalty(float(t + 1), config)), history[row, :t].tolist()))
    if search.ended:
        for kept in (search.finished, search.unmet):
            kept.sort(key=lambda f: -f[0])
            del kept[k:]
    picked = sorted([c for c in dealt if c[2] != EOS_ID][:k], key=lambda c: -c[0])  # the first K dealt, best first
    search.states = [state for _, _, _, state in picked]
    while search.states and len(search.states) < k:  # fewer candidates than rows: pad with dead copies
        picked.append((float("-inf"), picked[0][1], picked[0][2], picked[0][3]))
        search.states.append(picked[0][3])
    best_open = picked[0][0] if picked else float("-inf")
    best_is_eos = bool(dealt) and max(dealt, key=lambda c: c[0])[2] == EOS_ID
    done = _done(search, best_open, best_is_eos, nbest, limit, config) or not picked
    return [(score, row, token) for score, row, token, _ in picked], done


Candidate = tuple[float, int, int, int]  # summed score, row, token, the number of the state it leads to


def _done(search: _Sentence, best_open: float, best_is_eos: bool, nbest: int, limit: int, config: DecodeConfig) -> bool:
    """The plain search's stopping rule (:func:`.search.sentence_done`) over this sentence's finished list
    (``limit``: its length limit, past which no open hypothesis can grow); and, whatever the rule, as soon as no open
    hypothesis can still beat the ``nbest``-th finished one. Hypotheses holding every constraint are few in the
    beam (the banks share it), so K of them finish late; waiting for K would keep rows alive whose outputs the
    bound shows cannot change the answer (docs/benchmarks.md, "Glossaries")."""
    bound = best_open / float(length_penalty(float(limit + 1), config))
    if len(search.finished) >= nbest and search.finished[nbest - 1][0] >= bound:
        return True
    scores = [score for score, _ in search.finished]
    return one_sentence_done(config, scores, best_open, best_is_eos, nbest, limit, 0)
