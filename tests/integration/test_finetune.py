"""Fine-tuning: a new run from a trained model's weights (train.init_from) on data encoded with its
vocabulary (vocab.from); the parent is only read."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from conftest import OVERFIT_SETTINGS, tiny_recipe_yaml

from nmt_cli.config import load_recipe
from nmt_cli.data.prepare import prepare, text_paths
from nmt_cli.data.vocab import load_vocab
from nmt_cli.errors import CheckpointError, DataError
from nmt_cli.train import checkpoint
from nmt_cli.train.loop import load_dataset, train


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def child_recipe(folder: Path, corpus: Path, parent: Path, *extra: str):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "child.yaml"
    path.write_text(tiny_recipe_yaml(corpus, folder / "data", folder / "run"))
    return load_recipe(
        path,
        [
            *OVERFIT_SETTINGS,
            f"vocab.from={parent}",
            f"train.init_from={parent}",
            "train.max_steps=4",
            "train.save_every=2",
            *extra,
        ],
    )


def test_fine_tuning_reuses_ids_trains_a_new_run_and_leaves_the_parent_alone(overfit, m30k_slice, tmp_path):
    parent, _, _ = overfit
    before = snapshot(parent)
    recipe = child_recipe(tmp_path, m30k_slice, parent)
    prepare(recipe, log=lambda _m: None, progress=False)

    # vocab.from: the parent's SentencePiece model, byte for byte, so every id means the same piece
    data = load_dataset(recipe)
    assert data.vocab_blobs["src"] == (parent / "spm.src.model").read_bytes()
    vocab = load_vocab(parent / "spm.src.model")
    lines = text_paths(recipe.data_dir, "train", recipe)[0].read_text(encoding="utf-8").splitlines()[:50]
    assert [data.train.src[i].tolist() for i in range(50)] == vocab.encode(lines)

    messages: list[str] = []
    train(recipe, log=messages.append)
    assert any("fine-tuning from" in m for m in messages)
    child_weights = checkpoint.load(tmp_path / "run" / "model.pt")
    parent_weights = checkpoint.load(parent / "model.pt")["model"]
    assert child_weights["parent"]["path"] == str((parent / "model.pt").resolve())
    assert child_weights["parent"]["sha256"] == hashlib.sha256((parent / "model.pt").read_bytes()).hexdigest()
    changed = [k for k in parent_weights if not torch.equal(parent_weights[k], child_weights["model"][k])]
    assert len(changed) > len(parent_weights) // 2  # trained on, from the parent's weights
    first = checkpoint.load(checkpoint.step_checkpoints(tmp_path / "run")[0])
    assert first["train_state"]["step"] == 2  # counted from zero: the schedule starts afresh
    assert snapshot(parent) == before


def test_fine_tuning_refuses_another_architecture_or_vocabulary(overfit, m30k_slice, tmp_path):
    parent, _, _ = overfit
    recipe = child_recipe(tmp_path, m30k_slice, parent, "model.d_ff=256")
    prepare(recipe, log=lambda _m: None, progress=False)
    with pytest.raises(CheckpointError, match=r"model\.d_ff is 512 there but 256 .*--set model\.d_ff=512"):
        train(recipe, log=lambda _m: None)
    assert not (tmp_path / "run").exists() or snapshot(tmp_path / "run") == {}  # nothing written

    own_vocab = child_recipe(tmp_path / "own", m30k_slice, parent, "vocab.from=")
    prepare(own_vocab, log=lambda _m: None, progress=False)
    with pytest.raises(CheckpointError, match=r"another src vocabulary .* prepare it with vocab\.from"):
        train(own_vocab, log=lambda _m: None)

    missing = child_recipe(tmp_path / "missing", m30k_slice, tmp_path / "nowhere")
    with pytest.raises(DataError, match=r"vocab\.from: .*nowhere not found"):
        prepare(missing, log=lambda _m: None, progress=False)


def test_extended_vocabulary_keeps_old_ids_rows_and_old_domain_output(overfit, m30k_slice, tmp_path):
    """vocab.extend appends pieces of the new data; init_from grows the embeddings, old rows bitwise."""
    from dataclasses import replace

    from nmt_cli.data.vocab import load_vocab_bytes
    from nmt_cli.decode.loading import LoadedModel, load_model
    from nmt_cli.decode.translator import Translator
    from nmt_cli.train.distributed import init_distributed
    from nmt_cli.train.loop import Trainer

    pytest.importorskip("google.protobuf")
    parent, memorised, _ = overfit
    recipe = child_recipe(tmp_path, m30k_slice, parent, "vocab.extend=300")
    prepare(recipe, log=lambda _m: None, progress=False)
    old_vocab = load_vocab(parent / "spm.src.model")
    blob = load_dataset(recipe).vocab_blobs["src"]
    new_vocab = load_vocab_bytes(blob, "extended")
    old_size, new_size = old_vocab.GetPieceSize(), new_vocab.GetPieceSize()
    assert old_size < new_size <= old_size + 300
    assert [new_vocab.IdToPiece(i) for i in range(old_size)] == [old_vocab.IdToPiece(i) for i in range(old_size)]

    trainer = Trainer(recipe, init_distributed(recipe.train), lambda _m: None)
    trainer.prepare_run_dir(None)
    before = checkpoint.load(parent / "model.pt")["model"]["src_embed.weight"]
    grown = trainer.model.src_embed.weight.detach()
    assert grown.shape == (new_size, before.size(1))
    assert torch.equal(grown[:old_size], before)  # old rows exactly as trained
    assert grown[old_size:].abs().sum() > 0  # new rows initialised, not zero

    # The old domain decodes as before wherever its encoding did not change and no new piece is produced.
    parent_model = load_model(parent)
    config = replace(parent_model.recipe.decode, beam=1)
    extended = LoadedModel(trainer.model.eval(), parent_model.recipe, new_vocab, new_vocab, Path("extended"))
    same_encoding = [line for line in memorised if old_vocab.encode(line) == new_vocab.encode(line)]
    assert len(same_encoding) >= 10  # new merges re-segment old text that contains the new pieces
    ours = Translator(extended, config).translate(same_encoding)
    theirs = Translator(parent_model, config).translate(same_encoding)
    compared = 0
    for ours_hyps, theirs_hyps in zip(ours, theirs):
        produced = new_vocab.encode(ours_hyps[0][0])
        if max(produced, default=0) < old_size:
            compared += 1
            assert ours_hyps[0][0] == theirs_hyps[0][0]
    assert compared >= 5


def test_fine_tuning_can_start_from_the_parents_adam_moments(overfit, m30k_slice, tmp_path):
    """train.init_optimizer: the child's Adam state goes on from the parent's newest training checkpoint (its
    moments and their step count), where a fresh optimizer starts from zero; weights only are refused."""
    from nmt_cli.errors import NmtError

    parent, _, _ = overfit
    newest = checkpoint.load(checkpoint.step_checkpoints(parent)[-1])
    parent_state = newest["optimizer"]["state"]
    runs = {}
    for name, extra in (("fresh", ()), ("carried", ("train.init_optimizer=true",))):
        recipe = child_recipe(tmp_path / name, m30k_slice, parent, "train.max_steps=1", "train.save_every=1", *extra)
        prepare(recipe, log=lambda _m: None, progress=False)
        messages: list[str] = []
        train(recipe, log=messages.append)
        runs[name] = checkpoint.load(checkpoint.step_checkpoints(tmp_path / name / "run")[0])["optimizer"]["state"]
        assert any("Adam's moments from" in m for m in messages) == (name == "carried")
    assert float(runs["fresh"][0]["step"]) == 1
    assert float(runs["carried"][0]["step"]) == float(parent_state[0]["step"]) + 1
    beta2 = 0.98  # the child's second moment is the parent's decayed, plus this update's share
    assert torch.all(runs["carried"][0]["exp_avg_sq"] >= beta2 * parent_state[0]["exp_avg_sq"] * (1 - 1e-5))
    assert not torch.allclose(runs["carried"][0]["exp_avg_sq"], runs["fresh"][0]["exp_avg_sq"])

    weights_only = child_recipe(
        tmp_path / "weights", m30k_slice, parent, "train.init_optimizer=true", f"train.init_from={parent / 'model.pt'}"
    )
    prepare(weights_only, log=lambda _m: None, progress=False)
    with pytest.raises(NmtError, match=r"train\.init_optimizer: .*model\.pt holds model weights only"):
        train(weights_only, log=lambda _m: None)
    with pytest.raises(Exception, match=r"train\.init_optimizer.*set train\.init_from"):
        child_recipe(tmp_path / "alone", m30k_slice, parent, "train.init_optimizer=true", "train.init_from=")
