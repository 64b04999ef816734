"""Recipes: defaults, inheritance, overrides, and errors that name the key and the fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nmt_cli.config import ModelConfig, Recipe, dump_recipe, load_recipe, recipe_from_dict, recipe_to_dict
from nmt_cli.errors import RecipeError

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_are_the_transformer_base():
    model = Recipe().model
    assert (model.layers, model.d_model, model.d_ff, model.n_heads, model.dropout) == (6, 512, 2048, 8, 0.1)
    assert (model.norm, model.positions, model.init) == ("post", "sinusoidal", "xavier")
    train = Recipe().train
    assert (train.adam_beta1, train.adam_beta2, train.adam_eps, train.warmup, train.label_smoothing) == (
        0.9,
        0.98,
        1e-9,
        4000,
        0.1,
    )
    decode = Recipe().decode
    assert (decode.beam, decode.alpha, decode.max_len_a, decode.max_len_b) == (4, 0.6, 1.0, 50)


def test_inheritance_and_overrides(tmp_path):
    write(tmp_path, "base.yaml", "data: {src_lang: en, tgt_lang: de, train: [a]}\nmodel: {layers: 4, d_model: 64}\n")
    child = write(tmp_path, "child.yaml", "base: base.yaml\nmodel: {d_model: 128}\n")
    recipe = load_recipe(child, ["model.layers=3", "train.max_time=30m", "data.train=[x, y]"])
    assert recipe.name == "child"
    assert recipe.model.d_model == 128  # child wins
    assert recipe.model.layers == 3  # --set wins
    assert recipe.model.n_heads == 8  # default kept
    assert recipe.data.train == ("x", "y")
    assert recipe.train.max_seconds == 1800


def test_round_trip_through_dict_and_yaml(tmp_path):
    recipe = load_recipe(RECIPES / "multi30k_ende.yaml")
    assert recipe_from_dict(recipe_to_dict(recipe)) == recipe
    again = write(tmp_path, "again.yaml", dump_recipe(recipe))
    assert load_recipe(again) == recipe


@pytest.mark.parametrize(
    "override, expected",
    [
        ("model.layerz=3", "unknown key 'model.layerz'; did you mean 'model.layers'?"),
        ("model.layers=three", "model.layers: expected an integer, got the text 'three'"),
        ("model.dropout=1.5", "model.dropout: 1.5 is out of range; it must be <= 1"),
        ("model.positions=rotary", "model.positions: expected one of sinusoidal, learned, relative"),
        ("model.n_heads=3", "model.n_heads: 3 does not divide model.d_model=512"),
        ("train.max_time=soon", "train.max_time: 'soon' is not a duration"),
        ("vocab.joint=false", "model.share_embeddings: needs a joint vocabulary"),
        ("model.layers", "--set model.layers: write KEY=VALUE"),
    ],
)
def test_errors_name_the_key_and_problem(tmp_path, override, expected):
    path = write(tmp_path, "r.yaml", "model: {}\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(path, [override])
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_file_errors(tmp_path):
    with pytest.raises(RecipeError, match="recipe not found"):
        load_recipe(tmp_path / "missing.yaml")
    bad = write(tmp_path, "bad.yaml", "model: [1, 2\n")
    with pytest.raises(RecipeError, match=r"bad.yaml: line \d+: invalid YAML"):
        load_recipe(bad)
    loop_a = write(tmp_path, "a.yaml", "base: b.yaml\n")
    write(tmp_path, "b.yaml", "base: a.yaml\n")
    with pytest.raises(RecipeError, match="loops back"):
        load_recipe(loop_a)
    with pytest.raises(RecipeError, match="unknown key 'modle'; did you mean 'model'"):
        load_recipe(write(tmp_path, "typo.yaml", "modle: {}\n"))


def test_missing_required_data_values(tmp_path):
    from nmt_cli.config import require_data

    recipe = load_recipe(write(tmp_path, "r.yaml", "data: {tgt_lang: de}\n"))
    with pytest.raises(RecipeError, match="missing required value data.src_lang"):
        require_data(recipe)


def test_every_shipped_recipe_resolves():
    paths = sorted(RECIPES.glob("*.yaml"))
    assert len(paths) >= 2
    for path in paths:
        recipe = load_recipe(path)
        assert all(src and tgt for src, tgt in recipe.directions) and recipe.data.train, path


def test_model_config_is_frozen():
    with pytest.raises(AttributeError):
        ModelConfig().layers = 3  # type: ignore[misc]


def test_a_multilingual_recipe_names_its_directions_once_each_over_one_vocabulary(tmp_path):
    from nmt_cli.config import recipe_from_dict

    recipe = recipe_from_dict({"data": {"pairs": ["en-de", "de-en", "sr_Cyrl-en"], "roots": {"en-sr_Cyrl": "/x"}}})
    assert recipe.directions == (("en", "de"), ("de", "en"), ("sr_Cyrl", "en")) and recipe.multilingual
    assert not recipe_from_dict({"data": {"src_lang": "en", "tgt_lang": "de"}}).multilingual
    for data, words in (
        ({"pairs": ["en-de", "en-de"]}, "'en-de' is listed twice"),
        ({"pairs": ["ende"]}, "write SOURCE-TARGET"),
        ({"pairs": ["en-en"]}, "into itself"),
        ({"pairs": ["en-de"], "src_lang": "en"}, "leave those out"),
        ({"pairs": ["en-de"], "roots": {"en-fr": "/x"}}, "outside data.pairs"),
        ({"pairs": ["en-de", "en-fr"], "roots": {"de-fr": "/x"}}, "outside data.pairs"),  # its languages are in
        ({"pairs": ["en-de"], "align": True}, "data.align: aligns words for train.guided_alignment"),
        ({"roots": {"en-fr": "/x"}}, "set data.pairs"),
    ):
        with pytest.raises(RecipeError, match=re.escape(words)):
            recipe_from_dict({"data": data})
    with pytest.raises(RecipeError, match="one joint vocabulary"):
        recipe_from_dict({"data": {"pairs": ["en-de"]}, "vocab": {"joint": False}, "model": {"share_embeddings": False}})


def test_a_retired_key_loads_from_a_stored_recipe_at_its_inert_value_and_is_refused_otherwise():
    """Checkpoints store every key: one written before train.train_previous was retired still loads (it held
    false); a recipe asking for it is told the key is gone and why."""
    stored = recipe_to_dict(Recipe())
    stored["train"]["train_previous"] = False
    assert recipe_from_dict(stored) == Recipe()
    stored["train"]["train_previous"] = True
    with pytest.raises(RecipeError, match=r"train\.train_previous is gone: .*remove the key"):
        recipe_from_dict(stored)


@pytest.mark.parametrize(
    "settings, expected",
    [
        # a budget of zero steps and zero time is no budget: the schedule would stay at zero for ever
        (["train.lr_schedule=linear", "train.max_steps=0", "train.max_time=0"], "set train.max_time or train.max_steps"),
        (
            ["model.positions=xl", "model.recurrence=1", "model.max_positions=128", "train.chain_tokens=100000"],
            "100,000 is more than model.max_positions (128): a chain is one row of the model; set train.chain_tokens",
        ),
        (
            ["model.positions=xl", "model.recurrence=1", "train.chain_tokens=512", "train.max_tokens=256"],
            "a batch could not hold one chain; set train.chain_tokens to at most 256",
        ),
    ],
)
def test_a_recipe_that_cannot_train_is_refused_before_any_work(tmp_path, settings, expected):
    path = write(tmp_path, "r.yaml", "model: {}\n")
    with pytest.raises(RecipeError, match=re.escape(expected)):
        load_recipe(path, settings)


def test_a_mapping_written_without_the_space_after_its_colon_is_refused_with_the_fix():
    """YAML reads ``{en-fr:/data/enfr}`` as one key without a value: the error names the key and the missing space."""
    base = {"data": {"pairs": ["en-de", "en-fr"]}}
    with pytest.raises(RecipeError, match=r"data\.roots: .*'en-fr:/data/enfr': None; put a space after each colon"):
        recipe_from_dict({"data": {**base["data"], "roots": {"en-fr:/data/enfr": None}}})
    with pytest.raises(RecipeError, match=r"data\.roots: .*got 'en-fr': 3$"):
        recipe_from_dict({"data": {**base["data"], "roots": {"en-fr": 3}}})
    given = recipe_from_dict({"data": {**base["data"], "roots": {"en-fr": "/data/enfr"}}})
    assert given.data.roots == {"en-fr": "/data/enfr"}
