"""Learning per target token, nmt against fairseq: training and validation NLL after the same updates.

    python benchmarks/studies/bench_per_token.py --steps 200 --fairseq-venv FSQ --fairseq-bin BIN \\
        --arm nmt= --arm fsinit=model.init=fairseq --set model.dropout=0 [--baseline OLD_CHECKOUT] [--parallel 2]

Every arm trains m30k-small (`recipes/multi30k_ende.yaml`) for ``--steps`` updates with
validation and checkpoints off until the end; an arm is ``NAME=KEY=VALUE,KEY=VALUE`` of recipe
overrides on top of the common ``--set`` ones. ``--fairseq-venv`` adds the same Transformer in
fairseq 0.12 (the command of ``../shared/peers/train_side_by_side.sh`` with the dropout of the
common overrides and a validation at the last update). Loss curves do not depend on speed, so
arms may run side by side (``--parallel N``, each with 2/N threads). NLL is in nats per target
token (fairseq logs base 2; converted). Prints a table: training NLL per window of ``--log-every``
updates and the final validation NLL and perplexity of each arm.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the helpers every script shares
from common import NMT_RACE_SETTINGS, ROOT, WORK, fairseq_train, parse_arm, print_table, record  # noqa: E402


def run_nmt(name: str, overrides: list[str], steps: int, log_every: int, threads: int, out: Path, code: Path = ROOT) -> dict:
    run_dir = out / name
    sets = [
        f"data.root={ROOT.parent / 'shared' / 'data' / 'multi30k'}",
        f"data.output={ROOT / 'data-bin' / 'multi30k_ende'}",
        f"train.dir={run_dir}",
        f"train.max_steps={steps}",
        *NMT_RACE_SETTINGS,
        f"train.log_every={log_every}",
        f"train.threads={threads}",
        *overrides,
    ]
    cmd = [sys.executable, "-m", "nmt_cli", "train", str(code / "recipes" / "multi30k_ende.yaml"), "--no-resume"]
    for item in sets:
        cmd += ["--set", item]
    if run_dir.exists():
        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
    env = {**_env(threads), "PYTHONPATH": str(code)}
    log = subprocess.run(cmd, capture_output=True, text=True, cwd=code, env=env)  # `-m` imports from cwd
    if log.returncode != 0:
        sys.exit(f"{name} failed:\n{log.stderr[-3000:]}")
    records = [json.loads(line) for line in open(run_dir / "metrics.jsonl", encoding="utf-8")]
    train = {r["step"]: r["nll"] for r in records if "nll" in r and "valid_nll" not in r}
    valid = [r for r in records if "valid_nll" in r][-1]["valid_nll"]
    return {"arm": name, "train_nll": train, "valid_nll": valid, "command": " ".join(cmd)}


def run_fairseq(venv: Path, data_bin: Path, dropout: float, steps: int, log_every: int, threads: int, out: Path) -> dict:
    cmd = [
        *fairseq_train(venv, data_bin, dropout, steps),
        "--validate-interval",
        "1000",
        "--no-save",
        "--log-format",
        "simple",
        "--log-interval",
        str(log_every),
    ]
    log = subprocess.run(cmd, capture_output=True, text=True, env=_env(threads))
    (out / "fairseq.log").write_text(log.stdout + log.stderr, encoding="utf-8")
    if log.returncode != 0:
        sys.exit(f"fairseq failed:\n{log.stderr[-3000:]}")
    train, valid = {}, None
    for line in (log.stdout + log.stderr).splitlines():
        update, nll = re.search(r"num_updates=(\d+)", line), re.search(r"nll_loss=([\d.]+)", line)
        if "train_inner" in line and update and nll:
            train[int(update.group(1))] = float(nll.group(1)) * math.log(2)
        found = re.search(r"valid on 'valid' subset.*?nll_loss ([\d.]+)", line)
        if found:
            valid = float(found.group(1)) * math.log(2)
    if valid is None:
        sys.exit("fairseq: no validation line in its log")
    return {"arm": "fairseq", "train_nll": train, "valid_nll": valid, "command": " ".join(cmd)}


def _env(threads: int) -> dict:
    return {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--arm", action="append", default=[], help="NAME=KEY=VALUE,KEY=VALUE (repeatable)")
    parser.add_argument("--set", action="append", default=[], help="override for every nmt arm")
    parser.add_argument("--fairseq-venv", type=Path)
    parser.add_argument("--fairseq-bin", type=Path)
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout of nmt (e.g. a git worktree of an earlier "
        "commit): adds the arm 'baseline', that code with the common overrides",
    )
    args = parser.parse_args()
    out = WORK / "per_token"
    out.mkdir(parents=True, exist_ok=True)
    threads = max(1, 2 // args.parallel)
    dropout = next((float(s.split("=", 1)[1]) for s in args.set if s.startswith("model.dropout=")), 0.1)
    jobs = [
        lambda n=n, o=o: run_nmt(n, args.set + o, args.steps, args.log_every, threads, out)
        for n, o in map(parse_arm, args.arm or ["nmt="])
    ]
    if args.baseline:
        jobs.insert(0, lambda: run_nmt("baseline", args.set, args.steps, args.log_every, threads, out, args.baseline))
    if args.fairseq_venv:
        jobs.insert(
            0, lambda: run_fairseq(args.fairseq_venv, args.fairseq_bin, dropout, args.steps, args.log_every, threads, out)
        )
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(lambda job: job(), jobs))
    windows = sorted(set().union(*(r["train_nll"] for r in results)))
    rows = []
    for r in results:
        row = {
            "arm": r["arm"],
            **{f"train@{w}": round(r["train_nll"].get(w, float("nan")), 3) for w in windows},
            "valid_nll": round(r["valid_nll"], 3),
            "valid_ppl": round(math.exp(r["valid_nll"]), 2),
        }
        rows.append(row)
    print_table(f"NLL per target token (nats), {args.steps} updates", rows)
    record("per_token", [{**row, "command": r["command"]} for row, r in zip(rows, results)], " ".join(sys.argv))


if __name__ == "__main__":
    main()
