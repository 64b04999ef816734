"""Tagged lines (`nmt translate --markup`) against plain `nmt translate` of the same sentences.

    python benchmarks/bench_markup.py --model nmt-quickstart/model --rounds 3

Builds N tagged lines (default 2,000) from the bundled software messages' held-out test and validation
splits: random inline elements (`<b>`, `<i>`, `<a href>`, `<span class>`) over random word spans, some
nested, some `<br/>`, entities (`&amp;`) for ampersands. Writes the same sentences plain, translates both
in separate processes, alternating, `--rounds` times each (model loading included). Reports the median
wall time of each and their ratio; BLEU and chrF against the German references of the tag-stripped
markup output and of the plain output; and how many lines came back with a different tag tree than
their source (must be 0) or with tags breaking a word.
"""

from __future__ import annotations

import argparse
import gzip
import html
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sacrebleu

from nmt_cli.formats.markup import strip
from nmt_cli.formats.markup_tree import tag_tree

SAMPLE = Path(__file__).resolve().parents[1] / "nmt_cli" / "sample" / "en-de"
TAGS = ("b", "i", 'a href="/docs?id=1&amp;v=2"', 'span class="ui"')


def read(name: str) -> list[str]:
    with gzip.open(SAMPLE / name, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def tagged(sentence: str, rng: random.Random) -> str:
    """``sentence`` with one or two inline elements (maybe nested), maybe a line break; '&' as an entity."""
    words = [html.escape(word, quote=False) for word in sentence.split()]
    if not words:
        return sentence
    start = rng.randrange(len(words))
    end = min(len(words), start + rng.randint(1, 4))
    tag = rng.choice(TAGS)
    inner = words[start:end]
    if len(inner) > 2 and rng.random() < 0.3:
        inner = [inner[0], f"<em>{' '.join(inner[1:-1])}</em>", inner[-1]]
    words[start:end] = [f"<{tag}>{' '.join(inner)}</{tag.split()[0]}>"]
    if len(words) > 3 and rng.random() < 0.15:
        words.insert(rng.randrange(1, len(words)), "<br/>")
    return " ".join(words)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    src = read("test.en.gz") + read("valid.en.gz")
    ref = read("test.de.gz") + read("valid.de.gz")
    src, ref = src[: args.lines], ref[: args.lines]
    rng = random.Random(0)
    lines = [tagged(s, rng) for s in src]
    work = Path(tempfile.mkdtemp(prefix="bench_markup_"))
    (work / "plain.en").write_text("".join(s + "\n" for s in src), encoding="utf-8")
    (work / "tagged.en").write_text("".join(line + "\n" for line in lines), encoding="utf-8")

    def run(kind: str) -> float:
        extra = ["--markup"] if kind == "markup" else []
        source, output = work / ("tagged.en" if kind == "markup" else "plain.en"), work / f"{kind}.de"
        output.unlink(missing_ok=True)
        started = time.perf_counter()
        command = [sys.executable, "-m", "nmt_cli", "translate", "-m", args.model, "-i", str(source), "-o", str(output)]
        subprocess.run([*command, "--no-progress", *extra], check=True, capture_output=True)
        return time.perf_counter() - started

    times: dict[str, list[float]] = {"plain": [], "markup": []}
    for _ in range(args.rounds):
        for kind in ("plain", "markup"):
            times[kind].append(run(kind))
    plain = (work / "plain.de").read_text(encoding="utf-8").splitlines()
    marked = (work / "markup.de").read_text(encoding="utf-8").splitlines()
    stripped = [" ".join(strip(line).split()) for line in marked]
    different = [(s, t) for s, t in zip(lines, marked) if tag_tree(s) != tag_tree(t)]
    median = {kind: statistics.median(values) for kind, values in times.items()}
    print(f"lines {len(lines):,} ({sum('<' in line for line in lines):,} tagged), {args.rounds} rounds")
    for kind in ("plain", "markup"):
        print(f"{kind:>6}: median {median[kind]:.2f} s ({', '.join(f'{t:.2f}' for t in times[kind])})")
    print(f"markup / plain time: {median['markup'] / median['plain']:.3f}")
    for kind, hyps in (("plain", plain), ("markup", stripped)):
        bleu = sacrebleu.corpus_bleu(hyps, [ref]).score
        chrf = sacrebleu.corpus_chrf(hyps, [ref]).score
        print(f"{kind:>6}: BLEU {bleu:.2f}, chrF {chrf:.2f}")
    print(f"tag tree different from the source's: {len(different)} of {len(lines)} lines")
    for source, target in different[:5]:
        print(f"  {source}\n  -> {target}")


if __name__ == "__main__":
    main()
