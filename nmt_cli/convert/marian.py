"""``nmt import hf`` and ``nmt export --for hf``: MarianMT folders (OPUS-MT's HuggingFace layout) in and out.

The folder holds ``config.json``, the weights (``model.safetensors`` or ``pytorch_model.bin``),
``source.spm``/``target.spm`` and ``vocab.json``, the one id space both SentencePiece models map into. The
network is the paper's post-norm Transformer with what MarianMT adds expressed as recipe options:
``model.activation: swish``, ``model.output_bias`` (``final_logits_bias``), embeddings scaled by sqrt(d) (as
nmt's), tied embeddings. Three things are moved, not added:

- the vocabulary: ``shared_ids.py`` rebuilds both SentencePiece models over vocab.json's order in nmt's
  layout, and the embedding rows follow; Marian starts decoding from ``<pad>``, so nmt's ``<s>`` row is that
  row, and its output bias is -1e4 so that the pad logit is counted once in the softmax, as Marian counts it;
- the position layout: Marian's sinusoid table holds all sines then all cosines, nmt's interleaves them with
  the same frequencies; permuting the residual dimensions of every weight (``layers.sines_then_cosines``) gives the same
  network in nmt's layout, so no new position option is needed;
- the weights' names: Q, K and V concatenated into nmt's fused projections.

What MarianMT can be that this cannot read is refused in one line naming the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..config import PAIR
from ..data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from ..decode.loading import LoadedModel
from ..errors import NmtError, reason
from ..model.transformer import Transformer
from .folder import imported_recipe, write_model_folder
from .layers import check_layer_shapes, layer_map, placed, sines_then_cosines
from .shared_ids import SPECIALS, rebuild

ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}
NEVER = -1e4  # output bias of the copy of the pad row that nmt's <s> is: exp(-1e4) is 0 in float32


def import_marian(
    folder: Path, output: Path, src_lang: str | None = None, tgt_lang: str | None = None, origin: str | None = None
) -> Path:
    """Write ``output``/model.pt from the MarianMT folder ``folder`` (fetched from the hub name ``origin``, if
    given); returns ``output``."""
    config = _read_json(folder / "config.json")
    model_settings = _model_settings(config, folder)
    vocab = _read_json(folder / "vocab.json")
    marian_rows, order = _vocabulary(vocab, config, folder)
    sides = {
        side: rebuild(_read_bytes(folder / f"{side}.spm"), order, str(folder / f"{side}.spm"))
        for side in ("source", "target")
    }
    weights = _weights(folder)
    _check_shapes(weights, config, model_settings, len(vocab), folder)
    state = _state_dict(weights, config, marian_rows, folder)
    pairs = _exported_pairs(folder) if src_lang is None and tgt_lang is None else None
    languages = ("", "") if pairs else _languages(folder, src_lang, tgt_lang)
    decode = {"beam": int(config.get("num_beams") or 4), "alpha": 1.0, "length_penalty": "average"}
    name = (origin or folder.name).rsplit("/", 1)[-1]
    # two SentencePiece models over one id space: vocab.joint false, embeddings shared
    recipe = imported_recipe(output, name, languages, model_settings, decode, False, f"{folder} (MarianMT config)", pairs)
    vocab = {"src": sides["source"], "tgt": sides["target"]}
    return write_model_folder(output, state, recipe, vocab, {"format": "marian", "path": origin or str(folder)})


def _check_shapes(
    weights: dict[str, torch.Tensor], config: dict[str, Any], settings: dict[str, Any], vocab_size: int, folder: Path
) -> None:
    """Every weight's shape against config.json's settings and vocab.json's size, before anything is built: a
    config that disagrees with its weights or its vocabulary is refused, naming both."""
    where = folder / "config.json"
    for field in ("vocab_size", "decoder_vocab_size"):
        if field in config and config[field] != vocab_size:
            raise NmtError(
                f"{where}: {field} is {config[field]!r}, but vocab.json has {vocab_size} pieces; "
                "the config and the vocabulary disagree"
            )
    for key in ("layers", "decoder_layers"):
        if not isinstance(settings[key], int) or settings[key] < 1:
            raise NmtError(f"{where}: the {key} count must be a positive whole number; it is {settings[key]!r}")
    check_layer_shapes(weights, settings, folder, "config.json")
    d_model = settings["d_model"]
    for name, tensor in weights.items():
        if name.endswith(("shared.weight", "embed_tokens.weight")) and tuple(tensor.shape) != (vocab_size, d_model):
            raise NmtError(
                f"{folder}: {name} has shape {tuple(tensor.shape)}, but vocab.json's {vocab_size} pieces and d_model "
                f"{d_model} give it {(vocab_size, d_model)}; the config, the vocabulary and the weights disagree"
            )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(_read_bytes(path).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise NmtError(f"{path}: not valid JSON ({err}); is this a MarianMT folder?") from None
    if not isinstance(data, dict):
        raise NmtError(f"{path}: holds no JSON object; is this a MarianMT folder?")
    return data


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise NmtError(
            f"{path}: not found; a MarianMT folder has config.json, vocab.json, source.spm, target.spm and the weights"
        )
    return path.read_bytes()


def _model_settings(config: dict[str, Any], folder: Path) -> dict[str, Any]:
    """nmt's model options for the MarianMT ``config``; what they cannot express is refused."""
    where = folder / "config.json"
    if config.get("model_type") != "marian":
        raise NmtError(f"{where}: model_type is {config.get('model_type')!r}; nmt import hf reads MarianMT (marian) models")
    for field, wanted in (
        ("scale_embedding", True),
        ("normalize_before", False),
        ("share_encoder_decoder_embeddings", True),
        ("tie_word_embeddings", True),
        ("add_bias_logits", False),
        ("normalize_embedding", False),
    ):
        if field in config and config[field] != wanted:
            raise NmtError(f"{where}: {field} is {config[field]!r}; nmt reads MarianMT models with {field} {wanted}")
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if config.get(a) != config.get(b):
            raise NmtError(f"{where}: {a} ({config.get(a)}) and {b} ({config.get(b)}) differ; nmt uses one value for both")
    activation = ACTIVATIONS.get(str(config.get("activation_function")))
    if activation is None:
        raise NmtError(
            f"{where}: activation_function {config.get('activation_function')!r} is not one nmt has (swish, relu, gelu)"
        )
    d_model = config.get("d_model")
    if not isinstance(d_model, int) or d_model % 2:
        raise NmtError(f"{where}: d_model must be an even number; it is {d_model!r}")
    return {
        "layers": config.get("encoder_layers"),
        "decoder_layers": config.get("decoder_layers"),
        "d_model": d_model,
        "n_heads": config.get("encoder_attention_heads"),
        "d_ff": config.get("encoder_ffn_dim"),
        "dropout": float(config.get("dropout", 0.1)),
        "attention_dropout": float(config.get("attention_dropout", 0.0)),
        "activation_dropout": float(config.get("activation_dropout", 0.0)),
        "activation": activation,
        "positions": "sinusoidal",
        "norm": "post",
        "share_embeddings": True,
        "tie_output": True,
        "output_bias": True,
        "max_positions": int(config.get("max_position_embeddings", 512)),
    }


