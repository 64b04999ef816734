"""``nmt import fairseq``: a fairseq ``transformer`` checkpoint whose pieces are SentencePiece's, as an nmt model.

fairseq keeps three things apart that an nmt model folder holds together: the weights and settings (the
checkpoint), the piece-to-id tables (``dict.SRC.txt``, ``dict.TGT.txt``) and the tokenizer (a SentencePiece
model applied before ``fairseq-preprocess``). The network is the paper's Transformer as nmt builds it; what
differs is moved, not added:

- ids: fairseq numbers ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3, then the dictionary's lines.
  ``shared_ids.py`` rebuilds the SentencePiece model over that order in nmt's layout and the embedding rows
  follow. fairseq's decoder starts from ``</s>``, so nmt's ``<s>`` row is that row, with an output bias of
  -1e4 so that it is never predicted; fairseq's own ``<s>`` (never an input) is left out. A piece the
  SentencePiece model makes but the dictionary lacks is ``<unk>`` to fairseq: here it keeps an id whose row
  is ``<unk>``'s, with the same -1e4 bias, so the network sees exactly what fairseq's sees.
- positions: fairseq's sinusoids have other frequencies and count from 2 (``model.sinusoids: fairseq``) and
  hold all sines then all cosines, so every weight's residual dimensions are permuted as for MarianMT.
- weight names: ``layers.py``'s table, with no prefix.

What such a checkpoint can be that nmt cannot express is refused in one line naming the setting.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from ..data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from ..errors import NmtError, reason
from .folder import imported_recipe, write_model_folder
from .layers import check_layer_shapes, layer_map, placed, sines_then_cosines
from .shared_ids import SPECIALS, rebuild

FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's Dictionary puts these first, in this order
FS_PAD, FS_EOS, FS_UNK = 1, 2, 3
NEVER = -1e4  # the output bias of rows that copy another: exp(-1e4) is 0 in float32
ACTIVATIONS = {"relu": "relu", "gelu": "gelu"}  # fairseq's gelu is the exact (erf) one, as torch's and nmt's


def import_fairseq(
    checkpoint: Path,
    output: Path,
    dictionaries: tuple[Path | None, Path | None],
    tokenizers: tuple[Path, Path | None],
    languages: tuple[str | None, str | None],
) -> Path:
    """Write ``output``/model.pt (and recipe.yaml) from a fairseq checkpoint; returns ``output``."""
    stored = _load(checkpoint)
    settings = _settings(stored, checkpoint)
    src_lang, tgt_lang = _languages(stored, languages, checkpoint)
    src_dict, tgt_dict = (
        _read_dictionary(_dictionary_path(given, stored, lang, checkpoint))
        for given, lang in zip(dictionaries, (src_lang, tgt_lang))
    )
    src_spm = _read_bytes(tokenizers[0])
    tgt_spm = _read_bytes(tokenizers[1]) if tokenizers[1] else src_spm
    weights = {k: v for k, v in stored["model"].items() if isinstance(v, torch.Tensor)}
    model_settings = _model_settings(settings, weights, checkpoint)
    _check_shapes(weights, model_settings, checkpoint)
    joint = src_dict == tgt_dict
    if model_settings["share_embeddings"] and not joint:
        raise NmtError(
            f"{checkpoint}: share_all_embeddings is set but the two dictionaries differ; give the ones it was trained with"
        )
    src_rows, src_order = _vocabulary(src_dict, [src_spm, tgt_spm] if joint else [src_spm])
    tgt_rows, tgt_order = (src_rows, src_order) if joint else _vocabulary(tgt_dict, [tgt_spm])
    vocab = {
        "src": rebuild(src_spm, src_order, str(tokenizers[0])),
        "tgt": rebuild(tgt_spm, tgt_order, str(tokenizers[1] or tokenizers[0])),
    }
    state = _state_dict(weights, model_settings, (src_rows, tgt_rows), (len(src_dict), len(tgt_dict)), checkpoint)
    # fairseq-generate's defaults: beam 5, score / length^1 with the length counting </s>
    decode = {"beam": 5, "alpha": 1.0, "length_penalty": "average"}
    recipe = imported_recipe(
        output, checkpoint.stem, (src_lang, tgt_lang), model_settings, decode, vocab["src"] == vocab["tgt"],
        f"{checkpoint} (fairseq settings)",
    )  # fmt: skip
    return write_model_folder(output, state, recipe, vocab, {"format": "fairseq", "path": str(checkpoint)})


def _load(checkpoint: Path) -> dict[str, Any]:
    """The checkpoint's dict, read without running code from it: tensors, plain containers and the
    ``argparse.Namespace`` fairseq keeps its settings in."""
    if checkpoint.is_dir():
        raise NmtError(
            f"{checkpoint}: is a folder; give the checkpoint file in it (checkpoint_best.pt, checkpoint_last.pt ...)"
        )
    if not checkpoint.is_file():
        raise NmtError(f"{checkpoint}: not found; give a fairseq checkpoint (checkpoint_best.pt, checkpoint_last.pt ...)")
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            stored = torch.load(checkpoint, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle and zip errors of a damaged, hostile or other-format file
        raise NmtError(f"{checkpoint}: not a fairseq checkpoint nmt can read safely ({reason(err)})") from None
    if not isinstance(stored, dict) or not isinstance(stored.get("model"), dict):
        raise NmtError(f"{checkpoint}: holds no 'model' weights; is it a fairseq checkpoint?")
    return stored


def _settings(stored: dict[str, Any], checkpoint: Path) -> dict[str, Any]:
    """The model's settings: ``cfg.model`` (fairseq >= 0.10, a Namespace or a dict) or ``args`` (older)."""
    cfg = stored.get("cfg")
    found = cfg.get("model") if isinstance(cfg, dict) else None
    if found is None:
        found = stored.get("args")
    if isinstance(found, argparse.Namespace):
        found = vars(found)
    if not isinstance(found, dict):
        raise NmtError(f"{checkpoint}: holds no model settings (cfg.model or args); is it a fairseq checkpoint?")
    return found


