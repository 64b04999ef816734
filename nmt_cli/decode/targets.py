"""The language a model translates into, for a model that knows several: its target tags.

Marian and OPUS-MT's multilingual models (``opus-mt-en-ROMANCE``, ``opus-mt-en-mul``...) are told their target
by a tag at the start of the source, a piece of its own in the vocabulary: ``>>fra<<``, ``>>por<<``,
``>>srp_Cyrl<<`` (Johnson et al. 2017). A model whose source vocabulary holds such pieces is a multilingual one;
``--to fr`` picks the tag, and every source line starts with its id, as MarianTokenizer puts it there.

``--to`` takes an ISO 639-1 or 639-3 code (``fr``, ``fra``, ``fre``) or a tag's own name (``srp_Cyrl``);
langcodes reads the codes. A model without tags translates into its recipe's ``data.tgt_lang`` alone.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import NmtError

TAG = re.compile(r">>([A-Za-z]{2,3}(?:_[A-Za-z]{4})?)<<")


def target_tags(vocab: Any) -> dict[str, int]:
    """The target tags of a source vocabulary (a SentencePiece processor): each tag's name and its id."""
    found = {}
    for token_id in range(vocab.GetPieceSize()):
        match = TAG.fullmatch(vocab.IdToPiece(token_id))
        if match:
            found[match.group(1)] = token_id
    return found


def language(code: str) -> str:
    """A language code as one spelling for comparing (``fra``, ``fre`` and ``fr`` are all ``fr``); a code
    langcodes does not know is compared as written."""
    import langcodes

    base = code.split("_")[0]
    try:
        return str(langcodes.standardize_tag(base)).lower()
    except (ValueError, LookupError):
        return base.lower()


def pick_tag(tags: dict[str, int], to: str, where: str) -> str:
    """The tag among ``tags`` that ``--to`` names: the tag itself, else the one of the same language (one only)."""
    if to in tags:
        return to
    same = [name for name in tags if language(name) == language(to)]
    if len(same) == 1:
        return same[0]
    if len(same) > 1:
        raise NmtError(f"--to {to}: {where} has {len(same)} tags for it ({', '.join(sorted(same))}); give one of them")
    raise NmtError(f"--to {to}: {where} does not translate into it; its targets: {', '.join(sorted(tags))}")


def source_prefix(vocab: Any, target_language: str, to: str | None, where: str) -> tuple[int, ...]:
    """The ids every source line starts with for ``--to`` (none for a model with one target)."""
    tags = target_tags(vocab)
    if not tags:
        if to is not None and target_language and language(to) != language(target_language):
            raise NmtError(f"--to {to}: {where} translates into {target_language} only")
        return ()
    if to is None:
        if len(tags) == 1:
            return (next(iter(tags.values())),)
        raise NmtError(f"{where} translates into {len(tags)} languages: give --to, one of {', '.join(sorted(tags))}")
    return (tags[pick_tag(tags, to, where)],)


def targets_of(vocab: Any, target_language: str) -> list[str]:
    """The languages a model translates into, as codes (its tags, else its recipe's target language)."""
    tags = target_tags(vocab)
    return sorted({language(name) for name in tags}) if tags else [target_language] if target_language else []


__all__ = ["TAG", "language", "pick_tag", "source_prefix", "target_tags", "targets_of"]
