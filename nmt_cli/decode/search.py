"""Greedy and beam search over a batch of source sentences, read top to bottom.

Both searches work on whole tensors: every step scores all open hypotheses of all
sentences at once, and sentences that are done leave the batch. The decoder runs
incrementally (:class:`CachedSteps`: a key/value cache for self-attention, encoder
keys/values computed once); :class:`UncachedSteps` recomputes the whole prefix every step
and exists as the reference the cache is tested against; :func:`reference_beam_search`, at the end,
is the whole search written plainly for one sentence, the reference the batched search is tested
against (as ``attention_reference`` sits next to ``attention``).

Scores are sums of log-probabilities; finished hypotheses are ranked by
``score / length_penalty(|Y|)`` where |Y| counts the EOS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..data.vocab import BOS_ID, EOS_ID, PAD_ID
from ..inference.step import IncrementalDecoder
from ..model.recurrence import Past
from ..model.transformer import Transformer
from .ensemble import Ensemble, EnsembleSteps
from .static_steps import StaticSteps, supports_static_steps
from .top_k import top_k_rows


@dataclass(frozen=True)
class Hypothesis:
    """One output: token ids (no BOS/EOS) and its length-normalised score."""

    tokens: list[int]
    score: float


# --------------------------------------------------------------------------- decoder steppers


class CachedSteps:
    """Incremental decoding: one new token per row per call, past keys/values cached."""

    def __init__(self, model: Transformer, memory: Tensor, src_mask: Tensor, past: list[Past] | None = None) -> None:
        self.model = model
        self.decoder = IncrementalDecoder(model)
        self.state = self.decoder.start(memory, src_mask, past=past)  # beams share their sentence's row

    def __call__(self, tokens: Tensor) -> Tensor:
        return self.decoder.logits(tokens, self.state).float()  # (N, V) logits

    def row_logits(self, tokens: Tensor) -> RowLogits:
        """This step's logits, to be made a block of rows at a time (see :class:`RowLogits`)."""
        return RowLogits(self.model, self.decoder.hidden(tokens, self.state))

    def select(self, rows: Tensor, sentences: Tensor | None) -> None:
        self.state.select(rows, sentences)


@dataclass(frozen=True)
class RowLogits:
    """A decoder step's logits (N, V), made a block of rows at a time as the search ranks them.

    At the hundreds of rows of default-batched beam search the whole matrix (77 MB at 600 x 32,000)
    leaves the processor's cache between the output projection and the log-softmax; a block of 128
    rows stays in it. Base model, beam 4, 300 Multi30k lines at default batching (AMD EPYC Zen 3, 2
    threads, median of 5, alternating, same outputs): 10.75 s with the whole matrix, 9.31 s by blocks
    of 128; level at batch 16 (64 rows: one block) and on the small model (8,000 pieces).
    """

    model: Transformer
    hidden: Tensor  # (N, D), the decoder's last hidden states

    def size(self, dim: int) -> int:
        return self.hidden.size(0) if dim == 0 else self.model.output.out_features

    @property
    def device(self) -> torch.device:
        return self.hidden.device

    def __getitem__(self, rows: slice) -> Tensor:
        n = len(self.hidden)
        hidden = self.hidden if rows.indices(n) == (0, n, 1) else self.hidden[rows]  # all rows: no slicing call
        logits = self.model.logits(hidden)
        return logits if logits.dtype == torch.float32 else logits.float()


def step_logits(steps: CachedSteps | UncachedSteps | StaticSteps | EnsembleSteps, tokens: Tensor) -> Tensor | RowLogits:
    """A step's logits for the search: on the CPU made a block at a time (:class:`RowLogits`), else whole."""
    if isinstance(steps, CachedSteps) and tokens.device.type == "cpu":
        return steps.row_logits(tokens)
    return steps(tokens)


