"""The Transformer: formulas, parameter counts, padding invariance, causality, attention paths."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from allpairspy import AllPairs

from nmt_cli.config import ModelConfig, TrainConfig
from nmt_cli.inference import cpu_linear
from nmt_cli.inference.step import IncrementalDecoder
from nmt_cli.model import attention as attention_module
from nmt_cli.model import transformer
from nmt_cli.model.attention import (
    RelativePositions,
    SelfAttention,
    attention,
    attention_reference,
    relative_shift,
)
from nmt_cli.model.loss import label_smoothed_nll, output_loss
from nmt_cli.model.positions import sinusoidal_table, sinusoids
from nmt_cli.model.transformer import build_model, count_parameters
from nmt_cli.train.schedule import inverse_sqrt, learning_rate, noam

VARIANTS = [(pos, norm) for pos in ("sinusoidal", "learned", "relative", "xl") for norm in ("post", "pre", "rezero")]
VARIANTS += [("sinusoidal", "tfixup")]


def tiny(positions="sinusoidal", norm="post", **kw):
    init = "tfixup" if norm == "tfixup" else "xavier"
    norm = "post" if norm == "tfixup" else norm
    config = ModelConfig(
        layers=2,
        d_model=32,
        n_heads=4,
        d_ff=64,
        dropout=0.0,
        positions=positions,
        norm=norm,
        init=init,
        max_relative_position=4,
        **kw,
    )
    torch.manual_seed(0)
    model = build_model(config, 50, 50).eval()
    if norm == "rezero":  # alpha starts at 0, which would make every test below trivially pass
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("alpha"):
                    p.fill_(0.5)
    return model


def test_sinusoidal_table_is_the_papers_formula():
    table = sinusoidal_table(50, 16)
    for pos in (0, 1, 7, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


@pytest.mark.parametrize("size, d_model, d_ff, heads, paper", [("base", 512, 2048, 8, 65e6), ("big", 1024, 4096, 16, 213e6)])
def test_parameter_counts_match_table_3(size, d_model, d_ff, heads, paper):
    with torch.device("meta"):
        model = build_model(ModelConfig(d_model=d_model, d_ff=d_ff, n_heads=heads), 37000, 37000)
    assert abs(count_parameters(model) - paper) / paper < 0.03


def test_label_smoothing_equals_hand_computation():
    logits = torch.tensor([[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 0.3, 0.4]])
    target = torch.tensor([0, 3])
    eps = 0.1
    loss, nll = label_smoothed_nll(logits, target, eps)
    expected_loss = expected_nll = 0.0
    for row, t in zip(logits.tolist(), target.tolist()):
        logz = math.log(sum(math.exp(v) for v in row))
        logp = [v - logz for v in row]
        expected_nll += -logp[t]
        expected_loss += (1 - eps) * -logp[t] + eps / 4 * sum(-v for v in logp)
    assert nll.item() == pytest.approx(expected_nll, rel=1e-6)
    assert loss.item() == pytest.approx(expected_loss, rel=1e-6)
    plain, _ = label_smoothed_nll(logits, target, 0.0)
    assert plain.item() == pytest.approx(F.cross_entropy(logits, target, reduction="sum").item(), rel=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_fused_output_loss_equals_unfused_in_value_and_gradients(eps, monkeypatch):
    import nmt_cli.model.loss as loss_module

    monkeypatch.setattr(loss_module, "BLOCK_ROWS", 7)  # several blocks, the last one partial
    torch.manual_seed(0)
    hidden = torch.randn(20, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 50, (20,))
    loss, nll = output_loss(hidden, weight, target, eps)
    loss.mul(0.37).backward()
    fused_grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    ref_loss, ref_nll = label_smoothed_nll(hidden @ weight.t(), target, eps)
    ref_loss.mul(0.37).backward()
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    assert nll.item() == pytest.approx(ref_nll.item(), rel=1e-6)
    torch.testing.assert_close(fused_grads[0], hidden.grad.float(), rtol=1e-5, atol=1e-6, check_dtype=False)
    torch.testing.assert_close(fused_grads[1], weight.grad.float(), rtol=1e-5, atol=1e-6, check_dtype=False)
    with torch.no_grad():  # validation: no gradients are built, same values
        assert output_loss(hidden, weight, target, eps)[0].item() == pytest.approx(ref_loss.item(), rel=1e-6)


def test_fused_output_loss_under_bf16_autocast_stays_close_and_fp32():
    torch.manual_seed(0)
    hidden = torch.randn(300, 32, requires_grad=True)
    weight = (0.2 * torch.randn(500, 32)).requires_grad_()
    target = torch.randint(0, 500, (300,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = output_loss(hidden, weight, target, 0.1)
    loss.backward()
    assert loss.dtype == torch.float32 and hidden.grad.dtype == weight.grad.dtype == torch.float32
    bf16_grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    ref, _ = label_smoothed_nll(hidden @ weight.t(), target, 0.1)
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-2)
    for got, want in zip(bf16_grads, (hidden.grad, weight.grad)):
        assert (got - want).norm() / want.norm() < 0.02


def test_fairseq_init_scales_attention_inputs_and_feed_forward():
    config = ModelConfig(layers=1, d_model=64, n_heads=4, d_ff=256)
    xavier = build_model(config, 100, 100)
    fairseq = build_model(replace(config, init="fairseq"), 100, 100)
    d = 64
    for name, model, qkv_bound, w2_bound in (
        ("xavier", xavier, (6 / (4 * d)) ** 0.5, (6 / (5 * d)) ** 0.5),
        ("fairseq", fairseq, (6 / (2 * d)) ** 0.5 / 2**0.5, (1 / (4 * d)) ** 0.5),
    ):
        layer = model.encoder[0]
        for block in layer.self_attn.qkv.weight.split(d):
            assert block.abs().max().item() <= qkv_bound + 1e-6, name
            assert block.abs().max().item() > 0.9 * qkv_bound, name  # uniform: the extremes are reached
        assert layer.ffn.w2.weight.abs().max().item() == pytest.approx(w2_bound, rel=0.05), name
    layer = fairseq.decoder[0]
    assert layer.self_attn.qkv.bias.abs().max().item() > 0  # PyTorch's default biases, as fairseq's projections
    assert layer.cross_attn.q.weight.abs().max().item() <= (6 / (2 * d)) ** 0.5 / 2**0.5 + 1e-6
    assert layer.self_attn.out.bias.abs().max().item() == 0


def test_a_model_built_to_be_loaded_skips_random_weights_and_later_builds_get_them_again():
    config = ModelConfig(layers=1, d_model=32, n_heads=4, d_ff=64)
    torch.manual_seed(0)
    state_before = torch.random.get_rng_state()
    skeleton = build_model(config, 50, 50, initialise=False)
    assert torch.equal(torch.random.get_rng_state(), state_before)  # no random numbers were drawn
    assert torch.equal(skeleton.positions.table, sinusoidal_table(config.max_positions, 32))  # buffers are made
    with torch.device("meta"):
        on_meta = build_model(config, 50, 50, initialise=False)
    assert on_meta.output.weight.is_meta and on_meta.positions.table.is_meta  # nothing allocated
    fresh = build_model(config, 50, 50)
    assert not torch.equal(torch.random.get_rng_state(), state_before)
    layer = fresh.encoder[0]
    assert layer.self_attn.qkv.weight.std().item() > 0.05 and layer.res_attn.norm.weight.eq(1).all()
    skeleton.load_state_dict(fresh.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(skeleton.state_dict().values(), fresh.state_dict().values()))


def test_schedules():
    d, w = 512, 4000
    assert noam(1, d, w) == pytest.approx(d**-0.5 * w**-1.5)
    assert noam(w, d, w) == pytest.approx(d**-0.5 * w**-0.5)  # the peak
    assert noam(4 * w, d, w) == pytest.approx(d**-0.5 * (4 * w) ** -0.5)
    assert noam(4 * w, d, w) == pytest.approx(noam(w, d, w) / 2)
    assert inverse_sqrt(1, 1e-3, w) == pytest.approx(1e-3 / w)
    assert inverse_sqrt(w, 1e-3, w) == pytest.approx(1e-3)
    assert inverse_sqrt(4 * w, 1e-3, w) == pytest.approx(5e-4)
    constant = learning_rate(TrainConfig(lr_schedule="constant", lr=3e-4), d)
    assert constant(1, 0.0) == constant(10**6, 0.9) == 3e-4


@pytest.mark.parametrize("causal", [False, True])
def test_fast_attention_matches_reference(causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    mask = None if causal else torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]
    torch.testing.assert_close(
        attention(q, k, v, mask, causal=causal), attention_reference(q, k, v, mask, causal=causal), atol=1e-5, rtol=1e-5
    )


def softmax_attention_in_float64(q, k, v, mask, causal):
    """softmax(q k^T / sqrt(d_k)) v in float64, the formula itself, for checking both training paths."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