def _vocabulary(vocab: dict[str, Any], config: dict[str, Any], folder: Path) -> tuple[torch.Tensor, list[str]]:
    """For each nmt id, the Marian row it takes; and the other pieces in Marian's order."""
    ids = sorted(vocab.values()) if all(isinstance(v, int) for v in vocab.values()) else None
    if ids != list(range(len(vocab))):
        raise NmtError(f"{folder / 'vocab.json'}: its ids are not 0 .. {len(vocab) - 1}, each once")
    pad, eos = config.get("pad_token_id"), config.get("eos_token_id")
    # Marian's decoding starts from <pad>; a folder `nmt export --for hf` wrote starts from its own <s>
    start = config.get("decoder_start_token_id", pad)
    unk = vocab.get("<unk>")
    if not all(isinstance(i, int) and 0 <= i < len(vocab) for i in (pad, eos, unk, start)):
        raise NmtError(
            f"{folder}: pad_token_id, eos_token_id, decoder_start_token_id or vocab.json's <unk> is missing or out of range"
        )
    by_id = sorted(vocab, key=vocab.__getitem__)
    special_rows = {PAD_ID: pad, UNK_ID: unk, BOS_ID: start, EOS_ID: eos}
    order = [piece for i, piece in enumerate(by_id) if i not in (pad, eos, unk, start)]
    rows = [special_rows[i] for i in sorted(SPECIALS)] + [vocab[piece] for piece in order]
    return torch.tensor(rows), order


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    safe, pickled = folder / "model.safetensors", folder / "pytorch_model.bin"
    if safe.is_file():
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise NmtError(
                f"{safe}: reading safetensors needs the safetensors package: pip install 'nmt-cli[hub]'"
            ) from None
        try:
            return load_file(str(safe))
        except Exception as err:  # safetensors raises its own error types for a damaged file
            raise NmtError(f"{safe}: not a readable safetensors file ({reason(err)})") from None
    if pickled.is_file():
        try:
            return torch.load(pickled, map_location="cpu", weights_only=True)
        except Exception as err:  # pickle and zip errors of a damaged or hostile file
            raise NmtError(f"{pickled}: not a readable PyTorch weights file ({reason(err)})") from None
    raise NmtError(f"{folder}: holds neither model.safetensors nor pytorch_model.bin")


