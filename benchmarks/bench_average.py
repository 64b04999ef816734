"""Peak memory of `nmt average` over 2 and 8 training checkpoints of a d_model-512 model (issue 11).

    python benchmarks/bench_average.py [--counts 2,8] [--repeats 3] [--vocab 32000] [--old-tree DIR]

The checkpoints are full training checkpoints of the Transformer base shape (recipes/ende_base.yaml:
6+6 layers, d_model 512, d_ff 2048, shared 32k vocabulary), Adam state included, as `nmt train`
writes them; the weights differ per file. Peak RSS is that of the `nmt average` process (GNU time),
median of ``--repeats`` runs per count, counts alternating. ``--old-tree`` also runs the
`nmt average` of another checkout (e.g. a git worktree of the commit before streaming averaging).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from common import ROOT, WORK, median, print_table, record, timed_run

from nmt_cli.config import load_recipe, recipe_to_dict
from nmt_cli.model.transformer import build_model, count_parameters
from nmt_cli.train.checkpoint import save


def make_checkpoints(count: int, vocab: int) -> list[Path]:
    folder = WORK / f"average_{vocab}"
    folder.mkdir(parents=True, exist_ok=True)
    recipe = load_recipe(ROOT / "recipes" / "ende_base.yaml")
    torch.manual_seed(0)
    model = build_model(recipe.model, vocab, vocab, 0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    model(torch.randint(4, vocab, (2, 7)), torch.randint(4, vocab, (2, 5)), torch.randint(4, vocab, (2, 5)), 0.1)[
        0
    ].backward()
    optimizer.step()  # creates the two Adam moments per parameter
    paths = []
    for i in range(count):
        path = folder / f"step_{i + 1:08d}.pt"
        paths.append(path)
        if path.exists():
            continue
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 1e-3)
        payload = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": {},
            "scaler": {},
            "train_state": {"step": i + 1},
            "rng": {"torch": [torch.get_rng_state()]},
            "recipe": recipe_to_dict(recipe),
            "vocab": {"src": b"(no vocabulary)", "tgt": b"(no vocabulary)"},
        }
        save(path, payload, kind="training")
    print(
        f"{count} checkpoints of {count_parameters(model):,} parameters, {paths[0].stat().st_size / 2**20:,.0f} MiB each",
        flush=True,
    )
    return paths


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--counts", default="2,8")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--old-tree", type=Path, help="another checkout whose `nmt average` to measure too")
    args = parser.parse_args()
    counts = [int(x) for x in args.counts.split(",")]
    paths = make_checkpoints(max(counts), args.vocab)
    trees = {"nmt (this tree)": ROOT}
    if args.old_tree:
        trees[f"nmt at {args.old_tree.name}"] = args.old_tree.resolve()
    peaks: dict[tuple[str, int], list[float]] = {}
    walls: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.repeats):
        for name, tree in trees.items():
            for count in counts:
                out = WORK / "average_out.pt"
                seconds, peak, _ = timed_run(
                    [sys.executable, "-m", "nmt_cli", "average", *map(str, paths[-count:]), "-o", str(out)],
                    cwd=tree,  # -m takes the package from the working directory
                    env={**os.environ, "PYTHONPATH": str(tree)},
                )
                peaks.setdefault((name, count), []).append(peak)
                walls.setdefault((name, count), []).append(seconds)
    rows = [
        {
            "code": name,
            "checkpoints": count,
            "peak RSS MiB (median)": median(peaks[(name, count)]),
            "seconds (median)": median(walls[(name, count)]),
        }
        for name, count in peaks
    ]
    print_table(f"nmt average, Transformer base, vocabulary {args.vocab:,}", rows)
    for name in trees:
        ratio = median(peaks[(name, counts[-1])]) / median(peaks[(name, counts[0])])
        print(f"{name}: peak RSS {counts[-1]} / {counts[0]} checkpoints = {ratio:.2f}")
    record("average", rows, "python benchmarks/bench_average.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
