"""Prepare time and peak RSS on Multi30k EN-DE at 1x and 10x (290k pairs), with 1 and 2 workers.

    python benchmarks/studies/bench_prepare.py [--repeats 3] [--scales 1,10]

``--scales`` lists the corpus sizes (multiples of the training set); the first is the baseline of
the peak-RSS ratios printed at the end, one per scale and worker count.

The 10x corpus is the training set written ten times into one gzip file; the vocabulary is
learned on the same sample size (input_sentence_size) so that only the corpus size changes.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the helpers every script shares
from common import SHARED, WORK, median, print_table, record, timed_run  # noqa: E402

RECIPE = """
data:
  src_lang: en
  tgt_lang: de
  root: {root}
  train: [train]
  valid: [val]
  output: {out}
  workers: {workers}
vocab:
  size: 8000
  input_sentence_size: 100000
"""


def make_corpus(times: int) -> str:
    folder = WORK / f"prepare_{times}x"
    folder.mkdir(parents=True, exist_ok=True)
    for lang in ("en", "de"):
        raw = gzip.decompress((SHARED / "multi30k" / f"train.{lang}.gz").read_bytes())
        with gzip.open(folder / f"train.{lang}.gz", "wb", compresslevel=1) as handle:
            for _ in range(times):
                handle.write(raw)
        shutil.copy(SHARED / "multi30k" / f"val.{lang}.gz", folder / f"val.{lang}.gz")
    return str(folder)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scales", default="1,10")
    args = parser.parse_args()
    scales = [int(x) for x in args.scales.split(",")]
    rows = []
    for times in scales:
        root = make_corpus(times)
        for workers in (1, 2):
            recipe = WORK / f"prepare_{times}x_{workers}w.yaml"
            out = WORK / f"prepare_{times}x_{workers}w_out"
            recipe.write_text(RECIPE.format(root=root, out=out, workers=workers))
            walls, rss = [], []
            for _ in range(args.repeats):
                seconds, peak, _ = timed_run([sys.executable, "-m", "nmt_cli", "prepare", str(recipe), "--force"])
                walls.append(seconds)
                rss.append(peak)
            pairs = 29_000 * times
            rows.append(
                {
                    "corpus": f"{times}x ({pairs:,} pairs)",
                    "scale": times,
                    "workers": workers,
                    "seconds (median)": median(walls),
                    "pairs/s": pairs / median(walls),
                    "peak RSS MiB (median)": median(rss),
                }
            )
    print_table("nmt prepare, Multi30k EN-DE", rows)
    base = {row["workers"]: row["peak RSS MiB (median)"] for row in rows if row["scale"] == scales[0]}
    for row in rows[2:]:
        ratio = row["peak RSS MiB (median)"] / base[row["workers"]]
        print(f"peak RSS {row['scale']}x / {scales[0]}x ({row['workers']} worker(s)): {ratio:.2f}")
    record("prepare", rows, "python benchmarks/studies/bench_prepare.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
