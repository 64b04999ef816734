"""Quality at a budget: train a recipe for N minutes on this machine, average the last
checkpoints, decode with beam 4, and report BLEU and chrF on the Multi30k test sets.

    python benchmarks/bench_quality.py multi30k_ende [--minutes 30] [--threads 2] [--score-only]

``--score-only`` re-scores the model a previous run left in ``benchmarks/work`` (for instance
after a change to the decoder) instead of training again.

``--also-at 15`` also scores the model a 15-minute budget would have produced, from the same run:
the schedule does not depend on the budget, so the first 15 minutes of a 30-minute run are a
15-minute run; its model is the average of the last 5 checkpoints written by then (run with
``--set train.keep_last=0`` so they are kept).

``--valid`` scores the validation set instead of the test sets: settings are decided on it, never on the tests.

With a schedule that knows its budget (``train.lr_schedule: linear`` or ``cosine``) the first 15 minutes of a
30-minute run are not a 15-minute run, and ``--also-at`` is refused: train each budget on its own.

``--weights avg,last,ema`` scores several weight files of the same run: ``avg`` is model.pt (the
last checkpoints averaged), ``last`` the final checkpoint alone, ``ema`` model.ema.pt (train with
``--set train.ema_decay=D``). ``--set train.max_steps=N --minutes 0`` bounds the run by updates instead.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

from common import ROOT, SHARED, WORK, print_table, record

TESTS = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", choices=["multi30k_ende", "multi30k_enfr"])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--score-only", action="store_true", help="decode and score the existing run, no training")
    parser.add_argument("--set", action="append", default=[], help="recipe override (tuning on validation data)")
    parser.add_argument("--tag", default="", help="suffix of the run folder, to keep variants apart")
    parser.add_argument("--weights", default="avg", help="avg, last, ema: which weight files of the run to score")
    parser.add_argument("--valid", action="store_true", help="score the validation set (for tuning), not the tests")
    parser.add_argument(
        "--also-at",
        type=float,
        action="append",
        default=[],
        help="also score the model of a shorter budget (minutes) from the same run",
    )
    args = parser.parse_args()
    from nmt_cli.config import load_recipe
    from nmt_cli.data.prepare import prepare
    from nmt_cli.decode.loading import load_model
    from nmt_cli.decode.translator import Translator
    from nmt_cli.score.metrics import score
    from nmt_cli.train.loop import train

    run_dir = WORK / f"quality_{args.recipe}_{args.minutes:g}m{args.tag}"
    recipe = load_recipe(
        ROOT / "recipes" / f"{args.recipe}.yaml",
        [
            f"data.root={SHARED / 'multi30k'}",
            f"data.output={WORK / ('data_' + args.recipe)}",
            f"train.dir={run_dir}",
            f"train.max_time={args.minutes:g}m" if args.minutes else "train.max_time=",
            f"train.threads={args.threads}",
            *args.set,
        ],
    )
    if args.also_at and recipe.train.lr_schedule in ("linear", "cosine"):
        sys.exit(f"--also-at: train.lr_schedule {recipe.train.lr_schedule} depends on the budget; train each budget alone")
    if args.score_only:
        if not (run_dir / "model.pt").is_file():
            sys.exit(f"{run_dir}/model.pt: no trained model to score; run without --score-only first")
        trained = None  # not measured here: the run that trained the model reported it
    else:
        prepare(recipe, log=print, progress=False)
        started = time.monotonic()
        train(recipe, log=lambda m: print(m, flush=True))
        trained = (time.monotonic() - started) / 60
    import torch

    torch.set_num_threads(args.threads)
    from nmt_cli.train import checkpoint

    files = {"avg": run_dir / "model.pt", "last": checkpoint.step_checkpoints(run_dir)[-1], "ema": run_dir / "model.ema.pt"}
    models = [(name, args.minutes, files[name]) for name in args.weights.split(",")]
    models += [("avg", minutes, _model_at(run_dir, minutes, recipe.train.average_last)) for minutes in args.also_at]
    rows = []
    tgt = recipe.data.tgt_lang
    for weights, minutes, path in models:
        loaded = load_model(path)
        for test in ("val",) if args.valid else TESTS:
            sources = gzip.decompress((SHARED / "multi30k" / f"{test}.en.gz").read_bytes()).decode().splitlines()
            refs = gzip.decompress((SHARED / "multi30k" / f"{test}.{tgt}.gz").read_bytes()).decode().splitlines()
            outputs = [h[0][0] for h in Translator(loaded, recipe.decode).translate(sources)]
            bleu, chrf = score(outputs, [refs], ("bleu", "chrf"))
            rows.append(
                {
                    "recipe": args.recipe,
                    "weights": weights,
                    "budget min": minutes,
                    "test": test,
                    "BLEU": bleu.score,
                    "chrF": chrf.score,
                    "train minutes": trained if minutes == args.minutes else None,
                    "updates": _step_of(path, run_dir),
                    "valid ppl": _valid_ppl(run_dir, _step_of(path, run_dir)),
                }
            )
    print_table(f"{args.recipe}: {args.minutes:g} minutes, {args.threads} threads, beam {recipe.decode.beam}", rows)
    print(bleu.signature)
    command = "python benchmarks/bench_quality.py " + " ".join(sys.argv[1:])
    record("quality_valid" if args.valid else "quality", rows, command)


def _model_at(run_dir, minutes: float, average_last: int):
    """The averaged model a budget of ``minutes`` would have written, from the run's kept checkpoints."""
    from nmt_cli.train import checkpoint

    found = [(path, checkpoint.load(path)) for path in checkpoint.step_checkpoints(run_dir)]
    within = [path for path, payload in found if payload["train_state"]["elapsed"] <= 60 * minutes]
    if len(within) < average_last:
        sys.exit(
            f"{run_dir}: fewer than {average_last} checkpoints within {minutes:g} minutes; "
            "train with --set train.keep_last=0"
        )
    target = run_dir / f"model_at_{minutes:g}m.pt"
    checkpoint.average_checkpoints(within[-average_last:], target)
    return target


def _step_of(path, run_dir) -> int:
    """The last update that went into a model file (for an average: its newest checkpoint)."""
    from nmt_cli.train import checkpoint

    averaged = checkpoint.load(path).get("averaged_from") or []
    steps = [checkpoint.load(Path(p))["train_state"]["step"] for p in averaged if Path(p).is_file()]
    return max(steps) if steps else _last_update(run_dir)


def _valid_ppl(run_dir, step: int) -> float | None:
    """Validation perplexity logged at the last validation at or before ``step`` (unaveraged weights)."""
    import json

    ppl = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if "valid_ppl" in line]
    ppl = [r["valid_ppl"] for r in ppl if r["step"] <= step]
    return ppl[-1] if ppl else None


def _last_update(run_dir) -> int:
    import json

    steps = [json.loads(line).get("step", 0) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return max(steps) if steps else 0


if __name__ == "__main__":
    main()
