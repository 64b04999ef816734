"""``nmt import hf``: a MarianMT folder (OPUS-MT's HuggingFace layout) as an nmt model folder.

The folder holds ``config.json``, the weights (``model.safetensors`` or ``pytorch_model.bin``),
``source.spm``/``target.spm`` and ``vocab.json``, the one id space both SentencePiece models map into. The
network is the paper's post-norm Transformer with what MarianMT adds expressed as recipe options:
``model.activation: swish``, ``model.output_bias`` (``final_logits_bias``), embeddings scaled by sqrt(d) (as
nmt's), tied embeddings. Three things are moved, not added:

- the vocabulary: ``shared_ids.py`` rebuilds both SentencePiece models over vocab.json's order in nmt's
  layout, and the embedding rows follow; Marian starts decoding from ``<pad>``, so nmt's ``<s>`` row is that
  row, and its output bias is -1e4 so that the pad logit is counted once in the softmax, as Marian counts it;
- the position layout: Marian's sinusoid table holds all sines then all cosines, nmt's interleaves them with
  the same frequencies; permuting the residual dimensions of every weight (``_residual_order``) gives the same
  network in nmt's layout, so no new position option is needed;
- the weights' names: Q, K and V concatenated into nmt's fused projections.

What MarianMT can be that this cannot read is refused in one line naming the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..config import recipe_from_dict, recipe_to_dict
from ..data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from ..errors import NmtError
from ..utils import torchfile
from .shared_ids import SPECIALS, rebuild

ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}
NEVER = -1e4  # output bias of the copy of the pad row that nmt's <s> is: exp(-1e4) is 0 in float32


def import_marian(folder: Path, output: Path, src_lang: str | None = None, tgt_lang: str | None = None) -> Path:
    """Write ``output``/model.pt from the MarianMT folder ``folder``; returns ``output``."""
    config = _read_json(folder / "config.json")
    model_settings = _model_settings(config, folder)
    vocab = _read_json(folder / "vocab.json")
    marian_rows, order = _vocabulary(vocab, config, folder)
    sides = {
        side: rebuild(_read_bytes(folder / f"{side}.spm"), order, str(folder / f"{side}.spm"))
        for side in ("source", "target")
    }
    weights = _weights(folder)
    state = _state_dict(weights, config, marian_rows, folder)
    languages = _languages(folder, src_lang, tgt_lang)
    recipe = recipe_from_dict(
        {
            "name": folder.name,
            "data": {"src_lang": languages[0], "tgt_lang": languages[1]},
            "model": model_settings,
            "decode": {"beam": int(config.get("num_beams") or 4), "alpha": 1.0, "length_penalty": "average"},
        },
        source=f"{folder} (MarianMT config)",
    )
    output.mkdir(parents=True, exist_ok=True)
    payload = {
        "model": state,
        "recipe": recipe_to_dict(recipe),
        "vocab": {"src": sides["source"], "tgt": sides["target"]},
        "step": 0,
        "parent": None,
        "imported_from": {"format": "marian", "path": str(folder)},
    }
    torchfile.save(output / "model.pt", payload, "weights")
    return output


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(_read_bytes(path).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise NmtError(f"{path}: not valid JSON ({err}); is this a MarianMT folder?") from None
    if not isinstance(data, dict):
        raise NmtError(f"{path}: holds no JSON object; is this a MarianMT folder?")
    return data


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise NmtError(
            f"{path}: not found; a MarianMT folder has config.json, vocab.json, source.spm, target.spm and the weights"
        )
    return path.read_bytes()


def _model_settings(config: dict[str, Any], folder: Path) -> dict[str, Any]:
    """nmt's model options for the MarianMT ``config``; what they cannot express is refused."""
    where = folder / "config.json"
    if config.get("model_type") != "marian":
        raise NmtError(f"{where}: model_type is {config.get('model_type')!r}; nmt import hf reads MarianMT (marian) models")
    for field, wanted in (
        ("scale_embedding", True),
        ("normalize_before", False),
        ("share_encoder_decoder_embeddings", True),
        ("tie_word_embeddings", True),
        ("add_bias_logits", False),
        ("normalize_embedding", False),
    ):
        if field in config and config[field] != wanted:
            raise NmtError(f"{where}: {field} is {config[field]!r}; nmt reads MarianMT models with {field} {wanted}")
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if config.get(a) != config.get(b):
            raise NmtError(f"{where}: {a} ({config.get(a)}) and {b} ({config.get(b)}) differ; nmt uses one value for both")
    activation = ACTIVATIONS.get(str(config.get("activation_function")))
    if activation is None:
        raise NmtError(
            f"{where}: activation_function {config.get('activation_function')!r} is not one nmt has (swish, relu, gelu)"
        )
    if config.get("decoder_start_token_id", config.get("pad_token_id")) != config.get("pad_token_id"):
        raise NmtError(f"{where}: decoder_start_token_id is not pad_token_id; nmt reads Marian's start from <pad>")
    d_model = config.get("d_model")
    if not isinstance(d_model, int) or d_model % 2:
        raise NmtError(f"{where}: d_model must be an even number; it is {d_model!r}")
    return {
        "layers": config.get("encoder_layers"),
        "decoder_layers": config.get("decoder_layers"),
        "d_model": d_model,
        "n_heads": config.get("encoder_attention_heads"),
        "d_ff": config.get("encoder_ffn_dim"),
        "dropout": float(config.get("dropout", 0.1)),
        "attention_dropout": float(config.get("attention_dropout", 0.0)),
        "activation_dropout": float(config.get("activation_dropout", 0.0)),
        "activation": activation,
        "positions": "sinusoidal",
        "norm": "post",
        "share_embeddings": True,
        "tie_output": True,
        "output_bias": True,
        "max_positions": int(config.get("max_position_embeddings", 512)),
    }


