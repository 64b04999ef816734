"""What training reads from a prepared folder (``nmt prepare``): the memory-mapped pairs, the vocabularies and
what identifies the data (checked on resuming)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sentencepiece as spm

from ..config import Recipe
from ..data.align import load_links
from ..data.batches import ParallelData
from ..data.binary import TokenArray
from ..data.context import Context, break_id, context_starts
from ..data.documents import load_documents
from ..data.prepare import load_meta, text_paths
from ..data.vocab import load_vocab
from ..errors import NmtError
from .checkpoint import data_identity
from .validate import Vocabularies


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


def load_dataset(recipe: Recipe) -> Dataset:
    """Open the prepared dataset of ``recipe`` (memory-mapped)."""
    data_dir = recipe.data_dir
    meta = load_meta(data_dir)
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
            data.previous = context_starts(documents, recipe.model.recurrence)
            data.train_previous = split == "train" and recipe.train.train_previous
    return Dataset(train, valid, valid_refs, blobs, vocab["src_size"], vocab["tgt_size"], vocabs, data_identity(meta))


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
