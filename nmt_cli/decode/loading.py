"""Loading a trained model for decoding: its file read safely, its weights checked against the settings it
stores before anything is built, and its CPU inference kernels prepared.

Every command and library path that decodes starts here (translate, serve, score, export, calibrate, the
trainer's validation), so nothing else reads model files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch

from ..config import Recipe, recipe_from_dict
from ..data.vocab import PAD_ID, load_vocab_bytes
from ..errors import CheckpointError, NmtError, reason
from ..inference.cpu_linear import int8_usable, prepare_for_cpu_inference, quantize_linears
from ..model.transformer import Transformer, build_model
from ..quality.confidence_map import Calibration
from ..utils import torchfile
from .ensemble import Ensemble
from .steering import StepProcessor, model_rules


@dataclass
class LoadedModel:
    """A model ready to translate, with its vocabularies and recipe."""

    model: Transformer
    recipe: Recipe
    src_vocab: spm.SentencePieceProcessor
    tgt_vocab: spm.SentencePieceProcessor
    path: Path
    calibration: Calibration | None = None  # the confidence map fitted for this model (nmt calibrate), if any
    # a multilingual model's maps, one per direction ("en-de"): translations of each read alike only per direction
    calibrations: dict[str, Calibration] = field(default_factory=dict)
    # ids the model reads and never writes (a multilingual model's target tags read from the source: unwritten_tags)
    unwritten: tuple[int, ...] = ()

    def rules(self) -> list[StepProcessor]:
        """The model's own rules of what a search step may write (``steering.py``), given to every search."""
        return model_rules(self.unwritten)

    def for_direction(self, source: str | None, target: str | None) -> LoadedModel:
        """This model with the calibration of one direction of a multilingual model (the only direction into
        ``target`` where ``source`` is not known); itself for a model calibrated as one."""
        if not self.calibrations:
            return self
        from .targets import language

        def named(key: str, side: int, code: str | None) -> bool:
            return code is None or language(key.split("-")[side]) == language(code)

        found = [key for key in self.calibrations if named(key, 1, target) and named(key, 0, source)]
        return replace(self, calibration=self.calibrations[found[0]] if len(found) == 1 else None)


def load_model(
    path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, int8: bool = False
) -> LoadedModel:
    """Load a model folder (its ``model.pt``) or any checkpoint file written by nmt; ``int8``: its linear layers
    compute in int8 (the CPU only)."""
    payload = torchfile.load(Path(path), map_location="cpu")
    loaded = model_from_payload(payload, Path(path), device, dtype, for_inference=False)
    # The weights are the model's now: the file's copy goes before the inference copies are made, so
    # the two never take memory at once (docs/choices.md, "Memory").
    del payload
    prepare_for_inference(loaded.model, dtype, int8)
    return loaded


def load_ensemble(
    paths: Sequence[str | Path],
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    int8: bool = False,
) -> LoadedModel:
    """One model, or several sharing one vocabulary decoded as an :class:`.ensemble.Ensemble`."""
    loaded = [load_model(path, device, dtype, int8) for path in paths]
    if len(loaded) == 1:
        return loaded[0]
    first = loaded[0]
    for other in loaded[1:]:
        context = ("concat", "concat_target")
        if any(getattr(other.recipe.model, k) != getattr(first.recipe.model, k) for k in context):
            raise NmtError(
                f"{other.path} and {first.path} read different document context (model.concat); an ensemble's "
                "models must read the same input"
            )
        for side in ("src_vocab", "tgt_vocab"):
            if getattr(other, side).serialized_model_proto() != getattr(first, side).serialized_model_proto():
                raise NmtError(
                    f"{other.path} and {first.path} have different {side[:3]} vocabularies; an ensemble "
                    "needs one vocabulary (the models' token ids must mean the same pieces)"
                )
    ensemble = Ensemble([m.model for m in loaded])
    recipe = replace(first.recipe, model=replace(first.recipe.model, max_positions=ensemble.config.max_positions))
    return LoadedModel(
        ensemble, recipe, first.src_vocab, first.tgt_vocab, first.path, first.calibration,  # type: ignore[arg-type]
        unwritten=first.unwritten,
    )  # fmt: skip


