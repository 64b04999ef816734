"""Quality at a budget: train a recipe for N minutes on this machine, average the last
checkpoints, decode with beam 4, and report BLEU and chrF on the Multi30k test sets.

    python benchmarks/bench_quality.py multi30k_ende [--minutes 30] [--threads 2] [--score-only]

``--score-only`` re-scores the model a previous run left in ``benchmarks/work`` (for instance
after a change to the decoder) instead of training again.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time

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
    args = parser.parse_args()
    from nmt_cli.config import load_recipe
    from nmt_cli.data.prepare import prepare
    from nmt_cli.decode.translator import Translator, load_model
    from nmt_cli.score.metrics import score
    from nmt_cli.train.loop import train

    run_dir = WORK / f"quality_{args.recipe}_{args.minutes:g}m{args.tag}"
    recipe = load_recipe(ROOT / "recipes" / f"{args.recipe}.yaml", [
        f"data.root={SHARED / 'multi30k'}", f"data.output={WORK / ('data_' + args.recipe)}", f"train.dir={run_dir}",
        f"train.max_time={args.minutes:g}m", f"train.threads={args.threads}", *args.set])
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
    loaded = load_model(run_dir)
    rows = []
    tgt = recipe.data.tgt_lang
    for test in TESTS:
        sources = gzip.decompress((SHARED / "multi30k" / f"{test}.en.gz").read_bytes()).decode().splitlines()
        refs = gzip.decompress((SHARED / "multi30k" / f"{test}.{tgt}.gz").read_bytes()).decode().splitlines()
        outputs = [h[0][0] for h in Translator(loaded, recipe.decode).translate(sources)]
        bleu, chrf = score(outputs, [refs], ("bleu", "chrf"))
        rows.append({"recipe": args.recipe, "test": test, "BLEU": bleu.score, "chrF": chrf.score,
                     "train minutes": trained, "updates": _last_update(run_dir), "valid ppl": _last_valid_ppl(run_dir)})
    print_table(f"{args.recipe}: {args.minutes:g} minutes, {args.threads} threads, last 5 averaged, beam 4", rows)
    print(bleu.signature)
    record("quality", rows, "python benchmarks/bench_quality.py " + " ".join(sys.argv[1:]))


def _last_valid_ppl(run_dir) -> float | None:
    """Validation perplexity of the final (not averaged) weights, as training logged it."""
    import json

    ppl = [json.loads(line)["valid_ppl"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
           if "valid_ppl" in line]
    return ppl[-1] if ppl else None


def _last_update(run_dir) -> int:
    import json

    steps = [json.loads(line).get("step", 0) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return max(steps) if steps else 0


if __name__ == "__main__":
    main()
