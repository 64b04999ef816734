"""``train.packed``: a batch's sentences laid end to end give the padded batch's loss and gradients, and the
recipes it cannot train are refused in one line."""

from __future__ import annotations

import pytest
import torch
from conftest import PACKING_LENGTHS, padded_pairs

from nmt_cli.config import ModelConfig, load_recipe
from nmt_cli.errors import RecipeError
from nmt_cli.model.packing import Layout
from nmt_cli.model.transformer import build_model

PAD = 0  # as conftest's padded_pairs pads


def _loss_and_grads(model: torch.nn.Module, batch: tuple, packed: bool, autocast: bool) -> tuple:
    model.zero_grad(set_to_none=True)
    model.packed = packed
    src, tgt_in, tgt_out, target_tokens, source_tokens = batch
    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.autocast("cpu", enabled=False)
    with context:
        loss, nll, n = model(src, tgt_in, tgt_out, 0.1, target_tokens, None, 0.0, None, source_tokens)
    loss.backward()
    return loss.detach(), nll.detach(), n, {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    "settings",
    [
        {},  # the paper's: sinusoids, post-norm
        {"norm": "pre", "positions": "learned"},
        {"share_embeddings": True, "tie_output": True, "activation": "gelu"},
    ],
    ids=["paper", "pre-norm-learned", "shared-gelu"],
)
def test_a_packed_batch_gives_the_padded_loss_and_gradients(settings):
    torch.manual_seed(0)
    config = ModelConfig(layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0, **settings)
    model = build_model(config, 60, 60, PAD).train()
    batch = padded_pairs(PACKING_LENGTHS, seed=1)
    loss, nll, n, grads = _loss_and_grads(model, batch, packed=False, autocast=False)
    p_loss, p_nll, p_n, p_grads = _loss_and_grads(model, batch, packed=True, autocast=False)
    assert p_n == n == batch[3]
    torch.testing.assert_close(p_loss, loss, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(p_nll, nll, rtol=1e-5, atol=1e-5)
    assert p_grads.keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(p_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_a_packed_batch_in_bf16_stays_within_bf16_tolerance_of_the_padded_one():
    torch.manual_seed(0)
    model = build_model(ModelConfig(layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0), 60, 60, PAD).train()
    batch = padded_pairs(PACKING_LENGTHS, seed=2)
    loss, _, _, grads = _loss_and_grads(model, batch, packed=False, autocast=True)
    p_loss, _, _, p_grads = _loss_and_grads(model, batch, packed=True, autocast=True)
    torch.testing.assert_close(p_loss, loss, rtol=2e-2, atol=1e-2)
    total = torch.stack([g.norm() for g in grads.values()]).norm()
    gap = torch.stack([(p_grads[k] - g).norm() for k, g in grads.items()]).norm()
    assert gap < 0.05 * total, (gap, total)


def test_evaluation_and_a_model_not_told_to_pack_run_padded():
    """Validation (eval mode) reads the padded path whatever the switch says: the same loss either way."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(layers=1, d_model=16, n_heads=2, d_ff=32, dropout=0.0), 60, 60, PAD).eval()
    src, tgt_in, tgt_out, target_tokens, _ = padded_pairs(PACKING_LENGTHS, seed=3)
    with torch.no_grad():
        padded = model.loss(src, tgt_in, tgt_out, 0.1, target_tokens)[0]
        model.packed = True
        assert torch.equal(model.loss(src, tgt_in, tgt_out, 0.1, target_tokens)[0], padded)


def test_layout_packs_the_real_tokens_in_order_and_unpacks_them_in_place():
    tokens = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0], [9, 10, 11, 12]])
    layout = Layout.of(tokens, PAD, count=8)
    assert layout.pack(tokens).tolist() == [5, 6, 7, 8, 9, 10, 11, 12]
    assert layout.offsets.tolist() == [0, 3, 4, 8] and layout.positions.tolist() == [0, 1, 2, 0, 0, 1, 2, 3]
    assert torch.equal(layout.unpack(layout.pack(tokens)), tokens)  # padding comes back as zeros
    rows = torch.arange(8.0)[:, None].expand(8, 3)
    assert torch.equal(layout.pack(layout.unpack(rows)), rows)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["model.positions=relative"], "absolute positions"),
        (["model.positions=xl", "model.recurrence=1"], "absolute positions"),  # recurrence runs on XL's positions
        (["model.concat=1", "model.concat_target=true"], "model.concat_target"),
        (["model.attention_dropout=0.1"], "model.attention_dropout: 0"),
        (["train.guided_alignment=0.05"], "guided alignment"),
    ],
)
def test_what_a_packed_batch_cannot_train_is_refused_in_one_line(overrides, named):
    with pytest.raises(RecipeError) as refused:
        load_recipe("recipes/multi30k_ende.yaml", ["train.packed=true", *overrides])
    message = str(refused.value)
    assert "train.packed" in message and named in message and "\n" not in message
    assert load_recipe("recipes/multi30k_ende.yaml", ["train.packed=true"]).train.packed


def test_the_run_log_names_what_computes_a_packed_batchs_attention():
    from nmt_cli.model.packing import has_variable_length_kernel, packed_attention_kernel

    assert packed_attention_kernel(torch.device("cpu"), "bf16").startswith("the padded computation")
    on_gpu = packed_attention_kernel(torch.device("cuda"), "bf16")  # words only: no device is touched
    assert ("variable-length flash-attention kernel" in on_gpu) == has_variable_length_kernel()
    assert packed_attention_kernel(torch.device("cuda"), "fp32").startswith("the padded computation")
