"""Export to CTranslate2 (``nmt export MODEL OUT --for ctranslate2``); ``decode/ctranslate2_engine.py``
translates with the folder it writes.

The CTranslate2 Transformer spec is filled from our weights directly: fused QKV for
self-attention, fused KV for cross-attention, the sinusoidal or learned position table, the
three-way tied embeddings, Shaw relative positions. Variants CTranslate2 cannot express
(ReZero, T-Fixup without LayerNorm) are refused with the option to change.

CTranslate2 is optional: ``pip install 'nmt-cli[ct2]'``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import dump_recipe
from ..decode.ctranslate2_engine import RECIPE_FILE, SPM_SOURCE, SPM_TARGET, require_ctranslate2
from ..decode.loading import LoadedModel
from ..errors import NmtError, reason
from ..model.attention import CrossAttention, SelfAttention
from ..model.positions import SinusoidalPositions
from ..utils.run_folder import refuse_output_inside_runs

EXPORT_MARKER = ".nmt-export"  # marks a folder as ours: --force may replace it, and nothing else


def check_exportable(loaded: LoadedModel) -> None:
    """Raise a one-line error naming the option when CTranslate2 cannot run this model."""
    m = loaded.recipe.model
    if m.reads_context:
        raise NmtError(
            f"{loaded.path}: a model that reads document context (model.concat, model.recurrence) runs with nmt's "
            "own engine only; translate it with `nmt translate` (--engine nmt)"
        )
    if m.init == "tfixup":
        raise NmtError(
            f"{loaded.path}: model.init=tfixup (no LayerNorm) has no CTranslate2 equivalent; "
            "export models trained with model.init=xavier"
        )
    if m.positions == "xl":
        raise NmtError(
            f"{loaded.path}: model.positions=xl (Transformer-XL attention) has no CTranslate2 "
            "equivalent; export a model trained with positions sinusoidal, learned or relative"
        )
    if m.norm == "rezero":
        raise NmtError(
            f"{loaded.path}: model.norm=rezero has no CTranslate2 equivalent; "
            "export models trained with model.norm=post or pre"
        )


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    # C order, whatever the storage: decoding may keep the output weight transposed
    return tensor.detach().float().cpu().contiguous().numpy()


def _linear(spec, layer: torch.nn.Linear) -> None:
    spec.weight = _numpy(layer.weight)
    if layer.bias is not None:
        spec.bias = _numpy(layer.bias)


def _norm(spec, norm: torch.nn.Module | None) -> None:
    assert isinstance(norm, torch.nn.LayerNorm)  # check_exportable refused the arrangements without one
    spec.gamma, spec.beta = _numpy(norm.weight), _numpy(norm.bias)


def _attention(spec: Any, attention: SelfAttention | CrossAttention) -> None:
    if isinstance(attention, SelfAttention):
        _linear(spec.linear[0], attention.qkv)  # rows: queries, keys, values (our chunk order)
        if attention.relative is not None:
            spec.relative_position_keys = _numpy(attention.relative.keys.weight)
            spec.relative_position_values = _numpy(attention.relative.values.weight)
    else:
        _linear(spec.linear[0], attention.q)
        _linear(spec.linear[1], attention.kv)  # rows: keys, values
    _linear(spec.linear[-1], attention.out)


def _position_table(model) -> np.ndarray | None:
    if isinstance(model.positions, SinusoidalPositions):
        return _numpy(model.positions.table)
    if model.positions is not None:
        return _numpy(model.positions.embedding.weight)
    return None


def build_spec(loaded: LoadedModel):
    """A ``ctranslate2.specs.TransformerSpec`` holding the weights of ``loaded``."""
    require_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    check_exportable(loaded)
    model, config = loaded.model, loaded.recipe.model
    pre_norm = config.norm == "pre"
    spec = transformer_spec.TransformerSpec.from_config(
        (config.n_encoder_layers, config.n_decoder_layers),
        config.n_heads,
        with_relative_position=config.positions == "relative",
        pre_norm=pre_norm,
        no_final_norm=not pre_norm,
        activation={
            "relu": common_spec.Activation.RELU,
            "gelu": common_spec.Activation.GELU,
            "swish": common_spec.Activation.SWISH,
        }[config.activation],
    )
    table = _position_table(model)
    for side, embedding in ((spec.encoder, model.src_embed), (spec.decoder, model.tgt_embed)):
        embeddings = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
        embeddings.weight = _numpy(embedding.weight)
        side.scale_embeddings = True
        if table is not None:
            side.position_encodings.encodings = table
    if pre_norm:
        _norm(spec.encoder.layer_norm, model.encoder_norm)
        _norm(spec.decoder.layer_norm, model.decoder_norm)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder_layers):
        _attention(layer_spec.self_attention, layer.self_attn)
        _norm(layer_spec.self_attention.layer_norm, layer.res_attn.norm)
        _linear(layer_spec.ffn.linear_0, layer.ffn.w1)
        _linear(layer_spec.ffn.linear_1, layer.ffn.w2)
        _norm(layer_spec.ffn.layer_norm, layer.res_ffn.norm)
    for layer_spec, block in zip(spec.decoder.layer, model.decoder_layers):
        _attention(layer_spec.self_attention, block.self_attn)
        _norm(layer_spec.self_attention.layer_norm, block.res_self.norm)
        _attention(layer_spec.attention, block.cross_attn)
        _norm(layer_spec.attention.layer_norm, block.res_cross.norm)
        _linear(layer_spec.ffn.linear_0, block.ffn.w1)
        _linear(layer_spec.ffn.linear_1, block.ffn.w2)
        _norm(layer_spec.ffn.layer_norm, block.res_ffn.norm)
    spec.decoder.projection.weight = _numpy(model.output.weight)
    if model.output.bias is not None:
        spec.decoder.projection.bias = _numpy(model.output.bias)
    spec.config.add_source_eos = True  # nmt's sources end in EOS
    spec.config.decoder_start_token = "<s>"
    spec.config.layer_norm_epsilon = 1e-5  # torch.nn.LayerNorm's default
    for vocab, register in (
        (loaded.src_vocab, spec.register_source_vocabulary),
        (loaded.tgt_vocab, spec.register_target_vocabulary),
    ):
        register([vocab.id_to_piece(i) for i in range(vocab.get_piece_size())])
    return spec


def export(loaded: LoadedModel, output: Path, quantization: str | None = None, force: bool = False) -> Path:
    """Write a CTranslate2 model folder (plus the SentencePiece models) to ``output``.

    ``force`` replaces only an earlier export of ours (recognised by its marker file), never a run
    folder or any other folder, and never the folder the model is read from.
    """
    _check_output(loaded.path, output, force)
    spec = build_spec(loaded)
    staging = output.with_name(f".{output.name}.tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        spec.validate()
        try:
            spec.optimize(quantization=quantization)
        except ValueError as err:  # CTranslate2 names the types it accepts
            raise NmtError(f"--quantization {quantization}: {reason(err)}") from None
        spec.save(str(staging))
        (staging / SPM_SOURCE).write_bytes(loaded.src_vocab.serialized_model_proto())
        (staging / SPM_TARGET).write_bytes(loaded.tgt_vocab.serialized_model_proto())
        (staging / RECIPE_FILE).write_text(dump_recipe(loaded.recipe), encoding="utf-8")
        (staging / EXPORT_MARKER).write_text(f"exported from {loaded.path}\n", encoding="utf-8")
        if output.exists():  # an earlier export (checked above): set it aside, put the new one in place
            old = output.with_name(f".{output.name}.old{os.getpid()}")
            output.rename(old)
            staging.rename(output)
            shutil.rmtree(old)
        else:
            staging.rename(output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return output


def _check_output(model: Path, output: Path, force: bool) -> None:
    refuse_output_inside_runs(output, "an exported model", lambda run: run.with_name(f"{run.name}-ct2"))
    source, target = model.resolve(), output.resolve()
    if target == source or target in source.parents:
        raise NmtError(f"{output}: holds the model being exported ({model}); export into another folder")
    if not output.exists():
        return
    if not force:
        raise NmtError(f"{output}: already exists; choose another folder or pass --force")
    # Exports of nmt 0.1 carry no marker, but our recipe file beside model.bin.
    ours = (output / EXPORT_MARKER).is_file() or ((output / "model.bin").is_file() and (output / RECIPE_FILE).is_file())
    if not output.is_dir() or not ours:
        raise NmtError(
            f"{output}: not an earlier `nmt export` folder (no {EXPORT_MARKER} marker in it); --force "
            "replaces only those. Choose a new folder"
        )
