"""Decoding beyond the 1-best, timed through the command line: two runs alone and as an ensemble,
beam against greedy and sampling, on Multi30k test 2016 (BLEU against the references).

    python benchmarks/bench_decode_modes.py RUN_A RUN_B [--threads 2] [--repeats 2]

RUN_A and RUN_B must share one vocabulary (two runs of one recipe on one prepared dataset). Each
configuration is run ``--repeats`` times, alternating; the table gives the median wall time of
``nmt translate`` (model loading included) and the sentences per second it implies.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import subprocess
import sys
import time

from common import SHARED, WORK, print_table, record


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_a")
    parser.add_argument("run_b")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from nmt_cli.score.metrics import score

    test = SHARED / "multi30k" / "test_2016_flickr"
    source = WORK / "modes_test2016.en"
    source.write_bytes(gzip.decompress(test.with_suffix(".en.gz").read_bytes()))
    references = gzip.decompress(test.with_suffix(".de.gz").read_bytes()).decode().splitlines()
    runs = {
        "A, beam 4": ["-m", args.run_a],
        "B, beam 4": ["-m", args.run_b],
        "A+B ensemble, beam 4": ["-m", args.run_a, "-m", args.run_b],
        "A, greedy": ["-m", args.run_a, "--beam", "1"],
        "A, sampling top-k 10": ["-m", args.run_a, "--sampling", "--top-k", "10", "--seed", "1"],
        "A, sampling (full distribution)": ["-m", args.run_a, "--sampling", "--seed", "1"],
    }
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    outputs: dict[str, list[str]] = {}
    for _ in range(args.repeats):
        for name, options in runs.items():
            out = WORK / f"modes_{len(outputs)}.out"
            command = [
                sys.executable,
                "-m",
                "nmt_cli",
                "translate",
                *options,
                "-i",
                str(source),
                "-o",
                str(out),
                "--threads",
                str(args.threads),
                "--no-progress",
            ]
            start = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            seconds[name].append(time.perf_counter() - start)
            outputs[name] = out.read_text(encoding="utf-8").splitlines()
    rows = []
    for name in runs:
        bleu, chrf = score(outputs[name], [references], ("bleu", "chrf"))
        wall = statistics.median(seconds[name])
        rows.append(
            {
                "decoding": name,
                "BLEU": bleu.score,
                "chrF": chrf.score,
                "seconds (median)": wall,
                "sent/s": len(references) / wall,
                "repeats": args.repeats,
            }
        )
    print_table(f"Multi30k test 2016, {args.threads} threads", rows)
    record("decode_modes", rows, "python benchmarks/bench_decode_modes.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