def _vocabulary(vocab: dict[str, Any], config: dict[str, Any], folder: Path) -> tuple[torch.Tensor, list[str]]:
    """For each nmt id, the Marian row it takes; and the other pieces in Marian's order."""
    ids = sorted(vocab.values()) if all(isinstance(v, int) for v in vocab.values()) else None
    if ids != list(range(len(vocab))):
        raise NmtError(f"{folder / 'vocab.json'}: its ids are not 0 .. {len(vocab) - 1}, each once")
    pad, eos = config.get("pad_token_id"), config.get("eos_token_id")
    unk = vocab.get("<unk>")
    if not all(isinstance(i, int) and 0 <= i < len(vocab) for i in (pad, eos, unk)):
        raise NmtError(f"{folder}: pad_token_id, eos_token_id or vocab.json's <unk> is missing or out of range")
    by_id = sorted(vocab, key=vocab.__getitem__)
    special_rows = {PAD_ID: pad, UNK_ID: unk, BOS_ID: pad, EOS_ID: eos}  # decoding starts from Marian's <pad>
    order = [piece for i, piece in enumerate(by_id) if i not in (pad, eos, unk)]
    rows = [special_rows[i] for i in sorted(SPECIALS)] + [vocab[piece] for piece in order]
    return torch.tensor(rows), order


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    safe, pickled = folder / "model.safetensors", folder / "pytorch_model.bin"
    if safe.is_file():
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise NmtError(f"{safe}: reading safetensors needs the safetensors package: pip install safetensors") from None
        try:
            return load_file(str(safe))
        except Exception as err:  # safetensors raises its own error types for a damaged file
            raise NmtError(f"{safe}: not a readable safetensors file ({str(err).splitlines()[0]})") from None
    if pickled.is_file():
        try:
            return torch.load(pickled, map_location="cpu", weights_only=True)
        except Exception as err:  # pickle and zip errors of a damaged or hostile file
            raise NmtError(f"{pickled}: not a readable PyTorch weights file ({str(err).splitlines()[0]})") from None
    raise NmtError(f"{folder}: holds neither model.safetensors nor pytorch_model.bin")


