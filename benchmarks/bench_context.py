"""Document-level translation measured: BLEU/chrF, lexical consistency, and a contrastive pronoun test.

    python benchmarks/bench_context.py --data DATA --split test.en-de --src en --tgt de \
        --system sentence=HYP1 --system concat=HYP2 --system recurrence=HYP3 \
        --model sentence=RUN1 --model concat=RUN2 --model recurrence=RUN3

DATA is a folder written by ``nmt prepare`` from a corpus with documents (``SPLIT.docs.txt`` beside
``text/SPLIT.SRC``); each ``--system NAME=FILE`` is a translation of ``text/SPLIT.SRC`` in order, each ``--model
NAME=RUN`` a trained model to score the contrastive pairs with.

- **BLEU / chrF** of every system against the reference (sacreBLEU).
- **Lexical consistency**: a source word (letters only, 5 characters or more) that comes back in several
  paragraphs of one document should be translated the same way each time. Every system's output is word-aligned
  to the source with eflomal (one run over the training pairs and all outputs, so every system is aligned by the
  same model; ``pip install 'nmt-cli[align]'``); the figure is, over the occurrences of words repeated within a
  document, the share aligned to the word's most frequent translation in that document. The reference's own figure is
  the ceiling the data sets.
- **Perplexity** of every ``--model`` on the references, each pair read in its document's context and alone.
- **Contrastive terms**: a paragraph that repeats a term of the paragraph before it, whose reference translates it
  the same way in both, as one of the term's two usual translations in the training data (eflomal's alignments
  above). The variant puts the other usual translation in its place; a model is right when it scores the
  reference higher, read in context (the previous paragraph and its reference first, ``--docids``) and alone.
- **Contrastive pronouns**: paragraphs whose English has one "it" and whose German reference has one
  third-person pronoun (er, sie, es, lower case, or Er/Es first) after a paragraph of the same page. Each gets the
  reference and the two variants with the other pronouns; a model is right when the reference scores highest
  (``nmt score --model``), read in context (the previous paragraph and its reference first, ``--docids``) and
  alone. The gain from context is the difference. EN-FR: one "it" or "they" in the English, one of il/elle or
  ils/elles in the French (gender agreement with the antecedent), the variant the other gender.

- **Context control** (``--context-control``): each model's CXMI (``nmt score --docids``) over the paragraphs that
  have a predecessor, each read as a two-line document after its true previous paragraph, and after a paragraph of
  another document drawn at random (Li et al. 2020). Context that is used for what it says gains more from the
  true paragraph than from the random one.

``--write-set DIR`` also writes each contrastive test as files any model can be scored on:
``DIR/NAME.src``, ``NAME.tgt`` (per item and candidate, the previous paragraph and its reference, then the
paragraph and the candidate, the reference first), ``NAME.docids`` and ``NAME.candidates`` (candidates per item).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)
TERM = re.compile(r"^[^\W\d_]{5,}$", re.UNICODE)
# per target language: the English pronoun each item has exactly one of, each target pronoun's variants, and the
# pronouns also taken capitalised first in the paragraph (German "Sie" there is as likely the polite "you")
PRONOUNS = {
    "de": (r"\bit\b", {"er": ("sie", "es"), "sie": ("er", "es"), "es": ("er", "sie")}, {"er", "es"}),
    "fr": (
        r"\b(it|they)\b",
        {"il": ("elle",), "elle": ("il",), "ils": ("elles",), "elles": ("ils",)},
        {"il", "elle", "ils", "elles"},
    ),
}
ALIGNMENT_CONTEXT_PAIRS = 20000  # training pairs aligned with the outputs, so eflomal's statistics are sound


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def tokens(line: str) -> list[str]:
    return WORD.findall(line)


def documents(ids: list[str]) -> list[list[int]]:
    out: list[list[int]] = []
    for i, name in enumerate(ids):
        if i == 0 or name != ids[i - 1]:
            out.append([])
        out[-1].append(i)
    return out


# --------------------------------------------------------------------------- lexical consistency


def align(source: list[list[str]], systems: dict[str, list[list[str]]], train: tuple[list[str], list[str]]):
    """Per system, per line, eflomal's grow-diag-final-and links (source word, output word)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from nmt_cli.data.align import symmetrised

    names = list(systems)
    src_all = [" ".join(tokens(s)) for s in train[0]]
    tgt_all = [" ".join(tokens(t)) for t in train[1]]
    for name in names:
        src_all += [" ".join(s) for s in source]
        tgt_all += [" ".join(t) for t in systems[name]]
    links = list(symmetrised(src_all, tgt_all))
    out, start = {"train": links[: len(train[0])]}, len(train[0])
    for name in names:
        out[name] = links[start : start + len(source)]
        start += len(source)
    return out


