"""``nmt translate``'s engine, opened from the checked options: ours or CTranslate2's, every choice fixed (model,
device, precision, decoding settings, glossary)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .common import console, weights_dtype, with_decoding
from .translate_options import TranslateOptions

if TYPE_CHECKING:  # imported where used: the command line starts without torch
    from ..decode.translation import Engine
    from ..terms.glossary import Glossary

# The same precision names for both engines: ours as torch dtypes, CTranslate2's as its compute types.
COMPUTE_TYPES = {None: "default", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}


def open_engine(o: TranslateOptions, device, threads: int, aligned: bool) -> Engine:
    """The engine ``--engine`` names, every choice fixed: model, device, precision, decoding settings (the
    model's recipe, then the options given)."""

    options, models = o.decoding, o.models
    if o.engine == "ctranslate2":
        from ..decode.ctranslate2_engine import CTranslate2Engine, CTranslate2Translator

        # --workers: CTranslate2's inter_threads, batches translated at once (1 unless given: its default)
        workers = options["workers"] or 1
        from ..decode.targets import source_prefix

        ct2 = CTranslate2Engine(models[0], device.type, threads, COMPUTE_TYPES[o.dtype], workers)
        tag = source_prefix(ct2.src, ct2.languages[1], o.to, str(models[0]))
        ct2.source_prefix = [ct2.src.IdToPiece(i) for i in tag]
        config = with_decoding(ct2.decode_config, options)
        if config.length_penalty == "gnmt" and config.alpha and options["length_penalty"] is None:
            console.print("note: the recipe's length penalty is gnmt; CTranslate2 applies |Y|^alpha (average) instead")
        return CTranslate2Translator(ct2, config, o.nbest, o.chunk_lines)
    from ..decode.loading import load_ensemble
    from ..decode.targets import source_prefix
    from ..decode.translator import Translator
    from ..utils.allocator import keep_freed_memory

    # Each step's buffers reused, not faulted in anew (utils/allocator.py); CTranslate2 above runs with the
    # allocator as it is, as it would on its own.
    keep_freed_memory()
    loaded = load_ensemble(models, device, weights_dtype(o.dtype))
    config = with_decoding(loaded.recipe.decode, options)
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
        source_prefix=source_prefix(loaded.src_vocab, loaded.recipe.data.tgt_lang, o.to, str(models[0])),
    )
    if o.confidence and loaded.calibration is None:
        console.print(
            f"note: {models[0]} has no calibration: confidences are exp(mean token log-probability), "
            'uncalibrated (marked ~ in text, "calibrated": false in jsonl); nmt calibrate fits one',
            soft_wrap=True,
        )
    return translator


def glossary_of(o: TranslateOptions, src_lang: str, tgt_lang: str) -> Glossary | None:
    """``--glossary`` and ``--keep-terms`` files read, checked and joined (None: neither given)."""
    if not (o.glossaries or o.keep_terms):
        return None
    from ..terms.glossary import Glossary, read_glossary, read_keep_terms

    read = [read_glossary(p, src_lang, tgt_lang) for p in o.glossaries] + [read_keep_terms(p) for p in o.keep_terms]
    return Glossary.join(*read)
