"""Export to CTranslate2: same greedy outputs and token scores from both engines."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from typer.testing import CliRunner

from nmt_cli.cli import app
from nmt_cli.config import ModelConfig, recipe_to_dict
from nmt_cli.decode.loading import load_model, model_from_payload
from nmt_cli.decode.translator import Translator
from nmt_cli.errors import NmtError
from nmt_cli.model.transformer import build_model
from nmt_cli.utils import torchfile

ctranslate2 = pytest.importorskip("ctranslate2", reason="CTranslate2 comes with the dev extra")
from nmt_cli.convert.ctranslate2 import export  # noqa: E402
from nmt_cli.decode.ctranslate2_engine import CTranslate2Engine  # noqa: E402

runner = CliRunner()


def test_exported_model_gives_the_same_greedy_outputs(overfit, tmp_path):
    run_dir, src, _ = overfit
    out = tmp_path / "ct2"
    result = runner.invoke(app, ["export", str(run_dir), str(out), "--for", "ctranslate2"])
    assert result.exit_code == 0, result.output
    loaded = load_model(run_dir)
    lines = src + ["A dog runs on the beach.", "Three people are sitting at a table outside a cafe.", ""]
    ours = [h[0][0] for h in Translator(loaded, replace(loaded.recipe.decode, beam=1)).translate(lines)]
    engine = CTranslate2Engine(out, threads=1)
    theirs = [h[0][0] for h in engine.translate(lines, replace(engine.decode_config, beam=1))]
    assert theirs == ours
    cli = runner.invoke(
        app, ["translate", "--engine", "ctranslate2", "-m", str(out), "--beam", "1"], input="\n".join(lines[:3]) + "\n"
    )
    assert cli.exit_code == 0, cli.output
    assert cli.stdout.splitlines() == ours[:3]
    # Beam 4: CTranslate2 normalises by |Y|^alpha and stops once a sentence has 4 finished
    # hypotheses, which is our 'average' length penalty with the 'beam' stop rule.
    config = replace(loaded.recipe.decode, beam=4, length_penalty="average", stop="beam")
    ours_beam = [h[0][0] for h in Translator(loaded, config).translate(lines)]
    assert [h[0][0] for h in engine.translate(lines, config)] == ours_beam
    # --workers: CTranslate2's inter_threads, batches translated at once, the same outputs
    two = CTranslate2Engine(out, threads=2, workers=2)
    assert [h[0][0] for h in two.translate(lines, replace(config, batch_size=3))] == ours_beam
    # Each batch's own length limit (a x its longest line + b), not the longest of all lines: one line
    # per batch, tight limits cut each output where ours cuts it
    tight = replace(loaded.recipe.decode, beam=1, max_len_a=0.5, max_len_b=1, batch_size=1)
    ours_cut = [h[0][0] for h in Translator(loaded, tight).translate(lines)]
    assert ours_cut != ours and [h[0][0] for h in two.translate(lines, tight)] == ours_cut
    refused = runner.invoke(app, ["translate", "--engine", "ctranslate2", "-m", str(out), "--stop", "top"], input="A dog.\n")
    assert refused.exit_code != 0 and refused.output.count("\n") == 1 and "--stop beam" in refused.output
    gnmt = runner.invoke(
        app, ["translate", "--engine", "ctranslate2", "-m", str(out), "--length-penalty", "gnmt"], input="A dog.\n"
    )
    assert gnmt.exit_code != 0 and gnmt.output.count("\n") == 1 and "--length-penalty average" in gnmt.output


VARIANTS = [
    dict(norm="post"),
    dict(norm="pre"),
    dict(positions="learned"),
    dict(positions="relative"),
    dict(activation="gelu", norm="pre"),
    dict(activation="swish", output_bias=True),
    dict(share_embeddings=False, tie_output=False),
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()))
def test_token_scores_match_for_each_supported_variant(overfit, tmp_path, variant):
    run_dir, src, tgt = overfit
    payload = torchfile.load(run_dir / "model.pt")
    recipe = recipe_to_dict(load_model(run_dir).recipe)
    recipe["model"] = {
        **recipe["model"],
        "layers": 2,
        "d_model": 32,
        "n_heads": 4,
        "d_ff": 64,
        "max_relative_position": 4,
        **variant,
    }
    torch.manual_seed(1)
    vocab_size = load_model(run_dir).src_vocab.get_piece_size()
    model = build_model(ModelConfig(**{k: v for k, v in recipe["model"].items()}), vocab_size, vocab_size)
    with torch.no_grad():  # make LayerNorm parameters non-trivial so that their export is checked too
        for name, p in model.named_parameters():
            if "norm" in name or name == "output.bias":
                p.add_(torch.randn_like(p) * 0.1)
    payload = {**payload, "model": model.state_dict(), "recipe": recipe}
    loaded = model_from_payload(payload, tmp_path / "variant.pt")
    export(loaded, tmp_path / "ct2")
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), intra_threads=1)
    sources = [loaded.src_vocab.encode(s, out_type=str) for s in src[:6]]
    targets = [loaded.tgt_vocab.encode(t, out_type=str) for t in tgt[:6]]
    theirs = translator.score_batch(sources, targets)
    for source, target, scored in zip(sources, targets, theirs):
        s = torch.tensor([[loaded.src_vocab.piece_to_id(p) for p in source] + [3]])
        t = [loaded.tgt_vocab.piece_to_id(p) for p in target]
        with torch.no_grad():
            memory, mask = loaded.model.encode(s)
            hidden = loaded.model.decode(torch.tensor([[2] + t]), memory, mask)
            log_probs = torch.log_softmax(loaded.model.logits(hidden)[0], dim=-1)
        ours = log_probs[torch.arange(len(t) + 1), torch.tensor(t + [3])]
        torch.testing.assert_close(torch.tensor(scored.log_probs), ours, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "variant, option",
    [
        (dict(norm="rezero"), "model.norm=rezero"),
        (dict(init="tfixup"), "model.init=tfixup"),
        (dict(positions="xl"), "model.positions=xl"),
    ],
)
def test_unsupported_variants_are_refused(overfit, tmp_path, variant, option):
    run_dir, _, _ = overfit
    payload = torchfile.load(run_dir / "model.pt")
    recipe = recipe_to_dict(load_model(run_dir).recipe)
    recipe["model"] = {**recipe["model"], **variant}
    vocab_size = load_model(run_dir).src_vocab.get_piece_size()
    model = build_model(ModelConfig(**recipe["model"]), vocab_size, vocab_size)
    loaded = model_from_payload({**payload, "model": model.state_dict(), "recipe": recipe}, tmp_path / "x.pt")
    with pytest.raises(NmtError, match=option):
        export(loaded, tmp_path / "ct2")