def _state_dict(
    weights: dict[str, torch.Tensor], config: dict[str, Any], rows: torch.Tensor, folder: Path
) -> dict[str, torch.Tensor]:
    """nmt's state dict from MarianMT's weights (the module's text)."""
    found = {name.removeprefix("model."): tensor.float() for name, tensor in weights.items()}
    used: set[str] = set()

    def take(name: str) -> torch.Tensor:
        if name not in found:
            raise NmtError(f"{folder}: the weights have no {name}; is this a MarianMT checkpoint?")
        used.add(name)
        return found[name]

    perm = sines_then_cosines(int(config["d_model"]))
    embedding = take("shared.weight") if "shared.weight" in found else take("encoder.embed_tokens.weight")
    for alias in ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"):
        used.add(alias)
    embedding = placed(embedding[rows], "in", perm)
    state = {"src_embed.weight": embedding, "tgt_embed.weight": embedding, "output.weight": embedding}
    bias = take("final_logits_bias").reshape(-1)[rows].clone() if "final_logits_bias" in found else torch.zeros(len(rows))
    bias[BOS_ID] = NEVER
    state["output.bias"] = bias

    for ours, theirs, place in layer_map(int(config["encoder_layers"]), int(config["decoder_layers"]), prefix="model."):
        state[ours] = placed(torch.cat([take(name.removeprefix("model.")) for name in theirs]), place, perm)
    left = sorted(n for n in found if n not in used and "embed_positions" not in n)
    if left:
        raise NmtError(f"{folder}: the weights hold {left[0]} (and {len(left) - 1} more) that nmt's model has no place for")
    return {name: tensor.contiguous() for name, tensor in state.items()}


def _exported_pairs(folder: Path) -> list[str] | None:
    """The directions a multilingual model nmt exported wrote into tokenizer_config.json (``nmt_pairs``)."""
    settings = folder / "tokenizer_config.json"
    pairs = _read_json(settings).get("nmt_pairs") if settings.is_file() else None
    if pairs is None:
        return None
    if not isinstance(pairs, list) or not pairs or not all(isinstance(p, str) and PAIR.fullmatch(p) for p in pairs):
        raise NmtError(f'{settings}: nmt_pairs is not a list of directions such as "en-de"; fix or remove it')
    return pairs


def _languages(folder: Path, src_lang: str | None, tgt_lang: str | None) -> tuple[str, str]:
    """The pair from the options, else from tokenizer_config.json (OPUS-MT writes source_lang/target_lang)."""
    settings = folder / "tokenizer_config.json"
    stored = _read_json(settings) if settings.is_file() else {}
    src = src_lang or stored.get("source_lang")
    tgt = tgt_lang or stored.get("target_lang")
    if not (isinstance(src, str) and src and isinstance(tgt, str) and tgt):
        raise NmtError(f"{folder}: does not say its languages (tokenizer_config.json); give --src-lang and --tgt-lang")
    return src, tgt


