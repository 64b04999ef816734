"""Glossaries measured: term success, quality with and without terms, unchanged lines, and speed.

    python benchmarks/bench_glossary.py --model RUN --train DATA/text/train --test DATA/text/test --src en --tgt de \
        [--lines 1000] [--rounds 3] [--threads 2]

``--train PREFIX`` and ``--test PREFIX`` name parallel text files (PREFIX.SRC, PREFIX.TGT).

- **The glossary** comes from the training pairs alone: a source word (letters only, 4 characters or more, not
  among the 150 most frequent words) seen in at least 15 pairs whose translation is consistent there: one
  target word occurs in at least 80% of the pairs holding it, and at least half of that word's own occurrences
  are in those pairs. Written as a TSV beside the work files (``benchmarks/work/glossary_*.tsv``).
- **Term success**: over the test sentences, the share of term occurrences (constraints) whose approved
  translation is in the output where a word begins, unconstrained, with ``--glossary-mode hard`` and ``soft``.
- **Quality**: BLEU and chrF of the sentences that hold terms, each mode; and on the sentences whose reference
  uses every approved translation (the glossary agrees with the reference: the case a glossary is for).
- **Unchanged lines**: the share of sentences without terms whose output is byte-identical to unconstrained
  decoding's.
- **Speed** (and success, BLEU) with 1, 2 and 4 constraints per sentence taken from the references (the first
  words of 4+ letters of each reference, as Hu et al. 2019 measure): the same sentences translated with and
  without them, alternating, median of ``--rounds`` (in-process wall time of ``Translator.translate_encoded``).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from common import WORK, print_table, record

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
MIN_PAIRS, MIN_SHARE, MIN_PRECISION, STOPWORDS = 15, 0.8, 0.5, 150


def read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def build_glossary(src: list[str], tgt: list[str]) -> dict[str, str]:
    """Source word -> its consistent target word (see the module docstring), most frequent first."""
    src_words = [set(w.lower() for w in WORD.findall(s)) for s in src]
    tgt_words = [set(WORD.findall(t)) for t in tgt]
    src_count = Counter(w for words in src_words for w in words)
    tgt_count = Counter(w for words in tgt_words for w in words)
    common = {w for w, _ in src_count.most_common(STOPWORDS)}
    candidates = {w for w, n in src_count.items() if n >= MIN_PAIRS and len(w) >= 4 and w not in common}
    together: dict[str, Counter] = defaultdict(Counter)
    for s_words, t_words in zip(src_words, tgt_words):
        for word in s_words & candidates:
            together[word].update(t_words)
    glossary = {}
    for word in sorted(candidates, key=lambda w: (-src_count[w], w)):  # ties by name: the same glossary every run
        target, shared = min(together[word].items(), key=lambda item: (-item[1], item[0]))
        if shared >= MIN_SHARE * src_count[word] and shared >= MIN_PRECISION * tgt_count[target] and len(target) >= 3:
            glossary[word] = target
    return glossary


def reference_words(line: str) -> list[str]:
    """A reference's distinct words of 4+ letters, in order (constraints for the speed test)."""
    return list(dict.fromkeys(w for w in WORD.findall(line) if len(w) >= 4))