def lexicon(train: tuple[list[str], list[str]], links) -> dict[str, list[tuple[str, int]]]:
    """Per source term (lower case), its aligned one-word translations in the training pairs, most frequent
    first, with their counts."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for s_line, t_line, pairs in zip(train[0], train[1], links):
        s_words, t_words = tokens(s_line), tokens(t_line)
        by_source: dict[int, list[int]] = defaultdict(list)
        for i, j in pairs:
            by_source[i].append(j)
        for i, js in by_source.items():
            if len(js) == 1 and TERM.match(s_words[i]) and TERM.match(t_words[js[0]]):
                counts[s_words[i].lower()][t_words[js[0]]] += 1
    return {w: sorted(ts.items(), key=lambda kv: -kv[1]) for w, ts in counts.items()}


def term_items(src: list[str], ref: list[str], ids: list[str], terms: dict[str, list[tuple[str, int]]]):
    """(line, [reference, variant]) where a source term of the previous paragraph comes back and the reference
    translates it the same way in both, as one of the term's two most frequent translations in the training
    data (each at least 5 times): the variant puts the other one in its place, so only the previous paragraph
    tells which the page uses."""
    items = []
    for i in range(1, len(src)):
        if ids[i] != ids[i - 1]:
            continue
        shared = {w.lower() for w in tokens(src[i])} & {w.lower() for w in tokens(src[i - 1])}
        for word in sorted(shared):
            choices = [t for t, n in terms.get(word, [])[:2] if n >= 5]
            if len(choices) != 2:
                continue
            now, before = tokens(ref[i]), tokens(ref[i - 1])
            used = [t for t in choices if t in now and t in before]
            if len(used) != 1 or now.count(used[0]) != 1:
                continue
            other = choices[1] if used[0] == choices[0] else choices[0]
            if other in now:
                continue
            variant = re.sub(rf"\b{re.escape(used[0])}\b", other, ref[i], count=1)
            items.append((i, [ref[i], variant]))
            break
    return items


def consistency(source: list[list[str]], output: list[list[str]], links, docs: list[list[int]]) -> tuple[float, int]:
    """Of the occurrences of source words repeated in a document, the share translated as the word's most
    frequent translation in that document; and how many occurrences were counted."""
    same = counted = 0
    for doc in docs:
        seen: dict[str, list[str]] = defaultdict(list)
        for i in doc:
            aligned: dict[int, list[int]] = defaultdict(list)
            for s, t in links[i]:
                aligned[s].append(t)
            for position, word in enumerate(source[i]):
                if TERM.match(word) and aligned.get(position):
                    seen[word.lower()].append(" ".join(output[i][t].lower() for t in sorted(aligned[position])))
        for translations in seen.values():
            if len(translations) > 1:
                counted += len(translations)
                same += Counter(translations).most_common(1)[0][1]
    return (same / counted if counted else float("nan")), counted


# --------------------------------------------------------------------------- contrastive pronouns


def pronoun_items(src: list[str], ref: list[str], ids: list[str], tgt: str = "de") -> list[tuple[int, list[str]]]:
    """(line, [reference, variant, ...]) for the lines that qualify (module docstring)."""
    english, table, initial = PRONOUNS[tgt]
    items = []
    for i in range(1, len(src)):
        if ids[i] != ids[i - 1] or len(re.findall(english, src[i], re.IGNORECASE)) != 1:
            continue
        words = ref[i].split(" ")
        found = [
            (k, w)
            for k, w in enumerate(words)
            if re.sub(r"\W", "", w) in table or (k == 0 and re.sub(r"\W", "", w).lower() in initial)
        ]
        if len(found) != 1:
            continue
        k, word = found[0]
        bare = re.sub(r"\W", "", word)
        others = table[bare.lower()]
        variants = []
        for other in others:
            replacement = other.capitalize() if bare[0].isupper() else other
            variants.append(" ".join(words[:k] + [word.replace(bare, replacement)] + words[k + 1 :]))
        items.append((i, [ref[i], *variants]))
    return items


def write_set(src: list[str], ref: list[str], items, folder: Path, name: str) -> dict[str, Path]:
    """The contrastive test ``name`` as files (module docstring): what ``nmt score --model`` reads."""
    rows_src, rows_tgt, rows_ids = [], [], []
    for n, (i, candidates) in enumerate(items):
        for c, candidate in enumerate(candidates):
            rows_src += [src[i - 1], src[i]]
            rows_tgt += [ref[i - 1], candidate]
            rows_ids += [f"{n}.{c}"] * 2
    folder.mkdir(parents=True, exist_ok=True)
    paths = {kind: folder / f"{name}.{kind}" for kind in ("src", "tgt", "docids", "candidates")}
    counts = [str(len(candidates)) for _, candidates in items]
    for kind, rows in (("src", rows_src), ("tgt", rows_tgt), ("docids", rows_ids), ("candidates", counts)):
        paths[kind].write_text("".join(row + "\n" for row in rows), encoding="utf-8")
    return paths


def contrastive(model: Path, src: list[str], ref: list[str], items, work: Path, nmt: list[str]) -> dict[str, float]:
    """The share of items whose reference scores above every variant: in context and alone."""
    paths = write_set(src, ref, items, work, "contrastive")
    paths["ids"] = paths["docids"]
    result = {}
    for reading, extra in (("alone", []), ("in_context", ["--docids", str(paths["ids"])])):
        command = [*nmt, "score", "--model", str(model), str(paths["src"]), str(paths["tgt"]), *extra]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode and "drop --docids" in done.stdout + done.stderr:  # a sentence-level model
            result[reading] = result["alone"]
            continue
        done.check_returncode()
        scores = [json.loads(line)["total"] for line in done.stdout.splitlines()]
        right, start = 0, 0
        for _, candidates in items:
            block = scores[start : start + 2 * len(candidates)][1::2]  # each candidate's second line
            start += 2 * len(candidates)
            right += block[0] > max(block[1:])
        result[reading] = right / len(items) if items else float("nan")
    return result


def perplexity(model: Path, src: Path, ref: Path, ids: Path, nmt: list[str]) -> dict[str, float]:
    """The model's per-token perplexity of the references, in context (``--docids``) and each pair alone."""
    result: dict[str, float] = {}
    for reading, extra in (("alone", []), ("in_context", ["--docids", str(ids)])):
        done = subprocess.run(
            [*nmt, "score", "--model", str(model), str(src), str(ref), *extra], capture_output=True, text=True
        )
        if done.returncode and "drop --docids" in done.stdout + done.stderr:  # a sentence-level model
            result[reading] = result["alone"]
            continue
        done.check_returncode()
        rows = [json.loads(line) for line in done.stdout.splitlines()]
        scored = [r for r in rows if r["total"] is not None]
        result[reading] = round(math.exp(-sum(r["total"] for r in scored) / sum(r["tokens"] for r in scored)), 3)
    return result


