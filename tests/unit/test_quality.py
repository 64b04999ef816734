"""Confidence features, flags and calibration (``quality/``): each measure does what its name says."""

from __future__ import annotations

import math
import random

import pytest
import torch

from nmt_cli.errors import NmtError
from nmt_cli.quality.confidence_map import MIN_PAIRS, Calibration, auroc, expected_calibration_error, fit
from nmt_cli.quality.features import Features, copied_share, features, flags, looping, repeated_share


def attention(rows: list[list[float]], heads: int = 2) -> torch.Tensor:
    weights = torch.tensor(rows)
    return (weights / weights.sum(-1, keepdim=True))[None].expand(heads, -1, -1)


def test_attention_features_tell_attending_from_detached_and_omitting():
    source, output = [5, 6, 7], [8, 9, 10]
    focused = attention([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])  # each token on its own word
    detached = attention([[1, 1, 1, 1]] * 4)  # evenly over everything: reading nothing in particular
    omitting = attention([[1, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1]])  # word 2 never read
    f_focused, f_detached = features(-1.0, focused, source, output), features(-1.0, detached, source, output)
    assert f_detached.attention_to_uniform == pytest.approx(0.0, abs=1e-6)
    assert f_focused.attention_to_uniform > 0.2
    assert f_focused.coverage_low == 0.0
    assert features(-1.0, omitting, source, output).coverage_low == pytest.approx(1 / 3)
    assert f_focused.mean_logprob == pytest.approx(-0.25)  # 3 tokens and the EOS
    assert f_focused.length_ratio == pytest.approx(0.0)


def test_repetition_copy_and_the_flags():
    assert repeated_share([1, 2, 3, 1, 2, 3, 1, 2, 3]) == pytest.approx(4 / 7)
    assert repeated_share([1, 2, 3, 4]) == 0.0
    assert looping([4, 1, 2, 1, 2, 1, 2]) and looping([7, 7, 7]) and not looping([1, 2, 3, 1, 2, 4])
    assert copied_share([1, 2, 3], [1, 2, 9, 9]) == 0.5
    plain = Features(-0.5, 0.0, 0.3, 0.0, 0.0, 0.1)
    assert flags(plain, [1, 2, 3], source_words=5, truncated=False) == []
    assert flags(plain, [1, 2, 3], source_words=5, truncated=True) == ["truncated"]
    assert "repetition" in flags(plain, [7, 7, 7, 7], 5, False)
    copied = Features(-0.5, 0.0, 0.3, 0.0, 0.0, 0.9)
    assert flags(copied, [1, 2, 3], source_words=5, truncated=False) == ["untranslated"]
    assert flags(copied, [1, 2], source_words=2, truncated=False) == []  # "OK" -> "OK" is no failure


def test_auroc_and_calibration_error_against_their_definitions():
    rng = random.Random(0)
    scores = [rng.random() for _ in range(200)]
    labels = [rng.random() < s for s in scores]
    pairs = [(p, n) for p, lp in zip(scores, labels) if lp for n, ln in zip(scores, labels) if not ln]
    assert auroc(scores, labels) == pytest.approx(sum(p > n for p, n in pairs) / len(pairs))
    assert auroc([1, 1, 0], [True, False, False]) == pytest.approx(0.75)  # ties count half
    assert math.isnan(auroc([1, 2], [True, True]))
    assert expected_calibration_error([0.95] * 20, [True] * 19 + [False]) == pytest.approx(0.0, abs=1e-9)
    assert expected_calibration_error([0.9] * 10, [False] * 10) == pytest.approx(0.9)


