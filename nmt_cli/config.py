"""The recipe: one typed, frozen configuration tree, loaded from YAML.

A recipe describes data, vocabulary, model, training and decoding. Defaults are the
Transformer base setup of Vaswani et al. (2017) and are declared here once, in the
dataclasses below. A recipe may inherit another (``base: other.yaml``, resolved relative to
the inheriting file) and any value may be overridden with dotted keys
(``--set model.layers=3``). Every error names the recipe file and the key path.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import yaml

from .errors import RecipeError
from .utils.timefmt import parse_duration


def _opt(default: Any, help: str, **checks: Any) -> Any:
    """A dataclass field with its help text and range checks (ge, gt, le) in metadata."""
    if isinstance(default, (list, dict)):
        raise TypeError("use tuples for defaults")  # guards against shared mutable defaults
    return field(default=default, metadata={"help": help, **checks})


def _sub(cls: type) -> Any:
    return field(default_factory=cls, metadata={"help": cls.__doc__ or ""})


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class CleanConfig:
    """Filters applied to training pairs (Moses clean-corpus-n practice); valid/test are only stripped."""

    min_tokens: int = _opt(1, "drop pairs with fewer whitespace tokens on either side", ge=0, le=100_000)
    max_tokens: int = _opt(250, "drop pairs with more whitespace tokens on either side", ge=1, le=1_000_000)
    max_ratio: float = _opt(1.5, "drop pairs whose token-count ratio exceeds this (0 disables)", ge=0, le=1000)
    dedup: bool = _opt(False, "drop exact duplicate pairs (keeps 8 bytes per distinct pair in memory)")


@dataclass(frozen=True)
class DataConfig:
    """Where the parallel text is and where the prepared dataset goes."""

    src_lang: str = _opt("", "source language suffix of the corpus files, e.g. en")
    tgt_lang: str = _opt("", "target language suffix of the corpus files, e.g. de")
    root: str = _opt(".", "folder that relative corpus prefixes are read from")
    train: tuple[str, ...] = _opt((), "training corpus prefixes: PREFIX.SRC[.gz] and PREFIX.TGT[.gz]")
    valid: tuple[str, ...] = _opt((), "validation corpus prefixes")
    test: tuple[str, ...] = _opt((), "test corpus prefixes, each kept as its own split")
    output: str = _opt("", "prepared dataset folder (default: data-bin/RECIPE_NAME)")
    synthetic: tuple[str, ...] = _opt((), "training prefixes (among data.train) that are synthetic, e.g. back-translations")
    tag_synthetic: bool = _opt(
        False,
        "start the source side of the data.synthetic corpora with the token <BT> "
        "(tagged back-translation, Caswell et al. 2019); <BT> is one piece of the vocabulary",
    )
    clean: CleanConfig = _sub(CleanConfig)
    workers: int = _opt(0, "encoding worker processes (0: one per CPU core)", ge=0, le=4096)
    chunk_lines: int = _opt(20000, "lines per encoding chunk (bounds memory per worker)", ge=1, le=10_000_000)
    encoding_errors: Literal["strict", "replace"] = _opt(
        "strict", "on invalid UTF-8: stop with the file and line (strict) or replace the bytes"
    )
    max_line_bytes: int = _opt(
        1 << 20,
        "longest corpus line read, in bytes; a longer one is refused with its file and line (a decompression "
        "bomb, or not one sentence per line)",
        ge=1024,
        le=1 << 31,
    )
    align: bool = _opt(
        False,
        "word-align the training pairs with eflomal for train.guided_alignment (pip install 'nmt-cli[align]')",
    )
    pairs: tuple[str, ...] = _opt(
        (),
        "directions of a multilingual model, e.g. [en-de, de-en, en-fr, fr-en], instead of data.src_lang and "
        "data.tgt_lang: one joint vocabulary, one tag per target language (>>de<<), one model",
    )
    roots: dict[str, str] = field(
        default_factory=dict,
        metadata={
            "help": "with data.pairs: a language pair's own folder (en-fr: /data/enfr), where corpora live apart; "
            "a pair not named reads data.root"
        },
    )
    temperature: float = _opt(
        5.0,
        "with data.pairs: how training mixes directions: a direction's share of each epoch is its size to the power "
        "1/T (1: in proportion to size; large: the same for every direction), as fairseq's temperature sampling",
        ge=1,
        le=1000,
    )
    language_tag: Literal["source", "target"] = _opt(
        "source",
        "with data.pairs: where the target language's tag goes: first token of the source (Johnson et al. 2017, "
        "Marian's >>fra<<) or first token the decoder reads (fairseq's --decoder-langtok)",
    )


@dataclass(frozen=True)
class VocabConfig:
    """SentencePiece subword vocabulary."""

    type: Literal["bpe", "unigram"] = _opt("bpe", "bpe, or unigram (word-piece style)")
    size: int = _opt(37000, "vocabulary size per model (the paper: 37k joint BPE for EN-DE)", ge=16, le=10_000_000)
    joint: bool = _opt(True, "one model for both languages (required by model.share_embeddings)")
    character_coverage: float = _opt(1.0, "share of characters covered (0.9995 for CJK)", gt=0, le=1)
    input_sentence_size: int = _opt(
        10_000_000,
        "most lines the vocabulary is learned from; with more, an even sample (bpe counts their words, "
        "unigram holds these lines in memory, ~22 bytes a character, checked against free memory first)",
        ge=1000,
        le=2**31 - 1,
    )
    threads: int = _opt(0, "SentencePiece training threads (0: all cores)", ge=0, le=4096)
    normalization: Literal["identity", "nmt_nfkc", "nfkc"] = _opt(
        "identity", "SentencePiece normalization; identity keeps the text exactly as cleaned"
    )
    byte_fallback: bool = _opt(True, "spell unseen characters as UTF-8 bytes instead of <unk>")
    extend: int = _opt(
        0,
        "with vocab.from: learn up to N new pieces from the new training data and append them "
        "to the reused vocabulary (old ids unchanged; train.init_from grows the embeddings)",
        ge=0,
        le=10_000_000,
    )
    from_: str = field(
        default="",
        metadata={
            "key": "from",
            "help": "reuse a trained model's SentencePiece model(s) instead of learning new ones, so "
            "token ids match it (fine-tuning): a run folder, a model or checkpoint .pt file, a prepared data folder "
            "or a .model file",
        },
    )


@dataclass(frozen=True)
class DownloadSource:
    """One file to fetch for ``nmt download``: a URL, its SHA-256, and what to unpack from it."""

    url: str = _opt("", "where to fetch the file (http, https or file URL)")
    sha256: str = _opt("", "hex SHA-256 of the file; the download is refused if it differs")
    extract: dict[str, str] = field(
        default_factory=dict, metadata={"help": "tar member -> file name under data.root (.sgm members become plain text)"}
    )
    save_as: str = _opt("", "for a plain file: its name under data.root (default: the URL's file name)")


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class ModelConfig:
    """Transformer sizes and variants; defaults are the paper's base model."""

    layers: int = _opt(6, "encoder layers (and decoder layers unless decoder_layers is set)", ge=1, le=1000)
    decoder_layers: int = _opt(0, "decoder layers (0: same as layers)", ge=0, le=1000)
    d_model: int = _opt(512, "model width", ge=2, le=65536)
    n_heads: int = _opt(8, "attention heads; must divide d_model", ge=1, le=4096)
    d_ff: int = _opt(2048, "feed-forward inner width", ge=1, le=1 << 20)
    dropout: float = _opt(0.1, "residual and embedding dropout", ge=0, le=1)
    attention_dropout: float = _opt(0.0, "dropout on attention weights", ge=0, le=1)
    activation_dropout: float = _opt(0.0, "dropout after the feed-forward activation", ge=0, le=1)
    activation: Literal["relu", "gelu", "swish"] = _opt(
        "relu", "feed-forward activation; swish is SiLU, x*sigmoid(x) (Marian's and OPUS-MT's default)"
    )
    positions: Literal["sinusoidal", "learned", "relative", "xl"] = _opt(
        "sinusoidal",
        "sinusoidal (paper), learned (paper variant E), relative (Shaw et al. 2018), xl "
        "(Transformer-XL relative attention, Dai et al. 2019: sinusoidal R_(i-j), biases u and v)",
    )
    sinusoids: Literal["paper", "fairseq"] = _opt(
        "paper",
        "with positions sinusoidal: paper, sin/cos(pos/10000^(2i/d)) from position 0; fairseq, frequencies "
        "10000^(-i/(d/2-1)) from position 2, as fairseq (and tensor2tensor) compute them (set by nmt import fairseq)",
    )
    max_relative_position: int = _opt(16, "clipping distance k of relative positions", ge=1, le=1 << 20)
    norm: Literal["post", "pre", "rezero"] = _opt(
        "post", "post: LN(x+F(x)) (paper); pre: x+F(LN(x)) with final LN; rezero: x+a*F(x)"
    )
    rezero_per: Literal["branch", "layer"] = _opt(
        "branch",
        "with norm: rezero, one a per residual branch, or one per layer shared by its branches (the official ReZero code)",
    )
    init: Literal["xavier", "fairseq", "tfixup"] = _opt(
        "xavier",
        "xavier: every projection Xavier-uniform, zero biases; fairseq: Q/K/V Xavier with gain 1/sqrt(2) "
        "per projection, feed-forward PyTorch's default uniform(+-1/sqrt(fan_in)), as fairseq; "
        "tfixup: Huang et al. 2020 (no LayerNorm)",
    )
    repulsive: float = _opt(
        0.0,
        "repulsive multi-head attention (An et al. 2020): weight w of the SVGD repulsion "
        "between heads' Q/K/V weights (their code: 0.01); 0: off",
        ge=0,
        le=100,
    )
    share_embeddings: bool = _opt(True, "one embedding for source and target (needs vocab.joint)")
    tie_output: bool = _opt(True, "output projection tied to the target embedding")
    output_bias: bool = _opt(False, "a learnt bias on the output logits (MarianMT's final_logits_bias; the paper has none)")
    max_positions: int = _opt(1024, "longest sentence in subword tokens (incl. EOS)", ge=8, le=1 << 20)
    concat: int = _opt(
        0,
        "document context by concatenation: each source sentence is read after the K previous sentences of its "
        "document, each followed by the piece <brk> (2-to-1; Tiedemann & Scherrer 2017); 0: sentence-level. "
        "Needs data prepared with documents (a .docids file beside the corpus)",
        ge=0,
        le=16,
    )
    recurrence: int = _opt(
        0,
        "document context by segment-level recurrence (Transformer-XL): every self-attention layer also attends to "
        "its own keys/values of the previous N sentences of the document, without gradient through them; needs "
        "model.positions: xl and data prepared with documents; 0: sentence-level",
        ge=0,
        le=16,
    )
    concat_target: bool = _opt(
        False,
        "with model.concat: the target side too starts with the previous sentences' translations (2-to-2); "
        "the loss counts the current sentence only, and translation forces the model's own earlier output",
    )

    @property
    def n_decoder_layers(self) -> int:
        return self.decoder_layers or self.layers

    @property
    def arrangement(self) -> Literal["post", "pre", "rezero", "none"]:
        """The residual arrangement of every sub-layer: T-Fixup's is ``none`` (no LayerNorm)."""
        return "none" if self.init == "tfixup" else self.norm


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation, batching, stopping, validation and checkpoints."""

    dir: str = _opt("", "run folder (default: runs/RECIPE_NAME)")
    init_from: str = _opt(
        "",
        "fine-tune: start this new run from a trained model's weights (a run folder, its "
        "model.pt or any checkpoint), with a fresh optimizer and schedule; prepare the data "
        "with vocab.from naming the same model",
    )
    seed: int = _opt(1, "random seed (batches, dropout, initialisation)", ge=0, le=2**32 - 1)
    max_tokens: int | Literal["auto"] = _opt(
        4096,
        "tokens per batch per process, padding included; auto: the largest batch that fits in GPU memory "
        "(probed at start; 4096 on the CPU)",
        ge=1,
        le=100_000_000,
    )
    update_freq: int = _opt(1, "batches accumulated per update (per process)", ge=1, le=100_000)
    max_steps: int = _opt(100_000, "stop after this many updates (0: no limit)", ge=0, le=10**12)
    max_epochs: int = _opt(0, "stop after this many epochs (0: no limit)", ge=0, le=1_000_000)
    max_time: str = _opt("", "stop after this wall-clock time, e.g. 30m, 2h (empty: no limit)")
    lr_schedule: Literal["noam", "inverse_sqrt", "inverse_sqrt_nowarmup", "constant"] = _opt(
        "noam",
        "noam: the paper's d^-0.5*min(s^-0.5, s*w^-1.5); inverse_sqrt: linear warm-up to lr, then "
        "lr*sqrt(w/s); inverse_sqrt_nowarmup: lr*sqrt(w/(w+s)) from the first update (T-Fixup; w = train.warmup); "
        "constant",
    )
    lr: float = _opt(7e-4, "peak learning rate (inverse_sqrt, constant)", gt=0, le=10)
    lr_scale: float = _opt(1.0, "factor on the noam schedule", gt=0, le=1000)
    warmup: int = _opt(4000, "warm-up updates", ge=0, le=10**9)
    adam_beta1: float = _opt(0.9, "Adam beta1", ge=0, le=1)
    adam_beta2: float = _opt(0.98, "Adam beta2", ge=0, le=1)
    adam_eps: float = _opt(1e-9, "Adam epsilon", gt=0, le=1)
    weight_decay: float = _opt(0.0, "decoupled weight decay (AdamW) ", ge=0, le=10)
    clip_norm: float = _opt(0.0, "clip the gradient norm to this (0: off)", ge=0, le=1e6)
    label_smoothing: float = _opt(0.1, "label smoothing epsilon", ge=0, le=1)
    guided_alignment: float = _opt(
        0.0,
        "weight of the guided-alignment loss: one cross-attention head of the penultimate decoder layer learns "
        "the word alignments of data.align, and alignments come from it (0: off; fairseq's default weight is 0.05)",
        ge=0,
        le=100,
    )
    validate_every: int = _opt(1000, "validate every N updates (0: only at the end)", ge=0, le=10**12)
    valid_bleu: bool = _opt(True, "decode the validation set and report sacreBLEU")
    valid_beam: int = _opt(1, "beam size for validation BLEU (1: greedy)", ge=1, le=1024)
    calibrate: bool = _opt(
        True,
        "at the end, fit the confidence of `nmt translate --confidence` on the validation set (100 pairs or more) "
        "and store it in model.pt",
    )
    calibrate_chrf: float = _opt(
        50.0, "the sentence chrF that counts as an acceptable translation for that calibration", ge=0, le=100
    )
    patience: int = _opt(0, "stop after N validations without improvement (0: off)", ge=0, le=1_000_000)
    save_every: int = _opt(1000, "write a checkpoint every N updates (0: off)", ge=0, le=10**12)
    save_minutes: float = _opt(0.0, "also write one every T minutes (the paper: 10)", ge=0, le=1_000_000)
    keep_last: int = _opt(5, "keep the last K step checkpoints (0: keep all)", ge=0, le=1_000_000)
    average_last: int = _opt(0, "average the last N checkpoints at the end (0: off)", ge=0, le=1_000_000)
    ema_decay: float = _opt(
        0.0,
        "keep an exponential moving average of the weights with this decay, e.g. 0.9999, written as model.ema.pt (0: off)",
        ge=0,
        lt=1,
    )
    log_every: int = _opt(100, "log metrics every N updates", ge=1, le=10**12)
    tensorboard: bool = _opt(
        True,
        "also write the metrics as TensorBoard event files to RUN/tensorboard "
        "(when the tensorboard package is installed: pip install 'nmt-cli[tensorboard]')",
    )
    precision: Literal["fp32", "bf16", "fp16", "auto"] = _opt(
        "fp32",
        "fp32; bf16 autocast; fp16 with loss scaling (CUDA); auto: bf16 where the hardware computes it "
        "natively (CPUs with AVX512-BF16 or AMX, CUDA devices with bf16), else fp32",
    )
    compile: bool = _opt(
        False, "torch.compile each encoder and decoder layer (regional, shapes symbolic): fuses the element-wise work"
    )
    activation_checkpointing: bool = _opt(False, "recompute layer activations in backward (saves memory)")
    packed: bool = _opt(
        False,
        "padding-free batches: each batch's sentences laid end to end, attention kept within each (on CUDA in "
        "bf16/fp16 the variable-length flash-attention kernel; elsewhere the padded computation, slower); "
        "absolute positions, sentence-level models",
    )
    train_previous: bool = _opt(
        False,
        "model.recurrence: also train each batch's previous pairs (their loss counted), as Transformer-XL trains the "
        "segment its memory comes from; off: they are run without gradient, only for their keys/values (more updates "
        "in a time budget; docs/benchmarks.md)",
    )
    threads: int = _opt(0, "CPU threads per process (0: cores / processes)", ge=0, le=4096)
    device: Literal["auto", "cpu", "cuda"] = _opt("auto", "auto picks CUDA when available")
    dist_timeout_minutes: float = _opt(10.0, "give up when another process is silent this long", gt=0, le=10_080)

    @property
    def max_seconds(self) -> float:
        return parse_duration(self.max_time) if self.max_time else 0.0


# --------------------------------------------------------------------------- decoding


@dataclass(frozen=True)
class DecodeConfig:
    """Beam search defaults used by validation and ``nmt translate``."""

    beam: int = _opt(4, "beam size (1: greedy)", ge=1, le=1024)
    alpha: float = _opt(0.6, "length penalty exponent (0: none)", ge=0, le=10)
    length_penalty: Literal["gnmt", "average"] = _opt(
        "gnmt", "gnmt: ((5+|Y|)/6)^alpha (the paper); average: |Y|^alpha (fairseq, Marian, CTranslate2)"
    )
    stop: Literal["beam", "top", "bound"] = _opt(
        "beam",
        "when a sentence's search ends — beam: once it has `beam` finished hypotheses (fairseq, CTranslate2); "
        "top: as soon as its best candidate ends (OpenNMT-py); bound: once no open hypothesis "
        "can still beat them (slowest, exhaustive within the length limit)",
    )
    max_len_a: float = _opt(1.0, "maximum output length is a * source length + b", ge=0, le=100)
    max_len_b: int = _opt(50, "see max_len_a", ge=0, le=100_000)
    batch_tokens: int = _opt(6000, "source tokens per decoding batch", ge=1, le=100_000_000)
    batch_size: int = _opt(0, "sentences per decoding batch (0: no limit)", ge=0, le=10_000_000)
    workers: int = _opt(
        0,
        "on the CPU, batches translated at once, each on threads / workers of the threads (0: one per "
        "thread when a text makes many batches of at most 256 sentences x beam, else 1; 1: one batch at a "
        "time on every thread, the lowest latency)",
        ge=0,
        le=256,
    )
    cuda_graphs: bool = _opt(
        True,
        "on a GPU, record each batch's decoder step as a CUDA graph and replay it "
        "(fixed shapes: finished sentences keep their slots); false: launch step by step",
    )
    sampling: bool = _opt(
        False,
        "sample each output token instead of searching (back-translation, diverse "
        "n-best lists); with nbest K, up to K distinct samples per line",
    )
    temperature: float = _opt(1.0, "sampling: divide the logits by this (below 1: sharper, above 1: flatter)", gt=0, le=100)
    top_k: int = _opt(0, "sampling: draw from the K most probable tokens only (0: all)", ge=0, le=10_000_000)
    top_p: float = _opt(
        1.0,
        "sampling: draw from the smallest set of tokens whose probability reaches P (nucleus sampling; 1: all)",
        gt=0,
        le=1,
    )
    seed: int = _opt(
        0, "sampling: random seed (the same seed, input and batching give the same samples)", ge=0, le=2**63 - 1
    )


PAIR = re.compile(r"([A-Za-z]{2,3}(?:_[A-Za-z]{4})?)-([A-Za-z]{2,3}(?:_[A-Za-z]{4})?)")


def parse_pair(pair: str) -> tuple[str, str]:
    """``en-de`` as ("en", "de"): language codes of 2-3 letters, a script after ``_`` where needed (sr_Cyrl)."""
    match = PAIR.fullmatch(pair.strip())
    if not match:
        raise ValueError(f"'{pair}' is not a direction; write SOURCE-TARGET, e.g. en-de")
    return match.group(1), match.group(2)


@dataclass(frozen=True)
class Recipe:
    """A whole recipe."""

    name: str = _opt("", "recipe name (default: the file name)")
    data: DataConfig = _sub(DataConfig)
    vocab: VocabConfig = _sub(VocabConfig)
    model: ModelConfig = _sub(ModelConfig)
    train: TrainConfig = _sub(TrainConfig)
    decode: DecodeConfig = _sub(DecodeConfig)
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


# --------------------------------------------------------------------------- loading


def load_recipe(path: str | Path, overrides: typing.Sequence[str] = ()) -> Recipe:
    """Load ``path`` (following ``base:`` inheritance), apply ``KEY=VALUE`` overrides, validate."""
    path = Path(path)
    raw = _load_yaml_tree(path, seen=())
    raw.setdefault("name", path.stem.removesuffix(".yaml"))
    for item in overrides:
        _apply_override(raw, item)
    return recipe_from_dict(raw, source=str(path))


def recipe_from_dict(raw: dict[str, Any], source: str = "recipe") -> Recipe:
    """Build and validate a :class:`Recipe` from plain data (e.g. a checkpoint's copy)."""
    recipe = _build(Recipe, raw, "", source)
    validate(recipe, source)
    return recipe


def recipe_to_dict(recipe: Recipe) -> dict[str, Any]:
    """Plain nested dicts and lists, ready for YAML or a checkpoint."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value):
            return {_key_of(f): plain(getattr(value, f.name)) for f in fields(value)}
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(recipe)


def _key_of(f: dataclasses.Field) -> str:
    """A field's key in recipes: its name, or the metadata's ``key`` where the name is a Python keyword."""
    return f.metadata.get("key", f.name)


def dump_recipe(recipe: Recipe) -> str:
    """The fully resolved recipe as YAML text."""
    return yaml.safe_dump(recipe_to_dict(recipe), sort_keys=False, allow_unicode=True)


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
    for i, item in enumerate(recipe.download):
        if not item.url or not re.fullmatch(r"[0-9a-f]{64}", item.sha256):
            fail(f"download[{i}]", "needs a url and a 64-digit hex sha256 (quote it in YAML)")


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
    languages = {lang for direction in seen for lang in direction}
    for key in d.roots:
        try:
            a, b = parse_pair(key)
        except ValueError as err:
            fail(f"data.roots.{key}", str(err))
            return
        if a not in languages or b not in languages:
            fail(f"data.roots.{key}", f"names a pair outside data.pairs ({', '.join(d.pairs)})")
    if recipe.train.guided_alignment:
        fail("train.guided_alignment", "is not available with data.pairs yet; train bilingual models for it")


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


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error, not a silent overwrite."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, typing.Hashable) and key in first_line:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"'{key}' appears twice, at lines {first_line[key]} and {line}; keep one",
                    key_node.start_mark,
                )
            if isinstance(key, typing.Hashable):
                first_line[key] = line
        return super().construct_mapping(node, deep=deep)


def _load_yaml_tree(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    resolved = path.resolve()
    if resolved in seen:
        raise RecipeError(f"{path}: 'base' inheritance loops back to this file")
    if not path.is_file():
        where = f" (inherited by {seen[-1]})" if seen else ""
        raise RecipeError(f"{path}: recipe not found{where}; check the path")
    try:
        with open(path, encoding="utf-8") as handle:
            raw = yaml.load(handle, Loader=_UniqueKeyLoader)  # a SafeLoader: no Python objects
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise RecipeError(f"{path}:{line}: invalid YAML ({getattr(err, 'problem', err)})") from None
    except UnicodeDecodeError:
        raise RecipeError(f"{path}: not UTF-8 text; save the recipe as UTF-8") from None
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise RecipeError(f"{path}: a recipe is a mapping of sections (data, vocab, model, ...)")
    base = raw.pop("base", None)
    if base is None:
        return raw
    if not isinstance(base, str):
        raise RecipeError(f"{path}: base: expected a file name, got {base!r}")
    parent = _load_yaml_tree(path.parent / base, seen + (resolved,))
    parent.pop("name", None)  # a derived recipe is named after its own file
    return _deep_merge(parent, raw)


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _apply_override(raw: dict[str, Any], item: str) -> None:
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise RecipeError(f"--set {item}: write KEY=VALUE, e.g. --set model.layers=3")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text
    parts = key.strip().split(".")
    _check_override(item, parts, value)
    node = raw
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise RecipeError(f"--set {item}: '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def _check_override(item: str, parts: list[str], value: Any) -> None:
    """A ``--set`` key and value checked on their own, so that a typo is reported as the option's, not as an
    unknown key of the recipe file."""
    cls: Any = Recipe
    path = ""
    for depth, part in enumerate(parts):
        by_key = {_key_of(f): f for f in fields(cls)}
        if part not in by_key:
            close = difflib.get_close_matches(part, list(by_key), n=1)
            hint = f"did you mean '{path}{close[0]}'?" if close else f"valid keys: {', '.join(by_key)}"
            raise RecipeError(f"--set {item}: unknown key '{path}{part}'; {hint}")
        kind = typing.get_type_hints(cls)[by_key[part].name]
        if depth < len(parts) - 1:
            if not (isinstance(kind, type) and dataclasses.is_dataclass(kind)):
                raise RecipeError(f"--set {item}: '{path}{part}' is a value, not a section")
            cls, path = kind, f"{path}{part}."
        else:
            _coerce(kind, value, path + part, by_key[part].metadata, f"--set {item}")


def override_section(section: Any, values: typing.Mapping[str, Any], sources: typing.Mapping[str, str]) -> Any:
    """``section`` (e.g. a recipe's ``DecodeConfig``) with ``values`` by field name (None: keep), each checked
    as a recipe's value is checked (type, choices, range) and failing with the same message, which names
    ``sources[name]`` (the command-line flag it came from) where a recipe error names the file."""
    cls = type(section)
    prefix = next(_key_of(f) + "." for f in fields(Recipe) if typing.get_type_hints(Recipe)[f.name] is cls)
    hints = typing.get_type_hints(cls)
    changed = {}
    for f in fields(cls):
        if values.get(f.name) is not None:
            changed[f.name] = _coerce(hints[f.name], values[f.name], prefix + _key_of(f), f.metadata, sources[f.name])
    return dataclasses.replace(section, **changed)


def option_help(cls: type, name: str) -> str:
    """A command-line option's help, from the recipe key it overrides: its meaning, choices and default."""
    f = next(f for f in fields(cls) if f.name == name)
    hint = typing.get_type_hints(cls)[name]
    prefix = next(_key_of(r) for r in fields(Recipe) if typing.get_type_hints(Recipe)[r.name] is cls)
    default = f.default if hint is not bool else ("on" if f.default else "off")
    return f"{f.metadata['help']}. [recipe key {prefix}.{_key_of(f)}; default: {default}]"


def _build(cls: type, data: Any, path: str, source: str) -> Any:
    if not isinstance(data, dict):
        raise RecipeError(f"{source}: {path.rstrip('.') or 'recipe'}: expected a mapping of keys, got {_describe(data)}")
    hints = typing.get_type_hints(cls)
    names = [_key_of(f) for f in fields(cls)]
    for key in data:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"did you mean '{path}{close[0]}'?" if close else f"valid keys: {', '.join(names)}"
            raise RecipeError(f"{source}: unknown key '{path}{key}'; {hint}")
    kwargs = {
        f.name: _coerce(hints[f.name], data[_key_of(f)], path + _key_of(f), f.metadata, source)
        for f in fields(cls)
        if _key_of(f) in data
    }
    return cls(**kwargs)


def _coerce(kind: Any, value: Any, key: str, meta: typing.Mapping[str, Any], source: str) -> Any:
    def fail(expected: str) -> typing.NoReturn:
        raise RecipeError(f"{source}: {key}: expected {expected}, got {_describe(value)}")

    origin = typing.get_origin(kind)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _build(kind, value, key + ".", source)
    if origin is Literal:
        choices = typing.get_args(kind)
        if value not in choices:
            fail("one of " + ", ".join(map(str, choices)))
        return value
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            fail("a mapping of names to names")
        return dict(value)
    if origin is tuple:
        item_kind = typing.get_args(kind)[0]
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            fail("a list")
        return tuple(_coerce(item_kind, v, f"{key}[{i}]", {}, source) for i, v in enumerate(items))
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(kind):
            return None
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        for arg in args:  # the first alternative that accepts the value
            try:
                return _coerce(arg, value, key, meta, source)
            except RecipeError as err:
                if "out of range" in str(err):
                    raise
        fail(" or ".join(_expected(arg) for arg in args))
    if kind is bool:
        if not isinstance(value, bool):
            fail("true or false")
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            fail("an integer")
    elif kind is float:
        if isinstance(value, str):  # YAML 1.1 reads 5e-4 (no dot) as a string
            value = _float_or_none(value) if value.strip() else value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail("a number")
        value = float(value)
        if not math.isfinite(value):  # .nan and .inf are YAML numbers; no setting means them
            fail("a finite number")
    elif kind is str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            fail("a string")
    _check_range(value, key, meta, source)
    return value


def _float_or_none(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _expected(kind: Any) -> str:
    """What a value of ``kind`` looks like, for error messages."""
    if typing.get_origin(kind) is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(kind)))
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(kind, str(kind))


def _check_range(value: Any, key: str, meta: typing.Mapping[str, Any], source: str) -> None:
    if isinstance(value, str):
        return
    for check, ok, words in (
        ("ge", lambda v, b: v >= b, ">="),
        ("gt", lambda v, b: v > b, ">"),
        ("le", lambda v, b: v <= b, "<="),
        ("lt", lambda v, b: v < b, "<"),
    ):
        if check in meta and not ok(value, meta[check]):
            raise RecipeError(f"{source}: {key}: {value} is out of range; it must be {words} {meta[check]}")


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    # said in the recipe's own words, not Python's ('abc' (str), None (NoneType))
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    return f"the text '{value}'"


@dataclass(frozen=True)
class KeyReference:
    """One recipe key as the reference page shows it: default in YAML, kind of value, bounds, meaning."""

    key: str
    default: str
    kind: str
    bounds: str
    help: str


def key_reference(cls: type = Recipe, prefix: str = "") -> list[KeyReference]:
    """Every leaf key of the recipe with its YAML default, its kind of value and its bounds (the reference page)."""
    rows: list[KeyReference] = []
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            rows += key_reference(hints[f.name], f"{prefix}{_key_of(f)}.")
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc,operator]
        shown = yaml.safe_dump(list(default) if isinstance(default, tuple) else default, default_flow_style=True)
        shown = shown.strip().removesuffix("...").strip()
        kind, bounds = _kind_text(hints[f.name]), _bounds_text(f.metadata)
        rows.append(KeyReference(prefix + _key_of(f), shown, kind, bounds, f.metadata.get("help", "")))
    return rows


def _kind_text(kind: Any) -> str:
    if typing.get_origin(kind) is Literal:
        return "one of " + ", ".join(str(choice) for choice in typing.get_args(kind))
    if typing.get_origin(kind) in (types.UnionType, typing.Union):
        return " or ".join(_kind_text(part) for part in typing.get_args(kind))
    if typing.get_origin(kind) is tuple:
        return "list of " + _kind_text(typing.get_args(kind)[0])
    if typing.get_origin(kind) is dict:
        return "mapping"
    names = {bool: "true or false", int: "integer", float: "number", str: "text"}
    return names.get(kind, getattr(kind, "__name__", str(kind)))


def _bounds_text(metadata: typing.Mapping[str, Any]) -> str:
    low = f"≥ {metadata['ge']:,}" if "ge" in metadata else f"> {metadata['gt']:,}" if "gt" in metadata else ""
    high = f"≤ {metadata['le']:,}" if "le" in metadata else f"< {metadata['lt']:,}" if "lt" in metadata else ""
    return ", ".join(part for part in (low, high) if part)


def field_help(cls: type = Recipe, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default as YAML, help) for every leaf field: used by ``nmt config --explain``."""
    return [(row.key, row.default, row.help) for row in key_reference(cls, prefix)]