class UncachedSteps:
    """Reference decoding: re-runs the decoder over the whole prefix at every step.

    Keeps one copy of the encoder output per hypothesis (the plain way: ``select`` copies a
    sentence's rows for each of its hypotheses), so it also checks the cached path's sharing
    of encoder keys between a sentence's hypotheses.
    """

    def __init__(self, model: Transformer, memory: Tensor, src_mask: Tensor) -> None:
        self.model = model
        self.memory, self.src_mask = memory, src_mask
        self.prefix = memory.new_zeros((memory.size(0), 0), dtype=torch.long)

    def __call__(self, tokens: Tensor) -> Tensor:
        self.prefix = torch.cat([self.prefix, tokens[:, None]], dim=1)  # (N, t + 1)
        hidden = self.model.decode(self.prefix, self.memory, self.src_mask)[:, -1]  # (N, D)
        return self.model.logits(hidden).float()

    def select(self, rows: Tensor, sentences: Tensor | None) -> None:
        self.prefix = self.prefix.index_select(0, rows)
        self.memory = self.memory.index_select(0, rows)
        self.src_mask = self.src_mask.index_select(0, rows)


def decoder_steps(
    model: Transformer | Ensemble,
    memory: Tensor | list[Tensor],
    src_mask: Tensor,
    config: DecodeConfig,
    cached: bool,
    rows_per_sentence: int,
    max_steps: int,
) -> CachedSteps | UncachedSteps | StaticSteps | EnsembleSteps:
    """The stepper a search runs: on a GPU a recorded CUDA graph (``decode.cuda_graphs``), else cached;
    for an ensemble, one per model."""
    if isinstance(model, Ensemble):
        return EnsembleSteps(
            [
                decoder_steps(one, memory_of_one, src_mask, config, cached, rows_per_sentence, max_steps)
                for one, memory_of_one in zip(model.models, memory)
            ]
        )
    assert isinstance(memory, Tensor)  # one model: one encoder output
    if not cached:
        return UncachedSteps(model, memory, src_mask)
    if config.cuda_graphs and memory.device.type == "cuda" and supports_static_steps(model):
        return StaticSteps(model, memory, src_mask, rows_per_sentence, max_steps, use_graph=True)
    return CachedSteps(model, memory, src_mask)


def search_steps(
    model: Transformer,
    memory: Tensor,
    src_mask: Tensor,
    config: DecodeConfig,
    cached: bool,
    rows_per_sentence: int,
    max_steps: int,
    past: list[Past] | None,
) -> CachedSteps | UncachedSteps | StaticSteps | EnsembleSteps:
    """:func:`decoder_steps`, or with a decoder ``past`` (``model.recurrence``: one model, no graph) cached
    steps that start from it."""
    if past is not None:
        return CachedSteps(model, memory, src_mask, past)
    return decoder_steps(model, memory, src_mask, config, cached, rows_per_sentence, max_steps)


# --------------------------------------------------------------------------- shared pieces


def max_output_lengths(src: Tensor, config: DecodeConfig, max_positions: int) -> Tensor:
    """Largest number of output tokens (EOS excluded) per sentence: a * |src| + b, within the model."""
    src_len = (src != PAD_ID).sum(dim=1) - 1  # the source ends in EOS
    limit = (config.max_len_a * src_len.double() + config.max_len_b).floor().long()
    return limit.clamp(min=1, max=max_positions - 1)


def prefix_tokens(prefix: Tensor | None, t: int, sentences: Tensor, rows_per_sentence: int) -> Tensor | None:
    """The token each row must emit at step ``t`` to follow its sentence's target prefix (-1: free),
    or None when no prefix reaches step ``t``. ``prefix`` is (n_sent, P), padded with PAD."""
    if prefix is None or t >= prefix.size(1):
        return None
    forced = prefix[sentences, t]
    return torch.where(forced == PAD_ID, -1, forced).repeat_interleave(rows_per_sentence)


def with_room_for(prefix: Tensor | None, max_len: Tensor, max_positions: int) -> Tensor:
    """Length limits that leave room for each sentence's prefix and an EOS after it."""
    if prefix is None:
        return max_len
    return torch.maximum(max_len, (prefix != PAD_ID).sum(dim=1)).clamp(max=max_positions - 1)


@overload
def length_penalty(length: Tensor, config: DecodeConfig) -> Tensor: ...
@overload
def length_penalty(length: float, config: DecodeConfig) -> float: ...
def length_penalty(length: Tensor | float, config: DecodeConfig) -> Tensor | float:
    """GNMT ((5 + |Y|) / 6) ** alpha (the paper's), or |Y| ** alpha (fairseq's 'average')."""
    if config.length_penalty == "gnmt":
        return ((5.0 + length) / 6.0) ** config.alpha
    return length**config.alpha