@pytest.mark.parametrize("keys", [6, 64, 65, 90])  # written out up to WRITTEN_OUT_MAX_KEYS (64), the kernel above
@pytest.mark.parametrize("causal", [False, True])
def test_training_attention_and_its_gradients_equal_the_formula(causal, keys):
    torch.manual_seed(0)
    leaves = [torch.randn(3, 2, keys, 8, requires_grad=True) for _ in range(3)]
    lengths = torch.tensor([keys, keys - 2, 1])
    padding = (torch.arange(keys)[None, :] < lengths[:, None])[:, None, None, :]
    mask = None if causal else padding
    out = attention(*leaves, mask, causal=causal)
    grads = torch.autograd.grad(out.square().sum(), leaves)
    copies = [leaf.detach().clone().requires_grad_() for leaf in leaves]
    expected = softmax_attention_in_float64(*copies, mask, causal)
    expected_grads = torch.autograd.grad(expected.square().sum(), copies)
    torch.testing.assert_close(out, expected.float(), atol=1e-5, rtol=1e-5)
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_bf16_attention_on_cpu_stays_close_to_fp32(causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    mask = None if causal else torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]
    low = attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask, causal=causal)
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.float(), attention(q, k, v, mask, causal=causal), atol=3e-2, rtol=3e-2)


def test_relative_terms_clip_distances():
    rel = RelativePositions(d_k=2, max_distance=2)
    terms = rel(4, 4)
    torch.testing.assert_close(terms.keys[0, 3], rel.keys.weight[4])  # distance +3 clipped to +2
    torch.testing.assert_close(terms.keys[3, 0], rel.keys.weight[0])  # distance -3 clipped to -2
    torch.testing.assert_close(terms.keys[2, 2], rel.keys.weight[2])  # distance 0
    last = rel(1, 4)  # incremental decoding: the query is the last position
    torch.testing.assert_close(last.keys[0], terms.keys[3])


def naive_xl_attention(attn, x, mask, causal):
    """Transformer-XL's scores written out pair by pair (Dai et al. 2019, eq. in section 3.3):
    (q_i + u)^T k_j + (q_i + v)^T W_R R_(i-j), with R the sinusoid of the distance i - j."""
    b, t, d = x.shape
    h, d_k = attn.n_heads, attn.d_k
    q, k, v = (part.view(b, t, h, d_k) for part in attn.qkv(x).chunk(3, dim=-1))
    u, v_bias = attn.xl.content_bias[:, 0], attn.xl.position_bias[:, 0]  # (H, d_k)
    out = torch.zeros(b, t, h, d_k)
    for n in range(b):
        for i in range(t):
            for head in range(h):
                scores = []
                for j in range(t):
                    r = attn.xl.position_keys(sinusoids(torch.tensor([i - j]), d))[0].view(h, d_k)[head]
                    score = (q[n, i, head] + u[head]) @ k[n, j, head] + (q[n, i, head] + v_bias[head]) @ r
                    hidden = (causal and j > i) or (mask is not None and not mask[n, 0, 0, j])
                    scores.append(float("-inf") if hidden else score / math.sqrt(d_k))
                weights = torch.softmax(torch.stack([torch.as_tensor(s) for s in scores]), dim=0)
                out[n, i, head] = weights @ v[n, :, head]
    return attn.out(out.reshape(b, t, d))


@pytest.mark.parametrize("causal", [False, True])
def test_xl_attention_equals_the_pairwise_formula(causal):
    torch.manual_seed(0)
    attn = SelfAttention(ModelConfig(d_model=16, n_heads=2, positions="xl")).eval()
    x = torch.randn(2, 5, 16)
    mask = None if causal else torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    got, _ = attn(x, mask=mask, causal=causal)
    expected = naive_xl_attention(attn, x, mask, causal)
    if mask is not None:  # padded query rows are never read
        got, expected = got[0], expected[0]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("t_q, t_k", [(1, 6), (3, 7), (5, 5)])
def test_relative_shift_puts_each_distance_under_its_key(t_q, t_k):
    by_distance = torch.randn(2, 3, t_q, t_q + t_k - 1)  # columns: distances t_k - 1 down to -(t_q - 1)
    shifted = relative_shift(by_distance, t_k)
    for i in range(t_q):
        for j in range(t_k):
            distance = (t_k - t_q + i) - j
            torch.testing.assert_close(shifted[:, :, i, j], by_distance[:, :, i, t_k - 1 - distance])


