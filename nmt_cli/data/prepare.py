"""``nmt prepare``: clean, learn the vocabulary, encode to binary arrays, bucket.

Every step streams (memory does not grow with the corpus), writes its outputs under
temporary names and renames them when done, and leaves a stamp recording the inputs and
settings it used. A re-run skips steps whose stamp still matches; ``force`` redoes them.
``meta.json`` is written last, so a dataset without it is incomplete.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import platform
import sys
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm
from tqdm import tqdm

from ..config import Recipe, recipe_to_dict, require_data
from ..errors import DataError
from ..utils.cpu import check_parallelism
from ..utils.files import atomic_open, ensure_writable_dir, remove_stale_temps
from ..utils.process import die_with_parent
from ..version import __version__
from .align import INSTALL_HINT, align_pieces, aligner_installed
from .binary import TokenArray, TokenArrayWriter, token_dtype
from .buckets import LengthHistogram, bucket_boundaries, bucket_table
from .corpus import CorpusPair, HashingReader, PairCleaner, ParallelReader, resolve_corpus
from .documents import DocumentNumbers, documents_file, save_documents
from .mixing import temperature_shares
from .vocab import (
    DOC_BREAK,
    SYNTHETIC_TAG,
    extend_vocab,
    load_vocab,
    parent_vocab_blobs,
    vocab_files,
    with_symbols,
)
from .vocab_process import learn_vocab_apart

META_VERSION = 1
Log = Callable[[str], None]


def prepare(recipe: Recipe, force: bool = False, log: Log = print, progress: bool = True) -> dict[str, Any]:
    """Run every step of preparation for ``recipe``; return the metadata written to meta.json."""
    check_parallelism(recipe.data.workers, "data.workers")
    check_parallelism(recipe.vocab.threads, "vocab.threads")
    require_data(recipe)
    if recipe.data.align and not aligner_installed():
        raise DataError(f"data.align is true, but eflomal (the word aligner) is not installed: {INSTALL_HINT}")
    out = ensure_writable_dir(recipe.data_dir)
    (out / "text").mkdir(exist_ok=True)
    (out / ".state").mkdir(exist_ok=True)
    for folder in (out, out / "text", out / ".state"):
        for leftover in remove_stale_temps(folder):
            log(f"removed {leftover}, left behind by a killed process")
    meta_path = out / "meta.json"
    if force:
        meta_path.unlink(missing_ok=True)
    splits = _splits(recipe)
    cleaned = {name: _clean_split(recipe, name, split, out, force, log, progress) for name, split in splits.items()}
    if recipe.multilingual:
        vocab = _learn_joint_vocab_step(recipe, out, splits, cleaned, force, log)
    else:
        vocab = _learn_vocab_step(recipe, out, cleaned["train"], force, log)
    encoded = {
        name: _encode_split(recipe, name, split, out, cleaned[name], vocab, force, log, progress)
        for name, split in splits.items()
    }
    if recipe.data.align:
        encoded["train"] = {**encoded["train"], **_align_step(recipe, out, encoded["train"], force, log)}
    meta = _metadata(recipe, splits, cleaned, vocab, encoded)
    with atomic_open(meta_path, "w", encoding="utf-8") as handle:
        json.dump(meta, handle, indent=2)
    return meta


@dataclass(frozen=True)
class Split:
    """One split to prepare: its corpora and their languages (a multilingual recipe has one split per direction,
    named ``train.en-de``, ``valid.en-de``, ...)."""

    corpora: list[CorpusPair]
    src: str
    tgt: str


def _splits(recipe: Recipe) -> dict[str, Split]:
    splits: dict[str, Split] = {}
    for src, tgt in recipe.directions:
        suffix = f".{src}-{tgt}" if recipe.multilingual else ""
        for name, split in _direction_splits(recipe, src, tgt).items():
            splits[name + suffix] = split
    return splits


def _direction_splits(recipe: Recipe, src: str, tgt: str) -> dict[str, Split]:
    d = recipe.data
    root = pair_root(recipe, src, tgt)
    resolve = lambda prefix: resolve_corpus(root, prefix, src, tgt)  # noqa: E731
    splits = {"train": Split([resolve(p) for p in d.train], src, tgt)}
    if d.valid:
        splits["valid"] = Split([resolve(p) for p in d.valid], src, tgt)
    for prefix in d.test:
        name = Path(prefix).name
        if name in splits:
            raise DataError(f"data.test: split name '{name}' is used twice; give test sets distinct names")
        splits[name] = Split([resolve(prefix)], src, tgt)
    return splits


def pair_root(recipe: Recipe, src: str, tgt: str) -> str:
    """The folder a direction's corpora are read from: ``data.roots`` names it for the pair (either way
    round), else ``data.root``."""
    roots = recipe.data.roots
    return roots.get(f"{src}-{tgt}") or roots.get(f"{tgt}-{src}") or recipe.data.root


# --------------------------------------------------------------------------- step bookkeeping


def _fingerprint(files: list[Path]) -> list[tuple[str, int, int]]:
    return [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _cached(out: Path, step: str, key: str, outputs: list[Path], force: bool) -> dict[str, Any] | None:
    stamp = out / ".state" / f"{step}.json"
    if force or not stamp.is_file() or not all(p.is_file() for p in outputs):
        return None
    try:
        saved = json.loads(stamp.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return saved["result"] if saved.get("key") == key else None


def _stamp(out: Path, step: str, key: str, result: dict[str, Any]) -> dict[str, Any]:
    with atomic_open(out / ".state" / f"{step}.json", "w", encoding="utf-8") as handle:
        json.dump({"key": key, "result": result}, handle)
    return result


# --------------------------------------------------------------------------- cleaning


# Bumped when the reading rules change (BOM, lone CR), so that cleaned text of older versions is redone.
TEXT_RULES = 2


def text_paths(out: Path, split: str, recipe: Recipe) -> tuple[Path, Path]:
    """Where the cleaned text of a bilingual recipe's split is kept (also the references for validation BLEU)."""
    return split_text(out, split, recipe.data.src_lang, recipe.data.tgt_lang)