def unwritten_tags(recipe: Recipe, vocab: Any) -> tuple[int, ...]:
    """A multilingual model whose tags are read from the source (``decode/targets.py``) never writes one."""
    from .targets import target_tags

    if recipe.data.language_tag != "source":
        return ()
    return tuple(sorted(target_tags(vocab).values()))


def model_from_payload(
    payload: dict[str, Any],
    origin: Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    for_inference: bool = True,
) -> LoadedModel:
    """Rebuild the model described by a checkpoint payload, ready for decoding (see
    :func:`prepare_for_inference`) unless ``for_inference`` is False."""
    try:
        recipe = recipe_from_dict(payload["recipe"], source=f"{origin} (stored recipe)")
    except NmtError as err:
        raise CheckpointError(f"{origin}: its stored recipe is not valid for this nmt version ({err})") from None
    vocab = payload.get("vocab") or {}
    if "src" not in vocab or "tgt" not in vocab:
        raise CheckpointError(f"{origin}: holds no SentencePiece model; it was not written by nmt train")
    src_vocab = load_vocab_bytes(vocab["src"], str(origin))
    tgt_vocab = src_vocab if vocab["tgt"] == vocab["src"] else load_vocab_bytes(vocab["tgt"], str(origin))
    sizes = (src_vocab.GetPieceSize(), tgt_vocab.GetPieceSize())
    _check_shapes(payload["model"], recipe, sizes, origin)  # before allocating what a crafted recipe asks for
    model = build_model(recipe.model, *sizes, PAD_ID, initialise=False)  # every weight is loaded next
    try:
        model.load_state_dict(payload["model"])
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0]
        raise CheckpointError(f"{origin}: weights do not fit the stored model settings ({first})") from None
    model.to(device=device, dtype=dtype).eval()  # the search scores in fp32 whatever the weights' dtype
    if for_inference:
        prepare_for_inference(model, dtype)
    stored = payload.get("calibration")
    calibration = Calibration.from_dict(stored, str(origin)) if isinstance(stored, dict) else None
    per_direction = payload.get("calibrations")
    calibrations = (
        {str(k): Calibration.from_dict(v, f"{origin} ({k})") for k, v in per_direction.items() if isinstance(v, dict)}
        if isinstance(per_direction, dict)
        else {}
    )
    unwritten = unwritten_tags(recipe, src_vocab)
    return LoadedModel(model, recipe, src_vocab, tgt_vocab, origin, calibration, calibrations, unwritten)


def prepare_for_inference(model: Transformer, dtype: torch.dtype, int8: bool = False) -> None:
    """Faster products on the CPU in fp32 and bf16, or in int8 where asked (inference/cpu_linear.py); a loaded
    model is for inference."""
    if model.output.weight.device.type != "cpu":
        return
    if int8:
        if not int8_usable():
            raise NmtError(
                "--dtype int8: this PyTorch lacks the fbgemm int8 operators our engine runs on; add --engine "
                "ctranslate2 or choose another --dtype"
            )
        quantize_linears(model)
        return
    prepare_for_cpu_inference(model, model.output, dtype)


def _check_shapes(weights: dict[str, torch.Tensor], recipe: Recipe, sizes: tuple[int, int], origin: Path) -> None:
    """Compare the stored weights with the model the stored recipe describes, built without memory."""
    try:
        with torch.device("meta"):
            skeleton = build_model(recipe.model, *sizes, PAD_ID, initialise=False)
    except (RuntimeError, ValueError, OverflowError) as err:
        raise CheckpointError(f"{origin}: its stored model settings describe no buildable model ({reason(err)})") from None
    expected = skeleton.state_dict()
    for key in sorted(set(expected) | set(weights)):
        if key not in weights or key not in expected:
            where = "missing from the file" if key not in weights else "not part of the model"
            raise CheckpointError(f"{origin}: weights do not fit the stored model settings ({key} is {where})")
        if tuple(weights[key].shape) != tuple(expected[key].shape):
            raise CheckpointError(
                f"{origin}: weights do not fit the stored model settings ({key} has shape "
                f"{tuple(weights[key].shape)}; the recipe's model needs {tuple(expected[key].shape)})"
            )
