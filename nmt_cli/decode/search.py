"""Greedy and beam search over a batch of source sentences, read top to bottom.

Both searches work on whole tensors: every step scores all open hypotheses of all
sentences at once, and sentences that are done leave the batch. The decoder runs
incrementally (:class:`CachedSteps`: a key/value cache for self-attention, encoder
keys/values computed once); :class:`UncachedSteps` recomputes the whole prefix every step
and exists as the reference the cache is tested against.

Scores are sums of log-probabilities; finished hypotheses are ranked by
``score / length_penalty(|Y|)`` where |Y| counts the EOS.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..config import DecodeConfig
from ..model.transformer import Transformer

PAD_ID, BOS_ID, EOS_ID = 0, 2, 3  # fixed by nmt's vocabularies (see data.vocab)


@dataclass(frozen=True)
class Hypothesis:
    """One output: token ids (no BOS/EOS) and its length-normalised score."""

    tokens: list[int]
    score: float


# --------------------------------------------------------------------------- decoder steppers


class CachedSteps:
    """Incremental decoding: one new token per row per call, past keys/values cached."""

    def __init__(self, model: Transformer, memory: Tensor, src_mask: Tensor, beam: int = 1) -> None:
        self.model = model
        self.state = model.start_decoding(memory, src_mask)  # beams share their sentence's row

    def __call__(self, tokens: Tensor) -> Tensor:
        return self.model.decode_step(tokens, self.state)  # (N, V)

    def select(self, rows: Tensor, sentences: Tensor | None) -> None:
        self.state.select(rows, sentences)


class UncachedSteps:
    """Reference decoding: re-runs the decoder over the whole prefix at every step.

    Keeps one copy of the encoder output per hypothesis (the plain way), so it also checks
    the cached path's sharing of encoder keys between a sentence's hypotheses.
    """

    def __init__(self, model: Transformer, memory: Tensor, src_mask: Tensor, beam: int = 1) -> None:
        self.model = model
        self.memory = memory.repeat_interleave(beam, dim=0)
        self.src_mask = src_mask.repeat_interleave(beam, dim=0)
        self.prefix = memory.new_zeros((self.memory.size(0), 0), dtype=torch.long)

    def __call__(self, tokens: Tensor) -> Tensor:
        self.prefix = torch.cat([self.prefix, tokens[:, None]], dim=1)  # (N, t + 1)
        hidden = self.model.decode(self.prefix, self.memory, self.src_mask)[:, -1]  # (N, D)
        return F.log_softmax(self.model.logits(hidden).float(), dim=-1)

    def select(self, rows: Tensor, sentences: Tensor | None) -> None:
        self.prefix = self.prefix.index_select(0, rows)
        self.memory = self.memory.index_select(0, rows)
        self.src_mask = self.src_mask.index_select(0, rows)


# --------------------------------------------------------------------------- shared pieces


def max_output_lengths(src: Tensor, config: DecodeConfig, max_positions: int) -> Tensor:
    """Largest number of output tokens (EOS excluded) per sentence: a * |src| + b, within the model."""
    src_len = (src != PAD_ID).sum(dim=1) - 1  # the source ends in EOS
    limit = (config.max_len_a * src_len.double() + config.max_len_b).floor().long()
    return limit.clamp(min=1, max=max_positions - 1)


def length_penalty(length: Tensor | float, config: DecodeConfig) -> Tensor | float:
    """GNMT ((5 + |Y|) / 6) ** alpha (the paper's), or |Y| ** alpha (fairseq's 'average')."""
    if config.length_penalty == "gnmt":
        return ((5.0 + length) / 6.0) ** config.alpha
    return length ** config.alpha


def _mask_specials(log_probs: Tensor, at_limit: Tensor) -> Tensor:
    """Never emit PAD or BOS; rows at their length limit may only emit EOS."""
    log_probs[..., PAD_ID] = float("-inf")
    log_probs[..., BOS_ID] = float("-inf")
    if at_limit.any():
        eos = log_probs[at_limit, ..., EOS_ID].clone()
        log_probs[at_limit] = float("-inf")
        log_probs[at_limit, ..., EOS_ID] = eos
    return log_probs


# --------------------------------------------------------------------------- greedy


@torch.inference_mode()
def greedy_search(model: Transformer, src: Tensor, config: DecodeConfig, cached: bool = True) -> list[list[Hypothesis]]:
    """The most probable token at every step, until EOS or the length limit."""
    memory, src_mask = model.encode(src)
    steps = (CachedSteps if cached else UncachedSteps)(model, memory, src_mask)
    max_len = max_output_lengths(src, config, model.config.max_positions)
    n = src.size(0)
    alive = torch.arange(n, device=src.device)  # original index of each row
    tokens = torch.full((n,), BOS_ID, dtype=torch.long, device=src.device)
    history = torch.zeros((n, 0), dtype=torch.long, device=src.device)
    scores = torch.zeros(n, device=src.device)
    results: list[list[Hypothesis]] = [[] for _ in range(n)]
    for t in range(int(max_len.max()) + 1):
        log_probs = _mask_specials(steps(tokens), t >= max_len[alive])
        best, tokens = log_probs.max(dim=-1)
        scores = scores + best
        history = torch.cat([history, tokens[:, None]], dim=1)  # (n_alive, t + 1)
        done = tokens == EOS_ID
        if not done.any():
            continue
        for row in done.nonzero().flatten().tolist():
            length = t + 1
            score = scores[row].item() / float(length_penalty(float(length), config))
            results[alive[row].item()] = [Hypothesis(history[row, :t].tolist(), score)]
        keep = (~done).nonzero().flatten()
        if len(keep) == 0:
            break
        alive, tokens, history, scores = alive[keep], tokens[keep], history[keep], scores[keep]
        steps.select(keep, sentences=keep)
    return results


# --------------------------------------------------------------------------- beam


@torch.inference_mode()
def beam_search(model: Transformer, src: Tensor, config: DecodeConfig, nbest: int = 1,
                cached: bool = True) -> list[list[Hypothesis]]:
    """Batched beam search; returns the ``nbest`` best finished hypotheses of each sentence.

    A sentence is done when it has ``beam`` finished hypotheses and no open one can
    still beat the worst of them (an open hypothesis's score can only fall, so its best
    final score is its current score over the largest length penalty it can reach).
    """
    k = config.beam
    device = src.device
    n_sent = src.size(0)
    memory, src_mask = model.encode(src)
    steps = (CachedSteps if cached else UncachedSteps)(model, memory, src_mask, beam=k)
    max_len = max_output_lengths(src, config, model.config.max_positions)  # (n_sent,)
    width = int(max_len.max()) + 1  # room for the tokens and the EOS

    sent = torch.arange(n_sent, device=device)  # original index of each open sentence
    scores = torch.full((n_sent, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # at the start only one hypothesis per sentence is real
    history = torch.zeros((n_sent * k, 0), dtype=torch.long, device=device)
    tokens = torch.full((n_sent * k,), BOS_ID, dtype=torch.long, device=device)
    fin_scores = torch.full((n_sent, k), float("-inf"), device=device)
    fin_tokens = torch.full((n_sent, k, width), PAD_ID, dtype=torch.long, device=device)

    for t in range(width):
        n = len(sent)
        log_probs = steps(tokens).view(n, k, -1)  # (n, K, V)
        vocab = log_probs.size(-1)
        log_probs = _mask_specials(log_probs, t >= max_len[sent])
        candidates = (scores[:, :, None] + log_probs).view(n, -1)  # (n, K*V)
        top_scores, top_index = candidates.topk(2 * k, dim=1)  # (n, 2K), best first
        origin, token = top_index // vocab, top_index % vocab
        is_eos = token == EOS_ID

        # Finished: EOS among the K best candidates (as in fairseq), ranked by normalised score.
        eos_ranked = is_eos.clone()
        eos_ranked[:, k:] = False
        if eos_ranked.any():
            _collect_finished(sent, fin_scores, fin_tokens, history.view(n, k, t), origin, top_scores,
                              eos_ranked, t, config)

        # Open: the K best candidates that did not end.
        open_scores, pick = top_scores.masked_fill(is_eos, float("-inf")).topk(k, dim=1)  # (n, K)
        parent = origin.gather(1, pick) + torch.arange(n, device=device)[:, None] * k  # row in history
        new_tokens = token.gather(1, pick)

        bound = open_scores[:, 0] / length_penalty(max_len[sent].double() + 1, config).float()
        full = fin_scores[sent, -1] > float("-inf")  # K finished (they are kept sorted)
        done = (full & (fin_scores[sent, -1] >= bound)) | (t >= max_len[sent]) | (open_scores[:, 0] == float("-inf"))
        keep = (~done).nonzero().flatten()
        if len(keep) == 0:
            break
        rows = parent[keep].flatten()  # (n_keep * K,)
        history = torch.cat([history.index_select(0, rows), new_tokens[keep].reshape(-1, 1)], dim=1)
        steps.select(rows, sentences=keep if len(keep) < n else None)
        sent, scores, tokens = sent[keep], open_scores[keep], new_tokens[keep].flatten()

    return _best(fin_scores, fin_tokens, nbest)


def _collect_finished(sent: Tensor, fin_scores: Tensor, fin_tokens: Tensor, history: Tensor, origin: Tensor,
                      top_scores: Tensor, eos_ranked: Tensor, t: int, config: DecodeConfig) -> None:
    """Merge this step's EOS candidates into each sentence's K best finished hypotheses."""
    n, two_k = origin.shape
    k, width = fin_tokens.shape[1:]
    normalised = (top_scores / length_penalty(float(t + 1), config)).masked_fill(~eos_ranked, float("-inf"))
    paths = history.gather(1, origin[:, :, None].expand(n, two_k, t))  # (n, 2K, t)
    new_tokens = torch.full((n, two_k, width), PAD_ID, dtype=torch.long, device=origin.device)
    new_tokens[:, :, :t] = paths
    new_tokens[:, :, t] = EOS_ID
    all_scores = torch.cat([fin_scores[sent], normalised], dim=1)  # (n, 3K)
    all_tokens = torch.cat([fin_tokens[sent], new_tokens], dim=1)  # (n, 3K, width)
    best, pick = all_scores.topk(k, dim=1)  # sorted, best first
    fin_scores[sent] = best
    fin_tokens[sent] = all_tokens.gather(1, pick[:, :, None].expand(n, k, width))


def _best(fin_scores: Tensor, fin_tokens: Tensor, nbest: int) -> list[list[Hypothesis]]:
    results = []
    for scores, paths in zip(fin_scores.tolist(), fin_tokens.tolist()):
        hyps = []
        for score, path in zip(scores[:nbest], paths[:nbest]):
            if score == float("-inf"):
                break
            hyps.append(Hypothesis(path[: path.index(EOS_ID)], score))
        results.append(hyps)
    return results


def search(model: Transformer, src: Tensor, config: DecodeConfig, nbest: int = 1) -> list[list[Hypothesis]]:
    """Greedy search when the beam is 1, else beam search."""
    if config.beam == 1:
        return greedy_search(model, src, config)
    return beam_search(model, src, config, nbest=nbest)