_NEVER_EMITTED: dict[torch.device, Tensor] = {}


def _never_emitted(device: torch.device) -> Tensor:
    """The ids no output may contain (PAD, BOS), as an index tensor made once per device."""
    ids = _NEVER_EMITTED.get(device)
    if ids is None:
        ids = _NEVER_EMITTED.setdefault(device, torch.tensor([PAD_ID, BOS_ID], device=device))
    return ids


def mask_specials(log_probs: Tensor, at_limit: Tensor | None, forced: Tensor | None = None) -> Tensor:
    """Never emit PAD or BOS; rows at their length limit (``at_limit``; None: no row is) may only emit
    EOS; rows with a ``forced`` token (a target prefix; -1: free) may only emit it (in place)."""
    log_probs.index_fill_(1, _never_emitted(log_probs.device), float("-inf"))  # one call for both columns
    if forced is not None:
        rows = (forced >= 0).nonzero().flatten()
        if len(rows):
            kept = log_probs[rows, forced[rows]].clone()
            log_probs[rows] = float("-inf")
            log_probs[rows, forced[rows]] = kept
    if at_limit is not None and at_limit.any():
        eos = log_probs[at_limit, EOS_ID].clone()
        log_probs[at_limit] = float("-inf")
        log_probs[at_limit, EOS_ID] = eos
    return log_probs


ROW_BLOCK = 128  # rows of (rows x vocabulary) scores handled at once, so they stay in the CPU cache