def _task(stored: dict[str, Any]) -> dict[str, Any]:
    """The task's settings: ``cfg.task`` (fairseq >= 0.10) or ``args`` (older)."""
    cfg = stored.get("cfg")
    task = cfg.get("task") if isinstance(cfg, dict) else stored.get("args")
    return vars(task) if isinstance(task, argparse.Namespace) else task if isinstance(task, dict) else {}


def _data_folder(stored: dict[str, Any]) -> Path | None:
    """The data-bin the checkpoint was trained on, when it is on this machine (the first of a ``:`` list)."""
    data = _task(stored).get("data")
    folder = Path(str(data).split(":")[0]) if data else None
    return folder if folder is not None and folder.is_dir() else None


def _languages(stored: dict[str, Any], given: tuple[str | None, str | None], checkpoint: Path) -> tuple[str, str]:
    """The options', else the task's, else (as fairseq infers them) the pair in the data-bin's file names."""
    task = _task(stored)
    src, tgt = given[0] or task.get("source_lang"), given[1] or task.get("target_lang")
    folder = _data_folder(stored)
    if not (src and tgt) and folder is not None:
        for path in sorted(folder.glob("*.*-*.*.idx")):
            pair = path.name.split(".")[1].split("-")
            if len(pair) == 2 and path.name.split(".")[2] == pair[0]:
                src, tgt = src or pair[0], tgt or pair[1]
                break
    if not (isinstance(src, str) and src and isinstance(tgt, str) and tgt):
        raise NmtError(f"{checkpoint}: does not say its languages; give --src-lang and --tgt-lang")
    return src, tgt


def _dictionary_path(given: Path | None, stored: dict[str, Any], lang: str, checkpoint: Path) -> Path:
    """The dictionary given, else ``dict.LANG.txt`` in the data folder the checkpoint was trained on."""
    if given is not None:
        return given
    folder = _data_folder(stored)
    if folder is not None and (folder / f"dict.{lang}.txt").is_file():
        return folder / f"dict.{lang}.txt"
    raise NmtError(f"{checkpoint}: give --dict-src and --dict-tgt (the data-bin's dict.*.txt the model was trained with)")


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise NmtError(f"{path}: not found; give the SentencePiece model the data was encoded with (--spm)")
    return path.read_bytes()


def _read_dictionary(path: Path) -> list[str]:
    """fairseq's ``Dictionary.load``: its four specials, then one ``PIECE COUNT [#fairseq:overwrite]`` per line
    (an overwritten piece keeps the id it has)."""
    if not path.is_file():
        raise NmtError(f"{path}: not found; give the dict.LANG.txt of the model's data-bin")
    symbols = list(FAIRSEQ_SPECIALS)
    seen = set(symbols)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise NmtError(f"{path}: not UTF-8 text; give a fairseq dict.LANG.txt") from None
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.rstrip().rsplit(" ", 1)
        overwrite = len(parts) == 2 and parts[1] == "#fairseq:overwrite"
        if overwrite:
            parts = parts[0].rsplit(" ", 1)
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            raise NmtError(f"{path}, line {number}: expected 'PIECE COUNT'; is this a fairseq dictionary?")
        piece = parts[0]
        if piece in seen:
            if overwrite:
                continue
            raise NmtError(f"{path}, line {number}: {piece!r} is listed twice (mark a repeat '#fairseq:overwrite')")
        seen.add(piece)
        symbols.append(piece)
    return symbols


