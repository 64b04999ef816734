"""Build a document-level corpus from po4a catalogues: manpages-l10n's, or any project translated with po4a.

    python scripts/manpages_corpus.py --po CHECKOUT/po --lang de --lang fr --out data/manpages

One catalogue is one document (``po/LANG/manN/PAGE.po`` is the page ``manN/PAGE``): its entries in file order, the
English ``msgid`` and the translated ``msgstr`` as one parallel paragraph, without the header, obsolete, fuzzy
and untranslated entries, whitespace inside a paragraph folded to one space. Writes, per language, for each
split: ``SPLIT.en-LANG.en.gz``, ``SPLIT.en-LANG.LANG.gz`` and ``SPLIT.en-LANG.docids.gz`` (the page of each line),
the layout of ``../shared/data/manpages`` that ``recipes/manpages_*.yaml`` read, so ``nmt prepare`` keeps the pages
as documents. A page goes to one split by a hash of its name (``--valid`` and ``--test`` percent of pages; the
rest trains), so a page never spans two splits and re-running gives the same splits.

Catalogues are read with polib, the maintained reader of PO files (a dependency of nmt's gettext support).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path

import polib

SPLITS = ("train", "valid", "test")


def paragraphs(catalogue: Path) -> Iterator[tuple[str, str]]:
    """A catalogue's translated entries in file order, as (English, translation) with whitespace folded."""
    for entry in polib.pofile(str(catalogue), wrapwidth=0):
        if entry.obsolete or "fuzzy" in entry.flags or not entry.msgid or not entry.translated():
            continue
        english, translated = " ".join(entry.msgid.split()), " ".join(entry.msgstr.split())
        if english and translated:
            yield english, translated


def split_of(page: str, valid: float, test: float) -> str:
    """The split a page belongs to, from a hash of its name alone (stable across runs and machines)."""
    bucket = int.from_bytes(hashlib.sha256(page.encode("utf-8")).digest()[:8], "big") / 2**64 * 100
    if bucket < valid:
        return "valid"
    if bucket < valid + test:
        return "test"
    return "train"


def build(po_root: Path, lang: str, out: Path, valid: float, test: float) -> dict[str, tuple[int, int]]:
    """Write the three splits of EN-LANG; per split, (documents, pairs)."""
    folder = po_root / lang
    if not folder.is_dir():
        raise SystemExit(f"{folder}: no catalogues for '{lang}' (expected po/{lang}/manN/PAGE.po)")
    out.mkdir(parents=True, exist_ok=True)
    pair = f"en-{lang}"
    names = {split: [out / f"{split}.{pair}.{suffix}.gz" for suffix in ("en", lang, "docids")] for split in SPLITS}
    temporary = {split: [path.with_name(path.name + ".tmp") for path in paths] for split, paths in names.items()}
    handles = {split: [gzip.open(path, "wt", encoding="utf-8") for path in paths] for split, paths in temporary.items()}
    counts = {split: [0, 0] for split in SPLITS}
    try:
        for catalogue in sorted(folder.glob("man*/*.po")):
            page = f"{catalogue.parent.name}/{catalogue.stem}"
            split = split_of(page, valid, test)
            rows = list(paragraphs(catalogue))
            if not rows:
                continue
            english, translated, ids = handles[split]
            for source, target in rows:
                english.write(source + "\n")
                translated.write(target + "\n")
                ids.write(page + "\n")
            counts[split][0] += 1
            counts[split][1] += len(rows)
    except BaseException:
        for files in handles.values():
            for handle in files:
                handle.close()
        for paths in temporary.values():
            for path in paths:
                path.unlink(missing_ok=True)
        raise
    for files in handles.values():
        for handle in files:
            handle.close()
    for split in SPLITS:  # every file whole, or none replaced
        for tmp, final in zip(temporary[split], names[split]):
            tmp.replace(final)
    return {split: (documents, pairs) for split, (documents, pairs) in counts.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--po", type=Path, required=True, help="the catalogues' root: po/ of a manpages-l10n checkout")
    parser.add_argument("--lang", action="append", required=True, help="target language (repeatable): de, fr, ...")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--valid", type=float, default=2.5, help="percent of pages for validation")
    parser.add_argument("--test", type=float, default=3.0, help="percent of pages for testing")
    args = parser.parse_args(argv)
    for lang in args.lang:
        for split, (documents, pairs) in build(args.po, lang, args.out, args.valid, args.test).items():
            print(f"en-{lang} {split}: {documents:,} documents, {pairs:,} pairs", file=sys.stderr)


if __name__ == "__main__":
    main()
