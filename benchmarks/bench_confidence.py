"""Confidence (`nmt translate --confidence`): how well it ranks and how well it is calibrated; what it costs.

    python benchmarks/bench_confidence.py --model nmt-quickstart/model \\
        --fit-src valid.en --fit-ref valid.de --test NAME:SRC:REF [--test ...] --rounds 3

Fits the calibration on the --fit pairs (validation data: nothing is tuned on the test sets), then for each
test set: AUROC of the confidence for "bad" translations (sentence chrF < 30) beside Seq-Logprob's (the mean
token log-probability alone), and the expected calibration error (10 bins) against "acceptable" (chrF >=
50). Synthetic hallucinations on the first test set: each source paired with another sentence's translation;
AUROC of the confidence for telling them from the real pairs. Time: `nmt translate` of the first test set
with and without `--confidence`, separate processes, alternating, `--rounds` each.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sacrebleu
import torch

from nmt_cli.decode.attention_maps import cross_attention
from nmt_cli.decode.fit_confidence import calibrate
from nmt_cli.decode.forced import forced_scores
from nmt_cli.decode.loading import load_model
from nmt_cli.decode.translator import Translator
from nmt_cli.errors import NmtError
from nmt_cli.quality.confidence_map import auroc, expected_calibration_error
from nmt_cli.quality.features import features
from nmt_cli.score.metrics import read_lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--fit-src", required=True)
    parser.add_argument("--fit-ref", required=True)
    parser.add_argument("--test", action="append", required=True, help="NAME:SRC:REF")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--refit", type=int, default=0, help="also refit on the first N pairs of the last test set, scored on the rest"
    )
    parser.add_argument(
        "--try-mc", type=int, default=0, help="only: N Monte-Carlo dropout passes as extra features, on the fit pairs"
    )
    args = parser.parse_args()
    if args.try_mc:
        _try_mc_dropout(args.model, read_lines(args.fit_src), read_lines(args.fit_ref), args.try_mc)
        return

    report = calibrate(Path(args.model), read_lines(args.fit_src), read_lines(args.fit_ref))
    calibration = report.calibration
    print(f"fitted on {report.pairs:,} pairs ({report.acceptable:.0%} acceptable)")
    loaded = load_model(args.model)
    translator = Translator(loaded, loaded.recipe.decode, assess=True)
    first_src: list[str] = []
    for spec in args.test:
        name, src_path, ref_path = spec.split(":")
        src, ref = read_lines(src_path), read_lines(ref_path)
        first_src = first_src or src
        hyps = [h[0] for h in translator.translate(src)]
        chrf = [sacrebleu.sentence_chrf(h[0], [r]).score for h, r in zip(hyps, ref)]
        confidence = [calibration.confidence(h.assessment.features) for h in hyps]
        logprob = [h.assessment.features.mean_logprob for h in hyps]
        bad = [c < 30 for c in chrf]
        ok = [c >= 50 for c in chrf]
        print(
            f"{name}: {len(src):,} lines, {sum(bad) / len(bad):.0%} bad, {sum(ok) / len(ok):.0%} acceptable | AUROC bad: "
            f"confidence {auroc([-c for c in confidence], bad):.3f}, Seq-Logprob {auroc([-x for x in logprob], bad):.3f} | "
            f"ECE {expected_calibration_error(confidence, ok):.3f} (mean confidence {statistics.mean(confidence):.3f})"
        )
        if name == args.test[0].split(":")[0]:
            _synthetic(loaded, translator, calibration, src, [h[0] for h in hyps])
    _omissions(loaded, translator, calibration, first_src)
    if args.refit:
        _refit(args.model, args.test[-1], args.refit)
    _timing(args.model, first_src, args.rounds)


def _refit(model: str, spec: str, n: int) -> None:
    """What `nmt calibrate` on N pairs of a new domain gives on the rest of it."""
    name, src_path, ref_path = spec.split(":")
    src, ref = read_lines(src_path), read_lines(ref_path)
    try:
        report = calibrate(Path(model), src[:n], ref[:n])
    except NmtError as err:
        print(f"{name}: nmt calibrate on its first {n} pairs refuses: {err}")
        return
    loaded = load_model(model)
    translator = Translator(loaded, loaded.recipe.decode, assess=True)
    hyps = [h[0] for h in translator.translate(src[n:])]
    chrf = [sacrebleu.sentence_chrf(h[0], [r]).score for h, r in zip(hyps, ref[n:])]
    confidence = [report.calibration.confidence(h.assessment.features) for h in hyps]
    ok, bad = [c >= 50 for c in chrf], [c < 30 for c in chrf]
    print(
        f"{name} refitted on its first {n} pairs, scored on the other {len(src) - n}: ECE "
        f"{expected_calibration_error(confidence, ok):.3f} (mean confidence {statistics.mean(confidence):.3f}, "
        f"{sum(ok) / len(ok):.0%} acceptable), AUROC bad {auroc([-c for c in confidence], bad):.3f}"
    )


def _try_mc_dropout(model: str, src: list[str], ref: list[str], passes: int) -> None:
    """Fomicheva et al. (2020): the mean and spread of the sentence log-probability over N teacher-forced passes with
    dropout on, as extra features. AUROC for bad translations by 2-fold cross-validation on the fit (validation)
    pairs: the one-pass features alone, then with the Monte-Carlo ones."""
    from nmt_cli.quality.confidence_map import _logistic

    loaded = load_model(model)
    translator = Translator(loaded, loaded.recipe.decode, assess=True)
    hyps = [h[0] for h in translator.translate(src)]
    bad = [sacrebleu.sentence_chrf(h[0], [r]).score < 30 for h, r in zip(hyps, ref)]
    base = [h.assessment.features.vector() for h in hyps]
    outputs = loaded.tgt_vocab.encode([h[0] for h in hyps], out_type=int)
    pairs = list(zip(loaded.src_vocab.encode(src, out_type=int), outputs))
    started = time.perf_counter()
    loaded.model.train()  # dropout on
    runs = []
    for seed in range(passes):
        torch.manual_seed(seed)
        totals = forced_scores(loaded.model, pairs, loaded.recipe.decode, torch.device("cpu"))
        runs.append([(t.total or -1e9) / max(len(o) + 1, 1) for t, (_, o) in zip(totals, pairs)])
    loaded.model.eval()
    seconds = time.perf_counter() - started
    by_line = list(zip(*runs))
    mc = [[statistics.mean(v), statistics.pstdev(v)] for v in by_line]

    def cross_validated(rows: list[list[float]]) -> float:
        x = torch.tensor(rows, dtype=torch.float64)
        y = torch.tensor(bad, dtype=torch.float64)
        folds = [list(range(0, len(rows), 2)), list(range(1, len(rows), 2))]
        scores = [0.0] * len(rows)
        for train_rows, test_rows in (folds, folds[::-1]):
            mean, scale = x[train_rows].mean(0), x[train_rows].std(0).clamp(min=1e-6)
            w = _logistic((x[train_rows] - mean) / scale, y[train_rows], 1.0)
            z = w[0] + ((x[test_rows] - mean) / scale) @ w[1:]
            for i, value in zip(test_rows, z.tolist()):
                scores[i] = value
        return auroc(scores, bad)

    print(f"{len(src):,} fit pairs, {sum(bad) / len(bad):.0%} bad; {passes} dropout passes took {seconds:.1f} s")
    print(f"  one-pass features: AUROC bad {cross_validated(base):.3f} (2-fold cross-validation)")
    alone = auroc([-b[0] for b in base], bad), auroc([-m[0] for m in mc], bad)
    print(f"  Seq-Logprob alone: {alone[0]:.3f}; MC mean alone {alone[1]:.3f}")
    print(f"  one-pass + MC mean and spread: AUROC bad {cross_validated([b + m for b, m in zip(base, mc)]):.3f}")


def _synthetic(loaded, translator, calibration, src: list[str], outputs: list[str]) -> None:
    """Detached outputs: each source with another sentence's translation, against the real pairs."""
    rng = random.Random(0)
    shuffled = outputs[:]
    rng.shuffle(shuffled)
    sources = loaded.src_vocab.encode(src, out_type=int)
    real = loaded.tgt_vocab.encode(outputs, out_type=int)
    fake = loaded.tgt_vocab.encode(shuffled, out_type=int)
    layer = translator.assessor.layer
    scores, detached, labels = [], [], []
    for targets, label in ((real, False), (fake, True)):
        totals = forced_scores(loaded.model, list(zip(sources, targets)), loaded.recipe.decode, torch.device("cpu"))
        attention = cross_attention(loaded.model, sources, targets, layer)
        for source, target, total, weights in zip(sources, targets, totals, attention):
            found = features(total.total or -1e9, weights, source, target)
            scores.append(-calibration.confidence(found))
            detached.append(calibration.flag_probabilities(found).get("hallucination", 0.0))
            labels.append(label)
    flagged = [d >= 0.5 for d in detached]
    caught = sum(f and y for f, y in zip(flagged, labels))
    print(
        f"synthetic hallucinations (another sentence's output): AUROC of confidence {auroc(scores, labels):.3f}, of the "
        f"hallucination map {auroc(detached, labels):.3f}; flag recall {caught / sum(labels):.3f}, precision "
        f"{caught / max(sum(flagged), 1):.3f} ({sum(f and not y for f, y in zip(flagged, labels))} real pairs flagged)"
    )
    real_assessed = [h[0].assessment for h in translator.translate(src)]
    # a misleading prefix: the search is forced to start with the first half of another sentence's translation
    prefixes = [" ".join(o.split()[: max(1, len(o.split()) // 2)]) for o in shuffled]
    misled = [h[0].assessment for h in translator.translate(src, prefixes)]
    _detected("misleading prefix (half of another sentence's translation forced first)", real_assessed, misled)
    # outputs forced to loop: the first three words of the real output, again and again, as long as the output was
    looped = [" ".join((o.split()[:3] or ["."]) * max(2, len(o.split()) // 3 + 1)) for o in outputs]
    looped_ids = loaded.tgt_vocab.encode(looped, out_type=int)
    limit = loaded.recipe.model.max_positions - 1
    looped_ids = [ids[:limit] for ids in looped_ids]
    found = [
        translator.assessor.assess([s], [[_forced_hypothesis(loaded, s, o)]])[0][0] for s, o in zip(sources, looped_ids)
    ]
    _detected("outputs forced to loop (the first 3 words repeated)", real_assessed, found)


def _forced_hypothesis(loaded, source: list[int], output: list[int]):
    """A hypothesis for ``output`` as the search would score it (log-probability over the length penalty)."""
    from nmt_cli.decode.search import Hypothesis, length_penalty

    total = forced_scores(loaded.model, [(source, output)], loaded.recipe.decode, torch.device("cpu"))[0].total
    penalty = float(length_penalty(float(len(output) + 1), loaded.recipe.decode))
    return Hypothesis(output, (total if total is not None else -1e9) / penalty)


def _detected(kind: str, real, fake) -> None:
    """AUROC of the confidence for telling made-up failures from the real translations; flag recall and false alarms."""
    scores = [-a.shown_confidence for a in real] + [-a.shown_confidence for a in fake]
    labels = [False] * len(real) + [True] * len(fake)
    flagged_fake = sum(bool(a.flags) for a in fake)
    flagged_real = sum(bool(a.flags) for a in real)
    print(
        f"synthetic {kind}: AUROC of confidence {auroc(scores, labels):.3f}; any flag on {flagged_fake / len(fake):.3f} "
        f"of them and on {flagged_real / len(real):.3f} of the real translations"
    )


def _omissions(loaded, translator, calibration, src: list[str]) -> None:
    """Made-up omissions on the test set: each source of 6+ words with the translation of its first 60%."""
    from nmt_cli.decode.fit_confidence import _omitted, _paired

    own = [h[0][0] for h in translator.translate(src)]
    real = [calibration.flag_probabilities(f).get("omission", 0.0) for f in _paired(loaded, translator, src, own)]
    fake = [calibration.flag_probabilities(f).get("omission", 0.0) for f in _omitted(loaded, translator, src)]
    labels = [False] * len(real) + [True] * len(fake)
    scores = real + fake
    flagged = [p >= 0.5 for p in scores]
    caught = sum(f and y for f, y in zip(flagged, labels))
    print(
        f"synthetic omissions (first 60% of the source translated): AUROC of the omission map "
        f"{auroc(scores, labels):.3f}; flag recall {caught / max(sum(labels), 1):.3f}, precision "
        f"{caught / max(sum(flagged), 1):.3f} ({sum(f and not y for f, y in zip(flagged, labels))} real pairs flagged)"
    )


def _timing(model: str, src: list[str], rounds: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench_confidence_"))
    (work / "src.txt").write_text("".join(s + "\n" for s in src), encoding="utf-8")
    times: dict[str, list[float]] = {"plain": [], "confidence": []}
    for _ in range(rounds):
        for kind in ("plain", "confidence"):
            command = [sys.executable, "-m", "nmt_cli", "translate", "-m", model, "-i", str(work / "src.txt")]
            command += ["-o", str(work / f"{kind}.txt"), "--no-progress", "--restart"]
            started = time.perf_counter()
            subprocess.run([*command, *(["--confidence"] if kind == "confidence" else [])], check=True, capture_output=True)
            times[kind].append(time.perf_counter() - started)
    median = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"time ({rounds} rounds, medians): plain {median['plain']:.2f} s, --confidence {median['confidence']:.2f} s, "
        f"ratio {median['confidence'] / median['plain']:.3f}"
    )


if __name__ == "__main__":
    main()
