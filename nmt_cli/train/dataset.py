"""What training reads from a prepared folder (``nmt prepare``): the memory-mapped pairs, the vocabularies and
what identifies the data (checked on resuming)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm

from ..config import Recipe
from ..data.align import load_links
from ..data.batches import ParallelData
from ..data.binary import JoinedTokenArrays, TokenArray
from ..data.chains import Chains
from ..data.context import Context, break_id
from ..data.documents import load_documents
from ..data.prepare import language_tag, load_meta, split_text, text_paths
from ..data.vocab import load_vocab
from ..errors import NmtError
from .checkpoint import data_identity


@dataclass(frozen=True)
class Vocabularies:
    """The source and target SentencePiece models of a run."""

    src: spm.SentencePieceProcessor
    tgt: spm.SentencePieceProcessor


@dataclass
class Dataset:
    """Everything training reads from the prepared folder."""

    train: ParallelData
    valid: ParallelData | None
    valid_refs: Path | None
    vocab_blobs: dict[str, bytes]
    src_size: int
    tgt_size: int
    vocabs: Vocabularies
    identity: dict[str, Any]  # what makes it the same prepared data (checked on resume)
    directions: list[Direction] = field(default_factory=list)  # data.pairs: each direction's validation rows


@dataclass(frozen=True)
class Direction:
    """One direction of a multilingual dataset: its tag, and its rows of the joined validation set and their
    references (its validation loss and BLEU are reported apart)."""

    name: str  # en-de
    tag: int
    rows: range
    references: Path | None


def load_dataset(recipe: Recipe) -> Dataset:
    """Open the prepared dataset of ``recipe`` (memory-mapped)."""
    data_dir = recipe.data_dir
    meta = load_meta(data_dir)
    if recipe.multilingual or meta.get("pairs"):
        return _load_multilingual(recipe, data_dir, meta)
    if meta["src_lang"] != recipe.data.src_lang or meta["tgt_lang"] != recipe.data.tgt_lang:
        raise NmtError(
            f"{data_dir}: prepared for {meta['src_lang']}-{meta['tgt_lang']}, but the recipe says "
            f"{recipe.data.src_lang}-{recipe.data.tgt_lang}; re-run `nmt prepare`"
        )
    vocab = meta["vocab"]
    if recipe.model.share_embeddings and not meta["vocab"]["joint"] and not _one_id_space(data_dir, vocab):
        raise NmtError(
            f"{data_dir}: has one vocabulary per side, but model.share_embeddings needs a joint one; "
            "set model.share_embeddings: false or prepare with vocab.joint: true"
        )
    dtypes = tuple(meta["splits"]["train"]["dtypes"])
    train = ParallelData.load(data_dir, "train", recipe.data.src_lang, recipe.data.tgt_lang, dtypes)
    if recipe.train.guided_alignment > 0:
        train.links = _training_links(data_dir, meta, len(train))
    valid = valid_refs = None
    if "valid" in meta["splits"]:
        valid = ParallelData.load(data_dir, "valid", recipe.data.src_lang, recipe.data.tgt_lang, dtypes)
        valid_refs = text_paths(data_dir, "valid", recipe)[1]
    blobs = {"src": (data_dir / vocab["src_model"]).read_bytes(), "tgt": (data_dir / vocab["tgt_model"]).read_bytes()}
    vocabs = Vocabularies(load_vocab(data_dir / vocab["src_model"]), load_vocab(data_dir / vocab["tgt_model"]))
    for split, data in (("train", train), ("valid", valid)):
        if data is not None and recipe.model.concat:
            data.context = document_context(recipe, data_dir, split, len(data), vocabs.src, vocabs.tgt)
        if data is not None and recipe.model.recurrence:
            documents = load_documents(data_dir / split, len(data))
            if split == "train" and len(documents) and documents[-1] + 1 == len(documents):
                raise NmtError(
                    f"{data_dir}: model.recurrence reads the previous sentences of a document, but every training pair "
                    "is a document of its own: put a PREFIX.docids file beside the corpus and re-run `nmt prepare --force`"
                )
            src, tgt = data.src.lengths.astype(np.int64), data.tgt.lengths.astype(np.int64)
            widths = np.maximum(src, tgt) + 1
            # validation always reads every pair after its past, as translation does
            leads = recipe.model.recurrence if recipe.train.chain_leads or split != "train" else 0
            data.chains = Chains.of(documents, widths, leads, recipe.train.chain_tokens)
    return Dataset(train, valid, valid_refs, blobs, vocab["src_size"], vocab["tgt_size"], vocabs, data_identity(meta))


def _load_multilingual(recipe: Recipe, data_dir: Path, meta: dict[str, Any]) -> Dataset:
    """A multilingual dataset (``data.pairs``): every direction's split joined into one, each pair with its
    direction and its target language's tag."""
    if meta.get("pairs") != list(recipe.data.pairs):
        raise NmtError(
            f"{data_dir}: prepared for the directions {', '.join(meta.get('pairs') or [])}, but the recipe says "
            f"{', '.join(recipe.data.pairs) or 'data.src_lang-data.tgt_lang'}; re-run `nmt prepare`"
        )
    if recipe.model.reads_context:
        raise NmtError(
            "data.pairs: document context (model.concat, model.recurrence) is not available for "
            "multilingual models yet; train one model per direction for it"
        )
    vocab = meta["vocab"]
    vocabs = Vocabularies(load_vocab(data_dir / vocab["src_model"]), load_vocab(data_dir / vocab["tgt_model"]))
    tags = [_tag_id(vocabs.src, tgt, data_dir) for _, tgt in recipe.directions]
    names = [f"{src}-{tgt}" for src, tgt in recipe.directions]
    dtypes = tuple(meta["splits"][f"train.{names[0]}"]["dtypes"])
    train = _joined(data_dir, "train", recipe, tags, dtypes)
    valid, directions = None, []
    if f"valid.{names[0]}" in meta["splits"]:
        valid = _joined(data_dir, "valid", recipe, tags, dtypes)
        assert valid.directions is not None
        counts = np.bincount(valid.directions, minlength=len(names))
        starts = np.concatenate([[0], np.cumsum(counts)])
        for number, ((src, tgt), name) in enumerate(zip(recipe.directions, names)):
            references = split_text(data_dir, f"valid.{name}", src, tgt)[1]
            directions.append(Direction(name, tags[number], range(int(starts[number]), int(starts[number + 1])), references))
    blob = (data_dir / vocab["src_model"]).read_bytes()
    size = vocab["src_size"]
    return Dataset(train, valid, None, {"src": blob, "tgt": blob}, size, size, vocabs, data_identity(meta), directions)


