"""How good are ``nmt translate --alignments``? No gold word alignments for Multi30k can be had offline,
so this measures what can be checked automatically, and says so:

    python benchmarks/bench_alignments.py [--model RUN] [--threads 2]

**Anchor accuracy**: in each translation of Multi30k test 2016, an output word that is spelled like
exactly one source word (case and punctuation aside; names, numbers, loanwords such as "Frisbee")
and occurs once in the output is an anchor whose correct link is known. The score is the share of
anchors that the alignment links to that source word, for each decoder layer's cross-attention,
against a diagonal baseline (output word j linked to source word round(j * (|src|-1) / (|out|-1))).
Anchors are the easy cases (identical strings), so this is an upper view of alignment quality, not
an alignment error rate.
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys

from common import SHARED, WORK, print_table, record


def normalise(word: str) -> str:
    return re.sub(r"[^\w]", "", word.lower())


def anchors(source: str, output: str) -> list[tuple[int, int]]:
    """(source word, output word) pairs known to be right: unique identical spellings on both sides."""
    src = [normalise(w) for w in source.split()]
    out = [normalise(w) for w in output.split()]
    found = []
    for j, word in enumerate(out):
        if (len(word) >= 2 or word.isdigit()) and out.count(word) == 1 and src.count(word) == 1:
            found.append((src.index(word), j))
    return found


def diagonal(n_src: int, n_out: int, j: int) -> int:
    return round(j * (n_src - 1) / max(n_out - 1, 1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=str(WORK / "quality_multi30k_ende_30m"))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    from nmt_cli.decode.translator import Translator, load_model

    torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    sources = gzip.decompress((SHARED / "multi30k" / "test_2016_flickr.en.gz").read_bytes()).decode().splitlines()
    rows = []
    baseline_hits = total = 0
    for layer in range(len(loaded.model.decoder)):
        translator = Translator(loaded, loaded.recipe.decode, alignments=True, alignment_layer=layer)
        hits = count = 0
        for source, hyps in zip(sources, translator.translate(sources)):
            text, pharaoh = hyps[0].text, hyps[0].alignment or ""
            links = dict((int(j), int(i)) for i, j in (pair.split("-") for pair in pharaoh.split()))
            for i, j in anchors(source, text):
                count += 1
                hits += links.get(j) == i
                if layer == 0:
                    total += 1
                    baseline_hits += diagonal(len(source.split()), len(text.split()), j) == i
        rows.append(
            {
                "alignment": f"decoder layer {layer} cross-attention, heads averaged",
                "anchors": count,
                "anchor accuracy": hits / max(count, 1),
            }
        )
    rows.append({"alignment": "diagonal baseline", "anchors": total, "anchor accuracy": baseline_hits / max(total, 1)})
    print_table(f"alignment anchors, Multi30k test 2016, {args.model}", rows)
    record("alignments", rows, "python benchmarks/bench_alignments.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