@pytest.mark.parametrize("positions, norm", VARIANTS)
def test_padding_invariance(positions, norm):
    model = tiny(positions, norm)
    short_src, long_src = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[8, 9, 10, 11, 12, 13, 3]])
    short_tgt = torch.tensor([[2, 14, 15]])
    long_tgt = torch.tensor([[2, 16, 17, 18, 19]])
    alone_mem, _ = model.encode(short_src)
    batch_src = torch.tensor([[5, 6, 7, 3, 0, 0, 0], long_src[0].tolist()])
    batch_mem, _ = model.encode(batch_src)
    torch.testing.assert_close(batch_mem[0, :4], alone_mem[0], atol=1e-5, rtol=1e-5)
    out = torch.tensor([[14, 15, 3]])
    alone_loss, _, _ = model.loss(short_src, short_tgt, out, 0.1)
    batch_tgt_in = torch.tensor([[2, 14, 15, 0, 0], long_tgt[0].tolist()])
    batch_tgt_out = torch.tensor([[14, 15, 3, 0, 0], [16, 17, 18, 19, 3]])
    memory, mask = model.encode(batch_src)
    hidden = model.decode(batch_tgt_in, memory, mask)
    first, _ = label_smoothed_nll(model.logits(hidden[0, :3]), batch_tgt_out[0, :3], 0.1)
    assert first.item() == pytest.approx(alone_loss.item(), rel=1e-5)


@pytest.mark.parametrize("positions, norm", VARIANTS)
def test_causality(positions, norm):
    model = tiny(positions, norm)
    src = torch.tensor([[5, 6, 7, 8, 3]])
    memory, mask = model.encode(src)
    tgt = torch.tensor([[2, 10, 11, 12, 13]])
    changed = tgt.clone()
    changed[0, 3] = 40
    a = model.decode(tgt, memory, mask)
    b = model.decode(changed, memory, mask)
    torch.testing.assert_close(a[0, :3], b[0, :3], atol=1e-6, rtol=1e-6)
    assert not torch.allclose(a[0, 3:], b[0, 3:])


@pytest.mark.parametrize("positions, norm", VARIANTS)
def test_incremental_decoding_equals_full_decoding(positions, norm):
    model = tiny(positions, norm)
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    memory, mask = model.encode(src)
    tgt = torch.tensor([[2, 10, 11, 12], [2, 13, 14, 15]])
    full = model.logits(model.decode(tgt, memory, mask))
    decoder = IncrementalDecoder(model)
    state = decoder.start(memory, mask)
    for t in range(tgt.size(1)):
        step = decoder.logits(tgt[:, t], state)
        torch.testing.assert_close(step, full[:, t], atol=1e-5, rtol=1e-5)


# Every pair of settings below is met at least once (a pairwise covering array: 39 cases instead of the 312 of
# the full product): a fault in the step shows in one setting or in the meeting of two.
STEP_CASES = [
    (positions, norm, activation, attention_kernel, kernels, beam)
    for (positions, norm), activation, attention_kernel, kernels, beam in AllPairs(
        [VARIANTS, ["relu", "gelu", "swish"], ["fused", "in place"], ["plain", "packed"], [2, 1]]
    )
]


@pytest.mark.parametrize("positions, norm, activation, attention_kernel, kernels, beam", STEP_CASES)
def test_incremental_step_equals_the_full_sequence_decoder(
    positions, norm, activation, attention_kernel, kernels, beam, monkeypatch
):
    """The incremental step (inference/step.py) gives the logits of the model's full-sequence decoder over
    each row's prefix: beams (or greedy rows) sharing a padded sentence's encoder keys, rows reordered and
    a sentence dropped between steps; every position kind; attention without gradients through PyTorch's
    fused kernel and written out in place; plain linear layers and the CPU inference kernels (oneDNN-packed weights, the
    ReLU and the residual sums fused into products)."""
    if kernels == "packed" and not cpu_linear.onednn_usable():
        pytest.skip("this PyTorch has no usable oneDNN linear operator")
    monkeypatch.setattr(attention_module, "IN_PLACE_MIN_QUERY_ROWS", 1 if attention_kernel == "in place" else 10**9)
    model = tiny(positions, norm, activation=activation)
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    with torch.inference_mode():  # as in decoding (the packed kernels serve no gradients)
        memory, mask = model.encode(src)
        if kernels == "packed":
            monkeypatch.setenv("NMT_CPU_LINEAR", "packed")
            cpu_linear.prepare_for_cpu_inference(model, model.output)
        tokens = torch.tensor([[2, 2, 2, 2], [10, 11, 12, 13], [14, 15, 16, 17], [18, 19, 20, 21]])  # step x row
        tokens = tokens[:, : 2 * beam]  # 2 sentences x beam rows
        decoder = IncrementalDecoder(model)
        state = decoder.start(memory, mask)
        prefixes, sentence_of_row = tokens[:0].T, torch.arange(2 * beam) // beam  # (rows, t)
        for t in range(tokens.size(0)):
            if t == 2:  # keep sentence 1 only (its rows swapped where it has two)
                kept = torch.tensor([3, 2]) if beam == 2 else torch.tensor([1])
                state.select(kept, sentences=torch.tensor([1]))
                prefixes, sentence_of_row = prefixes[kept], sentence_of_row[kept]
            rows = tokens[t] if t < 2 else tokens[t, :beam]
            prefixes = torch.cat([prefixes, rows[:, None]], dim=1)
            full = model.decode(prefixes, memory[sentence_of_row], mask[sentence_of_row])[:, -1]
            torch.testing.assert_close(decoder.logits(rows, state), model.logits(full), atol=1e-5, rtol=1e-5)


