"""``nmt translate``'s engine, opened from the checked options: ours or CTranslate2's, every choice fixed (model,
device, precision, decoding settings, glossary)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import NmtError
from .common import console, weights_dtype, with_decoding
from .translate_options import TranslateOptions

if TYPE_CHECKING:  # imported where used: the command line starts without torch
    from ..decode.translation import Engine
    from ..terms.glossary import Glossary

# The same precision names for both engines: ours as torch dtypes, CTranslate2's as its compute types.
COMPUTE_TYPES = {None: "default", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}


def open_engine(o: TranslateOptions, device, threads: int, aligned: bool, loaded: Any = None) -> Engine:
    """The engine ``--engine`` names, every choice fixed: model, device, precision, decoding settings (the
    model's recipe, then the options given); ``loaded``: the model, already loaded (``--from auto`` opens an
    engine per language of one model)."""
    if o.source == "auto":
        return _by_language(o, device, threads, aligned)
    options, models = o.decoding, o.models
    if o.engine == "ctranslate2":
        from ..decode.ctranslate2_engine import CTranslate2Engine, CTranslate2Translator

        # --workers: CTranslate2's inter_threads, batches translated at once (1 unless given: its default)
        workers = options["workers"] or 1
        from ..decode.targets import pivot_language, route, target_tags

        ct2 = CTranslate2Engine(models[0], device.type, threads, COMPUTE_TYPES[o.dtype], workers)
        pivot = None if o.zero_shot else pivot_language(ct2.data, o.source, o.to)
        if pivot is not None:
            raise NmtError(
                f"--engine ctranslate2: {o.source}-{o.to} was never trained and goes through {pivot}, which only "
                "--engine nmt does; leave out --engine, or add --zero-shot"
            )
        way = route(ct2.data, ct2.src, o.to, str(models[0]), o.source)
        ct2.source_prefix = [ct2.src.IdToPiece(i) for i in way.source_prefix]
        ct2.target_prefix = [ct2.src.IdToPiece(way.target_tag)] if way.target_tag is not None else []
        if way.source_prefix:
            ct2.suppressed = [[f">>{name}<<"] for name in target_tags(ct2.src)]
        config = with_decoding(ct2.decode_config, options)
        if config.length_penalty == "gnmt" and config.alpha and options["length_penalty"] is None:
            console.print("note: the recipe's length penalty is gnmt; CTranslate2 applies |Y|^alpha (average) instead")
        engine = CTranslate2Translator(ct2, config, o.nbest, o.chunk_lines)
        engine.languages = languages_of(ct2.data, o.source, o.to)
        return engine
    from ..decode.loading import load_ensemble
    from ..decode.targets import pivot_language, route
    from ..decode.translator import Translator
    from ..utils.allocator import keep_freed_memory

    # Each step's buffers reused, not faulted in anew (utils/allocator.py); CTranslate2 above runs with the
    # allocator as it is, as it would on its own.
    keep_freed_memory()
    loaded = loaded or load_ensemble(models, device, weights_dtype(o.dtype), int8_on(o, device))
    config = with_decoding(loaded.recipe.decode, options)
    pivot = None if o.zero_shot else pivot_language(loaded.recipe.data, o.source, o.to)
    if pivot is not None:
        return _through_pivot(o, loaded, config, device, aligned, pivot)
    way = route(loaded.recipe.data, loaded.src_vocab, o.to, str(models[0]), o.source)
    loaded = loaded.for_direction(languages_of(loaded.recipe.data, o.source, o.to)[0] or None, o.to)
    translator = Translator(
        loaded,
        config,
        device,
        nbest=o.nbest,
        chunk_lines=o.chunk_lines,
        alignments=o.alignments or aligned,
        alignment_layer=o.alignment_layer,
        assess=o.confidence,
        glossary=glossary_of(o, loaded.recipe.data.src_lang, loaded.recipe.data.tgt_lang),
        glossary_mode="soft" if o.glossary_mode == "soft" else "hard",
        source_prefix=way.source_prefix,
        target_tag=way.target_tag,
    )
    translator.languages = languages_of(loaded.recipe.data, o.source, o.to)
    if o.confidence and loaded.calibration is None:
        console.print(
            f"note: {models[0]} has no calibration: confidences are exp(mean token log-probability), "
            'uncalibrated (marked ~ in text, "calibrated": false in jsonl); nmt calibrate fits one',
            soft_wrap=True,
        )
    return translator


def _by_language(o: TranslateOptions, device: Any, threads: int, aligned: bool) -> Engine:
    """``--from auto``: an engine that identifies each line's language and translates it from that language
    (``decode/by_language.py``), with one engine per language the model reads into ``--to``, sharing one model."""
    from dataclasses import replace

    from ..decode.by_language import ByLanguageEngine
    from ..decode.loading import load_ensemble
    from ..languages import LineIdentifier

    loaded = load_ensemble(o.models, device, weights_dtype(o.dtype), int8_on(o, device))
    data = loaded.recipe.data
    target = languages_of(data, None, o.to)[1]
    readers = readers_of(data, target)
    if not readers:
        raise NmtError(f"--from auto: {o.models[0]} translates into {target} from no language; check --to")

    def open_for(language: str) -> Engine:
        return open_engine(replace(o, source=language), device, threads, aligned, loaded)

    return ByLanguageEngine(open_for, readers, target, LineIdentifier(readers, target), o.chunk_lines)


def int8_on(o: TranslateOptions, device: Any) -> bool:
    """``--dtype int8`` with our engine: its int8 products run on the CPU only."""
    if o.dtype != "int8":
        return False
    if device.type != "cpu":
        raise NmtError(
            f"--dtype int8: our engine computes int8 on the CPU, not on {device}; add --engine ctranslate2 or use "
            "--dtype bf16"
        )
    return True


def readers_of(data: Any, target: str) -> list[str]:
    """The languages a model translates into ``target`` from (through a pivot included), its trained ones first."""
    from ..config import parse_pair
    from ..decode.targets import language, pivot_language

    if not data.pairs:
        return [data.src_lang] if language(data.src_lang) != language(target) else []
    pairs = [parse_pair(pair) for pair in data.pairs]
    sources = list(dict.fromkeys(a for a, _ in pairs if language(a) != language(target)))
    direct = [a for a in sources if any(language(b) == language(target) for x, b in pairs if x == a)]
    through = [a for a in sources if a not in direct and pivot_language(data, a, target) is not None]
    return direct + through


def languages_of(data: Any, source: str | None, to: str | None) -> tuple[str, str]:
    """The language pair a document is translated in (a gettext catalogue's Language, the sentence splitter's
    rules): ``--from``/``--to`` where given, else the model's own (a multilingual model's one source language)."""
    from ..config import parse_pair

    sources = {parse_pair(pair)[0] for pair in data.pairs} if data.pairs else {data.src_lang}
    return source or (next(iter(sources)) if len(sources) == 1 else ""), to or data.tgt_lang


def _through_pivot(o: TranslateOptions, loaded: Any, config: Any, device: Any, aligned: bool, pivot: str) -> Any:
    """A multilingual model's untrained direction (``--from de --to fr``), through the ``pivot`` language both
    trained directions join at (``decode/pivot.py``); a glossary is for one language pair, so it is refused."""
    from ..decode.pivot import PivotEngine
    from ..decode.targets import route
    from ..decode.translator import Translator

    assert o.source is not None and o.to is not None
    if o.glossaries or o.keep_terms or o.confidence:
        given = "--glossary" if o.glossaries else "--keep-terms" if o.keep_terms else "--confidence"
        raise NmtError(
            f"{given}: {o.source}-{o.to} was never trained and goes through {pivot}; {given} applies to a trained "
            "direction (translate in two steps, or add --zero-shot)"
        )
    where, alignments = str(o.models[0]), o.alignments or aligned
    steps = []
    for source, target, nbest in ((o.source, pivot, 1), (pivot, o.to, o.nbest)):
        way = route(loaded.recipe.data, loaded.src_vocab, target, where, source)
        hop = Translator(
            loaded, config, device, nbest=nbest, chunk_lines=o.chunk_lines, alignments=alignments,
            alignment_layer=o.alignment_layer, source_prefix=way.source_prefix, target_tag=way.target_tag,
        )  # fmt: skip
        steps.append(hop)
    console.print(f"note: {o.source}-{o.to} was never trained: translating through {pivot} (--zero-shot: directly)")
    return PivotEngine(steps[0], steps[1], (o.source, o.to), o.chunk_lines)


def glossary_of(o: TranslateOptions, src_lang: str, tgt_lang: str) -> Glossary | None:
    """``--glossary`` and ``--keep-terms`` files read, checked and joined (None: neither given)."""
    if not (o.glossaries or o.keep_terms):
        return None
    from ..terms.glossary import Glossary, read_glossary, read_keep_terms

    read = [read_glossary(p, src_lang, tgt_lang) for p in o.glossaries] + [read_keep_terms(p) for p in o.keep_terms]
    return Glossary.join(*read)
