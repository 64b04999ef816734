"""A gettext catalogue against plain `nmt translate` of the same sentences: time, BLEU, placeholders.

    python benchmarks/bench_formats.py --model nmt-quickstart/model --rounds 3

Builds a catalogue of N entries (default 5,000) from the bundled software messages (the held-out test
and validation splits first, then training messages), writes the same messages one per line, and
translates both with `nmt translate` in separate processes, alternating, `--rounds` times each (model
loading included in both). Reports the median wall time of each and their ratio; BLEU and chrF of the
catalogue's msgstrs and of the plain output against the German references of the test split; the share
of entries whose placeholders the model copied itself (before repair) and after repair (must be 100%).
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import polib
import sacrebleu

from nmt_cli.formats.placeholders import placeholders

SAMPLE = Path(__file__).resolve().parents[1] / "nmt_cli" / "sample" / "en-de"


def read(name: str) -> list[str]:
    with gzip.open(SAMPLE / name, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--entries", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    test_en, test_de = read("test.en.gz"), read("test.de.gz")
    messages = list(dict.fromkeys(test_en + read("valid.en.gz") + read("train.en.gz")))[: args.entries]
    work = Path(tempfile.mkdtemp(prefix="bench_formats_"))
    template = polib.POFile()
    template.metadata = {"Content-Type": "text/plain; charset=UTF-8", "Language": ""}
    for message in messages:
        template.append(polib.POEntry(msgid=message, msgstr="", flags=["c-format"] if "%" in message else []))
    template.save(str(work / "app.pot"))
    (work / "app.en").write_text("".join(m + "\n" for m in messages), encoding="utf-8")

    def run(kind: str) -> float:
        source, output = (work / "app.pot", work / "de.po") if kind == "po" else (work / "app.en", work / "app.de")
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "nmt_cli",
                "translate",
                "-m",
                args.model,
                "-i",
                str(source),
                "-o",
                str(output),
                "--no-progress",
            ],
            check=True,
            capture_output=True,
        )
        return time.perf_counter() - started

    times: dict[str, list[float]] = {"plain": [], "po": []}
    for _ in range(args.rounds):
        for kind in ("plain", "po"):
            times[kind].append(run(kind))
    plain = (work / "app.de").read_text(encoding="utf-8").splitlines()
    catalogue = {e.msgid: e.msgstr for e in polib.pofile(str(work / "de.po"))}
    po = [catalogue[m] for m in messages]
    n_test = len([m for m in messages if m in set(test_en)])
    refs = [dict(zip(test_en, test_de))[m] for m in messages[:n_test]]
    with_ph = [i for i, m in enumerate(messages) if placeholders(m)]
    copied = sum(Counter(placeholders(plain[i])) == Counter(placeholders(messages[i])) for i in with_ph)
    kept = sum(Counter(placeholders(po[i])) == Counter(placeholders(messages[i])) for i in with_ph)
    median = {kind: statistics.median(values) for kind, values in times.items()}
    print(f"entries {len(messages):,} ({n_test:,} from the test split, {len(with_ph):,} with placeholders)")
    for kind in ("plain", "po"):
        print(f"{kind:>5}: median {median[kind]:.2f} s of {args.rounds} ({', '.join(f'{t:.2f}' for t in times[kind])})")
    print(f"catalogue / plain time: {median['po'] / median['plain']:.3f}")
    for kind, hyps in (("plain", plain[:n_test]), ("po", po[:n_test])):
        bleu = sacrebleu.corpus_bleu(hyps, [refs]).score
        chrf = sacrebleu.corpus_chrf(hyps, [refs]).score
        print(f"{kind:>5}: test BLEU {bleu:.2f}, chrF {chrf:.2f}")
    print(f"placeholders exact: plain (the model alone) {copied}/{len(with_ph)}; catalogue (repaired) {kept}/{len(with_ph)}")


if __name__ == "__main__":
    main()
