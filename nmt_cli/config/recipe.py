"""The whole recipe: its sections, and the rules across them that no single key's type and range express."""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from pathlib import Path

from ..errors import RecipeError
from ..utils.timefmt import parse_duration
from .data import DataConfig, DownloadSource, VocabConfig, parse_pair
from .decode import DecodeConfig
from .distill import DistillConfig
from .fields import _opt, _sub
from .model import ModelConfig
from .train import TrainConfig


@dataclass(frozen=True)
class Recipe:
    """A whole recipe."""

    name: str = _opt("", "recipe name (default: the file name)")
    data: DataConfig = _sub(DataConfig)
    vocab: VocabConfig = _sub(VocabConfig)
    model: ModelConfig = _sub(ModelConfig)
    train: TrainConfig = _sub(TrainConfig)
    decode: DecodeConfig = _sub(DecodeConfig)
    distill: DistillConfig = _sub(DistillConfig)
    download: tuple[DownloadSource, ...] = _opt((), "corpora that `nmt download` fetches into data.root")

    @property
    def directions(self) -> tuple[tuple[str, str], ...]:
        """The (source, target) languages the recipe trains: each of ``data.pairs``, else its one pair."""
        if self.data.pairs:
            return tuple(parse_pair(p) for p in self.data.pairs)
        return ((self.data.src_lang, self.data.tgt_lang),)

    @property
    def multilingual(self) -> bool:
        return bool(self.data.pairs)

    @property
    def data_dir(self) -> Path:
        return Path(self.data.output or f"data-bin/{self.name}")

    @property
    def run_dir(self) -> Path:
        return Path(self.train.dir or f"runs/{self.name}")


def validate(recipe: Recipe, source: str = "recipe") -> None:
    """Cross-field rules that a single field's type and range cannot express."""
    m, d = recipe.model, recipe.data

    def fail(key: str, problem: str) -> None:
        raise RecipeError(f"{source}: {key}: {problem}")

    if m.d_model % m.n_heads:
        fail("model.n_heads", f"{m.n_heads} does not divide model.d_model={m.d_model}")
    if m.recurrence and m.positions != "xl":
        fail("model.recurrence", "needs model.positions: xl (relative positions that run across the past and the sentence)")
    if m.recurrence and m.concat:
        fail("model.recurrence", "and model.concat are two ways to read context; choose one")
    if recipe.train.init_optimizer and not recipe.train.init_from:
        fail("train.init_optimizer", "starts from the Adam moments of the run train.init_from names; set train.init_from")
    if recipe.train.context_dropout and not m.reads_context:
        fail(
            "train.context_dropout", "trains a model to read its document context; it needs model.concat or model.recurrence"
        )
    if m.recurrence and recipe.train.guided_alignment:
        fail(
            "train.guided_alignment",
            "is not available with model.recurrence (it trains on chains of sentences); set it to 0 or use model.concat",
        )
    if m.recurrence:
        _check_chains(recipe, fail)
    if m.concat_target and not m.concat:
        fail("model.concat_target", "needs model.concat: K (the number of previous sentences to read)")
    if m.sinusoids == "fairseq" and m.d_model % 2:
        fail("model.sinusoids", f"fairseq's sinusoids need an even model.d_model (it is {m.d_model})")
    # vocab.from may name two models over one id space (an imported MarianMT's): training checks the pieces
    if m.share_embeddings and not recipe.vocab.joint and not recipe.vocab.from_:
        fail("model.share_embeddings", "needs a joint vocabulary; set vocab.joint: true or model.share_embeddings: false")
    if m.norm == "rezero" and m.init == "tfixup":
        fail("model.init", "tfixup and norm: rezero are alternatives; pick one")
    if d.src_lang and d.src_lang == d.tgt_lang:
        fail("data.tgt_lang", "must differ from data.src_lang")
    if d.pairs:
        _check_pairs(recipe, fail)
    elif d.roots:
        fail("data.roots", "names the folders of data.pairs' language pairs; set data.pairs, or use data.root")
    if recipe.train.max_time:
        try:
            parse_duration(recipe.train.max_time)
        except ValueError as err:
            fail("train.max_time", str(err))
    if recipe.train.lr_schedule == "inverse_sqrt_nowarmup" and recipe.train.warmup == 0:
        fail("train.warmup", "inverse_sqrt_nowarmup decays as lr*sqrt(w/(w+s)) and needs w > 0 (e.g. 4000)")
    _check_budget_schedule(recipe.train, fail)
    unknown = [prefix for prefix in d.synthetic if prefix not in d.train]
    if unknown:
        fail("data.synthetic", f"{unknown[0]!r} is not one of data.train; list the synthetic corpora there too")
    if d.tag_synthetic and not d.synthetic:
        fail("data.tag_synthetic", "tags the data.synthetic corpora; name them in data.synthetic")
    if recipe.vocab.extend and not recipe.vocab.from_:
        fail("vocab.extend", "extends a reused vocabulary; set vocab.from to the model whose vocabulary to extend")
    if recipe.train.packed and (conflict := _packed_conflict(recipe)):
        fail("train.packed", conflict)
    if recipe.train.precision == "fp16" and recipe.train.device == "cpu":
        fail("train.precision", "fp16 needs CUDA; use bf16 or fp32 on the CPU")
    if recipe.train.average_last > recipe.train.keep_last > 0:
        fail(
            "train.average_last",
            f"{recipe.train.average_last} checkpoints cannot be averaged when only "
            f"train.keep_last={recipe.train.keep_last} are kept; raise keep_last",
        )
    _check_distill(recipe, fail)
    for i, item in enumerate(recipe.download):
        if not item.url or not re.fullmatch(r"[0-9a-f]{64}", item.sha256):
            fail(f"download[{i}]", "needs a url and a 64-digit hex sha256 (quote it in YAML)")


