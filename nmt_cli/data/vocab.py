"""SentencePiece vocabularies: learning them and loading them.

Special ids are fixed for every model nmt trains, so the model never needs the vocabulary
object: pad 0, unk 1, bos 2, eos 3.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import sentencepiece as spm

from ..config import VocabConfig
from ..errors import CheckpointError, DataError
from ..utils.files import atomic_path
from ..utils.memory import available_memory
from ..utils.run_folder import RunFolder
from .unigram_sample import UnigramSample, check_fits, estimate_sample
from .word_counts import WordCounts, count_words

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SYNTHETIC_TAG = "<BT>"  # data.tag_synthetic: first source token of synthetic pairs, one vocabulary piece
DOC_BREAK = "<brk>"  # model.concat: ends each context sentence; one piece of vocabularies learnt from documents


def vocab_files(src_lang: str, tgt_lang: str, joint: bool) -> tuple[str, str]:
    """File names of the (source, target) SentencePiece models inside a data or model folder."""
    if joint:
        return "spm.model", "spm.model"
    return f"spm.{src_lang}.model", f"spm.{tgt_lang}.model"


def learn_vocab(
    inputs: Sequence[Path], output: Path, config: VocabConfig, hard_limit: bool = True, symbols: Sequence[str] = ()
) -> WordCounts | UnigramSample:
    """Train a SentencePiece model on the text files ``inputs`` and write it to ``output``.

    A BPE model is learned from the inputs' word counts (see :mod:`.word_counts`: the same model
    as from the sentences, in memory that grows with distinct words). A unigram model is learned
    from a sample of at most ``input_sentence_size`` sentences, which SentencePiece holds in memory:
    checked to fit first (:mod:`.unigram_sample`). Returns what it was learned from, for the log.
    SentencePiece's errors are translated into a one-line :class:`DataError`.
    """
    learned_from: WordCounts | UnigramSample
    if config.type == "bpe":
        learned_from = count_words(inputs, config.input_sentence_size)
    else:
        learned_from = estimate_sample(inputs, config.input_sentence_size)
        check_fits(learned_from, inputs, available_memory())
    with atomic_path(output) as tmp:
        prefix = str(tmp)[: -len(".model")] if str(tmp).endswith(".model") else str(tmp)
        counts_file = output.with_name(f".{output.name}.words.tmp{os.getpid()}")  # removed by remove_stale_temps
        if isinstance(learned_from, WordCounts):
            learned_from.write_tsv(counts_file)
            source: dict[str, Any] = {"input": [str(counts_file)], "input_format": "tsv", "input_sentence_size": 0}
            learned_from.counts.clear()  # SentencePiece reads the file: the memory goes back before it starts
        else:
            source = {"input": [str(p) for p in inputs], "input_sentence_size": config.input_sentence_size}
        try:
            spm.SentencePieceTrainer.train(
                **source,
                model_prefix=prefix,
                vocab_size=config.size,
                model_type=config.type,
                character_coverage=config.character_coverage,
                shuffle_input_sentence=True,
                num_threads=config.threads or os.cpu_count() or 1,
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                normalization_rule_name=config.normalization,
                byte_fallback=config.byte_fallback,
                user_defined_symbols=list(symbols),  # pieces never split (the synthetic-data tag)
                max_sentence_length=1 << 16,
                hard_vocab_limit=hard_limit,  # False: up to vocab.size pieces, fewer if the text has no more
                minloglevel=2,
            )
        except RuntimeError as err:
            raise DataError(_explain_spm_error(str(err), inputs, config)) from None
        finally:
            counts_file.unlink(missing_ok=True)
        Path(prefix + ".model").replace(tmp)
        Path(prefix + ".vocab").unlink(missing_ok=True)
    return learned_from


def _explain_spm_error(message: str, inputs: Sequence[Path], config: VocabConfig) -> str:
    names = ", ".join(str(p) for p in inputs)
    too_high = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", message)
    if too_high:
        return (
            f"{names}: vocab.size={config.size} is too large for this data; "
            f"set vocab.size to at most {too_high.group(2)} (e.g. --set vocab.size={too_high.group(2)})"
        )
    too_small = re.search(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)", message)
    if too_small:
        return (
            f"{names}: vocab.size={config.size} is too small: the characters of this data (plus byte and "
            f"special pieces) need {too_small.group(2)}; raise vocab.size to at least {too_small.group(2)} "
            "or lower vocab.character_coverage"
        )
    if "vocab_size" in message or "Vocabulary size" in message:
        return (
            f"{names}: vocab.size={config.size} does not fit this data; choose a smaller vocab.size "
            f"(SentencePiece said: {message.strip().splitlines()[-1]})"
        )
    return f"{names}: SentencePiece could not learn a vocabulary: {message.strip().splitlines()[-1]}"


def load_vocab(path: Path) -> spm.SentencePieceProcessor:
    """Load a SentencePiece model, with a one-line error if it is missing or broken."""
    if not path.is_file():
        raise DataError(f"{path}: SentencePiece model not found; run `nmt prepare` first")
    processor = spm.SentencePieceProcessor()
    try:
        processor.Load(str(path))
    except (OSError, RuntimeError):
        raise DataError(f"{path}: not a valid SentencePiece model; re-run `nmt prepare --force`") from None
    return processor


def load_vocab_bytes(blob: bytes, origin: str) -> spm.SentencePieceProcessor:
    """Load a SentencePiece model from its serialized bytes (as stored in checkpoints)."""
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(blob)
    except (OSError, RuntimeError):
        raise DataError(f"{origin}: the stored SentencePiece model is corrupt") from None
    return processor


def parent_vocab_blobs(path: Path) -> tuple[bytes, bytes]:
    """The (source, target) SentencePiece models of a trained model, to encode new data with its ids.

    ``path`` is a run folder, a model or checkpoint ``.pt`` file, a prepared data folder or a
    ``.model`` file (joint). Each model is checked to load before it is used.
    """
    import json

    from ..utils import torchfile

    if path.is_dir() and RunFolder(path).spm_file("src").is_file():
        folder = RunFolder(path)
        blobs = folder.spm_file("src").read_bytes(), folder.spm_file("tgt").read_bytes()
    elif path.is_dir() and (path / "meta.json").is_file():
        names = json.loads((path / "meta.json").read_text(encoding="utf-8"))["vocab"]
        blobs = (path / names["src_model"]).read_bytes(), (path / names["tgt_model"]).read_bytes()
    elif path.is_file() and path.suffix == ".pt":
        try:
            stored = torchfile.load(path).get("vocab") or {}
        except CheckpointError as err:
            raise DataError(f"vocab.from: {err}") from None
        if not isinstance(stored.get("src"), bytes) or not isinstance(stored.get("tgt"), bytes):
            raise DataError(f"vocab.from: {path} holds no SentencePiece model; name a file written by nmt train")
        blobs = stored["src"], stored["tgt"]
    elif path.is_file():
        blobs = (path.read_bytes(),) * 2
    else:
        raise DataError(
            f"vocab.from: {path} not found; name a run folder, a model .pt file, a prepared data "
            "folder or a SentencePiece .model file"
        )
    for blob in set(blobs):
        load_vocab_bytes(blob, f"vocab.from: {path}")
    return blobs


def extend_vocab(parent: bytes, inputs: Sequence[Path], count: int, config: VocabConfig, workdir: Path) -> bytes:
    """``parent`` with up to ``count`` pieces of the text ``inputs`` appended: old ids and pieces unchanged.

    A model of the new text is learned (as large as the parent plus ``count``); its pieces the parent
    lacks are appended in the order it learned them, scored below every old piece, so they apply only
    after all of the parent's merges. Editing the model needs protobuf (SentencePiece's own schema).
    """
    proto: Any = _proto_module()  # generated protobuf code: no type information
    model = proto.ModelProto()
    model.ParseFromString(parent)
    learned_path = workdir / "extension.model"
    size = len(model.pieces) + count
    learn_vocab(inputs, learned_path, replace(config, size=size, type=_type_name(model)), hard_limit=False)
    learned = proto.ModelProto()
    learned.ParseFromString(learned_path.read_bytes())
    learned_path.unlink()
    known = {piece.piece for piece in model.pieces}
    new = [p for p in learned.pieces if p.type == p.NORMAL and p.piece not in known][:count]
    lowest = min((p.score for p in model.pieces if p.type == p.NORMAL), default=0.0)
    for rank, piece in enumerate(new, 1):
        model.pieces.add(piece=piece.piece, score=lowest - rank, type=piece.NORMAL)
    return model.SerializeToString()


def with_symbols(blob: bytes, symbols: Sequence[str], where: str, log: Any = print) -> bytes:
    """A SentencePiece model with the ``symbols`` it lacks appended as pieces never split (a multilingual
    model's tag for a new target language): old ids unchanged."""
    known = load_vocab_bytes(blob, where)
    missing = [s for s in symbols if known.PieceToId(s) == known.unk_id() and s != known.IdToPiece(known.unk_id())]
    if not missing:
        return blob
    model = _proto_module().ModelProto()
    model.ParseFromString(blob)
    for symbol in missing:
        model.pieces.add(piece=symbol, score=0.0, type=model.SentencePiece.USER_DEFINED)
    log(f"{where}: added {', '.join(missing)} to the vocabulary (new ids {len(model.pieces) - len(missing)} and up)")
    return model.SerializeToString()


def _proto_module() -> Any:
    try:
        from sentencepiece import sentencepiece_model_pb2 as proto_module
    except ImportError:
        raise DataError(
            "editing the vocabulary (vocab.extend, or a new language's tag) needs protobuf: pip install 'nmt-cli[extend]'"
        ) from None
    return proto_module


def _type_name(model: Any) -> Literal["bpe", "unigram"]:
    return "unigram" if model.trainer_spec.model_type == 1 else "bpe"


def is_extension(parent: bytes, child: bytes) -> bool:
    """Whether ``child`` holds ``parent``'s pieces under the same ids, followed by new ones."""
    old, new = load_vocab_bytes(parent, "parent"), load_vocab_bytes(child, "child")
    size = old.GetPieceSize()
    return new.GetPieceSize() > size and all(old.IdToPiece(i) == new.IdToPiece(i) for i in range(size))
