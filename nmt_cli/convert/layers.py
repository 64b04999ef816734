"""The Transformer layer weights of nmt beside those of the fairseq family (fairseq, MarianMT in transformers).

fairseq and HuggingFace's MarianMT name the weights inside a layer the same way (``self_attn.q_proj``,
``encoder_attn``, ``fc1``, ``final_layer_norm`` ...); only the prefix differs (``model.`` in transformers).
nmt fuses Q, K and V into one projection (``qkv``; K and V into ``kv`` for cross-attention). One table says,
for every layer weight, nmt's name, theirs concatenated into it, and where the residual dimension lies in it;
an import reads it one way, an export the other.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from ..errors import NmtError

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


def layer_shape_problem(name: str, shape: tuple[int, ...], d_model: int, d_ff: int) -> str | None:
    """Whether a layer weight of the fairseq family has the shape the model's settings give it: what is wrong,
    or None (names this table does not know are left to the importer)."""
    d, f = d_model, d_ff
    leaf = name.split(".")
    if len(leaf) < 2:
        return None
    kind = ".".join(leaf[-2:])
    wanted: tuple[int, ...] | None = None
    if leaf[-2] in ("q_proj", "k_proj", "v_proj", "out_proj"):
        wanted = (d, d) if leaf[-1] == "weight" else (d,)
    elif kind == "fc1.weight":
        wanted = (f, d)
    elif kind == "fc1.bias":
        wanted = (f,)
    elif kind == "fc2.weight":
        wanted = (d, f)
    elif kind == "fc2.bias" or leaf[-2].endswith("layer_norm"):
        wanted = (d,)
    if wanted is None or tuple(shape) == wanted:
        return None
    return f"{name} has shape {tuple(shape)}, but d_model {d} and d_ff {f} give it {wanted}"


def check_layer_shapes(weights: dict[str, torch.Tensor], settings: dict[str, Any], source: object, said: str) -> None:
    """The settings an importer read (``d_model``, ``d_ff``, ``n_heads``) against every layer weight's shape,
    before anything is built: what disagrees is refused naming both (``said``: where the settings came from)."""
    d_model, d_ff, heads = settings["d_model"], settings["d_ff"], settings["n_heads"]
    for key in ("d_ff", "n_heads"):
        if not isinstance(settings[key], int) or settings[key] < 1:
            raise NmtError(f"{source}: {key} ({said}) must be a positive whole number; it is {settings[key]!r}")
    if d_model % heads:
        raise NmtError(f"{source}: the attention heads ({heads}, {said}) do not divide d_model ({d_model})")
    for name, tensor in weights.items():
        problem = layer_shape_problem(name, tuple(tensor.shape), d_model, d_ff)
        if problem:
            raise NmtError(f"{source}: {problem} ({said}); the settings and the weights disagree")