def split_text(out: Path, split: str, src: str, tgt: str) -> tuple[Path, Path]:
    """Where the cleaned text of split ``split`` (of languages ``src`` and ``tgt``) is kept."""
    return out / "text" / f"{split}.{src}", out / "text" / f"{split}.{tgt}"


def _clean_split(
    recipe: Recipe, split: str, part: Split, out: Path, force: bool, log: Log, progress: bool
) -> dict[str, Any]:
    src_out, tgt_out = split_text(out, split, part.src, part.tgt)
    pairs = part.corpora
    is_train = split.split(".")[0] == "train"
    key = _key(
        _fingerprint([p for pair in pairs for p in (pair.src, pair.tgt, pair.docids) if p is not None]),
        recipe.data.encoding_errors,
        recipe_to_dict(recipe)["data"]["clean"] if is_train else "strip",
        TEXT_RULES,
        *([sorted(recipe.data.synthetic)] if is_train and recipe.data.tag_synthetic else []),
    )
    cached = _cached(out, f"clean.{split}", key, [src_out, tgt_out, documents_file(out / split)], force)
    if cached is not None:
        log(f"[skip] {split}: cleaned text is up to date ({cached['kept']:,} pairs)")
        return cached
    cleaner = PairCleaner(recipe.data.clean)
    tagged = _tagged_corpora(recipe, part) if is_train else set()
    read, hashes = 0, {}
    documents = DocumentNumbers()
    with atomic_open(src_out, "w", encoding="utf-8") as fs, atomic_open(tgt_out, "w", encoding="utf-8") as ft:
        for index, pair in enumerate(pairs):
            reader = ParallelReader(pair, recipe.data.encoding_errors, recipe.data.max_line_bytes)
            stream = tqdm(
                reader,
                desc=f"clean {split}",
                unit=" pairs",
                disable=None if progress else True,
                leave=False,
                file=sys.stderr,
            )
            tag = SYNTHETIC_TAG + " " if pair in tagged else ""
            for (src, tgt), document in zip(stream, _document_ids(pair)):
                kept = cleaner.keep(src, tgt) if is_train else (src.strip(), tgt.strip())
                if kept is None:
                    continue
                fs.write(tag + kept[0] + "\n")
                ft.write(kept[1] + "\n")
                documents.add(None if document is None else (index, document))
            if pair.docids is not None:
                _check_ids(pair, reader.lines)
            read += reader.lines
            hashes.update(reader.hashes)
            for note in reader.notes():
                log(note)
        n_kept = cleaner.kept if is_train else read
        if n_kept == 0:  # raised inside the with: the empty files are discarded, earlier text stays
            _refuse_empty(split, pairs, read, _drops({"dropped": dict(cleaner.dropped)}))
    save_documents(out / split, documents.numbers)
    result = {
        "read": read,
        "kept": n_kept,
        "dropped": dict(cleaner.dropped),
        "sha256": hashes,
        "documents": documents.count,
    }
    log(f"{split}: read {read:,} pairs, kept {n_kept:,}" + (f" ({_drops(result)})" if is_train else ""))
    return _stamp(out, f"clean.{split}", key, result)


