"""SentencePiece models rebuilt over another toolkit's id space, in nmt's layout.

MarianMT (OPUS-MT) and fairseq number their pieces themselves: Marian in ``vocab.json``, one id space shared by
a source and a target SentencePiece model; fairseq in its ``dict.txt`` files. nmt reads ids straight from
its SentencePiece models, with ``<pad>`` 0, ``<unk>`` 1, ``<s>`` 2 and ``</s>`` 3 (``data/vocab.py``). So an
imported model gets SentencePiece models whose ids are that toolkit's order moved into nmt's layout:

- ids 0-3 are nmt's four special pieces, then every piece of ``order`` (the other toolkit's, specials left out);
- each side keeps its own pieces' scores and types, so it segments text exactly as before (a unigram model
  picks by score, a BPE model merges by score: the order of the list does not matter to either);
- a piece of ``order`` that a side does not have is typed UNUSED there, scored below all of the side's own: it
  has an id (the embedding row is shared) but that side never produces it.

One difference from MarianTokenizer remains: a character a side's model does not know becomes ``<unk>``, where
MarianTokenizer looks its surface text up in ``vocab.json`` (the other side may know it).

The caller maps its weights' rows by piece: ``order``'s piece k is nmt's id ``len(SPECIALS) + k``.
"""

from __future__ import annotations

from typing import Any

from ..data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from ..errors import NmtError

SPECIALS = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}


def rebuild(side: bytes, order: list[str], origin: str) -> bytes:
    """The SentencePiece model ``side`` (serialized) over the ids of ``order`` in nmt's layout (the module's text);
    refused in one line when a piece it produces has no place in ``order``."""
    from sentencepiece import sentencepiece_model_pb2

    pb: Any = sentencepiece_model_pb2  # generated protobuf classes: no type information
    model = pb.ModelProto()
    try:
        model.ParseFromString(side)
    except Exception:  # protobuf's DecodeError and friends: not a SentencePiece model at all
        raise NmtError(f"{origin}: not a SentencePiece model") from None
    own = {p.piece: p for p in model.pieces if p.type in (p.NORMAL, p.USER_DEFINED, p.BYTE)}
    placed = set(order)
    missing = [piece for piece in own if piece not in placed]
    if missing:
        raise NmtError(
            f"{origin}: {len(missing):,} of its pieces have no id in the model's vocabulary (first: {missing[0]!r}); "
            "the tokenizer and the model do not belong together"
        )
    rebuilt = pb.ModelProto()
    rebuilt.CopyFrom(model)
    del rebuilt.pieces[:]
    kinds = {PAD_ID: pb.ModelProto.SentencePiece.CONTROL, UNK_ID: pb.ModelProto.SentencePiece.UNKNOWN}
    for token_id, piece in sorted(SPECIALS.items()):
        rebuilt.pieces.add(piece=piece, score=0.0, type=kinds.get(token_id, pb.ModelProto.SentencePiece.CONTROL))
    specials = set(SPECIALS.values())
    # Below every piece of the side: a BPE model merges by score, and an unused piece merged early (then split
    # back) would change what the side's own pieces become.
    lowest = min((p.score for p in own.values()), default=0.0) - 1.0
    for piece in order:
        if piece in specials:
            raise NmtError(f"{origin}: the vocabulary lists {piece!r} among its pieces; leave the special pieces out")
        found = own.get(piece)
        if found is not None:
            rebuilt.pieces.add(piece=piece, score=found.score, type=found.type)
        else:
            rebuilt.pieces.add(piece=piece, score=lowest, type=pb.ModelProto.SentencePiece.UNUSED)
    spec = rebuilt.trainer_spec
    spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID
    spec.pad_piece, spec.unk_piece, spec.bos_piece, spec.eos_piece = (SPECIALS[i] for i in (PAD_ID, UNK_ID, BOS_ID, EOS_ID))
    spec.vocab_size = len(rebuilt.pieces)
    return rebuilt.SerializeToString()
