"""Fine-tuning, before and after, on both domains: a Multi30k EN->DE model (image captions) fine-tuned
on the bundled software messages with ``recipes/finetune_example.yaml``, run through the command line
as a user runs it.

    python benchmarks/bench_finetune.py [--parent RUN] [--minutes 10] [--threads 2] [--extend 0]

The parent defaults to the 30-minute Multi30k model ``bench_quality.py multi30k_ende`` leaves in
``benchmarks/work``. Both models translate Multi30k test 2016 (the old domain) and the software
messages' test split (the new one) with the recipe's beam search; ``nmt score --compare`` tells
whether each difference is significant (paired bootstrap, 1,000 samples).
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys

from common import ROOT, SHARED, WORK, print_table, record

SOFTWARE = ROOT / "nmt_cli" / "sample" / "en-de"


def nmt(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "nmt_cli", *args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"failed: nmt {' '.join(args)}\n{result.stderr[-3000:]}")
    return result.stdout + result.stderr


def plain_copy(source, target) -> str:
    target.write_bytes(gzip.decompress(source.read_bytes()))
    return str(target)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parent", default=str(WORK / "quality_multi30k_ende_30m"))
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--extend", type=int, default=0, help="vocab.extend: new pieces from the software text")
    args = parser.parse_args()
    tag = f"finetune_{args.minutes:g}m" + (f"_extend{args.extend}" if args.extend else "")
    child = WORK / tag
    overrides = [
        "--set",
        f"vocab.from={args.parent}",
        "--set",
        f"train.init_from={args.parent}",
        "--set",
        f"data.output={WORK / ('data_' + tag)}",
        "--set",
        f"train.dir={child}",
        "--set",
        f"train.max_time={args.minutes:g}m",
        "--set",
        f"train.threads={args.threads}",
        "--set",
        f"vocab.extend={args.extend}",
    ]
    recipe = str(ROOT / "recipes" / "finetune_example.yaml")
    print(nmt("prepare", recipe, *overrides)[-400:], flush=True)
    print(nmt("train", recipe, *overrides)[-600:], flush=True)
    tests = {
        "multi30k test 2016 (old)": (
            SHARED / "multi30k" / "test_2016_flickr.en.gz",
            SHARED / "multi30k" / "test_2016_flickr.de.gz",
        ),
        "software test (new)": (SOFTWARE / "test.en.gz", SOFTWARE / "test.de.gz"),
    }
    rows = []
    for name, (src_gz, ref_gz) in tests.items():
        short = name.split()[0]
        src, ref = plain_copy(src_gz, WORK / f"{tag}_{short}.en"), plain_copy(ref_gz, WORK / f"{tag}_{short}.de")
        outputs = {}
        for label, model in (("before", args.parent), ("after", str(child))):
            outputs[label] = str(WORK / f"{tag}_{short}_{label}.out")
            nmt("translate", "-m", model, "-i", src, "-o", outputs[label], "--threads", str(args.threads), "--no-progress")
        compared = json.loads(
            nmt("score", "--compare", outputs["before"], outputs["after"], ref, "--metrics", "bleu,chrf", "--json")
        )
        print(json.dumps(compared, indent=1), flush=True)
        rows.append({"test": name, "comparison": compared})
    print_table(
        f"fine-tuning {args.parent} for {args.minutes:g} minutes on the software messages",
        [{"test": r["test"], "result": json.dumps(r["comparison"])[:200]} for r in rows],
    )
    record("finetune", rows, "python benchmarks/bench_finetune.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