def _document_ids(pair: CorpusPair) -> Iterator[str | None]:
    """The document id of each of the corpus's pairs, in order (None without a ``.docids`` file, and past the
    file's end: :func:`_check_ids` then says the counts differ)."""
    if pair.docids is None:
        return itertools.repeat(None)
    ids = (line.strip() or None for line in HashingReader(pair.docids, "strict"))
    return itertools.chain(ids, itertools.repeat(None))


def _check_ids(pair: CorpusPair, pairs: int) -> None:
    """A ``.docids`` file has one non-blank id per pair of its corpus (read again: it is a few bytes a line)."""
    assert pair.docids is not None
    ids = HashingReader(pair.docids, "strict")
    for number, line in enumerate(ids, start=1):
        if not line.strip():
            raise DataError(f"{pair.docids}:{number}: a blank document id; every line names the document of its pair")
    if ids.lines != pairs:
        raise DataError(f"{pair.docids}: {ids.lines:,} document ids for {pairs:,} pairs; give one id per corpus line")


def _tagged_corpora(recipe: Recipe, part: Split) -> set[CorpusPair]:
    """The training corpora whose source lines start with the synthetic-data tag."""
    d = recipe.data
    if not d.tag_synthetic:
        return set()
    root = pair_root(recipe, part.src, part.tgt)
    return {resolve_corpus(root, prefix, part.src, part.tgt) for prefix in d.synthetic}


def _refuse_empty(name: str, pairs: list[CorpusPair], read: int, drops: str) -> None:
    names = ", ".join(f"{p.src} / {p.tgt}" for p in pairs)
    split = name.split(".")[0] if name.split(".")[0] in ("train", "valid") else name
    fix = (
        f"data.clean {drops}; check the files or relax data.clean"
        if split == "train" and read
        else f"give data.{split} non-empty files" + ("" if split == "train" else f", or remove data.{split}")
    )
    raise DataError(f"{names}: the {name} split is empty ({read:,} lines read, 0 kept); {fix}")


def _drops(result: dict[str, Any]) -> str:
    dropped = result["dropped"]
    parts = [f"{dropped.get(step, 0):,} {step}" for step in PairCleaner.STEPS if dropped.get(step)]
    return "dropped " + ", ".join(parts) if parts else "nothing dropped"


# --------------------------------------------------------------------------- vocabulary


def _learn_vocab_step(recipe: Recipe, out: Path, train: dict[str, Any], force: bool, log: Log) -> dict[str, Any]:
    d, v = recipe.data, recipe.vocab
    src_text, tgt_text = text_paths(out, "train", recipe)
    src_name, tgt_name = vocab_files(d.src_lang, d.tgt_lang, v.joint)
    outputs = [out / src_name, out / tgt_name]
    if v.from_:
        return _reuse_vocab(recipe, out, (src_name, tgt_name), train, force, log)
    symbols = [SYNTHETIC_TAG] if d.tag_synthetic else []
    if train.get("documents", train["kept"]) < train["kept"]:  # documents of several pairs: model.concat's break
        symbols.append(DOC_BREAK)
    key = _key(
        train["sha256"],
        train["kept"],
        recipe_to_dict(recipe)["vocab"],
        sorted(train["dropped"].items()),
        *([symbols] if symbols else []),
    )  # unchanged for untagged data: earlier vocabularies stay valid
    cached = _cached(out, "vocab", key, outputs, force)
    if cached is not None:
        log(f"[skip] vocabulary is up to date ({src_name})")
        return cached
    if v.joint:
        log(f"learning a joint {v.type} vocabulary of {v.size:,} pieces ...")
        log(f"  learned from {learn_vocab_apart([src_text, tgt_text], out / src_name, v, symbols)}")
    else:
        for text, name in ((src_text, src_name), (tgt_text, tgt_name)):
            log(f"learning a {v.type} vocabulary of {v.size:,} pieces for {text.name} ...")
            log(f"  learned from {learn_vocab_apart([text], out / name, v, symbols)}")
    sizes = [load_vocab(p).GetPieceSize() for p in outputs]
    return _stamp(
        out, "vocab", key, {"src_model": src_name, "tgt_model": tgt_name, "src_size": sizes[0], "tgt_size": sizes[1]}
    )


