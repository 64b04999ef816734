"""The HuggingFace peer: our Transformer's weights as a ``MarianMTModel``, and the plain training step a user writes.

MarianMT is the paper's architecture in transformers (post-norm layers, sinusoidal positions,
sqrt(d)-scaled embeddings shared by encoder, decoder and output). Two layouts differ and are
mapped by ``nmt export --for hf``'s code (``convert/marian.py``): our self-attention holds Q, K, V in one
fused matrix (cross-attention: Q, and K|V), and our sinusoid table interleaves sin/cos where Marian's puts all
sines first. The mapping is checked in ``tests/unit/test_hf_peer.py``: same logits as our model on the same input.

Used by ``bench_gpu.py``; needs ``transformers`` (not a dependency of nmt).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nmt_cli.config import ModelConfig
from nmt_cli.convert.layers import placed, sines_then_cosines
from nmt_cli.convert.marian import marian_weights
from nmt_cli.data.vocab import BOS_ID, EOS_ID, PAD_ID
from nmt_cli.model.positions import sinusoidal_table
from nmt_cli.model.transformer import Transformer


def marian_config(config: ModelConfig, vocab: int, attention: str = "sdpa"):
    """A MarianConfig with the dimensions, dropouts and special ids of our model."""
    from transformers import MarianConfig

    unsupported = {
        "norm": (config.norm, "post"),
        "positions": (config.positions, "sinusoidal"),
        "activation": (config.activation, "relu"),
        "share_embeddings": (config.share_embeddings, True),
        "tie_output": (config.tie_output, True),
    }
    for key, (value, needed) in unsupported.items():
        if value != needed:
            raise ValueError(f"MarianMT mirrors model.{key}={needed} only (got {value})")
    hf = MarianConfig(
        vocab_size=vocab,
        decoder_vocab_size=vocab,
        d_model=config.d_model,
        max_position_embeddings=config.max_positions,
        encoder_layers=config.n_encoder_layers,
        decoder_layers=config.n_decoder_layers,
        encoder_attention_heads=config.n_heads,
        decoder_attention_heads=config.n_heads,
        encoder_ffn_dim=config.d_ff,
        decoder_ffn_dim=config.d_ff,
        activation_function="relu",
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        bos_token_id=BOS_ID,
        decoder_start_token_id=BOS_ID,
        forced_eos_token_id=None,
        use_cache=True,
    )
    hf._attn_implementation = attention
    return hf


def to_marian(model: Transformer, attention: str = "sdpa") -> nn.Module:
    """A MarianMTModel holding a copy of ``model``'s weights (same device and dtype)."""
    from transformers import MarianMTModel

    config = model.config
    marian = MarianMTModel(marian_config(config, model.tgt_vocab, attention))
    marian.load_state_dict(marian_state_dict(model), strict=True)
    parameter = next(model.parameters())
    return marian.to(device=parameter.device, dtype=parameter.dtype)


def marian_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """Our parameters under MarianMTModel's names and layout: ``nmt export --for hf``'s own mapping
    (``convert/marian.py``), with the position table MarianMTModel keeps among its weights."""
    table = sinusoidal_table(model.config.max_positions, model.config.d_model)
    marian_table = placed(table, "in", torch.argsort(sines_then_cosines(model.config.d_model)))
    out = marian_weights(model)
    for side in ("encoder", "decoder"):
        out[f"model.{side}.embed_positions.weight"] = marian_table
    return out


def hf_loss(
    marian: nn.Module, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, label_smoothing: float
) -> tuple[torch.Tensor, int]:
    """(summed label-smoothed cross-entropy, target tokens): the loop a transformers user writes."""
    logits = marian(
        input_ids=src,
        attention_mask=src != PAD_ID,
        decoder_input_ids=tgt_in,
        decoder_attention_mask=tgt_in != PAD_ID,
        use_cache=False,
    ).logits
    loss = F.cross_entropy(
        logits.view(-1, logits.size(-1)),
        tgt_out.reshape(-1),
        ignore_index=PAD_ID,
        label_smoothing=label_smoothing,
        reduction="sum",
    )
    return loss, int((tgt_out != PAD_ID).sum())


__all__ = ["marian_config", "to_marian", "marian_state_dict", "hf_loss"]
