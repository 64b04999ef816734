"""The search: one loop over a batch of source sentences, read top to bottom, and the strategies it runs.

Every step the loop (:func:`run_search`) asks the decoder for the next token's logits of every open row
(``steppers.py``), binds the search's rules to the step (``steering.py``: PAD and BOS never, no empty output, only
EOS at a sentence's length limit, only the prefix's token where a target prefix is forced, and the caller's rules,
a multilingual model's tags never written), and hands both to the *strategy*, which turns the logits into
log-probabilities through the rules, chooses each row's token and the rows that go on, keeps the finished outputs
and says which sentences are done; done sentences leave the batch. The
strategies: :class:`Greedy` (the best token), :class:`Beam` (beam search, :func:`beam_step`), sampling
(``sampling.py``) and lexically constrained beam search (``constrained.py``). The server's continuous batching
(``continuous.py``) runs the same steps over a batch that sentences join while it runs. :func:`reference_beam_search`,
at the end, is beam search written plainly for one sentence, the reference the batched one is tested against (as
``attention_reference`` sits next to ``attention``).

Scores are sums of log-probabilities; finished hypotheses are ranked by ``score / length_penalty(|Y|)`` where |Y|
counts the EOS. When a sentence stops is ``decode.stop`` (:func:`sentence_done`); it always stops at its limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, overload

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..data.vocab import BOS_ID, EOS_ID, PAD_ID
from ..model.transformer import Transformer
from .ensemble import Ensemble
from .steering import Steering, StepProcessor, StepRows, search_rules
from .steppers import Encoded, RowLogits, search_steps, step_logits
from .top_k import top_k_rows


@dataclass(frozen=True)
class Hypothesis:
    """One output: token ids (no BOS/EOS) and its length-normalised score."""

    tokens: list[int]
    score: float


@dataclass(frozen=True)
class BeamStep:
    """What one step chose for n open sentences of R rows each: each (n, R) but ``done`` (n,)."""

    scores: Tensor | None  # the rows' summed log-probabilities, best first (None: the strategy keeps its own)
    parents: Tensor | None  # the row each extends, an index into the step's rows (None: each row goes on itself)
    tokens: Tensor  # the token each adds
    done: Tensor  # sentences that stop searching after this step


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
    """What the loop asks of a search strategy (see the module docstring)."""

    first_rows: int  # rows per sentence at the first step (a beam fans out from one BOS row)
    rows: int  # rows per sentence after it

    def choose(self, logits: Tensor | RowLogits, t: int, sentences: Tensor, max_len: Tensor, steering: Steering) -> BeamStep:
        """Step ``t``'s choice for the open ``sentences`` (original indices; ``max_len`` their limits) from their
        rows' ``logits``, made log-probabilities by ``steering`` (the search's rules at this step)."""
        ...

    def advance(self, chosen: BeamStep, keep: Tensor | None, rows: Tensor | None) -> None:
        """Follow the choice: ``keep`` the sentences that go on (None: all), ``rows`` the rows they go on with."""
        ...

    def results(self) -> list[list[Hypothesis]]:
        """Each sentence's hypotheses, best first."""
        ...