def _learn_joint_vocab_step(
    recipe: Recipe, out: Path, splits: dict[str, Split], cleaned: dict[str, Any], force: bool, log: Log
) -> dict[str, Any]:
    """A multilingual recipe's one vocabulary: learned over every language's training text, each language
    weighed by temperature (``data/mixing.py``) so that a small one is not drowned, with one piece per
    target language's tag (``>>de<<``)."""
    name = vocab_files("", "", True)[0]
    texts = _language_texts(out, splits)
    symbols = [language_tag(tgt) for tgt in sorted({tgt for _, tgt in recipe.directions})]
    trains = [cleaned[n] for n in splits if n.split(".")[0] == "train"]
    if recipe.data.tag_synthetic:
        symbols.append(SYNTHETIC_TAG)
    if any(t.get("documents", t["kept"]) < t["kept"] for t in trains):
        symbols.append(DOC_BREAK)
    if recipe.vocab.from_:
        all_texts = [p for paths in texts.values() for p in paths]
        return _reuse_vocab(recipe, out, (name, name), _joined(trains), force, log, symbols, all_texts)
    key = _key(
        [t["sha256"] for t in trains],
        [t["kept"] for t in trains],
        recipe_to_dict(recipe)["vocab"],
        recipe.data.temperature,
        symbols,
    )
    cached = _cached(out, "vocab", key, [out / name], force)
    if cached is not None:
        log(f"[skip] vocabulary is up to date ({name})")
        return cached
    v = recipe.vocab
    counts = {lang: sum(_line_count(p) for p in paths) for lang, paths in texts.items()}
    shares = temperature_shares(counts, recipe.data.temperature, min(v.input_sentence_size, sum(counts.values())))
    samples = [
        _language_sample(out / ".state" / f"vocab-sample.{lang}", texts[lang], counts[lang], shares[lang])
        for lang in sorted(texts)
    ]
    log(
        f"learning a joint {v.type} vocabulary of {v.size:,} pieces over {len(texts)} languages (lines per "
        f"language, weighed at T={recipe.data.temperature:g}: "
        + ", ".join(f"{lang} {shares[lang]:,} of {counts[lang]:,}" for lang in sorted(texts))
        + ") ..."
    )
    try:
        log(f"  learned from {learn_vocab_apart(samples, out / name, v, symbols)}")
    finally:
        for sample in samples:
            sample.unlink(missing_ok=True)
    size = load_vocab(out / name).GetPieceSize()
    return _stamp(out, "vocab", key, {"src_model": name, "tgt_model": name, "src_size": size, "tgt_size": size})


def language_tag(language: str) -> str:
    """The piece that tells a multilingual model its target language (Marian's and OPUS-MT's spelling)."""
    return f">>{language}<<"


def _language_texts(out: Path, splits: dict[str, Split]) -> dict[str, list[Path]]:
    """Each language's cleaned training text, once per corpus file: en-de and de-en read the same corpora, and
    a three-way parallel corpus (Multi30k) gives en-de and en-fr the same English file."""
    texts: dict[str, list[Path]] = {}
    files_seen: set[Path] = set()
    for name, split in splits.items():
        if name.split(".")[0] != "train":
            continue
        sides = zip(split_text(out, name, split.src, split.tgt), (split.src, split.tgt), (0, 1))
        for text, lang, side in sides:
            files = {corpus.src if side == 0 else corpus.tgt for corpus in split.corpora}
            if files <= files_seen:
                continue
            files_seen |= files
            texts.setdefault(lang, []).append(text)
    return texts


def _line_count(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))