def translate(translator, lines: list[str]) -> tuple[list[str], float]:
    start = time.perf_counter()
    out = [hyps[0].text for hyps in translator.translate(lines)]
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--train", required=True, type=Path)
    parser.add_argument("--test", required=True, type=Path)
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--lines", type=int, default=0, help="first N test lines (0: all)")
    parser.add_argument("--speed-lines", type=int, default=200, help="sentences per group of the speed test")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch
    from sacrebleu import corpus_bleu, corpus_chrf

    from nmt_cli.decode.constrained import Constraint
    from nmt_cli.decode.loading import load_model
    from nmt_cli.decode.translator import Translator
    from nmt_cli.terms.glossary import read_glossary

    torch.set_num_threads(args.threads)
    pair = f"{args.src}{args.tgt}"
    glossary_words = build_glossary(
        read(args.train.with_name(f"{args.train.name}.{args.src}")),
        read(args.train.with_name(f"{args.train.name}.{args.tgt}")),
    )
    WORK.mkdir(exist_ok=True)
    path = WORK / f"glossary_{Path(args.model).name}_{pair}.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in glossary_words.items()), encoding="utf-8")
    glossary = read_glossary(path)
    src = read(args.test.with_name(f"{args.test.name}.{args.src}"))
    ref = read(args.test.with_name(f"{args.test.name}.{args.tgt}"))
    if args.lines:
        src, ref = src[: args.lines], ref[: args.lines]
    loaded = load_model(args.model)
    config = loaded.recipe.decode
    translators = {
        "none": Translator(loaded, config),
        "hard": Translator(loaded, config, glossary=glossary, glossary_mode="hard"),
        "soft": Translator(loaded, config, glossary=glossary, glossary_mode="soft"),
    }
    constraints = [translators["hard"].glossary.constraints_of(line.strip()) for line in src]
    outputs = {name: translate(t, src)[0] for name, t in translators.items()}
    with_terms = [i for i, c in enumerate(constraints) if c]
    agreeing = [i for i in with_terms if all(c.met_by(ref[i]) for c in constraints[i])]
    without = [i for i, c in enumerate(constraints) if not c]
    occurrences = sum(len(constraints[i]) for i in with_terms)
    rows = []
    for name, out in outputs.items():
        met = sum(c.met_by(out[i]) for i in with_terms for c in constraints[i])
        rows.append(
            {
                "mode": name,
                "term success": met / max(occurrences, 1),
                "BLEU with terms": corpus_bleu([out[i] for i in with_terms], [[ref[i] for i in with_terms]]).score,
                "chrF with terms": corpus_chrf([out[i] for i in with_terms], [[ref[i] for i in with_terms]]).score,
                "BLEU, reference agrees": corpus_bleu([out[i] for i in agreeing], [[ref[i] for i in agreeing]]).score,
                "unchanged without terms": sum(out[i] == outputs["none"][i] for i in without) / max(len(without), 1),
            }
        )
    print(
        f"glossary: {len(glossary):,} terms from the training pairs ({path}); test: {len(src):,} sentences, "
        f"{len(with_terms):,} with terms ({occurrences:,} occurrences; {len(agreeing):,} whose reference agrees), "
        f"{len(without):,} without",
        flush=True,
    )
    print_table("glossary: term success and quality", rows)
    speed_rows = []
    for count in (1, 2, 4):
        # Constraints from the references (as Hu et al. 2019 measure): the first `count` distinct words of 4+
        # letters of each reference, on the test sentences whose reference has that many.
        picked = [(i, words[:count]) for i, words in ((i, reference_words(ref[i])) for i in range(len(src)))]
        picked = [(i, words) for i, words in picked if len(words) == count][: args.speed_lines]
        if not picked:
            continue
        encoded = [loaded.src_vocab.encode(src[i].strip(), out_type=int) for i, _ in picked]
        wanted = [
            tuple(Constraint((tuple(loaded.tgt_vocab.encode(w, out_type=int)),), w, (w,)) for w in words)
            for _, words in picked
        ]
        seconds: dict[str, list[float]] = {"none": [], "hard": []}
        outputs_by: dict[str, list[str]] = {}
        for _ in range(args.rounds):  # alternating
            for name in seconds:
                start = time.perf_counter()
                found = translators["hard"].translate_encoded(encoded, constraints=wanted if name == "hard" else None)
                seconds[name].append(time.perf_counter() - start)
                outputs_by[name] = [hyps[0].text for hyps in found]
        plain, hard = statistics.median(seconds["none"]), statistics.median(seconds["hard"])
        refs = [ref[i] for i, _ in picked]
        met = sum(c.met_by(out) for out, cs in zip(outputs_by["hard"], wanted) for c in cs)
        speed_rows.append(
            {
                "constraints": count,
                "sentences": len(picked),
                "none s": plain,
                "hard s": hard,
                "hard / none": hard / plain,
                "term success": met / (count * len(picked)),
                "BLEU none": corpus_bleu(outputs_by["none"], [refs]).score,
                "BLEU hard": corpus_bleu(outputs_by["hard"], [refs]).score,
            }
        )
    print_table(f"glossary: speed, beam {config.beam}, {args.threads} threads", speed_rows)
    record(
        "glossary",
        rows + speed_rows,
        f"python benchmarks/bench_glossary.py --model {args.model} --train {args.train} --test {args.test} "
        f"--src {args.src} --tgt {args.tgt} --lines {args.lines} --rounds {args.rounds} --threads {args.threads}",
    )


if __name__ == "__main__":
    main()
