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
from dataclasses import dataclass
from typing import Any

from ..config import DataConfig, parse_pair
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


def source_prefix(
    vocab: Any, target_language: str, to: str | None, where: str, pairs: list[tuple[str, str]] | None = None
) -> tuple[int, ...]:
    """The ids every source line starts with for ``--to`` (none for a model with one target); ``pairs``, a
    multilingual recipe's directions, for the error that names them."""
    tags = target_tags(vocab)
    if not tags:
        if to is not None and target_language and language(to) != language(target_language):
            raise NmtError(f"--to {to}: {where} translates into {target_language} only")
        return ()
    if to is None:
        if len(tags) == 1:
            return (next(iter(tags.values())),)
        known = (
            f"its directions: {', '.join(f'{a}-{b}' for a, b in pairs)}" if pairs else f"one of {', '.join(sorted(tags))}"
        )
        raise NmtError(f"{where} translates into {len(tags)} languages: give --to ({known})")
    return (tags[pick_tag(tags, to, where)],)


@dataclass(frozen=True)
class Route:
    """How a line is told its target language: ids before its source (Marian's ``>>fra<<``, a model trained
    with ``data.language_tag: source``), or the tag the decoder reads first (``data.language_tag: target``)."""

    source_prefix: tuple[int, ...] = ()
    target_tag: int | None = None


def route(data: DataConfig, vocab: Any, to: str | None, where: str, source: str | None = None) -> Route:
    """The :class:`Route` of ``--to`` (and ``--from``) for a model whose recipe's data section is ``data`` and
    whose source vocabulary is ``vocab``; a direction it does not know is a one-line error naming those it knows.
    A direction never trained whose languages the model knows is translated zero-shot."""
    pairs = [parse_pair(pair) for pair in data.pairs]
    if pairs:
        _check_direction(pairs, source, to, where)
    elif source is not None and data.src_lang and language(source) != language(data.src_lang):
        raise NmtError(f"--from {source}: {where} translates from {data.src_lang} only")
    tag = source_prefix(vocab, data.tgt_lang, to, where, pairs)
    if tag and data.language_tag == "target":
        return Route((), tag[0])
    return Route(tag)


def pivot_language(data: DataConfig, source: str | None, to: str | None) -> str | None:
    """The language a multilingual model's untrained direction ``source``->``to`` goes through: one both trained
    directions join at, English where it is one of them (as LibreTranslate pivots); None for a trained direction,
    or where no language joins them (then the direction is translated zero-shot)."""
    pairs = [parse_pair(pair) for pair in data.pairs]
    if not pairs or source is None or to is None:
        return None
    named = {(language(a), language(b)): (a, b) for a, b in pairs}
    src, tgt = language(source), language(to)
    if (src, tgt) in named or src == tgt:  # trained, or refused by route()
        return None
    middle = sorted({b for a, b in named if a == src and (b, tgt) in named})
    if not middle:
        return None
    return "en" if "en" in middle else middle[0]


def never_trained(data: DataConfig, source: str | None, to: str | None) -> bool:
    """Whether ``source``->``to`` is a direction a multilingual model knows both languages of but never trained
    (translated zero-shot, or through a pivot)."""
    pairs = {(language(a), language(b)) for a, b in (parse_pair(pair) for pair in data.pairs)}
    return bool(pairs) and source is not None and to is not None and (language(source), language(to)) not in pairs


def _check_direction(pairs: list[tuple[str, str]], source: str | None, to: str | None, where: str) -> None:
    known = ", ".join(f"{a}-{b}" for a, b in pairs)
    if source is not None and to is not None and language(source) == language(to):
        raise NmtError(f"--from {source} --to {to}: the same language; give the language to translate into")
    if source is not None and language(source) not in {language(a) for a, _ in pairs}:
        raise NmtError(f"--from {source}: {where} does not translate from it; its directions: {known}")
    if to is not None and language(to) not in {language(b) for _, b in pairs}:
        raise NmtError(f"--to {to}: {where} does not translate into it; its directions: {known}")


def targets_of(vocab: Any, target_language: str) -> list[str]:
    """The languages a model translates into, as codes (its tags, else its recipe's target language)."""
    tags = target_tags(vocab)
    return sorted({language(name) for name in tags}) if tags else [target_language] if target_language else []


__all__ = [
    "TAG",
    "Route",
    "language",
    "never_trained",
    "pick_tag",
    "pivot_language",
    "route",
    "source_prefix",
    "target_tags",
    "targets_of",
]
