"""``train.compile``: each layer compiled in place computes the eager layers' loss and gradients, and batches of
new shapes run the compiled code without compiling again (shapes are symbolic)."""

import pytest
import torch

from nmt_cli.config import ModelConfig
from nmt_cli.model.transformer import build_model
from nmt_cli.train.loop import compile_layers


def _batch(rows: int, src_len: int, tgt_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(rows * 100 + src_len)
    src = torch.randint(4, 60, (rows, src_len), generator=generator)
    tgt = torch.randint(4, 60, (rows, tgt_len + 1), generator=generator)
    src[0, -2:] = 0  # padding on both sides, so the masks are exercised
    tgt[0, -2:] = 0
    return src, tgt[:, :-1], tgt[:, 1:]


def _loss_and_grads(model: torch.nn.Module, shape: tuple[int, int, int]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = model.loss(*_batch(*shape), 0.1)[0]
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.slow  # inductor compiles C++ on the CPU: a minute or two for this test with a cold cache
def test_compiled_layers_give_the_eager_loss_and_gradients_without_recompiling_for_new_shapes():
    torch.manual_seed(0)
    model = build_model(ModelConfig(layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0), 60, 60, 0).train()
    shapes = [(3, 7, 5), (5, 11, 9), (2, 13, 4)]
    eager = [_loss_and_grads(model, shape) for shape in shapes]
    names = list(model.state_dict())
    compile_layers(model)
    assert list(model.state_dict()) == names  # checkpoints read the same either way
    compiled = [_loss_and_grads(model, shapes[0])]
    with torch.compiler.set_stance("fail_on_recompile"):
        compiled += [_loss_and_grads(model, shape) for shape in shapes[1:]]
    for (loss, grads), (c_loss, c_grads) in zip(eager, compiled):
        torch.testing.assert_close(c_loss, loss, rtol=1e-5, atol=1e-5)
        for grad, c_grad in zip(grads, c_grads):
            torch.testing.assert_close(c_grad, grad, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # as above: inductor compiles C++ on the CPU
def test_compiled_layers_take_packed_batches():
    """``train.compile`` with ``train.packed``: the compiled layers read a packed batch's layout and give the
    eager layers' loss and gradients."""
    from conftest import PACKING_LENGTHS, padded_pairs

    torch.manual_seed(0)
    model = build_model(ModelConfig(layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0), 60, 60, 0).train()
    model.packed = True

    def loss_and_grads(batch: tuple) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        src, tgt_in, tgt_out, target_tokens, source_tokens = batch
        loss = model(src, tgt_in, tgt_out, 0.1, target_tokens, None, 0.0, None, source_tokens)[0]
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    batches = [padded_pairs(PACKING_LENGTHS, 1), padded_pairs([(4, 3), (9, 8), (2, 5)], 2)]
    eager = [loss_and_grads(batch) for batch in batches]
    compile_layers(model)
    for (loss, grads), (c_loss, c_grads) in zip(eager, [loss_and_grads(batch) for batch in batches]):
        torch.testing.assert_close(c_loss, loss, rtol=1e-5, atol=1e-5)
        for grad, c_grad in zip(grads, c_grads):
            torch.testing.assert_close(c_grad, grad, rtol=1e-4, atol=1e-5)
