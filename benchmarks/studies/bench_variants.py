"""The paper's Table 3 on a CPU: each variant of ``recipes/multi30k_ende.yaml`` trained for the same
wall-clock budget, one at a time, then scored as ``bench_quality.py`` scores (last 5 checkpoints
averaged, beam 4).

    python benchmarks/studies/bench_variants.py [--variants base,prenorm,...] [--minutes 10] [--threads 2]

Per variant: updates done in the budget, validation perplexity of the averaged model (Multi30k val),
BLEU on Multi30k test 2016, and the heads' attention-map similarity at the last validation. Run it
on an otherwise idle machine: the budget is wall-clock time. Rows may be run on different days;
each is recorded in results.jsonl with its date and command.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the helpers every script shares
from common import ROOT, WORK, print_table, record  # noqa: E402

# name -> recipe overrides; the base is recipes/multi30k_ende.yaml (post-norm, sinusoidal, 4 heads,
# dropout 0.1, label smoothing 0.1, inverse-sqrt with 400 warm-up updates)
VARIANTS = {
    "base": [],
    "prenorm": ["model.norm=pre"],
    "rezero": ["model.norm=rezero"],
    "rezero_nowarmup": ["model.norm=rezero", "train.lr_schedule=inverse_sqrt_nowarmup"],  # its paper trains without
    "tfixup_nowarmup": ["model.init=tfixup", "train.lr_schedule=inverse_sqrt_nowarmup"],
    "learned_positions": ["model.positions=learned"],  # Table 3 (E)
    "shaw_relative": ["model.positions=relative"],
    "xl_relative": ["model.positions=xl"],
    "repulsive_heads": ["model.repulsive=0.01"],
    "heads_1": ["model.n_heads=1"],  # Table 3 (A), d_model fixed
    "heads_8": ["model.n_heads=8"],
    "dropout_0": ["model.dropout=0"],  # Table 3 (D)
    "label_smoothing_0": ["train.label_smoothing=0"],  # Table 3 (D)
}


def averaged_valid_ppl(run_dir) -> float:
    """Perplexity of the run's model.pt (the averaged checkpoints) on its validation split."""
    import torch

    from nmt_cli.config import load_recipe
    from nmt_cli.decode.loading import load_model
    from nmt_cli.train.loop import load_dataset
    from nmt_cli.train.validate import validation_loss

    recipe = load_recipe(run_dir / "recipe.yaml")
    model = load_model(run_dir / "model.pt").model
    _, nll = validation_loss(model, load_dataset(recipe).valid, recipe, torch.device("cpu"))
    return math.exp(nll)


def last_head_similarity(run_dir) -> float | None:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    values = [json.loads(line).get("valid_head_similarity") for line in lines if "valid_head_similarity" in line]
    return values[-1] if values else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"some of {', '.join(VARIANTS)}")
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    rows = []
    for name in args.variants.split(","):
        if name not in VARIANTS:
            sys.exit(f"unknown variant {name}; choose from {', '.join(VARIANTS)}")
        tag = f"_variant_{name}"
        command = [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_quality.py"),
            "multi30k_ende",
            "--minutes",
            f"{args.minutes:g}",
            "--threads",
            str(args.threads),
            "--tag",
            tag,
        ]
        for override in VARIANTS[name]:
            command += ["--set", override]
        subprocess.run(command, check=True, cwd=ROOT / "benchmarks")
        quality = [json.loads(line) for line in (ROOT / "benchmarks" / "results.jsonl").read_text().splitlines()]
        last = [r for r in quality if r["benchmark"] == "quality" and tag in r["command"]][-1]
        test2016 = next(row for row in last["rows"] if row["test"] == "test_2016_flickr")
        run_dir = WORK / f"quality_multi30k_ende_{args.minutes:g}m{tag}"
        row = {
            "variant": name,
            "overrides": " ".join(VARIANTS[name]) or "-",
            "updates": test2016["updates"],
            "valid ppl (avg)": averaged_valid_ppl(run_dir),
            "BLEU test 2016": test2016["BLEU"],
            "heads alike": last_head_similarity(run_dir),
            "date": last["machine"]["date"],
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    print_table(f"Table 3 on a CPU: {args.minutes:g} minutes each, {args.threads} threads", rows)
    record("variants", rows, "python benchmarks/studies/bench_variants.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
