"""The shipped recipes: every one resolves, the paper values are where the paper puts them,
and each small recipe trains for a few steps on the real corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt_cli.config import load_recipe
from nmt_cli.data.prepare import prepare
from nmt_cli.train.loop import train

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def test_paper_setups():
    base, big = load_recipe(RECIPES / "ende_base.yaml"), load_recipe(RECIPES / "ende_big.yaml")
    assert (base.model.d_model, base.model.d_ff, base.model.n_heads, base.model.dropout) == (512, 2048, 8, 0.1)
    assert (big.model.d_model, big.model.d_ff, big.model.n_heads, big.model.dropout) == (1024, 4096, 16, 0.3)
    assert (base.train.average_last, big.train.average_last) == (5, 20)
    assert (base.train.max_steps, big.train.max_steps) == (100_000, 300_000)
    assert base.train.save_minutes == 10 and base.train.warmup == 4000
    assert (base.decode.beam, base.decode.alpha, base.decode.max_len_b) == (4, 0.6, 50)
    assert base.vocab.size == 37000 and base.vocab.joint
    assert big.data_dir == base.data_dir  # big reuses base's prepared data
    enfr, enfr_big = load_recipe(RECIPES / "enfr_base.yaml"), load_recipe(RECIPES / "enfr_big.yaml")
    assert enfr.vocab.type == "unigram" and enfr.vocab.size == 32000 and enfr.data.tgt_lang == "fr"
    assert enfr_big.model.dropout == 0.1 and enfr_big.name == "enfr_big"
    assert "giga-fren" in enfr.data.train and len(enfr.download) == 6
    assert base.data.test == ("newstest2014",) and base.data.valid == ("newstest2013",)


@pytest.mark.parametrize("name", ["multi30k_ende", "multi30k_enfr"])
def test_small_recipes_train_a_few_steps(name, m30k_slice, tmp_path):
    """Each recipe, as written but for its data, on the 3,000-pair slice: the EN-DE one on the whole corpus is
    tests/cli/test_documented_runs.py's (the README's own commands); learning a vocabulary from all 29,000 pairs
    again here costs half a minute and tests nothing more."""
    recipe = load_recipe(
        RECIPES / f"{name}.yaml",
        [
            f"data.root={m30k_slice}",
            f"data.output={tmp_path / 'data'}",
            f"train.dir={tmp_path / 'run'}",
            "data.test=[test]",
            "train.max_steps=3",
            "train.max_time=",
            "train.max_tokens=1024",
            "train.validate_every=0",
            "train.save_every=0",
            "train.threads=2",
            "train.calibrate=false",  # 3 updates translate nothing acceptable (the quickstart test covers that case)
        ],
    )
    prepare(recipe, log=lambda _m: None, progress=False)
    messages: list[str] = []
    train(recipe, log=messages.append)
    assert any("reached 3 updates" in m for m in messages)
    assert (tmp_path / "run" / "model.pt").is_file()


@pytest.mark.parametrize("name", ["multi30k_ende", "multi30k_enfr"])
def test_multi30k_download_entries_verify_against_the_real_files(name, multi30k, tmp_path):
    """The recipe's SHA-256 values match the corpus files (served here from disk, not the network)."""
    from dataclasses import replace

    from nmt_cli.data.download import download_all

    recipe = load_recipe(RECIPES / f"{name}.yaml", [f"data.root={tmp_path / 'root'}"])
    local = tuple(replace(s, url=(multi30k / s.url.rsplit("/", 1)[1]).as_uri()) for s in recipe.download)
    assert len(local) == 10
    written = download_all(replace(recipe, download=local), log=lambda _m: None, progress=False, cache=tmp_path / "cache")
    assert {p.name for p in written} >= {"train.en.gz", "val.en.gz", "test_2016_flickr.en.gz"}
