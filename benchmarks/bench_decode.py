"""Decoding speed: sentences/s and target tokens/s, beam 4 and greedy, batch sizes 1, 16, 64.

    python benchmarks/bench_decode.py MODEL_DIR [--threads 2] [--sets m30k,wmt14]

Each run is ``nmt translate`` in a fresh process (so peak RSS is per run), reading Multi30k
test 2016 (1,000 sentences) and newstest2014 English (3,003 sentences). The reported time is
the translation itself (model load excluded), as printed by ``nmt translate --progress``.
"""

from __future__ import annotations

import argparse
import re
import sys

from common import SHARED, WORK, print_table, record, timed_run

SETS = {"m30k": SHARED / "multi30k" / "test_2016_flickr.en.gz", "wmt14": SHARED / "wmt14" / "newstest2014.en.gz"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sets", default="m30k,wmt14")
    parser.add_argument("--batch-sizes", default="1,16,64")
    parser.add_argument("--beams", default="4,1")
    parser.add_argument("--engine", default="nmt", choices=["nmt", "ctranslate2"],
                        help="ctranslate2: MODEL is a folder written by `nmt export`")
    args = parser.parse_args()
    import gzip

    WORK.mkdir(exist_ok=True)
    rows = []
    for name in args.sets.split(","):
        source = WORK / f"decode_{name}.en"
        source.write_bytes(gzip.decompress(SETS[name].read_bytes()))
        for beam in map(int, args.beams.split(",")):
            for batch in map(int, args.batch_sizes.split(",")):
                out = WORK / f"decode_{name}_b{beam}_bs{batch}.out"
                cmd = [sys.executable, "-m", "nmt_cli", "translate", "-m", args.model, "-i", str(source),
                       "-o", str(out), "--beam", str(beam), "--batch-size", str(batch), "--batch-tokens", "100000",
                       "--threads", str(args.threads), "--progress", "--engine", args.engine]
                _, rss, result = timed_run(cmd)
                match = re.search(r"translated ([\d,]+) lines in ([\d.]+) s \(([\d.]+) sentences/s, (\d+) target",
                                  result.stderr)
                lines, seconds, sents, toks = match.groups()
                rows.append({"engine": args.engine, "test set": name, "beam": beam, "batch size": batch, "sentences": lines,
                             "seconds": float(seconds), "sentences/s": float(sents), "target tokens/s": float(toks),
                             "peak RSS MiB": rss})
                print(rows[-1], flush=True)
    print_table(f"nmt translate, {args.threads} threads, model {args.model}", rows)
    record("decode", rows, "python benchmarks/bench_decode.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
