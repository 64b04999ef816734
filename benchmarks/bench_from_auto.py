"""``nmt translate --from auto`` on a file mixing English, German and French lines of Multi30k.

    python benchmarks/bench_from_auto.py --model RUN [--split val|test_2016_flickr|...] [--threads 2]

Line i of the mixed file is line i of the split in English, German or French, in turn (so no sentence is there
twice). Identification: for each target language, how many lines ``languages.LineIdentifier`` puts in their true
language (``--from auto`` keeps lines in the target language as written, so those count as right when kept).
Translation (with ``--model``, a multilingual model of ``recipes/multi30k_multi.yaml``): the mixed file translated
into each language with ``--from auto``, against the same lines translated with their true ``--from`` (lines
already in the target language kept as written in both), BLEU and chrF against the split's side in that language.
Decide choices on ``--split val`` only.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import SHARED, print_table, record  # noqa: E402

from nmt_cli.languages import LineIdentifier  # noqa: E402

LANGUAGES = ("en", "de", "fr")


def side(split: str, language: str) -> list[str]:
    path = SHARED / "multi30k" / f"{split}.{language}.gz"
    return gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()


def translate(model: str, lines: list[str], args: list[str], threads: int) -> list[str]:
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "src"
        source.write_text("\n".join(lines) + "\n", encoding="utf-8")
        cmd = [sys.executable, "-m", "nmt_cli", "translate", "-m", model, "-i", str(source), "--threads", str(threads)]
        done = subprocess.run([*cmd, *args], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"failed: {' '.join(cmd + args)}\n{done.stderr[-2000:]}")
        return done.stdout.splitlines()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a multilingual model (EN<->DE, EN<->FR) to translate the mixed file with")
    parser.add_argument("--split", default="val")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import sacrebleu

    sides = {language: side(args.split, language) for language in LANGUAGES}
    truth = [LANGUAGES[i % 3] for i in range(len(sides["en"]))]
    mixed = [sides[language][i] for i, language in enumerate(truth)]
    rows = []
    for target in LANGUAGES:
        readers = [language for language in LANGUAGES if language != target]
        identifier = LineIdentifier(readers, target)
        right = sum(identifier.identify(line) == language for line, language in zip(mixed, truth))
        row = {"to": target, "lines": len(mixed), "identified": right, "accuracy %": round(100 * right / len(mixed), 2)}
        if args.model:
            found = translate(args.model, mixed, ["--from", "auto", "--to", target, "--format", "jsonl"], args.threads)
            auto = [json.loads(line)["translation"] for line in found]
            known = list(mixed)  # lines already in the target language stay as written
            for language in readers:
                rows_of = [i for i, true in enumerate(truth) if true == language]
                sources = [mixed[i] for i in rows_of]
                alone = translate(args.model, sources, ["--from", language, "--to", target], args.threads)
                for i, text in zip(rows_of, alone):
                    known[i] = text
            references = [sides[target]]
            row["auto BLEU / chrF"] = (
                f"{sacrebleu.corpus_bleu(auto, references).score:.2f} / {sacrebleu.corpus_chrf(auto, references).score:.2f}"
            )
            row["right --from BLEU / chrF"] = (
                f"{sacrebleu.corpus_bleu(known, references).score:.2f} / "
                f"{sacrebleu.corpus_chrf(known, references).score:.2f}"
            )
        rows.append(row)
    print_table(f"--from auto on Multi30k {args.split}, EN/DE/FR lines in turn", rows)
    record("from_auto", rows, " ".join(sys.argv))


if __name__ == "__main__":
    main()
