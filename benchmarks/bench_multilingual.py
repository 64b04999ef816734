"""One multilingual model against one bilingual model per direction, at the same total budget, on Multi30k.

    python benchmarks/bench_multilingual.py [--minutes 10] [--threads 2] [--split test|valid]
                                            [--multi RUN] [--bilingual en-de=RUN,...] [--set KEY=VALUE ...]

Trains ``recipes/multi30k_multi.yaml`` (EN<->DE, EN<->FR) for 4 x ``--minutes`` and one bilingual model per
direction (the Multi30k recipes: the same 3+3-layer model) for ``--minutes`` each, unless ``--multi`` /
``--bilingual`` name runs already trained (for instance two runs trained side by side, one core each). Each model
translates each direction's test sets (beam and length penalty of its recipe); BLEU and chrF by sacreBLEU. The
directions never trained, DE->FR and FR->DE (the German and French sides of Multi30k are translations of the same
English captions, so each is the other's reference), are translated zero-shot and through English.

``--split valid`` scores the validation sets instead (for choices such as data.language_tag: decided on
validation, never on the test sets).
"""

from __future__ import annotations

import argparse
import gzip
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, SHARED, WORK, print_table, record

DIRECTIONS = [("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "en")]
UNTRAINED = [("de", "fr"), ("fr", "de")]
SPLITS = {"test": ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"), "valid": ("val",)}
BILINGUAL_RECIPES = {
    ("en", "de"): ("multi30k_ende.yaml", ["model.dropout=0"]),  # the races' budgets are short: as multi30k_multi
    ("de", "en"): ("multi30k_deen.yaml", ["model.dropout=0"]),
    ("en", "fr"): ("multi30k_enfr.yaml", ["model.dropout=0"]),
    ("fr", "en"): ("multi30k_enfr.yaml", ["data.src_lang=fr", "data.tgt_lang=en", "model.dropout=0"]),
}


def nmt(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "nmt_cli", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: nmt {' '.join(args)}\n{done.stderr[-3000:]}")
    return done


def train(recipe: str, name: str, minutes: float, threads: int, overrides: list[str]) -> Path:
    run = WORK / name
    sets = [
        f"data.root={SHARED / 'multi30k'}",
        f"data.output={WORK / ('data-' + name)}",
        f"train.dir={run}",
        f"train.max_time={minutes}m",
        f"train.threads={threads}",
        *overrides,
    ]
    flags = [a for item in sets for a in ("--set", item)]
    nmt("prepare", str(ROOT / "recipes" / recipe), *flags)
    nmt("train", str(ROOT / "recipes" / recipe), *flags)
    return run


def lines(split: str, lang: str) -> list[str]:
    path = SHARED / "multi30k" / f"{split}.{lang}.gz"
    return gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()


def translate(run: Path, sources: list[str], threads: int, args: list[str]) -> list[str]:
    with tempfile.TemporaryDirectory() as folder:
        source, output = Path(folder) / "src", Path(folder) / "hyp"
        source.write_text("\n".join(sources) + "\n", encoding="utf-8")
        nmt("translate", "-m", str(run), "-i", str(source), "-o", str(output), "--threads", str(threads), *args)
        return output.read_text(encoding="utf-8").splitlines()


def scores(hypotheses: list[str], references: list[str]) -> tuple[float, float]:
    import sacrebleu

    return (
        sacrebleu.corpus_bleu(hypotheses, [references]).score,
        sacrebleu.corpus_chrf(hypotheses, [references]).score,
    )


def direction_rows(label: str, run: Path, direction: tuple[str, str], split_names, threads: int, args: list[str]):
    src, tgt = direction
    row: dict = {"model": label, "direction": f"{src}-{tgt}"}
    for split in split_names:
        hypotheses = translate(run, lines(split, src), threads, args)
        bleu, chrf = scores(hypotheses, lines(split, tgt))
        row[f"{split} BLEU"], row[f"{split} chrF"] = round(bleu, 2), round(chrf, 2)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10, help="each bilingual model's budget; 4x for the multilingual")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--split", choices=sorted(SPLITS), default="test")
    parser.add_argument("--multi", type=Path, action="append", default=[], help="trained multilingual run(s), LABEL=RUN")
    parser.add_argument(
        "--bilingual", default="", help="trained bilingual runs: en-de=RUN,de-en=RUN,... (none: no baseline)"
    )
    parser.add_argument("--set", action="append", default=[], help="override of the multilingual recipe")
    parser.add_argument("--no-untrained", action="store_true", help="leave out DE<->FR (zero-shot and pivot)")
    parser.add_argument(
        "--weights", choices=["avg", "last"], default="avg", help="model.pt (last checkpoints averaged) or the last alone"
    )
    args = parser.parse_args()
    split_names = SPLITS[args.split]
    weights = (lambda run: run) if args.weights == "avg" else _last_checkpoint
    multis = [_labelled(str(item)) for item in args.multi] or [
        ("multi", train("multi30k_multi.yaml", "multi", 4 * args.minutes, args.threads, args.set))
    ]
    given = dict(item.split("=", 1) for item in args.bilingual.split(",") if item and item != "none")
    rows = []
    for direction in DIRECTIONS:
        name = f"{direction[0]}-{direction[1]}"
        if name in given:
            run = Path(given[name])
        elif not args.bilingual:
            recipe, overrides = BILINGUAL_RECIPES[direction]
            run = train(recipe, f"bilingual-{name}", args.minutes, args.threads, overrides)
        else:
            run = None
        if run is not None:
            rows.append(direction_rows("bilingual", weights(run), direction, split_names, args.threads, []))
        for label, multi in multis:
            to = ["--from", direction[0], "--to", direction[1]]
            rows.append(direction_rows(label, weights(multi), direction, split_names, args.threads, to))
        print(rows[-1], flush=True)
    if not args.no_untrained:
        for label, multi in multis:
            for direction in UNTRAINED:
                to = ["--from", direction[0], "--to", direction[1]]
                rows.append(
                    direction_rows(
                        f"{label} zero-shot", weights(multi), direction, split_names, args.threads, [*to, "--zero-shot"]
                    )
                )
                rows.append(direction_rows(f"{label} pivot en", weights(multi), direction, split_names, args.threads, to))
                print(rows[-2:], flush=True)
    print_table(f"multilingual against bilingual, Multi30k {args.split}", rows)
    record("multilingual", rows, "python benchmarks/bench_multilingual.py " + " ".join(sys.argv[1:]))


def _last_checkpoint(run: Path) -> Path:
    return sorted((run / "checkpoints").glob("step_*.pt"))[-1]


def _labelled(item: str) -> tuple[str, Path]:
    label, _, path = item.rpartition("=")
    return label or "multi", Path(path)


if __name__ == "__main__":
    main()
