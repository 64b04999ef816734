"""SentencePiece models rebuilt over an imported model's id space (``convert/shared_ids.py``): each side
segments exactly as before, every piece has the id its place in the shared order gives, specials are nmt's."""

from __future__ import annotations

import gzip
import io
import random
from importlib import resources
from pathlib import Path

import pytest
import sentencepiece as spm

from nmt_cli.convert.shared_ids import SPECIALS, rebuild
from nmt_cli.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from nmt_cli.errors import NmtError

SAMPLE = Path(str(resources.files("nmt_cli") / "sample" / "en-de"))


def lines(name: str) -> list[str]:
    return gzip.decompress((SAMPLE / name).read_bytes()).decode("utf-8").splitlines()


def trained(text: list[str], kind: str, size: int) -> bytes:
    """A SentencePiece model as another toolkit would ship it: its own special ids (unk 0, no pad)."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_writer=model,
        vocab_size=size,
        model_type=kind,
        unk_id=0,
        bos_id=-1,
        eos_id=1,
        pad_id=-1,
        minloglevel=2,
    )
    return model.getvalue()


def processor(blob: bytes) -> spm.SentencePieceProcessor:
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(blob)
    return sp


def pieces_of(sp: spm.SentencePieceProcessor) -> list[str]:
    return [sp.IdToPiece(i) for i in range(sp.GetPieceSize()) if not (sp.IsControl(i) or sp.IsUnknown(i))]


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_each_side_segments_as_before_with_the_shared_ids(kind):
    english, german = lines("train.en.gz")[:3000], lines("train.de.gz")[:3000]
    source, target = trained(english, kind, 400), trained(german, kind, 350)
    old_source, old_target = processor(source), processor(target)
    order = sorted(set(pieces_of(old_source)) | set(pieces_of(old_target)))
    random.Random(0).shuffle(order)  # the other toolkit's order, whatever it is
    new_source = processor(rebuild(source, order, "source.spm"))
    new_target = processor(rebuild(target, order, "target.spm"))
    assert new_source.GetPieceSize() == new_target.GetPieceSize() == len(SPECIALS) + len(order)
    for sp in (new_source, new_target):
        assert [sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()] == [PAD_ID, UNK_ID, BOS_ID, EOS_ID]
    held_out = {"en": lines("test.en.gz")[:300], "de": lines("test.de.gz")[:300]}
    for old, new, text in ((old_source, new_source, held_out["en"]), (old_target, new_target, held_out["de"])):
        for sentence in text:
            pieces = old.encode(sentence, out_type=str)
            assert new.encode(sentence, out_type=str) == pieces  # segmented exactly as before
            ids = new.encode(sentence, out_type=int)
            # a character the side does not know is <unk>, as it was (MarianTokenizer would look its surface
            # up in vocab.json instead: the one difference, for characters the model never saw on this side)
            known = [not old.IsUnknown(i) for i in old.encode(sentence, out_type=int)]
            assert ids == [len(SPECIALS) + order.index(p) if k else UNK_ID for p, k in zip(pieces, known)]
            assert new.decode(ids) == old.decode(old.encode(sentence, out_type=int))
    only_german = set(pieces_of(old_target)) - set(pieces_of(old_source))
    produced = {new_source.IdToPiece(i) for s in held_out["en"] for i in new_source.encode(s, out_type=int)}
    assert only_german and not produced & only_german  # the other side's pieces have ids but are never produced


def test_a_piece_without_an_id_or_a_broken_model_is_one_line():
    english = lines("train.en.gz")[:2000]
    source = trained(english, "unigram", 300)
    order = pieces_of(processor(source))
    with pytest.raises(NmtError, match=r"source.spm: 1 of its pieces have no id .*do not belong together"):
        rebuild(source, order[1:], "source.spm")
    with pytest.raises(NmtError, match="leave the special pieces out"):
        rebuild(source, ["</s>", *order], "source.spm")
    with pytest.raises(NmtError, match="source.spm: not a SentencePiece model"):
        rebuild(b"\x00not a model", order, "source.spm")