def _language_sample(path: Path, texts: list[Path], count: int, wanted: int) -> Path:
    """``wanted`` of a language's ``count`` lines into ``path``: every line as often as fits, then an even
    thinning of the rest (deterministic: the same data gives the same vocabulary)."""
    repeats, rest = divmod(wanted, count)
    with atomic_open(path, "w", encoding="utf-8") as sample:
        for _ in range(repeats):
            for text in texts:
                with open(text, encoding="utf-8", newline="\n") as handle:
                    sample.writelines(handle)
        number = 0
        for text in texts:
            with open(text, encoding="utf-8", newline="\n") as handle:
                for line in handle:
                    if rest and (number * rest) // count != ((number + 1) * rest) // count:
                        sample.write(line)
                    number += 1
    return path


def _joined(trains: list[dict[str, Any]]) -> dict[str, Any]:
    """The cleaning results of several training splits as one (for reusing a parent's vocabulary)."""
    return {"sha256": {k: v for t in trains for k, v in t["sha256"].items()}}


def _reuse_vocab(
    recipe: Recipe,
    out: Path,
    names: tuple[str, str],
    train: dict[str, Any],
    force: bool,
    log: Log,
    tags: list[str] | None = None,
    texts: list[Path] | None = None,
) -> dict[str, Any]:
    """``vocab.from``: the parent model's SentencePiece model(s), copied, so token ids mean the same pieces;
    with ``vocab.extend``, new pieces of this data appended after them. A multilingual recipe gives its
    ``tags`` (and its training ``texts``): the tags the parent lacks (a new target language) are appended too."""
    parent = Path(recipe.vocab.from_)
    blobs = parent_vocab_blobs(parent)
    if recipe.vocab.joint and blobs[0] != blobs[1]:
        raise DataError(
            f"vocab.from: {parent} has separate source and target vocabularies but this recipe asks "
            "for a joint one; set vocab.joint: false"
        )
    extend = recipe.vocab.extend
    key = _key(
        "reuse",
        [hashlib.sha256(b).hexdigest() for b in blobs],
        names,
        extend,
        train["sha256"] if extend else None,
        *([tags] if tags else []),
    )
    outputs = [out / name for name in names]
    cached = _cached(out, "vocab", key, outputs, force)
    if cached is not None:
        log(f"[skip] vocabulary is up to date (reused from {parent})")
        return cached
    if extend:
        paths = texts if texts is not None else list(text_paths(out, "train", recipe))
        sides = [paths] if names[0] == names[1] else [[paths[0]], [paths[1]]]
        grown = [extend_vocab(blobs[i], sides[i], extend, recipe.vocab, out / ".state") for i in range(len(sides))]
        blobs = (grown[0], grown[-1])
        log(f"extended the vocabulary of {parent} by up to {extend:,} pieces of the new data")
    if tags:
        blobs = (with_symbols(blobs[0], tags, f"vocab.from: {parent}", log),) * 2
    for name, blob in zip(names, blobs):
        with atomic_open(out / name, "wb") as handle:
            handle.write(blob)
    sizes = [load_vocab(p).GetPieceSize() for p in outputs]
    log(
        f"reusing the vocabulary of {parent} ({sizes[0]:,} pieces"
        + (f", target {sizes[1]:,})" if names[0] != names[1] else ")")
    )
    return _stamp(
        out,
        "vocab",
        key,
        {"src_model": names[0], "tgt_model": names[1], "src_size": sizes[0], "tgt_size": sizes[1], "from": str(parent)},
    )


# --------------------------------------------------------------------------- encoding

_WORKER: dict[str, spm.SentencePieceProcessor] = {}


def _init_worker(src_model: str, tgt_model: str, parent: int | None = None) -> None:
    if parent is not None:
        die_with_parent(parent)
    _WORKER["src"] = load_vocab(Path(src_model))
    _WORKER["tgt"] = _WORKER["src"] if tgt_model == src_model else load_vocab(Path(tgt_model))


def _encode_side(processor: spm.SentencePieceProcessor, block: bytes) -> tuple[np.ndarray, np.ndarray]:
    ids = processor.encode(_block_lines(block), out_type=int)
    # Ids in the dtype of the .bin file (2 bytes for most vocabularies): less to send back and hold.
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int32, count=len(ids))
    dtype = token_dtype(processor.GetPieceSize())
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum()))
    return flat, lengths