def export_marian(loaded: LoadedModel, output: Path) -> Path:
    """Write ``loaded`` as a MarianMT folder ``transformers`` loads (the inverse of :func:`import_marian`):
    nmt's ids become vocab.json's, the residual dimensions go back to Marian's sinusoid layout."""
    settings, model = loaded.recipe.model, loaded.model
    _check_expressible(loaded)
    if output.exists() and any(output.iterdir()):
        raise NmtError(f"{output}: exists and is not empty; export into a new folder")
    size = loaded.src_vocab.GetPieceSize()
    vocab: dict[str, int] = {}
    for i in range(size):  # one id space: each id's piece, from whichever side produces it
        piece = loaded.tgt_vocab.IdToPiece(i) or loaded.src_vocab.IdToPiece(i)
        vocab.setdefault(piece, i)
    if len(vocab) != size:
        raise NmtError(f"{loaded.path}: two ids share a piece; MarianMT's vocab.json cannot hold that vocabulary")
    theirs = marian_weights(model)
    config = {
        "model_type": "marian",
        "architectures": ["MarianMTModel"],
        "vocab_size": size,
        "decoder_vocab_size": size,
        "d_model": settings.d_model,
        "encoder_layers": settings.n_encoder_layers,
        "decoder_layers": settings.n_decoder_layers,
        "encoder_attention_heads": settings.n_heads,
        "decoder_attention_heads": settings.n_heads,
        "encoder_ffn_dim": settings.d_ff,
        "decoder_ffn_dim": settings.d_ff,
        "activation_function": settings.activation,
        "dropout": settings.dropout,
        "attention_dropout": settings.attention_dropout,
        "activation_dropout": settings.activation_dropout,
        "max_position_embeddings": settings.max_positions,
        "scale_embedding": True,
        "share_encoder_decoder_embeddings": True,
        "tie_word_embeddings": True,
        "pad_token_id": PAD_ID,
        "eos_token_id": EOS_ID,
        "forced_eos_token_id": EOS_ID,
        "decoder_start_token_id": BOS_ID,
        "bad_words_ids": [[PAD_ID], [BOS_ID]],  # never emitted, as nmt's search never emits them
        "num_beams": loaded.recipe.decode.beam,
        "max_length": settings.max_positions,
        "is_encoder_decoder": True,
    }
    staging = output.with_name(f".{output.name}.tmp")
    staging.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.contiguous() for k, v in theirs.items()}, staging / "pytorch_model.bin")
    (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (staging / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    (staging / "source.spm").write_bytes(loaded.src_vocab.serialized_model_proto())
    (staging / "target.spm").write_bytes(loaded.tgt_vocab.serialized_model_proto())
    languages: dict[str, Any] = {"source_lang": loaded.recipe.data.src_lang, "target_lang": loaded.recipe.data.tgt_lang}
    if loaded.recipe.data.pairs:  # several directions: OPUS-MT's "mul", and the directions for nmt import hf
        languages = {"source_lang": "mul", "target_lang": "mul", "nmt_pairs": list(loaded.recipe.data.pairs)}
    (staging / "tokenizer_config.json").write_text(json.dumps({**languages, "tokenizer_class": "MarianTokenizer"}) + "\n")
    if output.exists():
        output.rmdir()  # empty (checked above)
    staging.rename(output)
    return output


def marian_weights(model: Transformer) -> dict[str, torch.Tensor]:
    """``model``'s weights under MarianMTModel's names, in Marian's layout (the inverse of :func:`_state_dict`):
    the residual dimensions put back in the order of Marian's sinusoids (all sines, then all cosines), so that
    Marian's own position table serves. The model must be expressible (:func:`_check_expressible`)."""
    settings = model.config
    back = torch.argsort(sines_then_cosines(settings.d_model))  # Marian's dimension j is nmt's back[j]
    weights = {name: tensor.detach().float().cpu() for name, tensor in model.state_dict().items()}
    embedding = placed(weights["src_embed.weight"], "in", back)
    bias = weights["output.bias"] if "output.bias" in weights else torch.zeros(embedding.size(0))
    theirs: dict[str, torch.Tensor] = {
        "model.shared.weight": embedding,
        "model.encoder.embed_tokens.weight": embedding,
        "model.decoder.embed_tokens.weight": embedding,
        "lm_head.weight": embedding,
        "final_logits_bias": bias[None, :],
    }
    for ours, names, place in layer_map(settings.n_encoder_layers, settings.n_decoder_layers, prefix="model."):
        weight = placed(weights[ours], place, back)
        theirs.update(zip(names, weight.split(settings.d_model) if len(names) > 1 else (weight,)))
    return theirs


def _check_expressible(loaded: LoadedModel) -> None:
    """Refuse, naming the option, a model MarianMT cannot express."""
    settings = loaded.recipe.model
    for option, value, wanted in (
        ("model.norm", settings.arrangement, "post"),
        ("model.positions", settings.positions, "sinusoidal"),
        ("model.sinusoids", settings.sinusoids, "paper"),
        ("model.share_embeddings", settings.share_embeddings, True),
        ("model.tie_output", settings.tie_output, True),
    ):
        if value != wanted:
            raise NmtError(f"{loaded.path}: {option} is {value}; MarianMT expresses {option}: {wanted} models only")
    if settings.d_model % 2:
        raise NmtError(f"{loaded.path}: model.d_model is odd; MarianMT's sinusoids need an even width")
    if loaded.src_vocab.GetPieceSize() != loaded.tgt_vocab.GetPieceSize():
        raise NmtError(f"{loaded.path}: the source and target vocabularies differ in size; MarianMT needs one id space")