def context_control(model: Path, src: list[str], ref: list[str], ids: list[str], work: Path, nmt: list[str]) -> dict:
    """CXMI of each paragraph (after the first of its document) read after its true previous paragraph and after a
    paragraph of another document drawn at random (Li et al. 2020's control), each as a two-line document: a model
    that uses what its context says gains more from the true one; one for which context is only a regulariser,
    about as much from either."""
    if len(set(ids)) < 2:  # no other document to draw a paragraph from: there is no control
        print("--context-control needs a split of two documents or more", file=sys.stderr)
        return {}
    rng = random.Random(1)
    rows = [i for i in range(1, len(src)) if ids[i] == ids[i - 1]]
    drawn = min(50, len(src))
    elsewhere = {i: rng.choice([j for j in rng.sample(range(len(src)), drawn) if ids[j] != ids[i]] or [i - 1]) for i in rows}
    result: dict[str, float | int] = {}
    for reading, before in (("true", {i: i - 1 for i in rows}), ("random", elsewhere)):
        pairs_src = [line for i in rows for line in (src[before[i]], src[i])]
        pairs_ref = [line for i in rows for line in (ref[before[i]], ref[i])]
        pairs_ids = [str(n) for n in range(len(rows)) for _ in range(2)]
        files = {}
        for kind, lines_ in (("src", pairs_src), ("tgt", pairs_ref), ("ids", pairs_ids)):
            files[kind] = work / f"control.{reading}.{kind}"
            files[kind].write_text("".join(line + "\n" for line in lines_), encoding="utf-8")
        command = [*nmt, "score", "--model", str(model), str(files["src"]), str(files["tgt"]), "--docids", str(files["ids"])]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode and "drop --docids" in done.stdout + done.stderr:  # a sentence-level model: no context
            return {}
        done.check_returncode()
        scored = [json.loads(line) for line in done.stdout.splitlines()][1::2]  # each document's second line
        scored = [r for r in scored if r["total"] is not None]
        tokens = sum(r["tokens"] for r in scored)
        result[f"cxmi_{reading}_previous"] = round(sum(r["total"] - r["alone"] for r in scored) / tokens, 5)
        result["tokens"] = tokens
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--split", default="test.en-de")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--system", action="append", default=[], help="NAME=HYPOTHESIS_FILE")
    parser.add_argument("--model", action="append", default=[], help="NAME=RUN (contrastive scoring)")
    parser.add_argument("--nmt", default=f"{sys.executable} -m nmt_cli")
    parser.add_argument("--write-set", type=Path, help="also write each contrastive test's files here")
    parser.add_argument(
        "--context-control",
        action="store_true",
        help="each --model's CXMI after the true previous paragraph and after a random one of another document",
    )
    parser.add_argument(
        "--no-perplexity", action="store_true", help="skip the models' perplexities (nmt score --docids gives CXMI)"
    )
    args = parser.parse_args()
    text = args.data / "text"
    src, ref = lines(text / f"{args.split}.{args.src}"), lines(text / f"{args.split}.{args.tgt}")
    ids = lines(args.data / f"{args.split}.docs.txt")
    docs = documents(ids)
    systems = {name: lines(Path(path)) for name, path in (s.split("=", 1) for s in args.system)}
    report: dict[str, dict] = {name: {} for name in ["reference", *systems]}

    from sacrebleu.metrics import BLEU, CHRF

    for name, hyp in systems.items():
        report[name]["bleu"] = round(BLEU().corpus_score(hyp, [ref]).score, 2)
        report[name]["chrf"] = round(CHRF().corpus_score(hyp, [ref]).score, 2)

    train = (
        lines(text / f"train.{args.src}")[:ALIGNMENT_CONTEXT_PAIRS],
        lines(text / f"train.{args.tgt}")[:ALIGNMENT_CONTEXT_PAIRS],
    )
    source = [tokens(s) for s in src]
    outputs = {"reference": [tokens(r) for r in ref], **{name: [tokens(h) for h in hyp] for name, hyp in systems.items()}}
    links = align(source, outputs, train)
    for name, output in outputs.items():
        share, pairs = consistency(source, output, links[name], docs)
        report[name]["consistency"] = round(100 * share, 2)
        report[name]["consistency_occurrences"] = pairs

    for name, run in (m.split("=", 1) for m in args.model) if not args.no_perplexity else ():
        ppl = perplexity(
            Path(run),
            text / f"{args.split}.{args.src}",
            text / f"{args.split}.{args.tgt}",
            args.data / f"{args.split}.docs.txt",
            args.nmt.split(),
        )
        report.setdefault(name, {})["perplexity"] = ppl
    for name, run in (m.split("=", 1) for m in args.model) if args.context_control else ():
        with tempfile.TemporaryDirectory() as work:
            control = context_control(Path(run), src, ref, ids, Path(work), args.nmt.split())
        report.setdefault(name, {})["context_control"] = control
    tests = {"terms": term_items(src, ref, ids, lexicon(train, links["train"]))}
    if args.tgt in PRONOUNS:
        tests["pronouns"] = pronoun_items(src, ref, ids, args.tgt)
    for test, items in tests.items() if args.write_set else ():
        write_set(src, ref, items, args.write_set, f"{args.split}.{test}")
    with tempfile.TemporaryDirectory() as work:
        for test, items in tests.items():
            report.setdefault("contrastive_items", {})[test] = len(items)
            for name, run in (m.split("=", 1) for m in args.model):
                if items:
                    scores = contrastive(Path(run), src, ref, items, Path(work), args.nmt.split())
                    report.setdefault(name, {})[f"contrastive_{test}"] = {k: round(100 * v, 2) for k, v in scores.items()}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
