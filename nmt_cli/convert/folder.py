"""The nmt model folder an import writes: ``model.pt`` (weights, recipe, SentencePiece models, where it came from)
and ``recipe.yaml``, ready to fine-tune: the data is prepared with these SentencePiece models (``vocab.from``)
and training starts from these weights (``train.init_from``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..config import Recipe, dump_recipe, recipe_from_dict, recipe_to_dict
from ..utils import torchfile


def imported_recipe(
    output: Path,
    name: str,
    languages: tuple[str, str],
    model: dict[str, Any],
    decode: dict[str, Any],
    joint: bool,
    source: str,
    pairs: list[str] | None = None,
) -> Recipe:
    """The recipe of an imported model; ``source`` names what its settings were read from (for errors); ``pairs``,
    the directions of a multilingual model nmt trained and exported (then ``languages`` is not read)."""
    data = {"pairs": pairs} if pairs else {"src_lang": languages[0], "tgt_lang": languages[1]}
    return recipe_from_dict(
        {
            "name": name,
            "data": data,
            "model": model,
            "decode": decode,
            "vocab": {"from": str((output / "model.pt").resolve()), "joint": joint},
            "train": {"init_from": str(output.resolve())},
        },
        source=source,
    )


def write_model_folder(
    output: Path, state: dict[str, torch.Tensor], recipe: Recipe, vocab: dict[str, bytes], origin: dict[str, str]
) -> Path:
    """``output``/model.pt and ``output``/recipe.yaml; ``origin`` says the format and path imported."""
    output.mkdir(parents=True, exist_ok=True)
    payload = {
        "model": state,
        "recipe": recipe_to_dict(recipe),
        "vocab": vocab,
        "step": 0,
        "parent": None,
        "imported_from": origin,
    }
    torchfile.save(output / "model.pt", payload, "weights")
    # the recipe to fine-tune from: its model section is the imported architecture (train.init_from keeps it)
    (output / "recipe.yaml").write_text(dump_recipe(recipe), encoding="utf-8")
    return output