def test_attention_kernel_by_device_precision_gradient_and_shape():
    """The rule of attention_kernel: written out for Shaw's positions, bf16 on the CPU and short keys in
    training; in place without gradients over many query rows of short blocks; the fused kernel else."""

    def kernel(b, h, t_q, t_k, grad=False, dtype=torch.float32, causal=False, dropout=0.0, relative=None, bias=None):
        q, k = torch.zeros(b, h, t_q, 8, dtype=dtype, requires_grad=grad), torch.zeros(b, h, t_k, 8, dtype=dtype)
        with torch.set_grad_enabled(grad):
            return attention_module.attention_kernel(q, k, dropout, causal, relative, bias)

    many, short = attention_module.IN_PLACE_MIN_QUERY_ROWS, attention_module.WRITTEN_OUT_MAX_KEYS
    assert kernel(2, 4, 8, short, grad=True) == "written out"
    assert kernel(2, 4, 8, short + 1, grad=True) == "fused"
    assert kernel(1, 1, 4, 4, dtype=torch.bfloat16) == "written out"
    assert kernel(1, 1, 1, 4, relative=RelativePositions(8, 2)(1, 4)) == "written out"
    assert kernel(many, 1, 1, 30) == "in place"  # one query per hypothesis over its cache
    assert kernel(many // 8, 8, 1, 30, causal=True) == "in place"  # one new query: causality hides nothing
    assert kernel(many // 32, 8, 4, 30) == "in place"  # a beam's hypotheses over their source
    assert kernel(1, 1, 1, 30) == "fused"  # too few rows
    assert kernel(2, 8, 8, 8, causal=True) == "fused"
    assert kernel(many, 1, 1, 30, dropout=0.1) == "fused"
    assert kernel(many, 1, 1, 30, bias=torch.zeros(1)) == "fused"
    assert kernel(4, 8, attention_module.IN_PLACE_MAX_QUERIES + 1, 128) == "fused"  # long square blocks


@pytest.mark.parametrize("queries", [1, 5])
def test_attention_in_place_at_inference_equals_the_formula(queries, monkeypatch):
    monkeypatch.setattr(attention_module, "IN_PLACE_MIN_QUERY_ROWS", 1)
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, queries, 8), torch.randn(3, 2, 7, 8), torch.randn(3, 2, 7, 8)
    mask = (torch.arange(7)[None, :] < torch.tensor([7, 5, 1])[:, None])[:, None, None, :]
    with torch.inference_mode():
        assert attention_module.attention_kernel(q, k, 0.0, False, None, None) == "in place"
        out = attention(q, k, v, mask)
    torch.testing.assert_close(out, softmax_attention_in_float64(q, k, v, mask, False).float(), atol=1e-5, rtol=1e-5)


def test_length_groups_cover_every_row_once_within_their_limits():
    widths = [int(w) for w in torch.randint(1, 120, (300,), generator=torch.Generator().manual_seed(0))]
    groups = transformer.length_groups(widths)
    assert sorted(row for group in groups for row in group) == list(range(len(widths)))
    for group in groups:
        widest = widths[group[0]]
        assert widest == max(widths[row] for row in group)
        assert len(group) == 1 or len(group) * widest <= transformer.ENCODE_GROUP_MAX_TOKENS
        assert all(widths[row] >= transformer.ENCODE_GROUP_MIN_FILL * widest for row in group)
    assert transformer.length_groups([7, 7, 7]) == [[0, 1, 2]]


@pytest.mark.parametrize("positions", ["sinusoidal", "relative", "xl"])
def test_encoding_in_length_groups_equals_one_padded_batch(positions, monkeypatch):
    """At inference the encoder runs sources in groups of similar width (Transformer.encode): the
    memory at every source position is the one padded batch's (padded positions are never attended to)."""
    model = tiny(positions, "pre")
    lengths = [2, 3, 5, 8, 9, 13, 17, 20, 20, 4]
    src = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, length in enumerate(lengths):
        src[row, :length] = torch.arange(length) % 20 + 4
    monkeypatch.setattr(transformer, "ENCODE_GROUP_MAX_TOKENS", 60)
    assert len(transformer.length_groups(lengths)) > 3
    with torch.inference_mode():
        grouped, mask = model.encode(src)
        monkeypatch.setattr(transformer, "ENCODE_GROUP_MAX_TOKENS", 10**9)
        monkeypatch.setattr(transformer, "ENCODE_GROUP_MIN_FILL", 0.0)
        padded, _ = model.encode(src)
    visible = mask[:, 0, 0]
    torch.testing.assert_close(grouped[visible], padded[visible], atol=1e-5, rtol=1e-5)


def test_beam_rows_reordered_between_steps_decode_as_their_own_prefixes():
    """DecoderState.select keeps and reorders hypothesis rows (and drops sentences) in every layer's cache."""
    model = tiny("sinusoidal", "post")
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    memory, mask = model.encode(src)
    prefixes = torch.tensor([[2, 10, 11], [2, 13, 14], [2, 16, 17], [2, 18, 19]])  # 2 rows per sentence
    decoder = IncrementalDecoder(model)
    state = decoder.start(memory, mask)
    for t in range(2):
        decoder.logits(prefixes[:, t], state)
    state.select(torch.tensor([1, 0]), sentences=torch.tensor([0]))  # sentence 0 only, its rows swapped
    step = decoder.logits(prefixes[[1, 0], 2], state)
    full = model.logits(model.decode(prefixes[[1, 0]], memory[[0, 0]], mask[[0, 0]]))[:, 2]
    torch.testing.assert_close(step, full, atol=1e-5, rtol=1e-5)


def test_cross_attention_mask_only_while_a_source_is_padded():
    """On the CPU the decoder attends over the source without a mask when nothing is padded, and
    takes the mask again whenever the kept sentences include a padded one."""
    model = tiny("sinusoidal", "post")
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    memory, mask = model.encode(src)
    decoder = IncrementalDecoder(model)
    state = decoder.start(memory, mask)
    assert state.cross_attention_mask() is mask  # sentence 1 is padded
    state.select(torch.tensor([1]), sentences=torch.tensor([1]))
    assert state.cross_attention_mask() is state.src_mask  # still padded
    unpadded = decoder.start(memory[:1], mask[:1])
    assert unpadded.cross_attention_mask() is None
    masked = decoder.start(memory[:1], mask[:1])
    masked._cross_mask_of, masked._cross_mask = masked.src_mask, masked.src_mask  # force the mask
    tokens = torch.tensor([2])
    torch.testing.assert_close(decoder.logits(tokens, unpadded), decoder.logits(tokens, masked))


def _same_model_after(prepare) -> None:
    """``prepare(model)`` keeps names, values, tying and outputs of a model (within fp32 rounding)."""
    model = tiny("sinusoidal", "pre").eval()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    src = torch.tensor([[5, 6, 7, 8, 3]])
    tgt = torch.tensor([[2, 10, 11, 12]])
    with torch.inference_mode():
        expected = model.logits(model.decode(tgt, *model.encode(src)))
    prepare(model)
    prepare(model)  # a second call changes nothing
    after = model.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(after[name], before[name]) for name in before)
    assert model.output.weight is model.tgt_embed.weight  # tying survives
    with torch.inference_mode():
        torch.testing.assert_close(model.logits(model.decode(tgt, *model.encode(src))), expected, atol=1e-5, rtol=1e-5)