# --------------------------------------------------------------------------- the loop


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
) -> list[list[Hypothesis]]:
    """Search ``src`` (n, S) with ``strategy`` until every sentence is done or at its length limit ``max_len``
    (n,) (:func:`length_limits`); outputs start with ``prefix`` (n, P) where given. ``encoded`` is ``src`` as
    the decoder reads it (:class:`.steppers.Encoded`: the encoder output, and a recurrent model's past) when the
    caller has it already; ``rules`` the caller's step processors (``steering.py``), kept with those every search
    keeps.

    At a few rows a step's bookkeeping is dozens of calls of a few microseconds each, a sizeable share of the
    step, so the calls that change nothing in most steps are skipped: a rule's edit at the steps it changes
    nothing (the length limit before any sentence reaches it), and the selection of the sentences that go on
    while all do."""
    device = src.device
    encoded = encoded if encoded is not None else Encoded(*model.encode(src))
    width = int(max_len.max()) + 1  # room for the tokens and the EOS
    rows_per_sent = strategy.first_rows
    steps = search_steps(model, encoded, config, cached, strategy.rows, width)
    sent = torch.arange(src.size(0), device=device)  # original index of each open sentence
    if rows_per_sent > 1:
        steps.select(sent.repeat_interleave(rows_per_sent), None)
    tokens = torch.full((src.size(0) * rows_per_sent,), BOS_ID, dtype=torch.long, device=device)
    open_max_len = max_len  # the open sentences' limits (max_len[sent])
    every_rule = [*search_rules(prefix), *rules]
    for t in range(width):
        steering = Steering(every_rule, StepRows(t, sent, rows_per_sent, open_max_len))
        chosen = strategy.choose(step_logits(steps, tokens), t, sent, open_max_len, steering)
        keep = (~chosen.done).nonzero().flatten()
        if len(keep) == 0:
            break
        new_tokens, parents = chosen.tokens, chosen.parents
        rows_per_sent = new_tokens.size(1)
        if len(keep) == len(sent):  # every sentence goes on
            strategy.advance(chosen, None, None if parents is None else parents.flatten())
            if parents is not None:
                steps.select(parents.flatten(), sentences=None)
        else:  # the done ones' rows leave
            sent, open_max_len, new_tokens = sent[keep], open_max_len[keep], new_tokens[keep]
            rows = (keep[:, None] * rows_per_sent + torch.arange(rows_per_sent, device=device)).flatten()
            rows = rows if parents is None else parents[keep].flatten()
            strategy.advance(chosen, keep, rows)
            steps.select(rows, sentences=keep)
        tokens = new_tokens.flatten()
    return strategy.results()


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
    """The most probable token at every step, until EOS or the length limit.

    Outputs and scores stay on the device until the end: reading a finished row back at once would make the
    host wait for the GPU at every sentence."""

    first_rows = rows = 1

    def __init__(self, n_sent: int, width: int, config: DecodeConfig, device: torch.device) -> None:
        self.config = config
        self.outputs = torch.full((n_sent, width), PAD_ID, dtype=torch.long, device=device)  # by original row
        self.lengths = torch.zeros(n_sent, dtype=torch.long, device=device)  # tokens before the EOS
        self.scores = torch.zeros(n_sent, device=device)  # summed log-probabilities, by original row

    def choose(self, logits: Tensor | RowLogits, t: int, sentences: Tensor, max_len: Tensor, steering: Steering) -> BeamStep:
        best, tokens = _best_tokens(logits, 1, steering)  # (n, 1)
        self.outputs[sentences, t] = tokens[:, 0]
        self.scores[sentences] += best[:, 0]
        done = tokens[:, 0] == EOS_ID
        self.lengths[sentences[done]] = t
        return BeamStep(None, None, tokens, done)

    def advance(self, chosen: BeamStep, keep: Tensor | None, rows: Tensor | None) -> None:
        pass  # every row goes on with its own token; the outputs are kept by original row

    def results(self) -> list[list[Hypothesis]]:
        normalised = self.scores / length_penalty(self.lengths.double() + 1, self.config).float()  # |Y| counts EOS
        return [
            [Hypothesis(row[:length], score)]
            for row, length, score in zip(self.outputs.tolist(), self.lengths.tolist(), normalised.tolist())
        ]


def greedy_search(model: Transformer, src: Tensor, config: DecodeConfig, cached: bool = True) -> list[list[Hypothesis]]:
    """Greedy search (:class:`Greedy`) whatever ``config.beam`` says; :func:`search` takes every option."""
    return search(model, src, replace(config, beam=1), cached=cached)


# --------------------------------------------------------------------------- beam