def _residual_order(d: int) -> torch.Tensor:
    """For each of nmt's residual dimensions, Marian's: sines first then cosines there, interleaved here."""
    return torch.tensor([k // 2 if k % 2 == 0 else d // 2 + k // 2 for k in range(d)])


def _state_dict(
    weights: dict[str, torch.Tensor], config: dict[str, Any], rows: torch.Tensor, folder: Path
) -> dict[str, torch.Tensor]:
    """nmt's state dict from MarianMT's weights (the module's text)."""
    found = {name.removeprefix("model."): tensor.float() for name, tensor in weights.items()}
    used: set[str] = set()

    def take(name: str) -> torch.Tensor:
        if name not in found:
            raise NmtError(f"{folder}: the weights have no {name}; is this a MarianMT checkpoint?")
        used.add(name)
        return found[name]

    perm = _residual_order(int(config["d_model"]))
    cols = lambda w: w[:, perm]  # noqa: E731  residual space in: input columns
    out_rows = lambda w: w[perm]  # noqa: E731  residual space out: output rows (and their biases)
    embedding = take("shared.weight") if "shared.weight" in found else take("encoder.embed_tokens.weight")
    for alias in ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"):
        used.add(alias)
    embedding = cols(embedding[rows])
    state = {"src_embed.weight": embedding, "tgt_embed.weight": embedding, "output.weight": embedding}
    bias = take("final_logits_bias").reshape(-1)[rows].clone() if "final_logits_bias" in found else torch.zeros(len(rows))
    bias[BOS_ID] = NEVER
    state["output.bias"] = bias

    def attention(prefix: str, theirs: str, ours: str, fused_self: bool) -> None:
        q, k, v, o = (f"{theirs}.{n}_proj" for n in ("q", "k", "v", "out"))
        if fused_self:
            state[f"{ours}.qkv.weight"] = cols(torch.cat([take(f"{prefix}.{p}.weight") for p in (q, k, v)]))
            state[f"{ours}.qkv.bias"] = torch.cat([take(f"{prefix}.{p}.bias") for p in (q, k, v)])
        else:
            state[f"{ours}.q.weight"], state[f"{ours}.q.bias"] = (
                cols(take(f"{prefix}.{q}.weight")),
                take(f"{prefix}.{q}.bias"),
            )
            state[f"{ours}.kv.weight"] = cols(torch.cat([take(f"{prefix}.{p}.weight") for p in (k, v)]))
            state[f"{ours}.kv.bias"] = torch.cat([take(f"{prefix}.{p}.bias") for p in (k, v)])
        state[f"{ours}.out.weight"] = out_rows(take(f"{prefix}.{o}.weight"))
        state[f"{ours}.out.bias"] = out_rows(take(f"{prefix}.{o}.bias"))

    def norm(prefix: str, theirs: str, ours: str) -> None:
        state[f"{ours}.norm.weight"] = out_rows(take(f"{prefix}.{theirs}.weight"))
        state[f"{ours}.norm.bias"] = out_rows(take(f"{prefix}.{theirs}.bias"))

    def feed_forward(prefix: str, ours: str) -> None:
        state[f"{ours}.ffn.w1.weight"], state[f"{ours}.ffn.w1.bias"] = (
            cols(take(f"{prefix}.fc1.weight")),
            take(f"{prefix}.fc1.bias"),
        )
        state[f"{ours}.ffn.w2.weight"] = out_rows(take(f"{prefix}.fc2.weight"))
        state[f"{ours}.ffn.w2.bias"] = out_rows(take(f"{prefix}.fc2.bias"))

    for i in range(int(config["encoder_layers"])):
        prefix, ours = f"encoder.layers.{i}", f"encoder.{i}"
        attention(prefix, "self_attn", f"{ours}.self_attn", fused_self=True)
        norm(prefix, "self_attn_layer_norm", f"{ours}.res_attn")
        feed_forward(prefix, ours)
        norm(prefix, "final_layer_norm", f"{ours}.res_ffn")
    for i in range(int(config["decoder_layers"])):
        prefix, ours = f"decoder.layers.{i}", f"decoder.{i}"
        attention(prefix, "self_attn", f"{ours}.self_attn", fused_self=True)
        norm(prefix, "self_attn_layer_norm", f"{ours}.res_self")
        attention(prefix, "encoder_attn", f"{ours}.cross_attn", fused_self=False)
        norm(prefix, "encoder_attn_layer_norm", f"{ours}.res_cross")
        feed_forward(prefix, ours)
        norm(prefix, "final_layer_norm", f"{ours}.res_ffn")
    left = sorted(n for n in found if n not in used and "embed_positions" not in n)
    if left:
        raise NmtError(f"{folder}: the weights hold {left[0]} (and {len(left) - 1} more) that nmt's model has no place for")
    return {name: tensor.contiguous() for name, tensor in state.items()}


def _languages(folder: Path, src_lang: str | None, tgt_lang: str | None) -> tuple[str, str]:
    """The pair from the options, else from tokenizer_config.json (OPUS-MT writes source_lang/target_lang)."""
    settings = folder / "tokenizer_config.json"
    stored = _read_json(settings) if settings.is_file() else {}
    src = src_lang or stored.get("source_lang")
    tgt = tgt_lang or stored.get("target_lang")
    if not (isinstance(src, str) and src and isinstance(tgt, str) and tgt):
        raise NmtError(f"{folder}: does not say its languages (tokenizer_config.json); give --src-lang and --tgt-lang")
    return src, tgt
