"""The recipe's model section."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .fields import _opt


@dataclass(frozen=True)
class ModelConfig:
    """Transformer sizes and variants; defaults are the paper's base model."""

    layers: int = _opt(6, "encoder and decoder layers (unless encoder_layers / decoder_layers say otherwise)", ge=1, le=1000)
    encoder_layers: int = _opt(0, "encoder layers (0: same as layers)", ge=0, le=1000)
    decoder_layers: int = _opt(
        0,
        "decoder layers (0: same as layers); a deep encoder and a shallow decoder decode faster (Kasai et al. 2021)",
        ge=0,
        le=1000,
    )
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
    def reads_context(self) -> bool:
        """Whether it reads its document's earlier sentences (``concat`` or ``recurrence``): the one test for it."""
        return bool(self.concat or self.recurrence)

    @property
    def n_encoder_layers(self) -> int:
        return self.encoder_layers or self.layers

    @property
    def n_decoder_layers(self) -> int:
        return self.decoder_layers or self.layers

    @property
    def arrangement(self) -> Literal["post", "pre", "rezero", "none"]:
        """The residual arrangement of every sub-layer: T-Fixup's is ``none`` (no LayerNorm)."""
        return "none" if self.init == "tfixup" else self.norm
