"""Tagged back-translation data: data.synthetic corpora get a <BT> source token (Caswell et al. 2019)."""

from __future__ import annotations

import pytest
from conftest import read_lines, tiny_recipe_yaml, write_slice

from nmt_cli.config import load_recipe
from nmt_cli.data.prepare import prepare, text_paths
from nmt_cli.data.vocab import SYNTHETIC_TAG, load_vocab
from nmt_cli.errors import RecipeError


def test_synthetic_corpora_are_tagged_and_the_tag_is_one_piece(multi30k, tmp_path):
    corpus = tmp_path / "c"
    write_slice(corpus, "train", {lang: read_lines(multi30k / f"train.{lang}.gz", 300) for lang in ("en", "de")})
    write_slice(corpus, "bt", {lang: read_lines(multi30k / f"train.{lang}.gz", 200, start=300) for lang in ("en", "de")})
    for split in ("val", "test"):
        write_slice(corpus, split, {lang: read_lines(multi30k / f"val.{lang}.gz", 20) for lang in ("en", "de")})
    path = tmp_path / "r.yaml"
    path.write_text(tiny_recipe_yaml(corpus, tmp_path / "data", tmp_path / "run"))
    recipe = load_recipe(
        path, ["data.train=[train, bt]", "data.synthetic=[bt]", "data.tag_synthetic=true", "vocab.size=500"]
    )
    prepare(recipe, log=lambda _m: None, progress=False)
    src_text = text_paths(recipe.data_dir, "train", recipe)[0].read_text(encoding="utf-8").splitlines()
    tagged_lines = [line.startswith(SYNTHETIC_TAG + " ") for line in src_text]
    first = tagged_lines.index(True)  # the real corpus comes first, untagged; then the synthetic one, tagged
    assert not any(tagged_lines[:first]) and all(tagged_lines[first:])
    assert 250 <= first <= 300 and 150 <= len(src_text) - first <= 200  # what cleaning kept of each
    vocab = load_vocab(recipe.data_dir / "spm.model")
    tagged = vocab.encode(src_text[-1])
    assert (
        vocab.IdToPiece(tagged[0]) in (SYNTHETIC_TAG, "\u2581" + SYNTHETIC_TAG)
        or vocab.IdToPiece(tagged[1]) == SYNTHETIC_TAG
    )
    assert vocab.PieceToId(SYNTHETIC_TAG) != vocab.unk_id()

    with pytest.raises(RecipeError, match=r"data.synthetic: 'other' is not one of data.train"):
        load_recipe(path, ["data.synthetic=[other]"])
    with pytest.raises(RecipeError, match="data.tag_synthetic: tags the data.synthetic corpora"):
        load_recipe(path, ["data.tag_synthetic=true"])
