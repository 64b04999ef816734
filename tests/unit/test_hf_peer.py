"""The HuggingFace peer of the GPU benchmark computes our model: same logits, same greedy output (tiny sizes, CPU)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from nmt_cli.config import DecodeConfig, ModelConfig
from nmt_cli.data.vocab import BOS_ID, EOS_ID, PAD_ID
from nmt_cli.decode.search import greedy_search
from nmt_cli.model.transformer import build_model

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from hf_peer import hf_loss, to_marian  # noqa: E402

CONFIG = ModelConfig(
    layers=2,
    decoder_layers=3,
    d_model=32,
    n_heads=4,
    d_ff=64,
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
    max_positions=64,
)


def _model(seed: int = 0):
    torch.manual_seed(seed)
    model = build_model(CONFIG, 97, 97, PAD_ID).eval()
    with torch.no_grad():  # non-trivial LayerNorm and bias values, so a swapped tensor cannot pass
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _batch():
    src = torch.tensor([[5, 9, 14, 22, EOS_ID, PAD_ID, PAD_ID], [7, 8, 9, 10, 11, 12, EOS_ID]])
    tgt_in = torch.tensor([[BOS_ID, 30, 31, 32, PAD_ID], [BOS_ID, 40, 41, 42, 43]])
    tgt_out = torch.tensor([[30, 31, 32, EOS_ID, PAD_ID], [40, 41, 42, 43, EOS_ID]])
    return src, tgt_in, tgt_out


def test_marian_gives_our_logits_on_the_same_weights():
    model = _model()
    marian = to_marian(model, attention="eager").eval()
    src, tgt_in, tgt_out = _batch()
    with torch.no_grad():
        ours = model.logits(model.decode(tgt_in, *model.encode(src)))
        theirs = marian(input_ids=src, attention_mask=src != PAD_ID, decoder_input_ids=tgt_in).logits
    real = tgt_out != PAD_ID
    torch.testing.assert_close(theirs[real], ours[real], rtol=1e-4, atol=1e-4)
    assert not torch.allclose(
        ours[real],
        to_marian(_model(seed=1), "eager")(input_ids=src, attention_mask=src != PAD_ID, decoder_input_ids=tgt_in)
        .logits[real]
        .detach(),
        atol=1e-2,
    )


def test_marian_loss_equals_ours_without_smoothing_and_with():
    model = _model()
    marian = to_marian(model, attention="sdpa").eval()
    src, tgt_in, tgt_out = _batch()
    for epsilon in (0.0, 0.1):
        with torch.no_grad():
            ours, _, n_ours = model.loss(src, tgt_in, tgt_out, epsilon)
            theirs, n_theirs = hf_loss(marian, src, tgt_in, tgt_out, epsilon)
        assert n_ours == n_theirs == 9
        # Our label smoothing spreads epsilon over V - 1 wrong classes (Szegedy et al.); torch's over all V.
        assert float(theirs) == pytest.approx(float(ours), rel=0.02 if epsilon else 1e-5)


def test_marian_greedy_generation_matches_our_greedy_search():
    model = _model(seed=3)
    marian = to_marian(model, attention="sdpa").eval()
    src = torch.tensor([[5, 9, 14, 22, 31, 40, EOS_ID]])
    config = replace(DecodeConfig(), beam=1, max_len_a=0.0, max_len_b=12)
    ours = greedy_search(model, src, config)[0][0].tokens
    generated = marian.generate(
        input_ids=src,
        attention_mask=src != PAD_ID,
        num_beams=1,
        do_sample=False,
        max_new_tokens=len(ours),
        bad_words_ids=[[PAD_ID], [BOS_ID]],
    )[0].tolist()
    assert generated[0] == BOS_ID
    assert generated[1 : 1 + len(ours)] == list(ours)