def _vocabulary(symbols: list[str], tokenizers: list[bytes]) -> tuple[torch.Tensor, list[str]]:
    """For each nmt id, the fairseq row it takes; and the pieces after nmt's specials, in order: the
    dictionary's, then those the SentencePiece models make that it lacks (fairseq reads them as ``<unk>``)."""
    from sentencepiece import SentencePieceProcessor

    order = [piece for piece in symbols[len(FAIRSEQ_SPECIALS) :]]
    known = set(order) | set(FAIRSEQ_SPECIALS)
    extra: list[str] = []
    for blob in tokenizers:
        sp = SentencePieceProcessor()
        try:
            sp.LoadFromSerializedProto(blob)
        except Exception:  # a file that is not a SentencePiece model: rebuild() names it
            continue
        for i in range(sp.GetPieceSize()):
            piece = sp.IdToPiece(i)
            if not (sp.IsControl(i) or sp.IsUnknown(i) or sp.IsUnused(i)) and piece not in known:
                known.add(piece)
                extra.append(piece)
    special_rows = {PAD_ID: FS_PAD, UNK_ID: FS_UNK, BOS_ID: FS_EOS, EOS_ID: FS_EOS}  # decoding starts from </s>
    rows = [special_rows[i] for i in sorted(SPECIALS)]
    rows += list(range(len(FAIRSEQ_SPECIALS), len(symbols))) + [FS_UNK] * len(extra)
    return torch.tensor(rows), order + extra


def _model_settings(found: dict[str, Any], weights: dict[str, torch.Tensor], checkpoint: Path) -> dict[str, Any]:
    """nmt's model options for fairseq's settings; what they cannot express is refused naming the setting."""
    arch = str(found.get("arch") or found.get("_name") or "")
    if not arch.startswith("transformer") or arch.startswith("transformer_lm"):
        raise NmtError(
            f"{checkpoint}: arch is {arch!r}; nmt import fairseq reads translation models of the transformer family"
        )
    for field, wanted in (
        ("no_scale_embedding", False),
        ("layernorm_embedding", False),
        ("adaptive_input", False),
        ("cross_self_attention", False),
        ("no_cross_attention", False),
        ("no_token_positional_embeddings", False),
        ("encoder_learned_pos", False),
        ("decoder_learned_pos", False),
        ("adaptive_softmax_cutoff", None),
        ("encoder_layers_to_keep", None),
        ("decoder_layers_to_keep", None),
        ("no_decoder_final_norm", False),
        ("offload_activations", False),
    ):
        if found.get(field, wanted) not in (wanted, "", 0) or (wanted is None and found.get(field)):
            raise NmtError(
                f"{checkpoint}: {field} is {found.get(field)!r}; nmt reads fairseq transformers with {field} {wanted}"
            )
    width = found.get("encoder_embed_dim")
    for a, b in (
        ("encoder_embed_dim", "decoder_embed_dim"),
        ("decoder_embed_dim", "decoder_input_dim"),
        ("decoder_embed_dim", "decoder_output_dim"),
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_embed_dim", "decoder_ffn_embed_dim"),
        ("encoder_normalize_before", "decoder_normalize_before"),
    ):
        if found.get(b, found.get(a)) != found.get(a):
            raise NmtError(
                f"{checkpoint}: {a} ({found.get(a)}) and {b} ({found.get(b)}) differ; nmt uses one value for both"
            )
    activation = ACTIVATIONS.get(str(found.get("activation_fn", "relu")))
    if activation is None:
        raise NmtError(f"{checkpoint}: activation_fn {found.get('activation_fn')!r} is not one nmt has (relu, gelu)")
    if not isinstance(width, int) or width % 2:
        raise NmtError(f"{checkpoint}: encoder_embed_dim must be an even number; it is {width!r}")
    shared = bool(found.get("share_all_embeddings", False))
    tied = bool(found.get("share_decoder_input_output_embed", False)) or shared
    if not tied and "decoder.output_projection.weight" not in weights:
        raise NmtError(f"{checkpoint}: the weights hold no decoder.output_projection.weight; is this a fairseq transformer?")
    return {
        "layers": _count(weights, "encoder.layers."),
        "decoder_layers": _count(weights, "decoder.layers."),
        "d_model": width,
        "n_heads": found.get("encoder_attention_heads"),
        "d_ff": found.get("encoder_ffn_embed_dim"),
        "dropout": float(found.get("dropout", 0.1)),
        "attention_dropout": float(found.get("attention_dropout", 0.0)),
        "activation_dropout": float(found.get("activation_dropout", found.get("relu_dropout", 0.0)) or 0.0),
        "activation": activation,
        "positions": "sinusoidal",
        "sinusoids": "fairseq",
        "norm": "pre" if found.get("encoder_normalize_before") else "post",
        "share_embeddings": shared,
        "tie_output": tied,
        "output_bias": True,
        "max_positions": int(min(found.get("max_source_positions", 1024), found.get("max_target_positions", 1024))),
    }


