"""The Transformer layer weights of nmt beside those of the fairseq family (fairseq, MarianMT in transformers).

fairseq and HuggingFace's MarianMT name the weights inside a layer the same way (``self_attn.q_proj``,
``encoder_attn``, ``fc1``, ``final_layer_norm`` ...); only the prefix differs (``model.`` in transformers).
nmt fuses Q, K and V into one projection (``qkv``; K and V into ``kv`` for cross-attention). One table says,
for every layer weight, nmt's name, theirs concatenated into it, and where the residual dimension lies in it;
an import reads it one way, an export the other.
"""

from __future__ import annotations

from typing import Literal

import torch

# How the residual dimension lies in a weight: "in" its columns (it reads the residual stream), "out" its rows
# (it writes to it: output rows, their biases, LayerNorm), "none" not at all (biases inside a projection).
Place = Literal["in", "out", "none"]


def layer_map(encoder_layers: int, decoder_layers: int, prefix: str = "") -> list[tuple[str, tuple[str, ...], Place]]:
    """Every layer weight as (nmt's name, the other toolkit's names concatenated into it, where the residual lies)."""
    table: list[tuple[str, tuple[str, ...], Place]] = []

    def attention(ours: str, theirs: str, fused: tuple[tuple[str, tuple[str, ...]], ...]) -> None:
        for name, parts in fused:
            table.append((f"{ours}.{name}.weight", tuple(f"{theirs}.{q}_proj.weight" for q in parts), "in"))
            table.append((f"{ours}.{name}.bias", tuple(f"{theirs}.{q}_proj.bias" for q in parts), "none"))
        table.append((f"{ours}.out.weight", (f"{theirs}.out_proj.weight",), "out"))
        table.append((f"{ours}.out.bias", (f"{theirs}.out_proj.bias",), "out"))

    def norm(ours: str, theirs: str) -> None:
        table.extend((f"{ours}.norm.{n}", (f"{theirs}.{n}",), "out") for n in ("weight", "bias"))

    def feed_forward(ours: str, theirs: str) -> None:
        table.append((f"{ours}.ffn.w1.weight", (f"{theirs}.fc1.weight",), "in"))
        table.append((f"{ours}.ffn.w1.bias", (f"{theirs}.fc1.bias",), "none"))
        table.append((f"{ours}.ffn.w2.weight", (f"{theirs}.fc2.weight",), "out"))
        table.append((f"{ours}.ffn.w2.bias", (f"{theirs}.fc2.bias",), "out"))

    self_attn = (("qkv", ("q", "k", "v")),)
    for i in range(encoder_layers):
        ours, theirs = f"encoder.{i}", f"{prefix}encoder.layers.{i}"
        attention(f"{ours}.self_attn", f"{theirs}.self_attn", self_attn)
        norm(f"{ours}.res_attn", f"{theirs}.self_attn_layer_norm")
        feed_forward(ours, theirs)
        norm(f"{ours}.res_ffn", f"{theirs}.final_layer_norm")
    for i in range(decoder_layers):
        ours, theirs = f"decoder.{i}", f"{prefix}decoder.layers.{i}"
        attention(f"{ours}.self_attn", f"{theirs}.self_attn", self_attn)
        norm(f"{ours}.res_self", f"{theirs}.self_attn_layer_norm")
        attention(f"{ours}.cross_attn", f"{theirs}.encoder_attn", (("q", ("q",)), ("kv", ("k", "v"))))
        norm(f"{ours}.res_cross", f"{theirs}.encoder_attn_layer_norm")
        feed_forward(ours, theirs)
        norm(f"{ours}.res_ffn", f"{theirs}.final_layer_norm")
    return table


def sines_then_cosines(d: int) -> torch.Tensor:
    """For each of nmt's residual dimensions, the other toolkit's, whose sinusoid table holds all sines then all
    cosines where nmt's interleaves them: permuting every weight's residual dimensions this way gives the same
    network in nmt's layout."""
    return torch.tensor([k // 2 if k % 2 == 0 else d // 2 + k // 2 for k in range(d)])


def placed(weight: torch.Tensor, place: Place, order: torch.Tensor) -> torch.Tensor:
    """``weight`` with its residual dimension put in ``order``."""
    return weight[:, order] if place == "in" else weight[order] if place == "out" else weight
