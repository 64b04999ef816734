"""How good are ``nmt translate --alignments``? No gold word alignments for Multi30k can be had offline,
so this measures what can be checked automatically, and says so:

    python benchmarks/bench_alignments.py [--model RUN] [--threads 2]
    python benchmarks/bench_alignments.py --aer DATA_DIR --model RUN [--model RUN2 ...]

**Alignment error rate** (``--aer``, Och and Ney 2003, with every reference link sure): the held-out
``valid`` split of a prepared folder (``DATA_DIR/text/valid.*``), its reference translations read by each
model with teacher forcing, against the links eflomal finds for those pairs when it aligns them together
with the training text (both directions, grow-diag-final-and): a statistical aligner's view, not gold
links. Reported per model for each decoder layer's cross-attention, heads averaged, and, for a model
trained with ``train.guided_alignment``, its guided head (what ``--alignments`` then uses).

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
from pathlib import Path

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


def aer(found: list[set[tuple[int, int]]], reference: list[set[tuple[int, int]]]) -> dict[str, float]:
    """Alignment error rate, precision and recall over a corpus, every reference link sure."""
    hits = sum(len(a & s) for a, s in zip(found, reference))
    n_found, n_ref = sum(map(len, found)), sum(map(len, reference))
    return {
        "AER": 1 - 2 * hits / max(n_found + n_ref, 1),
        "precision": hits / max(n_found, 1),
        "recall": hits / max(n_ref, 1),
    }


def aer_rows(model_dir: str, data_dir: str, threads: int) -> list[dict]:
    """AER of each decoder layer (heads averaged) and, for a guided model, its guided head."""
    import torch

    from nmt_cli.data.align import symmetrised
    from nmt_cli.decode.attention_maps import cross_attention, word_alignment, word_starts
    from nmt_cli.decode.loading import load_model
    from nmt_cli.model.guided import GUIDED_HEAD, guided_layer

    torch.set_num_threads(threads)
    loaded = load_model(model_dir)
    src_lang, tgt_lang = loaded.recipe.data.src_lang, loaded.recipe.data.tgt_lang
    text = lambda split, lang: (Path(data_dir) / "text" / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()  # noqa: E731
    held_src, held_tgt = text("valid", src_lang), text("valid", tgt_lang)
    train_src, train_tgt = text("train", src_lang), text("train", tgt_lang)
    links = list(symmetrised(train_src + held_src, train_tgt + held_tgt))[len(train_src) :]
    src_ids = [loaded.src_vocab.EncodeAsIds(line) for line in held_src]
    tgt_ids = [loaded.tgt_vocab.EncodeAsIds(line) for line in held_tgt]
    src_pieces = [[loaded.src_vocab.IdToPiece(t) for t in ids] for ids in src_ids]
    tgt_pieces = [[loaded.tgt_vocab.IdToPiece(t) for t in ids] for ids in tgt_ids]
    # pairs whose SentencePiece words are the whitespace words eflomal aligned (normalisation may differ)
    keep = [
        k for k in range(len(held_src))
        if src_ids[k] and tgt_ids[k] and word_starts(src_pieces[k])[-1] + 1 == len(held_src[k].split())
        and word_starts(tgt_pieces[k])[-1] + 1 == len(held_tgt[k].split())
    ]  # fmt: skip
    reference = [set(links[k]) for k in keep]
    model = loaded.model
    guided = loaded.recipe.train.guided_alignment > 0
    readings = [(f"layer {layer}, heads averaged", layer, None) for layer in range(len(model.decoder))]
    if guided:
        readings.append(
            (f"layer {guided_layer(len(model.decoder))}, guided head", guided_layer(len(model.decoder)), GUIDED_HEAD)
        )
    rows = []
    for name, layer, head in readings:
        crosses = cross_attention(model, [src_ids[k] for k in keep], [tgt_ids[k] for k in keep], layer)
        found = []
        for k, cross in zip(keep, crosses):
            heads = cross if head is None else cross[head : head + 1]
            found.append(set(word_alignment(heads, src_pieces[k], tgt_pieces[k])))
        rows.append({"model": model_dir, "alignment": name, "pairs": len(keep), **aer(found, reference)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", action="append", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--aer", metavar="DATA_DIR", help="alignment error rate on DATA_DIR's valid split")
    args = parser.parse_args()
    models = args.model or [str(WORK / "quality_multi30k_ende_30m")]
    if args.aer:
        rows = [row for model in models for row in aer_rows(model, args.aer, args.threads)]
        print_table(f"alignment error rate against eflomal, {args.aer} valid", rows)
        record("alignment_error_rate", rows, "python benchmarks/bench_alignments.py " + " ".join(sys.argv[1:]))
        return
    args.model = models[0]
    import torch

    from nmt_cli.decode.loading import load_model
    from nmt_cli.decode.translator import Translator

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
