"""Decoding speed: sentences/s and target tokens/s, beam 4 and greedy, batch sizes 1, 16, 64.

    python benchmarks/bench_decode.py MODEL_DIR [--ct2 CT2_DIR] [--repeats 3] [--threads 2] [--sets m30k,wmt14]
                                      [--max-lines N]

Each run is ``nmt translate`` in a fresh process (so peak RSS is per run), reading Multi30k
test 2016 (1,000 sentences) and newstest2014 English (3,003 sentences). The reported time is
the translation itself (model load excluded), as printed by ``nmt translate --progress``.

With ``--ct2`` (a folder written by ``nmt export``), every setting also runs through
CTranslate2, alternating the two engines run by run so that both see the same machine load;
each figure is the median of ``--repeats`` runs and the table adds the speed ratio.
``--ct2-threads 2,1`` also runs CTranslate2 at other thread counts, in the same rotation (on some
machines it is faster with fewer threads than ours: the table then adds ``nmt / best ct2``, against
CTranslate2 at whichever of its thread counts was fastest in that setting).
``--batch-sizes`` takes 0 for each engine's default batching (ours: ``decode.batch_tokens``).
``--workers 0,1`` runs our translation with each ``--workers`` value (the first is the ``nmt`` row the
ratios use) and ``--ct2-workers 1,2`` CTranslate2 with each (its ``inter_threads``: batches translated at
once), all in the same rotation; ``nmt / best ct2`` then compares with CTranslate2's fastest configuration.
"""

from __future__ import annotations

import argparse
import re
import sys

from common import SHARED, WORK, median, print_table, record, timed_run

SETS = {"m30k": SHARED / "multi30k" / "test_2016_flickr.en.gz", "wmt14": SHARED / "wmt14" / "newstest2014.en.gz"}
REPORT = re.compile(r"translated ([\d,]+) lines in ([\d.]+) s \(([\d.]+) sentences/s, (\d+) target")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--ct2", help="also run this CTranslate2 folder (from `nmt export`), interleaved")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ct2-threads", default="", help="CTranslate2's thread counts (default: --threads)")
    parser.add_argument(
        "--workers", default="", help="our --workers values, each a configuration (default: none given, our default)"
    )
    parser.add_argument(
        "--ct2-workers", default="1", help="CTranslate2's --workers (its inter_threads) values, each a configuration"
    )
    parser.add_argument("--sets", default="m30k,wmt14")
    parser.add_argument("--batch-sizes", default="1,16,64")
    parser.add_argument("--beams", default="4,1")
    parser.add_argument("--stop", default=None, help="our beam search's stop rule (default: the recipe's)")
    parser.add_argument("--max-lines", type=int, default=0, help="only the first N lines of each test set (0: all)")
    parser.add_argument("--dtype", default="fp32", help="fp32, bf16 or fp16 for both engines (CTranslate2: compute type)")
    parser.add_argument(
        "--ct2-dtype", default="", help="CTranslate2's own --dtype (e.g. int8, its fastest CPU type; default: --dtype)"
    )
    args = parser.parse_args()
    import gzip

    WORK.mkdir(exist_ok=True)
    # name -> (engine, model, threads, workers or None for the engine's default)
    engines: dict[str, tuple[str, str, int, int | None]] = {}
    for workers in [int(w) for w in args.workers.split(",")] if args.workers else [None]:
        engines["nmt" if workers is None or len(engines) == 0 else f"nmt {workers} workers"] = (
            "nmt",
            args.model,
            args.threads,
            workers,
        )
    for threads in map(int, (args.ct2_threads or str(args.threads)).split(",")) if args.ct2 else []:
        for workers in map(int, args.ct2_workers.split(",")):
            name = "ctranslate2" if threads == args.threads else f"ctranslate2 {threads} threads"
            engines[name if workers == 1 else f"{name} {workers} workers"] = ("ctranslate2", args.ct2, threads, workers)
    rows = []
    for name in args.sets.split(","):
        source = WORK / f"decode_{name}.en"
        lines = gzip.decompress(SETS[name].read_bytes()).splitlines(keepends=True)
        source.write_bytes(b"".join(lines[: args.max_lines or None]))
        for beam in map(int, args.beams.split(",")):
            for batch in map(int, args.batch_sizes.split(",")):
                runs: dict[str, list[tuple[float, float, float, str]]] = {engine: [] for engine in engines}
                for _ in range(args.repeats):
                    for engine, (kind, model, threads, workers) in engines.items():
                        runs[engine].append(_run(kind, model, threads, workers, source, name, beam, batch, args))
                speeds = {}
                for engine, results in runs.items():
                    speeds[engine] = median([r[1] for r in results])
                    rows.append(
                        {
                            "engine": engine,
                            "test set": name,
                            "beam": beam,
                            "batch size": batch or "default",
                            "sentences": results[0][3],
                            "seconds": median([r[0] for r in results]),
                            "sentences/s": speeds[engine],
                            "target tokens/s": median([r[2] for r in results]),
                            "peak RSS MiB": max(r[4] for r in results),
                            "runs": len(results),
                            "threads": engines[engine][2],
                            "workers": "default" if engines[engine][3] is None else engines[engine][3],
                        }
                    )
                    print(rows[-1], flush=True)
                setting = rows[-len(engines) :]
                if "ctranslate2" in speeds:
                    for row in setting:
                        row["nmt / ct2"] = round(speeds["nmt"] / speeds["ctranslate2"], 3)
                peers = [speed for engine, speed in speeds.items() if engines[engine][0] == "ctranslate2"]
                if len(peers) > 1:
                    for row in setting:
                        row["nmt / best ct2"] = round(speeds["nmt"] / max(peers), 3)
    print_table(f"nmt translate, {args.threads} threads, model {args.model}", rows)
    record("decode", rows, "python benchmarks/bench_decode.py " + " ".join(sys.argv[1:]))


def _run(
    engine: str, model: str, threads: int, workers: int | None, source, name: str, beam: int, batch: int, args
) -> tuple:
    out = WORK / f"decode_{engine}_{threads}t_{workers}w_{name}_b{beam}_bs{batch}.out"
    cmd = [
        sys.executable,
        "-m",
        "nmt_cli",
        "translate",
        "-m",
        model,
        "-i",
        str(source),
        "-o",
        str(out),
        "--beam",
        str(beam),
        "--threads",
        str(threads),
        "--progress",
        "--engine",
        engine,
        "--dtype",
        (args.ct2_dtype or args.dtype) if engine == "ctranslate2" else args.dtype,
    ]
    if batch:
        cmd += ["--batch-size", str(batch), "--batch-tokens", "100000"]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    if args.stop and engine == "nmt":
        cmd += ["--stop", args.stop]
    _, rss, result = timed_run(cmd)
    lines, seconds, sents, toks = REPORT.search(result.stderr).groups()
    return float(seconds), float(sents), float(toks), lines, rss


if __name__ == "__main__":
    main()