class Beam:
    """Beam search: every step extends each open hypothesis by one token, keeps the 2K best candidates of each
    sentence, moves those ending in EOS (among the K best) to the sentence's finished list and carries the K best
    others on (:func:`beam_step`). The first step runs one row per sentence (all its hypotheses would be the same
    BOS); the loop's ``select`` then fans each sentence out to its K best continuations."""

    first_rows = 1

    def __init__(self, n_sent: int, width: int, config: DecodeConfig, nbest: int, device: torch.device) -> None:
        k = self.rows = config.beam
        self.config, self.nbest = config, nbest
        self.scores = torch.zeros((n_sent, 1), device=device)  # (n, rows per sentence)
        self.history = torch.zeros((n_sent, 0), dtype=torch.long, device=device)  # (n * rows, t) tokens so far
        self.fin_scores = torch.full((n_sent, k), float("-inf"), device=device)
        self.fin_tokens = torch.full((n_sent, k, width), PAD_ID, dtype=torch.long, device=device)

    def choose(self, logits: Tensor | RowLogits, t: int, sentences: Tensor, max_len: Tensor, steering: Steering) -> BeamStep:
        return beam_step(logits, self.lists(sentences), t, max_len, self.config, self.nbest, steering)

    def lists(self, sentences: Tensor) -> BeamLists:
        """This beam's lists for the open ``sentences``."""
        return BeamLists(self.scores, self.history, self.fin_scores, self.fin_tokens, sentences)

    def advance(self, chosen: BeamStep, keep: Tensor | None, rows: Tensor | None) -> None:
        assert chosen.scores is not None and rows is not None
        tokens = chosen.tokens if keep is None else chosen.tokens[keep]
        self.history = torch.cat([self.history.index_select(0, rows), tokens.reshape(-1, 1)], dim=1)
        self.scores = chosen.scores if keep is None else chosen.scores[keep]

    def results(self) -> list[list[Hypothesis]]:
        return best_finished(self.fin_scores, self.fin_tokens, self.nbest)


def beam_search(
    model: Transformer, src: Tensor, config: DecodeConfig, nbest: int = 1, cached: bool = True
) -> list[list[Hypothesis]]:
    """Batched beam search (:class:`Beam`): each sentence's ``nbest`` best finished hypotheses (``config.beam`` of
    1 too: a beam of one); :func:`search` takes every option."""
    max_len = length_limits(src, config, model.config.max_positions)
    beam = Beam(src.size(0), int(max_len.max()) + 1, config, nbest, src.device)
    return run_search(model, src, config, beam, max_len, cached)


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
    if is_eos[:, :k].any():
        eos_ranked = is_eos.clone()
        eos_ranked[:, k:] = False
        ended_at = lengths if isinstance(lengths, Tensor) else torch.full((n,), lengths, device=scores.device)
        history = history.view(n, rows_per_sent, history.size(-1))
        _collect_finished(finished, fin_scores, fin_tokens, history, origin, top_scores, eos_ranked, ended_at, config)
    open_scores, pick = top_scores.masked_fill(is_eos, float("-inf")).topk(min(k, top_scores.size(1)), dim=1)
    first_rows = torch.arange(0, n * rows_per_sent, rows_per_sent, device=scores.device)  # each sentence's first row
    parents = origin.gather(1, pick) + first_rows[:, None]
    done = sentence_done(config, fin_scores[finished], open_scores[:, 0], is_eos[:, 0], nbest, max_len, lengths)
    return BeamStep(open_scores, parents, token.gather(1, pick), done)


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
) -> None:
    """Merge this step's EOS candidates into each sentence's K best finished hypotheses.

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
    width, device = int(max_len.max()) + 1, src.device
    strategy: Greedy | Beam = (
        Greedy(src.size(0), width, config, device) if config.beam == 1 else Beam(src.size(0), width, config, nbest, device)
    )
    return run_search(model, src, config, strategy, max_len, cached, prefix, encoded, rules)


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