def test_weights_stored_transposed_give_the_same_model():
    """The fallback where oneDNN is not usable: only the output weight's storage changes, its
    product's right operand becomes contiguous."""
    from nmt_cli.inference.cpu_linear import store_weight_transposed

    _same_model_after(lambda model: store_weight_transposed(model.output))
    model = tiny("sinusoidal", "pre")
    store_weight_transposed(model.output)
    assert model.output.weight.t().is_contiguous() and model.decoder_layers[0].self_attn.qkv.weight.is_contiguous()


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this PyTorch is built without oneDNN")
def test_inference_linears_give_the_same_model(monkeypatch):
    """With the kernels chosen by rows, every linear layer is an InferenceLinear: same names, values,
    tying and outputs; with gradients on, they fall back to F.linear (oneDNN's operator has none)."""
    from nmt_cli.inference import cpu_linear

    assert cpu_linear.onednn_usable()  # PyTorch's private operator still means what we think
    monkeypatch.setenv("NMT_CPU_LINEAR", "onednn")  # on any processor
    prepare = lambda model: cpu_linear.prepare_for_cpu_inference(model, model.output)  # noqa: E731
    _same_model_after(prepare)
    model = tiny("sinusoidal", "pre")
    prepare(model)
    layer = model.decoder_layers[0]
    assert isinstance(layer.self_attn.qkv, cpu_linear.InferenceLinear)
    assert isinstance(model.output, cpu_linear.InferenceLinear)
    assert model.output.weight.is_contiguous()  # not transposed: oneDNN takes PyTorch's layout
    loss, _, _ = model.loss(torch.tensor([[5, 6, 3]]), torch.tensor([[2, 7, 8]]), torch.tensor([[7, 8, 3]]), 0.1)
    loss.backward()
    assert layer.ffn.w1.weight.grad is not None and layer.ffn.w1.weight.grad.abs().sum() > 0


