"""What the search and one cheap pass over a translation say about it: the features of its confidence, and flags.

For each (source, output) pair:

- ``mean_logprob``: the mean log-probability of the output's tokens (EOS included), Seq-Logprob, the strongest
  simple hallucination detector (Guerreiro et al., EACL 2023). The search already has it: its score is the
  summed log-probability over the length penalty, so nothing is recomputed.
- ``coverage_low``: the share of source tokens that the output attends to less than half a token's worth
  in all (source content with no target counterpart: omissions).
- ``attention_to_uniform``: the mean, over output tokens, of the Wasserstein-1 distance between its
  attention and the uniform distribution over the source (Wass-to-Unif, Guerreiro et al. 2023: an output
  detached from its source attends evenly, to nothing in particular).
- ``length_ratio``: log of output over source tokens; ``repeated``: the share of the output's 3-grams seen
  before in it; ``copied``: the share of output tokens that are source tokens.

The attention is one decoder layer's cross-attention, heads averaged, from the teacher-forced pass that
``--alignments`` uses (stopped at that layer, on the search's encoder output). The minimum and spread of the
token log-probabilities, which would need the whole decoder and the output layer again, added nothing on
validation data (2-fold AUROC for bad translations 0.777 with them, 0.779 without), so they are not used.

Flags: ``hallucination`` and ``omission`` when the model's calibration has a map for them (fitted by ``nmt
calibrate`` on made-up failures: each source paired with another sentence's translation, and with the
translation of its first part only) and it says more likely than not; and plain rules: ``truncated`` (the
output stopped at its length limit), ``repetition`` (a 1-4-gram repeated three times in a row, or half the
3-grams repeated), ``untranslated`` (most output tokens copied from a source of four words or more).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from ..data.vocab import PAD_ID
from .flag_names import REPETITION, TRUNCATED, UNTRANSLATED

FEATURES = ("mean_logprob", "coverage_low", "attention_to_uniform", "length_ratio", "repeated", "copied")


@dataclass(frozen=True)
class Features:
    mean_logprob: float
    coverage_low: float
    attention_to_uniform: float
    length_ratio: float
    repeated: float
    copied: float

    def vector(self) -> list[float]:
        return [getattr(self, name) for name in FEATURES]

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in asdict(self).items()}


def features(total_logprob: float, attention: torch.Tensor, source: list[int], output: list[int]) -> Features:
    """One pair's features: its summed token log-probability (EOS included) and its cross-attention
    (heads, T + 1, S + 1): output tokens and EOS over source tokens and EOS."""
    weights = attention.float().mean(dim=0)  # (T + 1, S + 1)
    coverage = weights.sum(dim=0)[:-1]  # per source token (its EOS left out)
    # Wasserstein-1 between distributions on positions 0..S: the summed gap of their cumulative sums, over S + 1
    uniform = torch.full_like(weights, 1.0 / weights.size(1))
    distance = (weights.cumsum(-1) - uniform.cumsum(-1)).abs().sum(-1) / weights.size(1)
    return Features(
        mean_logprob=total_logprob / (len(output) + 1),
        coverage_low=float((coverage < 0.5).float().mean()) if coverage.numel() else 0.0,
        attention_to_uniform=float(distance.mean()),
        length_ratio=math.log((len(output) + 1) / (len(source) + 1)),
        repeated=repeated_share(output),
        copied=copied_share(source, output),
    )


def repeated_share(tokens: list[int], n: int = 3) -> float:
    """The share of ``tokens``' n-grams that occurred earlier in them."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    seen: set[tuple[int, ...]] = set()
    repeats = 0
    for gram in grams:
        repeats += gram in seen
        seen.add(gram)
    return repeats / len(grams) if grams else 0.0


def copied_share(source: list[int], output: list[int]) -> float:
    """The share of output tokens that are also source tokens (pieces, PAD aside)."""
    own = set(source) - {PAD_ID}
    return sum(token in own for token in output) / len(output) if output else 0.0


def looping(tokens: list[int], times: int = 3) -> bool:
    """Whether some 1- to 4-gram occurs ``times`` times in a row."""
    for n in range(1, 5):
        for start in range(len(tokens) - n * times + 1):
            gram = tokens[start : start + n]
            if all(tokens[start + k * n : start + (k + 1) * n] == gram for k in range(1, times)):
                return True
    return False


def flags(
    features: Features,
    output: list[int],
    source_words: int,
    truncated: bool,
    learnt: dict[str, float] | None = None,
) -> list[str]:
    """The flags of one translation (the module's docstring); a learnt flag (``hallucination``, ``omission``)
    when the calibration's map for it (``learnt``: name -> probability) says more likely than not."""
    found = [name for name, probability in sorted((learnt or {}).items()) if probability >= 0.5]
    if truncated:
        found.append(TRUNCATED)
    if looping(output) or features.repeated >= 0.5:
        found.append(REPETITION)
    if source_words >= 4 and features.copied >= 0.8:
        found.append(UNTRANSLATED)
    return found
