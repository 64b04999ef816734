"""Back-translation with and without, at the same budget, on Multi30k English->German, through the
command line as docs/backtranslation.md runs it.

    python benchmarks/bench_backtranslation.py [--real 10000] [--updates 600] [--threads 2]

Multi30k has no German monolingual text of its own, so the usual simulation is used: the first
``--real`` training pairs are the parallel data, and the German side of the remaining pairs is the
monolingual text (their English side is thrown away). The loop:

1. German->English on the real pairs;
2. the monolingual German sample-translated into English (``--sampling --top-k 10 --seed 1``);
3. English->German on the real pairs alone, and on the real pairs plus the ``<BT>``-tagged synthetic
   ones (``data.synthetic``, ``data.tag_synthetic``), both for the same number of updates with the
   same 4,096-token batches;
4. both translate Multi30k val and the three test sets; ``nmt score --compare`` gives BLEU and chrF
   with a paired bootstrap.

Budgets are counted in updates, not minutes, so the figures do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
from pathlib import Path

from common import ROOT, SHARED, WORK, print_table, record

MULTI30K = SHARED / "multi30k"
TESTS = ["val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"]


def nmt(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "nmt_cli", *args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"failed: nmt {' '.join(args)}\n{result.stderr[-3000:]}")
    return result.stdout + result.stderr


def lines_of(corpus: Path) -> list[str]:
    return gzip.decompress(corpus.read_bytes()).decode("utf-8").splitlines()


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def split_corpus(folder: Path, real: int) -> None:
    """real.en/real.de: the parallel pairs; mono.de: German whose English is never seen."""
    english, german = lines_of(MULTI30K / "train.en.gz"), lines_of(MULTI30K / "train.de.gz")
    write_lines(folder / "real.en", english[:real])
    write_lines(folder / "real.de", german[:real])
    write_lines(folder / "mono.de", german[real:])


def write_recipe(folder: Path, name: str, body: str) -> str:
    path = folder / f"{name}.yaml"
    short = "model:\n  dropout: 0.0\n"  # budgets of a few hundred updates: no dropout, as measured
    path.write_text(f"base: {ROOT / 'recipes' / 'multi30k_ende.yaml'}\nname: {name}\n{short}{body}", encoding="utf-8")
    return str(path)


def data_section(folder: Path, train: list[str], name: str, extra: str = "") -> str:
    shared = [str(MULTI30K / t) for t in TESTS[1:]]
    return (
        f"data:\n  root: {folder}\n  train: {json.dumps(train)}\n  valid: [{MULTI30K / 'val'}]\n"
        f"  test: {json.dumps(shared)}\n  output: {folder / ('data_' + name)}\n{extra}"
    )


def train_section(folder: Path, name: str, updates: int, threads: int) -> str:
    return f"train:\n  dir: {folder / name}\n  max_steps: {updates}\n  max_time: ''\n  threads: {threads}\n"


def prepare_and_train(recipe: str) -> None:
    print(nmt("prepare", recipe)[-300:], flush=True)
    print(nmt("train", recipe)[-500:], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--real", type=int, default=10000, help="pairs kept as parallel data")
    parser.add_argument("--updates", type=int, default=600, help="updates for every model")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    folder = WORK / f"backtranslation_{args.real}_{args.updates}u"
    folder.mkdir(parents=True, exist_ok=True)
    split_corpus(folder, args.real)
    budget = train_section
    reverse = write_recipe(
        folder,
        "deen",
        "data:\n  src_lang: de\n  tgt_lang: en\n"
        + data_section(folder, ["real"], "deen")[len("data:\n") :]
        + budget(folder, "deen", args.updates, args.threads),
    )
    prepare_and_train(reverse)
    nmt(
        "translate",
        "-m",
        str(folder / "deen"),
        "-i",
        str(folder / "mono.de"),
        "-o",
        str(folder / "mono.en"),
        "--sampling",
        "--top-k",
        "10",
        "--seed",
        "1",
        "--threads",
        str(args.threads),
        "--no-progress",
    )
    plain = write_recipe(
        folder, "plain", data_section(folder, ["real"], "plain") + budget(folder, "plain", args.updates, args.threads)
    )
    tagged = write_recipe(
        folder,
        "bt",
        data_section(folder, ["real", "mono"], "bt", "  synthetic: [mono]\n  tag_synthetic: true\n")
        + budget(folder, "bt", args.updates, args.threads),
    )
    prepare_and_train(plain)
    prepare_and_train(tagged)
    rows = []
    for test in TESTS:
        source = write_lines(folder / f"{test}.en", lines_of(MULTI30K / f"{test}.en.gz"))
        reference = write_lines(folder / f"{test}.de", lines_of(MULTI30K / f"{test}.de.gz"))
        outputs = []
        for model in ("plain", "bt"):
            output = folder / f"{test}.{model}.out"
            nmt(
                "translate",
                "-m",
                str(folder / model),
                "-i",
                str(source),
                "-o",
                str(output),
                "--threads",
                str(args.threads),
                "--no-progress",
            )
            outputs.append(str(output))
        compared = json.loads(nmt("score", "--compare", *outputs, str(reference), "--metrics", "bleu,chrf", "--json"))
        print(test, json.dumps(compared), flush=True)
        rows.append({"test": test, "comparison": compared})
    print_table(
        f"back-translation: {args.real} real pairs, {args.updates} updates each",
        [{"test": r["test"], "result": json.dumps(r["comparison"])[:200]} for r in rows],
    )
    record("backtranslation", rows, "python benchmarks/bench_backtranslation.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
