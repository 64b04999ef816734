"""Training throughput, nmt against fairseq 0.12, in one run: alternating rounds, same data and model.

    python benchmarks/bench_vs_fairseq.py --fairseq-venv FSQ --fairseq-bin BIN [--steps 150] [--rounds 2] \\
        [--arm fp32=train.precision=fp32 --arm default= ...]

The same measurement as ``../shared/peers/train_side_by_side.sh`` (m30k-small, 2 threads, 4,096-token
batches, validation and checkpoints off; target tokens/s of the log windows after update 25, median
over all rounds), with several settings of our side (``--arm NAME=KEY=VALUE,...``) run in turn
within every round, so that fp32 and our default precision are compared against fairseq's fp32
in one sitting. fairseq's figure is its ``wps``
(target tokens per second of training time), ours the same quantity from ``metrics.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from common import NMT_RACE_SETTINGS, ROOT, WORK, fairseq_train, parse_arm, print_table, record


def run_nmt(run_dir: Path, steps: int, overrides: list[str], env: dict) -> list[float]:
    sets = [
        f"train.dir={run_dir}",
        f"train.max_steps={steps}",
        *NMT_RACE_SETTINGS,
        "train.log_every=25",
        "train.threads=2",
        *overrides,
    ]
    cmd = [sys.executable, "-m", "nmt_cli", "train", "recipes/multi30k_ende.yaml", "--no-resume"]
    for item in sets:
        cmd += ["--set", item]
    subprocess.run(["rm", "-rf", str(run_dir)], check=True)
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if result.returncode != 0:
        sys.exit(f"nmt failed:\n{result.stderr[-3000:]}")
    rows = [json.loads(line) for line in open(run_dir / "metrics.jsonl", encoding="utf-8")]
    return [r["tgt_tokens_per_s"] for r in rows if "tgt_tokens_per_s" in r and r["step"] > 25]


def run_fairseq(venv: Path, data_bin: Path, steps: int, env: dict, log: Path) -> list[float]:
    cmd = [
        *fairseq_train(venv, data_bin, 0.1, steps),
        "--disable-validation",
        "--no-save",
        "--log-format",
        "simple",
        "--log-interval",
        "25",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    log.write_text(result.stdout + result.stderr, encoding="utf-8")
    if result.returncode != 0:
        sys.exit(f"fairseq failed:\n{result.stderr[-3000:]}")
    speeds = []
    for line in (result.stdout + result.stderr).splitlines():
        update, wps = re.search(r"num_updates=(\d+)", line), re.search(r"wps=([\d.]+)", line)
        if "train_inner" in line and update and wps and int(update.group(1)) > 25:
            speeds.append(float(wps.group(1)))
    return speeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fairseq-venv", type=Path, required=True)
    parser.add_argument("--fairseq-bin", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--arm", action="append", default=[], help="NAME=KEY=VALUE,... recipe overrides for our side")
    args = parser.parse_args()
    arms = [parse_arm(text) for text in args.arm] or [("nmt", [])]
    env = {**os.environ, "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    out = WORK / "vs_fairseq"
    out.mkdir(parents=True, exist_ok=True)
    ours: dict[str, list[float]] = {name: [] for name, _ in arms}
    theirs: list[float] = []
    for round_ in range(1, args.rounds + 1):
        theirs += run_fairseq(args.fairseq_venv, args.fairseq_bin, args.steps, env, out / f"fairseq_{round_}.log")
        for name, overrides in arms:
            ours[name] += run_nmt(out / f"{name}_{round_}", args.steps, overrides, env)
    fairseq_median = statistics.median(theirs)
    rows = [
        {
            "nmt arm": name,
            "settings": " ".join(overrides) or "recipe as is",
            "nmt tgt tok/s": statistics.median(ours[name]),
            "nmt windows": len(ours[name]),
            "fairseq tgt tok/s": fairseq_median,
            "fairseq windows": len(theirs),
            "ratio": statistics.median(ours[name]) / fairseq_median,
        }
        for name, overrides in arms
    ]
    print_table(f"training throughput, updates 26-{args.steps}, {args.rounds} alternating rounds", rows)
    record("vs_fairseq", rows, " ".join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
