"""The recipe's data, vocabulary and download sections, and the ``SRC-TGT`` pairs they name."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from .fields import _opt, _sub


@dataclass(frozen=True)
class CleanConfig:
    """Filters applied to training pairs (Moses clean-corpus-n practice); valid/test are only stripped."""

    min_tokens: int = _opt(1, "drop pairs with fewer whitespace tokens on either side", ge=0, le=100_000)
    max_tokens: int = _opt(250, "drop pairs with more whitespace tokens on either side", ge=1, le=1_000_000)
    max_ratio: float = _opt(1.5, "drop pairs whose token-count ratio exceeds this (0 disables)", ge=0, le=1000)
    dedup: bool = _opt(False, "drop exact duplicate pairs (keeps 8 bytes per distinct pair in memory)")


@dataclass(frozen=True)
class DataConfig:
    """Where the parallel text is and where the prepared dataset goes."""

    src_lang: str = _opt("", "source language suffix of the corpus files, e.g. en")
    tgt_lang: str = _opt("", "target language suffix of the corpus files, e.g. de")
    root: str = _opt(".", "folder that relative corpus prefixes are read from")
    train: tuple[str, ...] = _opt((), "training corpus prefixes: PREFIX.SRC[.gz] and PREFIX.TGT[.gz]")
    valid: tuple[str, ...] = _opt((), "validation corpus prefixes")
    test: tuple[str, ...] = _opt((), "test corpus prefixes, each kept as its own split")
    output: str = _opt("", "prepared dataset folder (default: data-bin/RECIPE_NAME)")
    synthetic: tuple[str, ...] = _opt((), "training prefixes (among data.train) that are synthetic, e.g. back-translations")
    tag_synthetic: bool = _opt(
        False,
        "start the source side of the data.synthetic corpora with the token <BT> "
        "(tagged back-translation, Caswell et al. 2019); <BT> is one piece of the vocabulary",
    )
    clean: CleanConfig = _sub(CleanConfig)
    workers: int = _opt(0, "encoding worker processes (0: one per CPU core)", ge=0, le=4096)
    chunk_lines: int = _opt(20000, "lines per encoding chunk (bounds memory per worker)", ge=1, le=10_000_000)
    encoding_errors: Literal["strict", "replace"] = _opt(
        "strict", "on invalid UTF-8: stop with the file and line (strict) or replace the bytes"
    )
    max_line_bytes: int = _opt(
        1 << 20,
        "longest corpus line read, in bytes; a longer one is refused with its file and line (a decompression "
        "bomb, or not one sentence per line)",
        ge=1024,
        le=1 << 31,
    )
    align: bool = _opt(
        False,
        "word-align the training pairs with eflomal for train.guided_alignment (pip install 'nmt-cli[align]')",
    )
    pairs: tuple[str, ...] = _opt(
        (),
        "directions of a multilingual model, e.g. [en-de, de-en, en-fr, fr-en], instead of data.src_lang and "
        "data.tgt_lang: one joint vocabulary, one tag per target language (>>de<<), one model",
    )
    roots: dict[str, str] = field(
        default_factory=dict,
        metadata={
            "help": "with data.pairs: a language pair's own folder (en-fr: /data/enfr), where corpora live apart; "
            "a pair not named reads data.root"
        },
    )
    temperature: float = _opt(
        2.0,
        "with data.pairs: how training mixes directions: a direction's share of each epoch is its size to the power "
        "1/T (1: in proportion to size; large: the same for every direction), as fairseq's temperature sampling; "
        "2 was best on validation with one direction ten times the other's data (docs/benchmarks.md)",
        ge=1,
        le=1000,
    )
    language_tag: Literal["source", "target"] = _opt(
        "source",
        "with data.pairs: where the target language's tag goes: first token of the source (Johnson et al. 2017, "
        "Marian's >>fra<<) or first token the decoder reads (fairseq's --decoder-langtok)",
    )


@dataclass(frozen=True)
class VocabConfig:
    """SentencePiece subword vocabulary."""

    type: Literal["bpe", "unigram"] = _opt("bpe", "bpe, or unigram (word-piece style)")
    size: int = _opt(37000, "vocabulary size per model (the paper: 37k joint BPE for EN-DE)", ge=16, le=10_000_000)
    joint: bool = _opt(True, "one model for both languages (required by model.share_embeddings)")
    character_coverage: float = _opt(1.0, "share of characters covered (0.9995 for CJK)", gt=0, le=1)
    input_sentence_size: int = _opt(
        10_000_000,
        "most lines the vocabulary is learned from; with more, an even sample (bpe counts their words, "
        "unigram holds these lines in memory, ~22 bytes a character, checked against free memory first)",
        ge=1000,
        le=2**31 - 1,
    )
    threads: int = _opt(0, "SentencePiece training threads (0: all cores)", ge=0, le=4096)
    normalization: Literal["identity", "nmt_nfkc", "nfkc"] = _opt(
        "identity", "SentencePiece normalization; identity keeps the text exactly as cleaned"
    )
    byte_fallback: bool = _opt(True, "spell unseen characters as UTF-8 bytes instead of <unk>")
    extend: int = _opt(
        0,
        "with vocab.from: learn up to N new pieces from the new training data and append them "
        "to the reused vocabulary (old ids unchanged; train.init_from grows the embeddings)",
        ge=0,
        le=10_000_000,
    )
    from_: str = field(
        default="",
        metadata={
            "key": "from",
            "help": "reuse a trained model's SentencePiece model(s) instead of learning new ones, so "
            "token ids match it (fine-tuning): a run folder, a model or checkpoint .pt file, a prepared data folder "
            "or a .model file",
        },
    )


@dataclass(frozen=True)
class DownloadSource:
    """One file to fetch for ``nmt download``: a URL, its SHA-256, and what to unpack from it."""

    url: str = _opt("", "where to fetch the file (http, https or file URL)")
    sha256: str = _opt("", "hex SHA-256 of the file; the download is refused if it differs")
    extract: dict[str, str] = field(
        default_factory=dict, metadata={"help": "tar member -> file name under data.root (.sgm members become plain text)"}
    )
    save_as: str = _opt("", "for a plain file: its name under data.root (default: the URL's file name)")


PAIR = re.compile(r"([A-Za-z]{2,3}(?:_[A-Za-z]{4})?)-([A-Za-z]{2,3}(?:_[A-Za-z]{4})?)")


def parse_pair(pair: str) -> tuple[str, str]:
    """``en-de`` as ("en", "de"): language codes of 2-3 letters, a script after ``_`` where needed (sr_Cyrl)."""
    match = PAIR.fullmatch(pair.strip())
    if not match:
        raise ValueError(f"'{pair}' is not a direction; write SOURCE-TARGET, e.g. en-de")
    return match.group(1), match.group(2)
