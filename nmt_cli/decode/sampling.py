"""Sampling instead of searching: each output token is drawn from the model's distribution.

Used for sampled back-translation (Edunov et al. 2018) and diverse n-best lists. Each sentence runs
``2 K`` sample rows for ``K`` requested samples (``nbest``), through the same batched, cached
decoder as the beam search (its rows are a sentence's group, as a beam is); the ``K`` best distinct
finished samples are returned. A sentence leaves the batch once all its rows ended.

The distribution can be reshaped (``temperature``, ``top_k``, ``top_p``); the score of a sample is
always its log-probability under the model itself, normalised by the length penalty, so it equals
what ``nmt score --model`` computes for the same output.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..data.vocab import BOS_ID, EOS_ID, PAD_ID
from ..model.recurrence import Past
from ..model.transformer import Transformer
from .search import (
    Hypothesis,
    length_penalty,
    mask_specials,
    max_output_lengths,
    prefix_tokens,
    search_steps,
    with_room_for,
)

OVERSAMPLE = 2  # rows per requested sample: duplicates are dropped, so draw more than asked


@torch.inference_mode()
def sample(
    model: Transformer,
    src: Tensor,
    config: DecodeConfig,
    nbest: int = 1,
    generator: torch.Generator | None = None,
    prefix: Tensor | None = None,
    encoded: tuple[Tensor, Tensor] | None = None,
    past: list[Past] | None = None,
) -> list[list[Hypothesis]]:
    """Up to ``nbest`` distinct samples per sentence of ``src``, best score first (``encoded`` and ``past``
    as :func:`.search.search` takes them)."""
    device = src.device
    rows_per_sentence = nbest * OVERSAMPLE if nbest > 1 else 1
    memory, src_mask = encoded if encoded is not None else model.encode(src)
    max_len = with_room_for(
        prefix, max_output_lengths(src, config, model.config.max_positions), model.config.max_positions
    )  # (n_sent,)
    width = int(max_len.max()) + 1
    steps = search_steps(model, memory, src_mask, config, True, rows_per_sentence, width, past)
    n_sent = src.size(0)
    rows = n_sent * rows_per_sentence
    steps.select(torch.arange(n_sent, device=device).repeat_interleave(rows_per_sentence), None)
    row_limit = max_len.repeat_interleave(rows_per_sentence)  # (rows,)
    outputs = torch.full((rows, width), PAD_ID, dtype=torch.long, device=device)
    lengths = torch.full((rows,), -1, dtype=torch.long, device=device)  # tokens before EOS; -1: open
    scores = torch.zeros(rows, device=device)
    open_sentences = torch.arange(n_sent, device=device)
    tokens = torch.full((rows,), BOS_ID, dtype=torch.long, device=device)
    for t in range(width):
        alive = (
            open_sentences[:, None] * rows_per_sentence + torch.arange(rows_per_sentence, device=device)
        ).flatten()  # original row of each open row
        forced = prefix_tokens(prefix, t, open_sentences, rows_per_sentence)
        log_probs = mask_specials(steps(tokens).log_softmax(dim=-1), t >= row_limit[alive], forced)  # (n_alive, V)
        drawn = torch.multinomial(_reshaped(log_probs, config).exp(), 1, generator=generator).squeeze(1)
        still_open = lengths[alive] < 0
        tokens = torch.where(still_open, drawn, EOS_ID)  # ended rows keep feeding EOS, and are not scored
        outputs[alive, t] = torch.where(still_open, tokens, outputs[alive, t])
        scores[alive] += torch.where(still_open, log_probs.gather(1, tokens[:, None]).squeeze(1), 0.0)
        ended = still_open & (tokens == EOS_ID)
        lengths[alive[ended]] = t
        if bool((lengths[alive] >= 0).all()):
            break
        sentence_open = (lengths[alive] < 0).view(-1, rows_per_sentence).any(dim=1)  # (n_open_sentences,)
        if not bool(sentence_open.all()):
            keep = sentence_open.nonzero().flatten()
            kept_rows = (keep[:, None] * rows_per_sentence + torch.arange(rows_per_sentence, device=device)).flatten()
            steps.select(kept_rows, sentences=keep)
            open_sentences, tokens = open_sentences[keep], tokens[kept_rows]
    normalised = scores / length_penalty(lengths.double() + 1, config).float()
    return _distinct_best(outputs.tolist(), lengths.tolist(), normalised.tolist(), rows_per_sentence, nbest)


def _reshaped(log_probs: Tensor, config: DecodeConfig) -> Tensor:
    """The sampling distribution (as log-probabilities): temperature, then top-k, then top-p."""
    logits = log_probs / config.temperature
    if config.top_k and config.top_k < logits.size(1):
        kth = logits.topk(config.top_k, dim=1).values[:, -1:]  # (n, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    logits = logits.log_softmax(dim=1)
    if config.top_p < 1.0:
        sorted_logp, order = logits.sort(dim=1, descending=True)
        before = sorted_logp.exp().cumsum(dim=1) - sorted_logp.exp()  # mass of the better tokens
        drop_sorted = before >= config.top_p  # the best token is always kept (nothing before it)
        drop = torch.empty_like(drop_sorted).scatter_(1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf")).log_softmax(dim=1)
    return logits


def _distinct_best(
    outputs: list[list[int]], lengths: list[int], scores: list[float], per_sentence: int, nbest: int
) -> list[list[Hypothesis]]:
    results = []
    for start in range(0, len(outputs), per_sentence):
        seen, hyps = set(), []
        candidates = range(start, start + per_sentence)
        for row in sorted(candidates, key=lambda r: -scores[r]):
            tokens = tuple(outputs[row][: lengths[row]])
            if lengths[row] >= 0 and tokens not in seen:
                seen.add(tokens)
                hyps.append(Hypothesis(list(tokens), scores[row]))
        results.append(hyps[:nbest])
    return results


__all__ = ["sample"]