def test_int8_linears_keep_the_model_and_its_outputs_within_int8_rounding():
    """``--dtype int8``: every linear layer computes in int8; names, values and tying are the model's, its
    log-probabilities within int8's rounding of fp32's and its best tokens mostly the same; gradients (none are
    asked in inference) still flow through the float weights."""
    from nmt_cli.inference import cpu_linear

    if not cpu_linear.int8_usable():
        pytest.skip("this PyTorch lacks the fbgemm int8 operators")
    torch.manual_seed(0)
    model = tiny("sinusoidal", "pre").eval()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    src, tgt = torch.randint(4, 40, (3, 9)), torch.randint(4, 40, (3, 7))
    with torch.inference_mode():
        expected = model.logits(model.decode(tgt, *model.encode(src))).log_softmax(-1)
    cpu_linear.quantize_linears(model)
    cpu_linear.quantize_linears(model)  # a second call changes nothing
    assert isinstance(model.output, cpu_linear.Int8Linear)
    assert isinstance(model.decoder_layers[0].ffn.w1, cpu_linear.Int8Linear)
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    assert model.output.weight is model.tgt_embed.weight
    with torch.inference_mode():
        got = model.logits(model.decode(tgt, *model.encode(src))).log_softmax(-1)
    assert (got - expected).abs().max() < 0.1
    assert (got.argmax(-1) == expected.argmax(-1)).float().mean() > 0.9
    loss, _, _ = model.loss(torch.tensor([[5, 6, 3]]), torch.tensor([[2, 7, 8]]), torch.tensor([[7, 8, 3]]), 0.1)
    loss.backward()
    assert model.decoder_layers[0].ffn.w1.weight.grad is not None


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this PyTorch is built without oneDNN")
def test_inference_linear_kernel_by_rows(monkeypatch):
    """2-7 input rows: W x^T through the BLAS; 0-1 rows or 8 and more: oneDNN; each equal to F.linear,
    with and without bias, for 2-D, 3-D, empty and non-contiguous inputs."""
    from nmt_cli.inference import cpu_linear

    calls: list[tuple[str, int]] = []
    for name in ("onednn_linear", "swapped_operands_linear"):
        kernel = getattr(cpu_linear, name)
        monkeypatch.setattr(
            cpu_linear, name, lambda x, w, b, k=kernel, n=name: calls.append((n, x.numel() // w.size(1))) or k(x, w, b)
        )
    for bias in (True, False):
        plain = torch.nn.Linear(8, 6, bias=bias)
        fast = cpu_linear.InferenceLinear.sharing(plain)
        shapes = ((1, 1, 8), (3, 1, 8), (2, 3, 8), (7, 8), (8, 1, 8), (4, 5, 8), (0, 1, 8))
        not_contiguous = torch.randn(5, 3, 8).transpose(0, 1)  # 15 rows
        for x in [torch.randn(shape) for shape in shapes] + [not_contiguous]:
            with torch.inference_mode():
                torch.testing.assert_close(fast(x), plain(x), atol=1e-5, rtol=1e-5)
    swapped = {rows for name, rows in calls if name == "swapped_operands_linear"}
    onednn = {rows for name, rows in calls if name == "onednn_linear"}
    assert swapped == {3, 6, 7} and onednn == {0, 1, 8, 15, 20}


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this PyTorch is built without oneDNN")
def test_packed_weights_for_two_rows_and_more(monkeypatch):
    """NMT_CPU_LINEAR=packed (auto's choice off Intel): 0-1 rows through oneDNN with the plain weight,
    2 and more with the packed copy; equal to F.linear; state dict, values and tying unchanged."""
    from nmt_cli.inference import cpu_linear

    calls = _recorded_onednn_calls(monkeypatch)
    monkeypatch.setenv("NMT_CPU_LINEAR", "packed")
    for bias in (True, False):
        plain = torch.nn.Linear(8, 6, bias=bias)
        fast = cpu_linear.InferenceLinear.sharing(plain, packed=True)
        assert fast.weight is plain.weight and set(fast.state_dict()) == set(plain.state_dict())
        many = cpu_linear.BLAS_MIN_ROWS  # from here on through the BLAS, not oneDNN
        for shape in ((1, 1, 8), (2, 8), (4, 5, 8), (0, 1, 8), (64, 8), (many - 1, 8), (many, 8), (2, many, 8)):
            x = torch.randn(shape)
            with torch.inference_mode():
                torch.testing.assert_close(fast(x), plain(x), atol=1e-5, rtol=1e-5)
    assert set(calls) == {(1, False), (2, True), (20, True), (0, False), (64, True), (many - 1, True)}
    prepare = lambda model: cpu_linear.prepare_for_cpu_inference(model, model.output)  # noqa: E731
    _same_model_after(prepare)
    model = tiny("sinusoidal", "post")
    prepare(model)
    assert model.output.weight is model.tgt_embed.weight  # tying kept
    assert isinstance(model.output, cpu_linear.InferenceLinear) and model.output.packed_weight is not None


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this PyTorch is built without oneDNN")
def test_fused_products_where_the_packed_weight_serves(monkeypatch):
    """product_relu and product_add give relu(F.linear) and F.linear + residual: in one oneDNN call
    where the packed weight serves (2 rows up to BLAS_MIN_ROWS, no gradient), else the product then
    the ReLU or the sum; with and without bias, and for a layer without a packed copy."""
    from nmt_cli.inference import cpu_linear

    fused: list[tuple[str, int]] = []
    for name in ("onednn_linear_relu", "onednn_linear_add"):
        kernel = getattr(cpu_linear, name)
        monkeypatch.setattr(
            cpu_linear, name, lambda x, *rest, k=kernel, n=name: fused.append((n, x.numel() // x.size(-1))) or k(x, *rest)
        )
    many = cpu_linear.BLAS_MIN_ROWS
    for bias, packed in ((True, True), (False, True), (True, False)):
        plain = torch.nn.Linear(8, 6, bias=bias)
        fast = cpu_linear.InferenceLinear.sharing(plain, packed=packed)
        fused.clear()
        for shape in ((1, 8), (3, 8), (2, 5, 8), (many, 8)):
            x, residual = torch.randn(shape), torch.randn(*shape[:-1], 6)
            with torch.inference_mode():
                torch.testing.assert_close(fast.product_relu()(x), plain(x).relu(), atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(fast.product_add()(x, residual), plain(x) + residual, atol=1e-5, rtol=1e-5)
        expected = {(name, rows) for name in ("onednn_linear_relu", "onednn_linear_add") for rows in (3, 10)}
        assert set(fused) == (expected if packed else set())
        fused.clear()
        x = torch.randn(3, 8, requires_grad=True)
        fast.product_add()(x, torch.zeros(3, 6)).sum().backward()  # with gradients: F.linear, no fusion
        assert fused == [] and x.grad is not None


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this PyTorch is built without oneDNN")
def test_one_row_products_in_parts(monkeypatch):
    """Under auto on a processor without AVX-512, one row runs through the BLAS as a batch of products
    over parts of the input (one per thread, 2 where that does not divide it, else the whole product)
    with the weight stored transposed, its parts views of it; more rows through oneDNN. With AVX-512
    or NMT_CPU_LINEAR=packed every product stays on oneDNN. Outputs equal F.linear's either way."""
    from nmt_cli.inference import cpu_linear

    batched: list[tuple[int, ...]] = []
    bmm = torch.bmm
    monkeypatch.setattr(torch, "bmm", lambda a, b: batched.append(tuple(b.shape)) or bmm(a, b))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    for capability, choice, expected in (("AVX2", "auto", True), ("AVX512", "auto", False), ("AVX2", "packed", False)):
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda c=capability: c)
        monkeypatch.setenv("NMT_CPU_LINEAR", choice)
        chosen = cpu_linear.one_row_in_parts()
        assert chosen is expected
        for in_features, bias in ((16, True), (16, False), (7, True)):
            plain = torch.nn.Linear(in_features, 24, bias=bias)
            fast = cpu_linear.InferenceLinear.sharing(plain, packed=True, one_row_parts=chosen)
            assert fast.weight is plain.weight and set(fast.state_dict()) == set(plain.state_dict())
            assert fast.weight.t().is_contiguous() is expected  # stored transposed for the parts
            batched.clear()
            with torch.inference_mode():
                for shape in ((4, 1, in_features), (3, in_features)):  # more rows: oneDNN, packed copy
                    x = torch.randn(shape)
                    torch.testing.assert_close(fast(x), plain(x), atol=1e-5, rtol=1e-5)
                assert batched == []
                for shape in ((1, 1, in_features), (1, in_features), (in_features,)):
                    x = torch.randn(shape)
                    torch.testing.assert_close(fast(x), plain(x), atol=1e-5, rtol=1e-5)
            in_parts = expected and in_features % 2 == 0
            assert batched == ([(2, in_features // 2, 24)] * 3 if in_parts else [])
    # The parts follow the calling thread's threads at every product (a translation worker may have one)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    monkeypatch.setenv("NMT_CPU_LINEAR", "auto")
    plain = torch.nn.Linear(16, 24)
    fast = cpu_linear.InferenceLinear.sharing(plain, packed=True, one_row_parts=True)
    x = torch.randn(1, 16)
    with torch.inference_mode():
        for threads, parts in ((2, [(2, 8, 24)]), (1, []), (4, [(4, 4, 24)]), (2, [(2, 8, 24)])):
            monkeypatch.setattr(torch, "get_num_threads", lambda t=threads: t)
            batched.clear()
            torch.testing.assert_close(fast(x), plain(x), atol=1e-5, rtol=1e-5)
            assert batched == parts
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    assert [cpu_linear.one_row_parts_for(n) for n in (24, 6, 7)] == [4, 2, 1]
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert cpu_linear.one_row_parts_for(24) == 1


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this PyTorch is built without oneDNN")
def test_a_copied_inference_linear_computes_with_its_own_weights():
    """The product function made at the first product is not shared by a deep copy."""
    import copy

    from nmt_cli.inference import cpu_linear

    fast = cpu_linear.InferenceLinear.sharing(torch.nn.Linear(8, 6), one_row_parts=True)
    x = torch.randn(1, 8)
    with torch.inference_mode():
        before = fast(x)
        copied = copy.deepcopy(fast)
        with torch.no_grad():
            copied.weight.mul_(2)
            copied.bias.zero_()
        torch.testing.assert_close(fast(x), before)
        torch.testing.assert_close(copied(x), 2 * (before - fast.bias))


def test_cpu_linear_choice_from_the_environment(monkeypatch):
    """NMT_CPU_LINEAR=blas keeps every layer with the BLAS (output weight stored transposed instead);
    a wrong value is a one-line error naming the variable; auto takes oneDNN only off Intel with MKL."""
    from nmt_cli.errors import NmtError
    from nmt_cli.inference import cpu_linear

    monkeypatch.setenv("NMT_CPU_LINEAR", "blas")
    model = build_model(ModelConfig(layers=1, d_model=32, n_heads=4, d_ff=64), 20000, 20000)
    cpu_linear.prepare_for_cpu_inference(model, model.output)
    assert not any(isinstance(m, cpu_linear.InferenceLinear) for m in model.modules())
    assert model.output.weight.t().is_contiguous()
    monkeypatch.setenv("NMT_CPU_LINEAR", "fast")
    with pytest.raises(NmtError, match="NMT_CPU_LINEAR='fast' is not one of auto, onednn, packed, blas"):
        cpu_linear.use_onednn()
    monkeypatch.setenv("NMT_CPU_LINEAR", "auto")
    for vendor, expected in (("GenuineIntel", False), ("AuthenticAMD", True), ("", False)):
        monkeypatch.setattr(cpu_linear, "cpu_vendor", lambda v=vendor: v)
        usable = cpu_linear.onednn_usable() and torch.backends.mkl.is_available()
        assert cpu_linear.use_onednn() is (expected and usable)


def _recorded_onednn_calls(monkeypatch) -> list[tuple[int, bool]]:
    """(rows, packed weight?) of every oneDNN product from now on."""
    from nmt_cli.inference import cpu_linear

    calls: list[tuple[int, bool]] = []
    kernel = cpu_linear.onednn_linear

    def recorded(x, weight, bias):
        calls.append((x.numel() // x.size(-1), weight.is_mkldnn))
        return kernel(x, weight, bias)

    monkeypatch.setattr(cpu_linear, "onednn_linear", recorded)
    return calls


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this PyTorch is built without oneDNN")
def test_the_blas_takes_large_products_only_without_avx512(monkeypatch):
    """From BLAS_MIN_ROWS rows on products leave oneDNN for the BLAS on processors without AVX-512;
    with AVX-512 the packed weight serves every count of 2 rows and more."""
    from nmt_cli.inference import cpu_linear

    many = cpu_linear.BLAS_MIN_ROWS
    for capability, expected in (("AVX2", many), ("DEFAULT", many), ("AVX512", None)):
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda c=capability: c)
        assert cpu_linear.blas_min_rows() == expected
        monkeypatch.setenv("NMT_CPU_LINEAR", "packed")
        model = tiny("sinusoidal", "pre")
        cpu_linear.prepare_for_cpu_inference(model, model.output)
        assert model.decoder_layers[0].ffn.w1.blas_from_rows == expected
    calls = _recorded_onednn_calls(monkeypatch)
    plain = torch.nn.Linear(8, 6)
    fast = cpu_linear.InferenceLinear.sharing(plain, packed=True, blas_from_rows=None)
    with torch.inference_mode():
        for rows in (1, 2, many, 4 * many):
            x = torch.randn(rows, 8)
            torch.testing.assert_close(fast(x), plain(x), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(fast.product_add()(x, x[:, :6]), plain(x) + x[:, :6], atol=1e-5, rtol=1e-5)
    assert calls == [(1, False), (1, False), (2, True), (many, True), (4 * many, True)]


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this PyTorch is built without oneDNN")
def test_bf16_models_read_packed_weights_where_the_processor_multiplies_bf16(monkeypatch):
    """In bf16 every linear layer reads a oneDNN-packed copy of its weight, one row included, under
    auto or packed where the processor multiplies bf16 in hardware; elsewhere, under blas or onednn,
    and in fp16 the layers stay as they are. The outputs stay those of the bf16 model."""
    import copy

    from nmt_cli.inference import cpu_linear

    if not cpu_linear.onednn_usable(torch.bfloat16):
        pytest.skip("this PyTorch's oneDNN does not compute bf16 on this processor")
    model = tiny("sinusoidal", "pre").eval().to(torch.bfloat16)
    src, tgt = torch.tensor([[5, 6, 7, 8, 3]]), torch.tensor([[2, 10, 11, 12]])
    with torch.inference_mode():
        expected = model.logits(model.decode(tgt, *model.encode(src))).float()
    cases = [(True, "auto", torch.bfloat16, True), (True, "packed", torch.bfloat16, True)]
    cases += [(False, "auto", torch.bfloat16, False), (True, "blas", torch.bfloat16, False)]
    cases += [(True, "onednn", torch.bfloat16, False), (True, "auto", torch.float16, False)]
    for native, choice, dtype, replaced in cases:
        monkeypatch.setattr(cpu_linear, "native_bf16_cpu", lambda n=native: n)
        monkeypatch.setenv("NMT_CPU_LINEAR", choice)
        prepared = copy.deepcopy(model)
        cpu_linear.prepare_for_cpu_inference(prepared, prepared.output, dtype)
        linears = [m for m in prepared.modules() if isinstance(m, cpu_linear.InferenceLinear)]
        all_linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        assert len(linears) == (len(all_linears) if replaced else 0)
        assert all(m.packed_weight is not None for m in linears)
        assert prepared.output.weight is prepared.tgt_embed.weight  # tying kept
        with torch.inference_mode():
            got = prepared.logits(prepared.decode(tgt, *prepared.encode(src))).float()
        torch.testing.assert_close(got, expected, atol=0.1, rtol=0.05)  # within bf16's rounding
    calls = _recorded_onednn_calls(monkeypatch)
    plain = torch.nn.Linear(8, 6).to(torch.bfloat16)
    fast = cpu_linear.InferenceLinear.sharing(plain, packed=True, blas_from_rows=None)
    with torch.inference_mode():
        for rows in (1, 3):
            x = torch.randn(rows, 8, dtype=torch.bfloat16)
            torch.testing.assert_close(fast(x).float(), plain(x).float(), atol=0.05, rtol=0.02)
    assert calls == [(1, True), (3, True)]


def test_tying_and_rezero_start():
    model = build_model(ModelConfig(layers=1, d_model=16, n_heads=2, d_ff=32, norm="rezero"), 30, 30)
    assert model.output.weight is model.tgt_embed.weight is model.src_embed.weight
    assert all(p.item() == 0 for n, p in model.named_parameters() if n.endswith("alpha"))
    untied = build_model(
        ModelConfig(layers=1, d_model=16, n_heads=2, d_ff=32, share_embeddings=False, tie_output=False), 30, 40
    )
    assert untied.output.weight.shape == (40, 16) and untied.src_embed.weight.shape == (30, 16)
    assert untied.output.weight is not untied.tgt_embed.weight


def test_tfixup_has_no_layernorm_and_scaled_weights():
    xavier = build_model(ModelConfig(layers=2, d_model=32, n_heads=4, d_ff=64), 30, 30)
    torch.manual_seed(0)
    fixup = build_model(ModelConfig(layers=2, d_model=32, n_heads=4, d_ff=64, init="tfixup"), 30, 30)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in fixup.modules())
    assert any(isinstance(m, torch.nn.LayerNorm) for m in xavier.modules())
    bound = math.sqrt(6 / (32 + 64)) * (9 * 2) ** -0.25
    assert fixup.decoder[0].ffn.w1.weight.abs().max().item() <= bound + 1e-6


@pytest.mark.parametrize("layers, tied", [(3, True), (6, True), (3, False), (6, False)])
def test_tfixup_scales_each_tensor_as_derived(layers, tied):
    """Huang et al. 2020, steps 1-3: Xavier per d x d (or d x d_ff) matrix, N(0, d^-1/2) embeddings, then
    (9 N)^-1/4 on decoder V, output, FFN and both embeddings, 0.67 N^-1/4 on the encoder's; Q and K untouched."""
    d, d_ff = 256, 1024
    torch.manual_seed(0)
    model = build_model(
        ModelConfig(layers=layers, d_model=d, n_heads=4, d_ff=d_ff, init="tfixup", share_embeddings=tied, tie_output=tied),
        2000,
        2000,
    )
    dec, enc = (9 * layers) ** -0.25, 0.67 * layers**-0.25
    square, ffn = (1 / d) ** 0.5, (2 / (d + d_ff)) ** 0.5  # Xavier std of a d x d and a d x d_ff matrix

    def check(tensor, expected):
        assert tensor.float().std().item() == pytest.approx(expected, rel=0.04)

    for stack, scale in ((model.encoder, enc), (model.decoder, dec)):
        for layer in stack:
            for attn in [layer.self_attn] + ([layer.cross_attn] if hasattr(layer, "cross_attn") else []):
                fused = attn.qkv.weight if isinstance(attn, SelfAttention) else torch.cat([attn.q.weight, attn.kv.weight])
                query, key, value = fused.split(d)
                check(query, square)
                check(key, square)
                check(value, square * scale)
                check(attn.out.weight, square * scale)
            check(layer.ffn.w1.weight, ffn * scale)
            check(layer.ffn.w2.weight, ffn * scale)
    for embedding in (model.src_embed, model.tgt_embed):
        check(embedding.weight[1:], d**-0.5 * dec)  # both inputs, decoder factor (step 2); row 0 is padding
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())


def test_warmup_free_schedule():
    from nmt_cli.config import TrainConfig
    from nmt_cli.train.schedule import learning_rate

    schedule = learning_rate(TrainConfig(lr_schedule="inverse_sqrt_nowarmup", lr=5e-4, warmup=4000), 512)
    assert schedule(1, 0.0) == pytest.approx(5e-4 * (4000 / 4001) ** 0.5)  # at full rate from the first update
    assert schedule(4000, 0.0) == pytest.approx(5e-4 * 0.5**0.5)
    assert schedule(12000, 0.0) == pytest.approx(2.5e-4)
    assert all(schedule(s, 0.0) > schedule(s + 1, 0.0) for s in range(1, 50))


def test_rezero_alpha_per_layer_is_shared_by_its_branches():
    per_layer = build_model(ModelConfig(layers=2, d_model=32, n_heads=4, d_ff=64, norm="rezero", rezero_per="layer"), 30, 30)
    per_branch = build_model(ModelConfig(layers=2, d_model=32, n_heads=4, d_ff=64, norm="rezero"), 30, 30)

    def alphas(model):
        return [p for n, p in model.named_parameters() if n.endswith("alpha")]

    assert len(alphas(per_layer)) == 4 and len(alphas(per_branch)) == 2 * 2 + 2 * 3
    decoder = per_layer.decoder[0]
    assert decoder.res_self.alpha is decoder.res_cross.alpha is decoder.res_ffn.alpha


def test_causal_fast_path_aligns_bottom_right_like_the_reference():
    from nmt_cli.model.attention import attention, attention_reference

    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8)
    padding = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    padding[1, ..., 5:] = False
    for mask in (None, padding):
        torch.testing.assert_close(attention(q, k, v, mask, causal=True), attention_reference(q, k, v, mask, causal=True))


def test_output_bias_is_added_to_the_logits_and_trained_through_the_plain_loss():
    """``model.output_bias`` (Marian's final_logits_bias): the logits carry it, decoding step by step sees it,
    and the loss (the plain path, not the fused one) equals the formula over those logits."""
    from nmt_cli.model.loss import label_smoothed_nll

    model = tiny(output_bias=True)
    with torch.no_grad():
        model.output.bias.copy_(torch.randn(50))
    src = torch.tensor([[5, 6, 7, 3]])
    tgt_in, tgt_out = torch.tensor([[2, 8, 9]]), torch.tensor([[8, 9, 3]])
    memory, mask = model.encode(src)
    hidden = model.decode(tgt_in, memory, mask)
    logits = model.logits(hidden)
    torch.testing.assert_close(logits, hidden @ model.output.weight.T + model.output.bias)
    decoder = IncrementalDecoder(model)
    state = decoder.start(memory, mask)
    for t in range(tgt_in.size(1)):
        torch.testing.assert_close(decoder.logits(tgt_in[:, t], state), logits[:, t], atol=1e-5, rtol=1e-5)
    loss, nll, _ = model.loss(src, tgt_in, tgt_out, 0.1)
    expected_loss, expected_nll = label_smoothed_nll(logits[0], tgt_out[0], 0.1)
    torch.testing.assert_close((loss, nll), (expected_loss, expected_nll))
    loss.backward()
    assert model.output.bias.grad is not None and model.output.bias.grad.abs().sum() > 0
    from nmt_cli.inference import cpu_linear

    if cpu_linear.onednn_usable():  # the CPU inference kernels keep the bias too
        with torch.no_grad():
            cpu_linear.prepare_for_cpu_inference(model, model.output)
            torch.testing.assert_close(model.logits(hidden), logits, atol=1e-4, rtol=1e-4)


def test_encoder_and_decoder_depths_are_set_apart():
    from nmt_cli.config import ModelConfig
    from nmt_cli.model.transformer import build_model

    shape = {"d_model": 32, "n_heads": 4, "d_ff": 64}
    deep_shallow = build_model(ModelConfig(layers=3, encoder_layers=5, decoder_layers=1, **shape), 50, 50, 0)
    assert len(deep_shallow.encoder_layers) == 5 and len(deep_shallow.decoder_layers) == 1
    both = build_model(ModelConfig(layers=2, d_model=32, n_heads=4, d_ff=64), 50, 50, 0)
    assert len(both.encoder_layers) == len(both.decoder_layers) == 2  # model.layers alone still means both
