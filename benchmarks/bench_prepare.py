"""Prepare time and peak RSS on Multi30k EN-DE at 1x and 10x (290k pairs), with 1 and 2 workers.

    python benchmarks/bench_prepare.py [--repeats 3]

The 10x corpus is the training set written ten times into one gzip file; the vocabulary is
learned on the same sample size (input_sentence_size) so that only the corpus size changes.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys

from common import SHARED, WORK, median, print_table, record, timed_run

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
    args = parser.parse_args()
    rows = []
    for times in (1, 10):
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
            rows.append({"corpus": f"{times}x ({pairs:,} pairs)", "workers": workers,
                         "seconds (median)": median(walls), "pairs/s": pairs / median(walls),
                         "peak RSS MiB (median)": median(rss)})
    print_table("nmt prepare, Multi30k EN-DE", rows)
    ratio = rows[2]["peak RSS MiB (median)"] / rows[0]["peak RSS MiB (median)"]
    print(f"peak RSS 10x / 1x (1 worker): {ratio:.2f}")
    record("prepare", rows, f"python benchmarks/bench_prepare.py --repeats {args.repeats}")


if __name__ == "__main__":
    main()
