"""A glossary applied to translation: each line's terms become constraints of its search (``constrained.py``), and
each translation says which terms it lacks (``--glossary``, ``--keep-terms``, the server's ``glossary``).

The command's translator and the server both check a glossary here before anything is translated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from ..config import DecodeConfig
from ..data.batches import pad_rows
from ..data.vocab import EOS_ID
from ..errors import NmtError
from ..terms.glossary import Glossary
from ..terms.matching import compiled
from .constrained import CONSTRAINED_MIN_BEAM, Constraint, GlossaryMode, constrained_beam_search, term_constraints
from .loading import LoadedModel
from .search import Hypothesis
from .translation import Translation, TranslationStats

PrefixOf = Callable[[list[int]], "torch.Tensor | None"]  # rows -> their target prefixes, (n, P) PAD-padded
PlainSearch = Callable[[list[int]], list[list[Hypothesis]]]  # rows without terms -> their n-best lists


def check_term_lengths(glossary: Glossary, loaded: LoadedModel) -> None:
    """A term whose translation alone takes more pieces than a translation may hold can never be met: refused,
    naming its file and line (a quarter of the model's length, so the sentence around it has room too)."""
    limit = max(1, (loaded.recipe.model.max_positions - 1) // 4)
    for term in glossary.terms:
        for target in term.targets:
            pieces = len(loaded.tgt_vocab.encode(target, out_type=int))
            if pieces > limit:
                raise NmtError(
                    f"{term.where}: the translation of '{term.source}' takes {pieces} pieces, more than a "
                    f"quarter of what this model translates at once ({limit}); shorten the term"
                )


class GlossarySearch:
    """A glossary's terms as every line's constraints, for one model and one decoding config."""

    def __init__(self, loaded: LoadedModel, config: DecodeConfig, glossary: Glossary, mode: GlossaryMode) -> None:
        if config.sampling:
            raise NmtError("--glossary and --keep-terms steer beam search; drop --sampling")
        if loaded.recipe.model.reads_context:
            raise NmtError(
                f"{loaded.path} reads document context (model.concat / model.recurrence); glossaries are applied by "
                "sentence-level models only so far: translate with a sentence-level model or drop --glossary"
            )
        check_term_lengths(glossary, loaded)
        self.loaded, self.config, self.mode = loaded, config, mode
        self.matcher = compiled(glossary)  # a server's glossaries are compiled once, at its start

    def constraints_of(self, text: str) -> tuple[Constraint, ...]:
        """The constraints of one source sentence: each glossary term it holds (:func:`.constrained.term_constraints`)."""
        return term_constraints(self.matcher, self.loaded.tgt_vocab, text)

    def search(
        self,
        rows: list[int],
        encoded: list[list[int]],
        prefix_of: PrefixOf,
        constraints: list[tuple[Constraint, ...]],
        plain: PlainSearch,
        nbest: int,
        device: torch.device,
    ) -> list[list[Hypothesis]]:
        """The n-best lists of the sentences ``rows`` indexes, a batch holding glossary terms: constrained beam search.
        Its sentences without terms go through the plain beam step on the same logits (their outputs are
        unconstrained decoding's); under greedy search they are searched apart (``plain``), greedily, and the rest
        with a beam of at least ``CONSTRAINED_MIN_BEAM``."""
        found: dict[int, list[Hypothesis]] = {}
        bound = rows
        config = self.config
        if config.beam < CONSTRAINED_MIN_BEAM:
            free = [i for i in rows if not constraints[i]]
            found.update(zip(free, plain(free) if free else []))
            bound = [i for i in rows if constraints[i]]
            config = replace(config, beam=CONSTRAINED_MIN_BEAM)
        src = pad_rows([encoded[i] + [EOS_ID] for i in bound]).to(device)
        wanted = [constraints[i] for i in bound]
        hyps = constrained_beam_search(
            self.loaded.model, src, config, wanted, nbest, self.mode, prefix=prefix_of(bound), rules=self.loaded.rules()
        )
        found.update(zip(bound, hyps))
        return [found[i] for i in rows]

    @staticmethod
    def mark_missing(
        results: list[list[Translation]], constraints: list[tuple[Constraint, ...]], stats: TranslationStats, first: int
    ) -> list[list[Translation]]:
        """Each translation with the source terms it lacks; ``stats`` counts the lines with terms and those whose best
        translation lacks one (``first``: the number of the first line, counted from 0)."""
        for number, (wanted, hyps) in enumerate(zip(constraints, results)):
            if wanted:
                stats.term_lines += 1
            for rank, hyp in enumerate(hyps):
                hyps[rank] = hyp._replace(missing_terms=tuple(c.source for c in wanted if not c.met_by(hyp.text)))
            if hyps[0].missing_terms:
                stats.term_failures.append(first + number + 1)
        return results