def _check_budget_schedule(t: TrainConfig, fail: typing.Callable[[str, str], None]) -> None:
    """The schedules and averages that depend on the run's budget have one to go by."""
    budget_schedule = t.lr_schedule in ("linear", "cosine")
    if budget_schedule and not (t.max_steps or t.max_seconds):
        fail("train.lr_schedule", f"{t.lr_schedule} reaches zero at the budget's end; set train.max_time or train.max_steps")
    if t.warmup_fraction and not budget_schedule:
        fail(
            "train.warmup_fraction",
            f"is the warm-up of the linear and cosine schedules; {t.lr_schedule} warms up for train.warmup updates "
            "(add --set train.warmup_fraction=0)",
        )
    if t.average_stretch and t.ema_decay and not (t.max_steps or t.max_seconds):
        fail(
            "train.average_stretch",
            "starts the moving average at the budget's last stretch; set train.max_time or train.max_steps",
        )


def _check_distill(recipe: Recipe, fail: typing.Callable[[str, str], None]) -> None:
    """A teacher is a model or a server, never both; a distilled student is a model of one direction."""
    d = recipe.distill
    if d.teacher and d.endpoint:
        fail("distill.endpoint", "and distill.teacher are two teachers; give one")
    if d.endpoint and not re.match(r"https?://[^\s/]+", d.endpoint):
        fail("distill.endpoint", f"'{d.endpoint}' is not an http:// or https:// address (e.g. http://localhost:8080)")
    if (d.teacher or d.endpoint) and recipe.multilingual:
        fail("distill.teacher", "distils one direction; train a student per direction (data.src_lang, data.tgt_lang)")


def _check_chains(recipe: Recipe, fail: typing.Callable[[str, str], None]) -> None:
    """A recurrence model trains on chains of pairs read as one row (data/chains.py): a row must fit the model's
    positions and a batch."""
    chain, t = recipe.train.chain_tokens, recipe.train
    if chain > recipe.model.max_positions:
        fail(
            "train.chain_tokens",
            f"{chain:,} is more than model.max_positions ({recipe.model.max_positions:,}): a chain is one row of the "
            f"model; set train.chain_tokens to at most {recipe.model.max_positions:,}",
        )
    if isinstance(t.max_tokens, int) and chain > t.max_tokens:
        fail(
            "train.chain_tokens",
            f"{chain:,} is more than train.max_tokens ({t.max_tokens:,}): a batch could not hold one chain; "
            f"set train.chain_tokens to at most {t.max_tokens:,}",
        )


def _check_pairs(recipe: Recipe, fail: typing.Callable[[str, str], None]) -> None:
    """A multilingual recipe: its directions well formed, once each, one joint vocabulary."""
    d = recipe.data
    seen: set[tuple[str, str]] = set()
    for pair in d.pairs:
        try:
            direction = parse_pair(pair)
        except ValueError as err:
            fail("data.pairs", str(err))
            return
        if direction[0] == direction[1]:
            fail("data.pairs", f"'{pair}' translates a language into itself")
        if direction in seen:
            fail("data.pairs", f"'{pair}' is listed twice")
        seen.add(direction)
    if d.src_lang or d.tgt_lang:
        fail("data.pairs", "replaces data.src_lang and data.tgt_lang; leave those out of a multilingual recipe")
    if not recipe.vocab.joint and not recipe.vocab.from_:  # (an imported model's two files over one id space)
        fail("vocab.joint", "data.pairs needs one joint vocabulary over every language; set vocab.joint: true")
    for key in d.roots:
        try:
            a, b = parse_pair(key)
        except ValueError as err:
            fail(f"data.roots.{key}", str(err))
            return
        if (a, b) not in seen and (b, a) not in seen:
            fail(f"data.roots.{key}", f"names a pair outside data.pairs ({', '.join(d.pairs)})")
    if recipe.train.guided_alignment:
        fail("train.guided_alignment", "is not available with data.pairs yet; train bilingual models for it")
    if d.align:
        fail("data.align", "aligns words for train.guided_alignment, not available with data.pairs yet; remove it")


def _packed_conflict(recipe: Recipe) -> str | None:
    """Why ``train.packed`` cannot train this recipe, or None: a packed batch holds each sentence's tokens
    alone (model/packing.py), so what reads across sentences or needs their padded grid is refused."""
    m = recipe.model
    if m.positions not in ("sinusoidal", "learned"):
        return f"needs absolute positions (sinusoidal or learned), not model.positions: {m.positions}; turn one off"
    if m.concat_target:  # (model.recurrence runs on XL's relative positions, refused above)
        return "packs sentences one by one; model.concat_target reads the previous ones with them: turn one off"
    if m.attention_dropout:
        return "the packed attention kernel has no dropout; set model.attention_dropout: 0"
    if recipe.train.guided_alignment:
        return "guided alignment reads padded attention weights; turn one off"
    return None


def require_data(recipe: Recipe, source: str = "recipe") -> None:
    """Checks needed only by commands that read corpora (prepare)."""
    d = recipe.data
    for key in ("src_lang", "tgt_lang") if not d.pairs else ():
        if not getattr(d, key):
            raise RecipeError(f"{source}: missing required value data.{key} (e.g. en, de)")
    if not d.train:
        raise RecipeError(f"{source}: missing required value data.train (corpus prefixes)")