def _joined(data_dir: Path, split: str, recipe: Recipe, tags: list[int], dtypes: tuple[str, ...]) -> ParallelData:
    parts = [
        ParallelData.load(data_dir, f"{split}.{src}-{tgt}", src, tgt, (dtypes[0], dtypes[1]))
        for src, tgt in recipe.directions
    ]
    counts = [len(part) for part in parts]
    return ParallelData(
        JoinedTokenArrays([part.src for part in parts]),
        JoinedTokenArrays([part.tgt for part in parts]),
        directions=np.repeat(np.arange(len(parts)), counts),
        tags=np.repeat(np.asarray(tags, dtype=np.int64), counts),
        tag_side=recipe.data.language_tag,
    )


def _tag_id(vocab: spm.SentencePieceProcessor, language: str, data_dir: Path) -> int:
    tag = language_tag(language)
    token = vocab.PieceToId(tag)
    if token == vocab.unk_id():
        raise NmtError(f"{data_dir}: the vocabulary has no piece {tag}; re-run `nmt prepare --force`")
    return token


def document_context(
    recipe: Recipe,
    data_dir: Path,
    split: str,
    pairs: int,
    src_vocab: spm.SentencePieceProcessor,
    tgt_vocab: spm.SentencePieceProcessor,
) -> Context:
    """What ``model.concat`` reads each pair of ``split`` with: its document's earlier pairs (data/context.py)."""
    breaks = [break_id(v, f"{data_dir}: model.concat") for v in (src_vocab, tgt_vocab)]
    documents = load_documents(data_dir / split, pairs)
    return Context.of(documents, recipe.model.concat, breaks[0], breaks[1] if recipe.model.concat_target else None)


def _training_links(data_dir: Path, meta: dict[str, Any], pairs: int) -> TokenArray:
    """The word alignments guided alignment learns from, checked against the training pairs."""
    if "alignment_links" not in meta["splits"]["train"]:
        raise NmtError(
            f"{data_dir}: train.guided_alignment needs word-aligned training data; "
            "set data.align: true and re-run `nmt prepare`"
        )
    links = load_links(data_dir / "train.align")
    if len(links) != pairs:
        raise NmtError(
            f"{data_dir}: train.align holds {len(links)} alignments for {pairs} pairs; re-run `nmt prepare --force`"
        )
    return links


def _one_id_space(data_dir: Path, vocab: dict[str, Any]) -> bool:
    """Separate source and target models whose ids mean the same pieces (an imported MarianMT model's, rebuilt
    over its one id space by convert/shared_ids.py) can share one embedding as a joint model does."""
    src, tgt = load_vocab(data_dir / vocab["src_model"]), load_vocab(data_dir / vocab["tgt_model"])
    size = src.GetPieceSize()
    return size == tgt.GetPieceSize() and all(src.IdToPiece(i) == tgt.IdToPiece(i) for i in range(size))