def _encode_chunk(chunk: tuple[bytes, bytes]) -> tuple[np.ndarray, ...]:
    src, tgt = chunk
    return (*_encode_side(_WORKER["src"], src), *_encode_side(_WORKER["tgt"], tgt))


def _read_chunks(src: Path, tgt: Path, size: int) -> Iterator[tuple[bytes, bytes]]:
    """Blocks of ``size`` lines of both sides as raw UTF-8: one block costs a worker's pipe and this
    process's memory far less than a list of strings (the peak of the whole prepare is here)."""
    with open(src, "rb") as fs, open(tgt, "rb") as ft:  # binary lines end at b"\n" only, as written
        while True:
            src_block = b"".join(itertools.islice(fs, size))
            tgt_block = b"".join(itertools.islice(ft, size))
            if not src_block:
                return
            yield src_block, tgt_block


def _block_lines(block: bytes) -> list[str]:
    lines = block.decode("utf-8").split("\n")  # not splitlines(): \x85 or U+2028 inside a line stay
    if lines[-1] == "":  # after the block's last line end (absent only at a file's end without one)
        lines.pop()
    return lines


def _encoded_chunks(
    chunks: Iterator[tuple[bytes, bytes]], workers: int, models: tuple[str, str]
) -> Iterator[tuple[np.ndarray, ...]]:
    """Encode chunks in order; at most one chunk per worker plus one are in flight (bounded memory)."""
    if workers <= 1:
        _init_worker(*models)
        yield from map(_encode_chunk, chunks)
        return
    with ProcessPoolExecutor(
        workers, mp_context=get_context("spawn"), initializer=_init_worker, initargs=(*models, os.getpid())
    ) as pool:
        pending: deque = deque()
        try:
            for chunk in chunks:
                pending.append(pool.submit(_encode_chunk, chunk))
                if len(pending) > workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        except BrokenProcessPool:
            raise DataError(
                f"{Path(models[0]).parent}: an encoding worker died; nothing half-written was kept. Killed for "
                "lack of memory? Lower data.workers or data.chunk_lines. Called from a Python script? Call "
                'prepare() under `if __name__ == "__main__":` (workers are spawned processes that import the script)'
            ) from None


def _encode_split(
    recipe: Recipe,
    split: str,
    part: Split,
    out: Path,
    cleaned: dict[str, Any],
    vocab: dict[str, Any],
    force: bool,
    log: Log,
    progress: bool,
) -> dict[str, Any]:
    d = recipe.data
    src_text, tgt_text = split_text(out, split, part.src, part.tgt)
    prefixes = [out / f"{split}.{part.src}", out / f"{split}.{part.tgt}"]
    outputs = [p.with_name(p.name + ext) for p in prefixes for ext in (".bin", ".idx")]
    key = _key(cleaned["sha256"], cleaned["kept"], vocab)
    cached = _cached(out, f"encode.{split}", key, outputs, force)
    if cached is not None:
        log(f"[skip] {split}: encoded arrays are up to date")
        return cached
    dtypes = (token_dtype(vocab["src_size"]), token_dtype(vocab["tgt_size"]))
    writers = [TokenArrayWriter(prefixes[0], dtypes[0]), TokenArrayWriter(prefixes[1], dtypes[1])]
    histogram = LengthHistogram()
    workers = d.workers or os.cpu_count() or 1
    models = (str(out / vocab["src_model"]), str(out / vocab["tgt_model"]))
    try:
        with tqdm(
            total=cleaned["kept"],
            desc=f"encode {split}",
            unit=" pairs",
            leave=False,
            disable=None if progress else True,
            file=sys.stderr,
        ) as bar:
            chunks = _read_chunks(src_text, tgt_text, d.chunk_lines)
            for src_flat, src_len, tgt_flat, tgt_len in _encoded_chunks(chunks, workers, models):
                writers[0].append(src_flat, src_len)
                writers[1].append(tgt_flat, tgt_len)
                histogram.add(np.maximum(src_len, tgt_len) + 1)
                bar.update(len(src_len))
    except BaseException:
        for writer in writers:
            writer.abort()
        raise
    for writer in writers:
        writer.commit()
    result = {
        "sentences": writers[0].sentences,
        "src_tokens": writers[0].tokens,
        "tgt_tokens": writers[1].tokens,
        "histogram": histogram.counts.tolist(),
        "dtypes": [dtypes[0].name, dtypes[1].name],
    }
    log(
        f"{split}: encoded {result['sentences']:,} pairs "
        f"({result['src_tokens']:,} source and {result['tgt_tokens']:,} target tokens)"
    )
    return _stamp(out, f"encode.{split}", key, result)


