"""From features to a calibrated confidence: the probability that a translation is acceptable.

Acceptable means a sentence chrF of at least ``threshold`` (50) against a human reference. The map is a
logistic regression on the standardised features (``features.FEATURES``), fitted by Newton's method with a
little L2 regularisation; it is a handful of numbers, stored in the model file as a plain dict, so
applying it needs no library and loading it needs no pickle.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch

from ..errors import NmtError
from .features import FEATURES, Features

MIN_PAIRS = 100  # fewer labelled pairs than this cannot calibrate eight weights


@dataclass(frozen=True)
class Calibration:
    """A fitted map: ``sigmoid(bias + weights . (features - mean) / scale)``."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    threshold: float  # the sentence chrF an acceptable translation reaches
    pairs: int  # how many pairs it was fitted on
    # Flags learnt from synthetic failures: the same kind of map per flag, (weights, bias), fitted to tell real
    # translations from made-up ones ("hallucination": each source with another sentence's translation;
    # "omission": each source with the translation of its first part only)
    flag_maps: dict[str, tuple[tuple[float, ...], float]] = field(default_factory=dict)

    def confidence(self, features: Features) -> float:
        return self._probability(features, self.weights, self.bias)

    def flag_probabilities(self, features: Features) -> dict[str, float]:
        """Per learnt flag, the probability that the translation is such a failure."""
        return {name: self._probability(features, w, b) for name, (w, b) in self.flag_maps.items()}

    def _probability(self, features: Features, weights: tuple[float, ...], bias: float) -> float:
        values = features.vector()
        z = bias + sum(w * (v - m) / s for w, v, m, s in zip(weights, values, self.mean, self.scale))
        return 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))

    def to_dict(self) -> dict:
        stored = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items() if k != "flag_maps"}
        stored["flag_maps"] = {name: {"weights": list(w), "bias": b} for name, (w, b) in self.flag_maps.items()}
        return stored

    @staticmethod
    def from_dict(data: dict, origin: str) -> Calibration:
        """A stored calibration, checked: its feature names must be this version's."""
        try:
            calibration = Calibration(
                tuple(str(x) for x in data["features"]),
                tuple(float(x) for x in data["mean"]),
                tuple(float(x) for x in data["scale"]),
                tuple(float(x) for x in data["weights"]),
                float(data["bias"]),
                float(data["threshold"]),
                int(data["pairs"]),
                {
                    str(name): (tuple(float(x) for x in value["weights"]), float(value["bias"]))
                    for name, value in dict(data.get("flag_maps", {})).items()
                },
            )
        except (KeyError, TypeError, ValueError):
            raise NmtError(f"{origin}: its stored calibration is not readable; refit it with nmt calibrate") from None
        sizes = {len(calibration.mean), len(calibration.scale), len(calibration.weights)}
        sizes |= {len(w) for w, _ in calibration.flag_maps.values()}
        if calibration.features != FEATURES or sizes != {len(FEATURES)}:
            raise NmtError(f"{origin}: its calibration was fitted on other features; refit it with nmt calibrate")
        if (
            not all(math.isfinite(x) for x in (*calibration.mean, *calibration.weights, calibration.bias))
            or min(calibration.scale) <= 0
        ):
            raise NmtError(f"{origin}: its stored calibration holds invalid numbers; refit it with nmt calibrate")
        return calibration


def fit(
    features: list[Features],
    labels: list[bool],
    threshold: float,
    synthetic: dict[str, list[Features]] | None = None,
    l2: float = 1.0,
) -> Calibration:
    """The logistic regression of ``labels`` (acceptable or not) on ``features``; and per flag of ``synthetic``
    (the features of made-up failures of that kind), one telling those from ``features``."""
    if len(features) < MIN_PAIRS:
        raise NmtError(f"calibration needs at least {MIN_PAIRS} pairs with references; got {len(features)}")
    if all(labels) or not any(labels):
        which = "all" if all(labels) else "none"
        raise NmtError(
            f"{which} of the {len(labels)} translations reach sentence chrF {threshold:g}: calibration needs good and "
            "bad ones; give sentences nearer the model's limits, or another --threshold"
        )
    x = torch.tensor([f.vector() for f in features], dtype=torch.float64)
    mean, scale = x.mean(0), x.std(0).clamp(min=1e-6)
    w = _logistic((x - mean) / scale, torch.tensor(labels, dtype=torch.float64), l2)
    flag_maps = {}
    for name, made_up in (synthetic or {}).items():
        if not made_up:
            continue
        wrong = torch.tensor([f.vector() for f in made_up], dtype=torch.float64)
        both = (torch.cat([x, wrong]) - mean) / scale
        d = _logistic(both, torch.cat([torch.zeros(len(x)), torch.ones(len(wrong))]).double(), l2)
        flag_maps[name] = (tuple(d[1:].tolist()), float(d[0]))
    return Calibration(
        FEATURES,
        tuple(mean.tolist()),
        tuple(scale.tolist()),
        tuple(w[1:].tolist()),
        float(w[0]),
        threshold,
        len(x),
        flag_maps,
    )


def _logistic(x: torch.Tensor, y: torch.Tensor, l2: float) -> torch.Tensor:
    """Bias and weights of the L2-regularised logistic regression of ``y`` on standardised ``x``."""
    z = torch.cat([torch.ones(len(x), 1, dtype=torch.float64), x], dim=1)
    w = torch.zeros(z.size(1), dtype=torch.float64)
    penalty = torch.eye(z.size(1), dtype=torch.float64) * l2
    penalty[0, 0] = 1e-6  # the bias is (all but) not shrunk
    for _ in range(50):  # Newton's method: a few steps reach the optimum of this convex loss
        p = torch.sigmoid(z @ w)
        gradient = z.T @ (p - y) + penalty @ w
        hessian = z.T @ (z * (p * (1 - p))[:, None]) + penalty
        step = torch.linalg.solve(hessian, gradient)
        w = w - step
        if float(step.abs().max()) < 1e-8:
            break
    return w


def auroc(scores: list[float], positives: list[bool]) -> float:
    """The area under the ROC curve: the chance that a random positive scores above a random negative."""
    pairs = sorted(zip(scores, positives))
    n_pos = sum(positives)
    n_neg = len(positives) - n_pos
    if not n_pos or not n_neg:
        return float("nan")
    rank_sum, i = 0.0, 0
    while i < len(pairs):  # average ranks over ties
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            j += 1
        rank_sum += sum(1 for k in range(i, j) if pairs[k][1]) * (i + j + 1) / 2
        i = j
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def expected_calibration_error(confidences: list[float], outcomes: list[bool], bins: int = 10) -> float:
    """The mean gap between confidence and accuracy over ``bins`` equal-width bins, weighted by their size."""
    total, error = len(confidences), 0.0
    for b in range(bins):
        inside = [
            (c, o) for c, o in zip(confidences, outcomes) if b / bins <= c < (b + 1) / bins or (b == bins - 1 and c == 1)
        ]
        if inside:
            error += (
                len(inside) / total * abs(sum(c for c, _ in inside) / len(inside) - sum(o for _, o in inside) / len(inside))
            )
    return error
