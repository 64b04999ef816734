"""What protecting spans does to plain lines, and which mask form the model handles best.

    python benchmarks/bench_protect.py --model nmt-quickstart/model \
        --src nmt-quickstart/data/text/valid.en --ref nmt-quickstart/data/text/valid.de [--forms printf,qt,braces]

Each line is translated without protection and with it, once per mask form (``printf``: ``%s``, ``%d``...,
what the model sees by default; ``qt``: ``%1``, ``%2``...; ``braces``: ``{0}``, ``{1}``...). Per run: BLEU and
chrF against the references; the lines whose sentence chrF is lower than without protection and those where it
is higher (the goal: fewer than a tenth as many worse as better); every span the span finder finds in a source
(``formats/protect.py``) counted as kept when the output holds it verbatim; glued junk: a kept span that the
source stands apart from the next word but the output glues a word, a code or a repetition of it onto. Decide the
mask form on validation data only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sacrebleu  # noqa: E402

from nmt_cli.decode.loading import load_model  # noqa: E402
from nmt_cli.decode.protected import ProtectedEngine  # noqa: E402
from nmt_cli.decode.translator import Translator  # noqa: E402
from nmt_cli.formats import protect  # noqa: E402

GLUE = re.compile(r"-?[^\W_][\w()<>.-]*")


def masks_of(form: str):  # type: ignore[no-untyped-def]
    """A replacement for ``protect.masks`` that gives the form's masks first (then the rest, as it does)."""

    def masks(taken: str) -> Iterator[str]:
        if form == "braces":
            yield from (f"{{{n}}}" for n in range(10_000) if f"{{{n}}}" not in taken)
            return
        if form == "printf":
            yield from (m for m in protect._MASKS if m not in taken)
        yield from (f"%{n}" for n in range(1, 100) if f"%{n}" not in taken and f"%{n}" not in protect._MASKS)
        yield from (f"{{{n}}}" for n in range(10_000) if f"{{{n}}}" not in taken)

    return masks


def translate(loaded, lines: list[str], protected: bool) -> list[str]:  # type: ignore[no-untyped-def]
    engine = Translator(loaded, loaded.recipe.decode)
    source = ProtectedEngine(engine) if protected else engine
    return [hyps[0].text for hyps in source.translate(lines)]


def spans_kept(sources: list[str], outputs: list[str]) -> tuple[int, int, int]:
    """(spans found in the sources, kept verbatim in their outputs, glued onto in the output)."""
    found = kept = glued = 0
    for source, output in zip(sources, outputs):
        for start, end in protect.protected_spans(source):
            span = source[start:end]
            if span.isspace():
                continue
            found += 1
            at = output.find(span)
            kept += at != -1
            apart = not GLUE.match(source, end)
            glued += at != -1 and apart and bool(GLUE.match(output, at + len(span)))
    return found, kept, glued


def sentence_chrf(outputs: list[str], references: list[str]) -> list[float]:
    return [sacrebleu.sentence_chrf(o, [r]).score for o, r in zip(outputs, references)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--src", required=True, type=Path)
    parser.add_argument("--ref", required=True, type=Path)
    parser.add_argument("--forms", default="printf,qt,braces")
    parser.add_argument("--lines", type=int, default=0, help="the first N lines only (0: all)")
    args = parser.parse_args()
    sources = args.src.read_text(encoding="utf-8").splitlines()
    references = args.ref.read_text(encoding="utf-8").splitlines()
    if args.lines:
        sources, references = sources[: args.lines], references[: args.lines]
    loaded = load_model(args.model)
    plain = translate(loaded, sources, protected=False)
    plain_chrf = sentence_chrf(plain, references)
    rows = [("unprotected", plain, None)]
    for form in args.forms.split(","):
        protect.masks = masks_of(form)
        outputs = translate(loaded, sources, protected=True)
        rows.append((form, outputs, sentence_chrf(outputs, references)))
    with_spans = [i for i, s in enumerate(sources) if protect.protected_spans(s)]
    print(f"{args.src}: {len(sources):,} lines, {len(with_spans):,} with spans")
    for name, outputs, chrf in rows:
        bleu = sacrebleu.corpus_bleu(outputs, [references]).score
        corpus_chrf = sacrebleu.corpus_chrf(outputs, [references]).score
        found, kept, glued = spans_kept(sources, outputs)
        changes = Counter((c > p) - (c < p) for c, p in zip(chrf, plain_chrf)) if chrf is not None else Counter()
        # a line with nothing to protect reads the same; it changes only with its batch's neighbours (padding and
        # batch order move its floating-point sums): that count is the measure's noise floor
        spanned = set(with_spans)
        by_spans = Counter(
            ((c > p) - (c < p), i in spanned) for i, (c, p) in enumerate(zip(chrf or [], plain_chrf)) if c != p
        )
        row = {
            "run": name,
            "bleu": round(bleu, 2),
            "chrf": round(corpus_chrf, 2),
            "spans_kept": f"{kept}/{found}",
            "glued": glued,
            "lines_better": changes[1],
            "lines_worse": changes[-1],
            "better_with_spans": by_spans[(1, True)],
            "worse_with_spans": by_spans[(-1, True)],
            "changed_without_spans": by_spans[(1, False)] + by_spans[(-1, False)],
        }
        print(json.dumps(row))


if __name__ == "__main__":
    main()