def test_a_fitted_calibration_ranks_and_is_calibrated_and_survives_the_model_file():
    rng = random.Random(1)
    found, labels = [], []
    for _ in range(600):
        quality = rng.gauss(0, 1)
        found.append(Features(-1 + 0.5 * quality + rng.gauss(0, 0.3), rng.random(), rng.random(), 0.0, 0.0, 0.1))
        labels.append(rng.random() < 1 / (1 + math.exp(-2 * quality)))
    detached = [Features(-3 + rng.gauss(0, 0.3), rng.random(), 0.05 * rng.random(), 0.0, 0.0, 0.1) for _ in range(300)]
    calibration = fit(found, labels, threshold=50, synthetic={"hallucination": detached})
    confidences = [calibration.confidence(f) for f in found]
    flagged = [flags(f, [1, 2, 3], 5, False, calibration.flag_probabilities(f)) for f in detached[:50] + found[:50]]
    assert sum("hallucination" in f for f in flagged[:50]) >= 45 and sum("hallucination" in f for f in flagged[50:]) <= 5
    assert auroc(confidences, labels) > 0.75
    assert expected_calibration_error(confidences, labels) < 0.06
    assert calibration.weights[0] > 0  # a higher log-probability, a higher confidence
    stored = Calibration.from_dict(calibration.to_dict(), "m.pt")
    assert stored == calibration
    with pytest.raises(NmtError, match="other features"):
        Calibration.from_dict({**calibration.to_dict(), "features": ["x"] * 6}, "m.pt")
    with pytest.raises(NmtError, match="invalid numbers"):
        Calibration.from_dict({**calibration.to_dict(), "bias": float("nan")}, "m.pt")
    with pytest.raises(NmtError, match="not readable"):
        Calibration.from_dict({"features": []}, "m.pt")
    with pytest.raises(NmtError, match=f"at least {MIN_PAIRS}"):
        fit(found[:10], labels[:10], 50)


def test_one_list_of_flag_names_for_the_code_the_help_and_the_docs():
    from pathlib import Path

    from typer.testing import CliRunner

    from nmt_cli.cli import app
    from nmt_cli.formats import gettext
    from nmt_cli.quality.flag_names import FLAGS, UNTRANSLATED

    assert gettext.UNTRANSLATED == UNTRANSLATED
    help_text = " ".join(CliRunner().invoke(app, ["translate", "--help"], terminal_width=200).output.split())
    root = Path(__file__).resolve().parents[2]
    readme = " ".join((root / "README.md").read_text(encoding="utf-8").split())
    docs = (root / "docs" / "confidence.md").read_text(encoding="utf-8")
    assert f"flags ({', '.join(FLAGS)})" in help_text
    assert f"flags ({', '.join(FLAGS)})" in readme
    assert all(f"`{flag}`" in docs for flag in FLAGS)


def test_a_translation_that_gives_its_source_back_is_flagged_and_trusted_little():
    """The command line and the server assess alike: a copy of the source's pieces (a language tag before them
    aside) that holds a word is `untranslated` and at most the copy ceiling, however sure the model was."""
    from nmt_cli.config import DecodeConfig
    from nmt_cli.decode.assess import Assessment, Assessor
    from nmt_cli.quality.features import Features
    from nmt_cli.quality.flag_names import COPY_CEILING

    class Pieces:
        def decode(self, ids: list[int]) -> str:
            return " ".join({5: "Linux", 6: "42"}.get(i, "x") for i in ids)

    assessor = Assessor(None, 0, DecodeConfig(), Pieces(), 64, None, joint=True)  # type: ignore[arg-type]
    assert assessor._copy_of([5], [5]) and assessor._copy_of([99, 5], [5])  # (99: a language tag)
    assert not assessor._copy_of([6], [6])  # a number given back is right
    assert not assessor._copy_of([5, 7], [5]) and not assessor._copy_of([5], [])
    apart = Assessor(None, 0, DecodeConfig(), Pieces(), 64, None, joint=False)  # type: ignore[arg-type]
    assert not apart._copy_of([5], [5])  # two vocabularies: the same ids are other pieces
    sure = Features(0.0, 0.0, 0.0, 0.0, 0.0, 1.0)  # log-probability 0: confidence 1 uncalibrated
    assert Assessment(sure, None, []).shown_confidence == 1.0
    assert Assessment(sure, 0.97, ["untranslated"], COPY_CEILING).shown_confidence == COPY_CEILING