# --------------------------------------------------------------------------- word alignment


def _align_step(recipe: Recipe, out: Path, encoded: dict[str, Any], force: bool, log: Log) -> dict[str, Any]:
    """Word-align the encoded training pairs (``data.align``) for guided alignment: ``train.align.bin/.idx``."""
    d = recipe.data
    prefix = out / "train.align"
    outputs = [prefix.with_name(prefix.name + ext) for ext in (".bin", ".idx")]
    key = _key(encoded, "eflomal grow-diag-final-and")
    cached = _cached(out, "align.train", key, outputs, force)
    if cached is not None:
        log("[skip] train: word alignments are up to date")
        return cached
    dtypes = encoded["dtypes"]
    src = TokenArray(out / f"train.{d.src_lang}", np.dtype(dtypes[0]))
    tgt = TokenArray(out / f"train.{d.tgt_lang}", np.dtype(dtypes[1]))
    log(f"train: word-aligning {len(src):,} pairs with eflomal (both directions, grow-diag-final-and)")
    links = align_pieces(src, tgt, prefix)
    log(f"train: {links:,} alignment links ({links / max(encoded['tgt_tokens'], 1):.2f} per target piece)")
    return _stamp(out, "align.train", key, {"alignment_links": links})


# --------------------------------------------------------------------------- metadata


def _metadata(
    recipe: Recipe,
    splits: dict[str, Split],
    cleaned: dict[str, Any],
    vocab: dict[str, Any],
    encoded: dict[str, Any],
) -> dict[str, Any]:
    trains = [name for name in splits if name.split(".")[0] == "train"]
    histogram = _summed([np.asarray(encoded[name]["histogram"], dtype=np.int64) for name in trains])
    bounds = bucket_boundaries(histogram)
    directions = {"pairs": list(recipe.data.pairs)} if recipe.multilingual else {}
    return {
        "format_version": META_VERSION,
        "recipe": recipe.name,
        "src_lang": recipe.data.src_lang,
        "tgt_lang": recipe.data.tgt_lang,
        **directions,
        "vocab": {**vocab, **recipe_to_dict(recipe)["vocab"]},
        "splits": {
            name: {
                "files": [[str(p.src), str(p.tgt)] for p in splits[name].corpora],
                **({"direction": f"{splits[name].src}-{splits[name].tgt}"} if recipe.multilingual else {}),
                "read": cleaned[name]["read"],
                "kept": cleaned[name]["kept"],
                "documents": cleaned[name].get("documents", cleaned[name]["kept"]),
                "dropped": cleaned[name]["dropped"],
                **{k: v for k, v in encoded[name].items() if k != "histogram"},
            }
            for name in splits
        },
        "buckets": {"bounds": bounds, "table": bucket_table(histogram, bounds)},
        "inputs_sha256": {path: h for name in splits for path, h in cleaned[name]["sha256"].items()},
        "versions": {
            "nmt": __version__,
            "sentencepiece": spm.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
        },
    }


def _summed(histograms: list[np.ndarray]) -> np.ndarray:
    total = np.zeros(max(len(h) for h in histograms), dtype=np.int64)
    for histogram in histograms:
        total[: len(histogram)] += histogram
    return total


def load_meta(data_dir: Path) -> dict[str, Any]:
    """Read ``meta.json`` of a prepared dataset, or explain how to create it."""
    path = data_dir / "meta.json"
    if not path.is_file():
        raise DataError(
            f"{path}: not found; the dataset is not prepared (or preparation did not finish): run `nmt prepare RECIPE`"
        )
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise DataError(f"{path}: unreadable; re-run `nmt prepare --force`") from None
    if meta.get("format_version") != META_VERSION:
        raise DataError(f"{path}: prepared with an incompatible nmt version; re-run `nmt prepare --force`")
    return meta