def _check_shapes(weights: dict[str, torch.Tensor], settings: dict[str, Any], checkpoint: Path) -> None:
    """Every layer weight's shape against the checkpoint's settings, before anything is built: settings that
    disagree with the weights are refused, naming both (the dictionaries' sizes are checked as they are read)."""
    check_layer_shapes(weights, settings, checkpoint, "its settings")
    d_model = settings["d_model"]
    for name, tensor in weights.items():
        if name.endswith("embed_tokens.weight") and tensor.dim() == 2 and tensor.size(1) != d_model:
            raise NmtError(
                f"{checkpoint}: {name} is {tensor.size(1)} wide, but encoder_embed_dim is {d_model}; "
                "the settings and the weights disagree"
            )


def _count(weights: dict[str, torch.Tensor], prefix: str) -> int:
    """The number of layers whose weights start with ``prefix`` (``encoder.layers.``)."""
    numbers = {int(name[len(prefix) :].split(".", 1)[0]) for name in weights if name.startswith(prefix)}
    return len(numbers)


def _state_dict(
    weights: dict[str, torch.Tensor],
    settings: dict[str, Any],
    rows: tuple[torch.Tensor, torch.Tensor],
    sizes: tuple[int, int],
    checkpoint: Path,
) -> dict[str, torch.Tensor]:
    """nmt's state dict from fairseq's weights (the module's text)."""
    found = {name: tensor.float() for name, tensor in weights.items()}
    used = {n for n in found if n.endswith(".version") or "embed_positions" in n}

    def take(name: str) -> torch.Tensor:
        if name not in found:
            raise NmtError(f"{checkpoint}: the weights have no {name}; is this a fairseq transformer?")
        used.add(name)
        return found[name]

    perm = sines_then_cosines(int(settings["d_model"]))
    src_rows, tgt_rows = rows
    state: dict[str, torch.Tensor] = {}
    for ours, theirs, wanted_rows, size in (
        ("src_embed.weight", "encoder.embed_tokens.weight", src_rows, sizes[0]),
        ("tgt_embed.weight", "decoder.embed_tokens.weight", tgt_rows, sizes[1]),
    ):
        table = take(theirs)
        if table.size(0) != size:
            raise NmtError(
                f"{checkpoint}: {theirs} has {table.size(0):,} rows but the dictionary {size:,} entries; "
                "give the dict.*.txt the model was trained with"
            )
        state[ours] = placed(table[wanted_rows], "in", perm)
    if settings["tie_output"]:
        used.add("decoder.output_projection.weight")  # fairseq stores the tied matrix under this name too
        state["output.weight"] = state["tgt_embed.weight"]
    else:
        state["output.weight"] = placed(take("decoder.output_projection.weight")[tgt_rows], "in", perm)
    # each fairseq row predicted once: nmt's <s> (fairseq's </s> again) and pieces fairseq reads as <unk> never
    bias = torch.full((len(tgt_rows),), NEVER)
    bias[_first_of_each(tgt_rows)] = 0.0
    state["output.bias"] = bias

    for ours, names, place in layer_map(settings["layers"], settings["decoder_layers"]):
        state[ours] = placed(torch.cat([take(name) for name in names]), place, perm)
    if settings["norm"] == "pre":
        for side in ("encoder", "decoder"):
            for part in ("weight", "bias"):
                state[f"{side}_norm.{part}"] = placed(take(f"{side}.layer_norm.{part}"), "out", perm)
    left = sorted(n for n in found if n not in used)
    if left:
        raise NmtError(
            f"{checkpoint}: the weights hold {left[0]} (and {len(left) - 1} more) that nmt's model has no place for"
        )
    return {name: tensor.contiguous() for name, tensor in state.items()}


def _first_of_each(rows: torch.Tensor) -> list[int]:
    """The positions in ``rows`` where a fairseq row appears for the first time, nmt's <s> aside: the
    ``</s>`` row is first taken by <s> (id 2) and then by </s> (id 3), which is the one to keep."""
    first: dict[int, int] = {}
    for position, row in enumerate(rows.tolist()):
        if position == BOS_ID:
            continue
        first.setdefault(row, position)
    return sorted(first.values())
