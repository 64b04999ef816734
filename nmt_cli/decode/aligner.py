"""Word alignments of translations, for ``--alignments`` and for putting a document's tags back on the right words.

The command's translator and the server's loop both use :class:`Aligner`.
"""

from __future__ import annotations

import torch

from ..model.guided import GUIDED_HEAD
from ..model.transformer import Transformer
from .assess import teacher_forced
from .attention_maps import alignment_layer as alignment_layer_of
from .attention_maps import cross_attention, pharaoh, word_alignment
from .ensemble import Ensemble
from .loading import LoadedModel
from .search import Hypothesis


class Aligner:
    """Pharaoh word alignments of hypotheses from one decoder layer's cross-attention (``--alignments``,
    and the tags of documents: the command's translator and the server's loop both use it). A model trained
    with guided alignment (``train.guided_alignment``) aligns with its guided head alone; otherwise, or at
    an explicitly chosen ``layer``, the layer's heads are averaged."""

    def __init__(self, loaded: LoadedModel, model: Transformer | None = None, layer: int | None = None) -> None:
        first = loaded.model.models[0] if isinstance(loaded.model, Ensemble) else loaded.model
        self.loaded = loaded
        self.model = model if model is not None else first
        guided = layer is None and loaded.recipe.train.guided_alignment > 0
        self.layer = alignment_layer_of(self.model, layer)
        self.heads = [GUIDED_HEAD] if guided else None

    def align(
        self,
        sources: list[list[int]],
        found: list[list[Hypothesis]],
        memory: tuple[torch.Tensor, torch.Tensor] | None = None,
        first: int | None = None,
    ) -> list[list[str]]:
        """Per sentence, per hypothesis, its alignment ("i-j ..."), from one teacher-forced pass over them all
        (on the search's encoder output when given: each sentence's row once per hypothesis; ``first``, the token
        the search forced before each output and left out of it: a decoder-side target tag)."""
        pairs_src, outputs, memory = teacher_forced(sources, found, memory)
        crosses = iter(cross_attention(self.model, pairs_src, outputs, self.layer, memory, first=first))
        src_piece, tgt_piece = self.loaded.src_vocab.IdToPiece, self.loaded.tgt_vocab.IdToPiece
        out = []
        for source, hyps in zip(sources, found):
            pieces = [src_piece(t) for t in source]
            out.append(
                [pharaoh(word_alignment(self._heads(next(crosses)), pieces, [tgt_piece(t) for t in h.tokens])) for h in hyps]
            )
        return out

    def _heads(self, cross: torch.Tensor) -> torch.Tensor:
        """The heads of one (H, T, S) cross-attention that align: the guided one, or all."""
        return cross if self.heads is None else cross[self.heads]