def _best_tokens(
    logits: Tensor | RowLogits, count: int, at_limit: Tensor | None, forced: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Log-probabilities and ids of the ``count`` best allowed tokens of every row: each (N, count).

    Normalises, masks and ranks a block of rows at a time: on a CPU, a whole batch of
    hypotheses x 8,000+ pieces is tens of MB, and passing over it three times costs more
    than the ranking itself. ``logits`` (N, V) is a tensor, or a :class:`RowLogits` that makes
    each block's rows as they are read.
    """
    count = min(count, logits.size(1))
    block = ROW_BLOCK if logits.device.type == "cpu" else logits.size(0)  # a GPU takes all rows at once
    blocks = []
    for start in range(0, logits.size(0), block):
        rows = slice(start, start + block)
        log_probs = mask_specials(
            logits[rows].log_softmax(dim=-1),
            None if at_limit is None else at_limit[rows],
            None if forced is None else forced[rows],
        )
        blocks.append(top_k_rows(log_probs, count))
    if len(blocks) == 1:
        return blocks[0]
    return torch.cat([b[0] for b in blocks]), torch.cat([b[1] for b in blocks])


# --------------------------------------------------------------------------- greedy


@torch.inference_mode()
def greedy_search(
    model: Transformer,
    src: Tensor,
    config: DecodeConfig,
    cached: bool = True,
    prefix: Tensor | None = None,
    encoded: tuple[Tensor, Tensor] | None = None,
    past: list[Past] | None = None,
) -> list[list[Hypothesis]]:
    """The most probable token at every step, until EOS or the length limit (``encoded``: ``model.encode(src)``
    when the caller has it already; ``past``: the decoder's past, ``model.recurrence``).

    Outputs and scores stay on the device until the end: reading a finished row back at once
    would make the host wait for the GPU at every sentence.
    """
    memory, src_mask = encoded if encoded is not None else model.encode(src)
    max_len = with_room_for(prefix, max_output_lengths(src, config, model.config.max_positions), model.config.max_positions)
    steps = search_steps(model, memory, src_mask, config, cached, 1, int(max_len.max()) + 1, past)
    n = src.size(0)
    device = src.device
    alive = torch.arange(n, device=device)  # original index of each open row
    tokens = torch.full((n,), BOS_ID, dtype=torch.long, device=device)
    outputs = torch.full((n, int(max_len.max()) + 1), PAD_ID, dtype=torch.long, device=device)  # by original row
    lengths = torch.zeros(n, dtype=torch.long, device=device)  # tokens before the EOS
    scores = torch.zeros(n, device=device)  # summed log-probabilities, by original row
    first_limit = int(max_len.min())  # before this step no row is at its length limit
    for t in range(outputs.size(1)):
        forced = prefix_tokens(prefix, t, alive, 1)
        at_limit = t >= max_len[alive] if t >= first_limit else None
        best, tokens = _best_tokens(step_logits(steps, tokens), 1, at_limit, forced)  # (n_alive, 1)
        tokens = tokens[:, 0]
        outputs[alive, t] = tokens
        scores[alive] += best[:, 0]
        done = tokens == EOS_ID
        if not done.any():
            continue
        lengths[alive[done]] = t
        keep = (~done).nonzero().flatten()
        if len(keep) == 0:
            break
        alive, tokens = alive[keep], tokens[keep]
        steps.select(keep, sentences=keep)
    normalised = scores / length_penalty(lengths.double() + 1, config).float()  # |Y| counts the EOS
    return [
        [Hypothesis(row[:length], score)]
        for row, length, score in zip(outputs.tolist(), lengths.tolist(), normalised.tolist())
    ]


# --------------------------------------------------------------------------- beam


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src: Tensor,
    config: DecodeConfig,
    nbest: int = 1,
    cached: bool = True,
    prefix: Tensor | None = None,
    encoded: tuple[Tensor, Tensor] | None = None,
    past: list[Past] | None = None,
) -> list[list[Hypothesis]]:
    """Batched beam search; returns the ``nbest`` best finished hypotheses of each sentence (``encoded``:
    ``model.encode(src)`` when the caller has it already; ``past``: the decoder's past, ``model.recurrence``).

    Every step extends each open hypothesis by one token, keeps the 2K best candidates of
    each sentence, moves those ending in EOS (among the K best) to the sentence's finished
    list and carries the K best others on. When a sentence stops is ``config.stop`` (see
    :func:`_sentence_done`); it always stops at its length limit.
    """
    k = config.beam
    device = src.device
    n_sent = src.size(0)
    memory, src_mask = encoded if encoded is not None else model.encode(src)
    max_len = with_room_for(
        prefix, max_output_lengths(src, config, model.config.max_positions), model.config.max_positions
    )  # (n_sent,)
    width = int(max_len.max()) + 1  # room for the tokens and the EOS
    steps = search_steps(model, memory, src_mask, config, cached, k, width, past)

    # The first step runs one row per sentence (all its hypotheses would be the same BOS);
    # ``select`` then fans each sentence out to its K best continuations.
    sent = torch.arange(n_sent, device=device)  # original index of each open sentence
    scores = torch.zeros((n_sent, 1), device=device)  # (n, rows per sentence)
    history = torch.zeros((n_sent, 0), dtype=torch.long, device=device)
    tokens = torch.full((n_sent,), BOS_ID, dtype=torch.long, device=device)
    fin_scores = torch.full((n_sent, k), float("-inf"), device=device)
    fin_tokens = torch.full((n_sent, k, width), PAD_ID, dtype=torch.long, device=device)
    first_limit = int(max_len.min())  # before this step no sentence is at its length limit
    open_max_len = max_len  # the open sentences' limits (max_len[sent])

    # At a few rows a step's bookkeeping is dozens of calls of a few microseconds each, a sizeable
    # share of the step, so the calls that change nothing in most steps are skipped: the length-limit
    # mask before any sentence reaches its limit, and the selection of the sentences that go on while
    # all do (and in beam_step, the finished lists while no EOS ranks among the K best).
    for t in range(width):
        n, rows_per_sent = scores.shape
        at_limit = (t >= open_max_len).repeat_interleave(rows_per_sent) if t >= first_limit else None
        forced = prefix_tokens(prefix, t, sent, rows_per_sent)  # a target prefix: one allowed token
        logits = step_logits(steps, tokens)
        chosen = beam_step(
            logits, scores, history, t, open_max_len, fin_scores, fin_tokens, sent, config, nbest, at_limit, forced
        )
        keep = (~chosen.done).nonzero().flatten()
        if len(keep) == 0:
            break
        open_scores, parent, new_tokens = chosen.scores, chosen.parents, chosen.tokens
        some_done = len(keep) < n
        if some_done:  # their rows leave
            sent, open_scores, parent, new_tokens = sent[keep], open_scores[keep], parent[keep], new_tokens[keep]
            open_max_len = open_max_len[keep]
        rows = parent.flatten()  # (n_keep * K,)
        history = torch.cat([history.index_select(0, rows), new_tokens.reshape(-1, 1)], dim=1)
        steps.select(rows, sentences=keep if some_done else None)
        scores, tokens = open_scores, new_tokens.flatten()

    return best_finished(fin_scores, fin_tokens, nbest)


@dataclass(frozen=True)
class BeamStep:
    """What one beam step chose for n open sentences of K rows each: each (n, K) but ``done`` (n,)."""

    scores: Tensor  # the K best candidates that did not end: summed log-probabilities, best first
    parents: Tensor  # the row each extends (an index into the step's rows)
    tokens: Tensor  # the token each adds
    done: Tensor  # sentences that stop searching after this step (see _sentence_done)


def beam_step(
    logits: Tensor | RowLogits,
    scores: Tensor,
    history: Tensor,
    lengths: int | Tensor,
    max_len: Tensor,
    fin_scores: Tensor,
    fin_tokens: Tensor,
    sentences: Tensor | None,
    config: DecodeConfig,
    nbest: int,
    at_limit: Tensor | None,
    forced: Tensor | None = None,
) -> BeamStep:
    """One step of beam search over n open sentences (the offline search's and the continuous one's).

    ``logits`` (n * rows, V) of the open rows, ``scores`` (n, rows) their summed log-probabilities,
    ``history`` (n * rows, H) their tokens so far; ``lengths`` (an int, or (n,) when sentences joined at
    different steps) counts each sentence's tokens so far, ``max_len`` (n,) its limit. Each sentence
    keeps its 2K best candidates; those ending in EOS among the K best are merged into its finished
    lists (``fin_scores`` (N, K), ``fin_tokens`` (N, K, W), rows ``sentences`` of them, None: all n;
    updated in place, ranked by normalised score as in fairseq), and the K best others go on.
    """
    k = config.beam
    n, rows_per_sent = scores.shape
    # A sentence's 2K best candidates are among the 2K best tokens of each of its rows (adding the
    # row's score does not reorder a row), so only those are scored.
    row_log_probs, row_tokens = _best_tokens(logits, 2 * k, at_limit, forced)  # (n * rows, 2K)
    top_scores, origin, token = _rank_candidates(scores, row_log_probs, row_tokens, k)  # (n, 2K) each
    is_eos = token == EOS_ID
    finished = slice(None) if sentences is None else sentences
    if is_eos[:, :k].any():
        eos_ranked = is_eos.clone()
        eos_ranked[:, k:] = False
        ended_at = lengths if isinstance(lengths, Tensor) else torch.full((n,), lengths, device=scores.device)
        history = history.view(n, rows_per_sent, history.size(-1))
        _collect_finished(finished, fin_scores, fin_tokens, history, origin, top_scores, eos_ranked, ended_at, config)
    open_scores, pick = top_scores.masked_fill(is_eos, float("-inf")).topk(min(k, top_scores.size(1)), dim=1)
    first_rows = torch.arange(0, n * rows_per_sent, rows_per_sent, device=scores.device)  # each sentence's first row
    parents = origin.gather(1, pick) + first_rows[:, None]
    done = _sentence_done(config, fin_scores[finished], open_scores[:, 0], is_eos[:, 0], nbest, max_len, lengths)
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


def _sentence_done(
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
    encoded: tuple[Tensor, Tensor] | None = None,
    past: list[Past] | None = None,
) -> list[list[Hypothesis]]:
    """Greedy search when the beam is 1, else beam search; outputs start with ``prefix`` (n, P) if given;
    ``past`` is the decoder's (``model.recurrence``; ``encoded`` then read the encoder's)."""
    if config.beam == 1:
        return greedy_search(model, src, config, prefix=prefix, encoded=encoded, past=past)
    return beam_search(model, src, config, nbest=nbest, prefix=prefix, encoded=encoded, past=past)


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
        full = len(finished) == k
        if config.stop == "beam":
            done = full
        elif config.stop == "top":
            done = full or (top[0][2] == EOS_ID and len(finished) >= nbest)
        else:
            done = full and finished[-1][0] >= best_open / float(length_penalty(float(max_len + 1), config))
        if done or t >= max_len or best_open == float("-inf"):
            break
    return [Hypothesis(tokens, score) for score, tokens in finished[:nbest]]
