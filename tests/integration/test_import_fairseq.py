"""``nmt import fairseq``: checkpoints that fairseq itself trained (a few updates on the bundled data, its own
``fairseq-preprocess`` dictionaries, a SentencePiece model trained here) give nmt models whose per-token
log-probabilities equal fairseq's forward and whose greedy outputs equal fairseq's SequenceGenerator.

fairseq pins old libraries, so it lives in its own environment: set ``NMT_FAIRSEQ_PYTHON`` to that python
(``../shared/peers/install_fairseq.sh VENV`` makes one; then VENV/bin/python). Without it those tests skip; the
refusals below need no fairseq.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
from importlib import resources
from pathlib import Path

import pytest
import sentencepiece as spm
import torch
from conftest import nmt_log_probs
from typer.testing import CliRunner

from nmt_cli.cli import app
from nmt_cli.decode.loading import load_model
from nmt_cli.decode.translator import Translator

SAMPLE = Path(str(resources.files("nmt_cli") / "sample" / "en-de"))
FAIRSEQ_PYTHON = os.environ.get("NMT_FAIRSEQ_PYTHON", "")
SIDE = Path(__file__).resolve().parents[1] / "peers" / "fairseq_side.py"
needs_fairseq = pytest.mark.skipif(
    not (FAIRSEQ_PYTHON and Path(FAIRSEQ_PYTHON).is_file()), reason="set NMT_FAIRSEQ_PYTHON to a python with fairseq"
)


def lines(name: str, n: int) -> list[str]:
    return gzip.decompress((SAMPLE / name).read_bytes()).decode("utf-8").splitlines()[:n]


def fairseq_tool(name: str) -> str:
    return str(Path(FAIRSEQ_PYTHON).parent / name)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A BPE SentencePiece model with byte fallback (as nmt's recipes train them) and the bundled pairs in pieces."""
    folder = tmp_path_factory.mktemp("fairseq-data")
    text = {lang: lines(f"train.{lang}.gz", 2000) for lang in ("en", "de")}
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text["en"] + text["de"]),
        model_prefix=str(folder / "spm"),
        vocab_size=400,
        model_type="bpe",
        byte_fallback=True,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(folder / "spm.model"))
    for split, rows in (("train", slice(0, 1800)), ("valid", slice(1800, 2000))):
        for lang in ("en", "de"):
            encoded = (" ".join(sp.encode(line, out_type=str)) for line in text[lang][rows])
            (folder / f"{split}.sp.{lang}").write_text("".join(e + "\n" for e in encoded), encoding="utf-8")
    return folder


def train_fairseq(corpus: Path, out: Path, preprocess: list[str], model: list[str]) -> Path:
    """fairseq-preprocess then fairseq-train for 3 updates: a checkpoint in fairseq's own layout."""
    env = {**os.environ, "OMP_NUM_THREADS": "2", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    run = {"check": True, "capture_output": True, "env": env}
    subprocess.run(
        [fairseq_tool("fairseq-preprocess"), "--source-lang", "en", "--target-lang", "de",
         "--trainpref", str(corpus / "train.sp"), "--validpref", str(corpus / "valid.sp"),
         "--destdir", str(out / "data-bin"), "--workers", "1", *preprocess],
        **run,
    )  # fmt: skip
    subprocess.run(
        [fairseq_tool("fairseq-train"), str(out / "data-bin"), "--cpu", "--seed", "3", "--arch", "transformer",
         "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
         "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
         "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
         "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "2048", "--max-update", "3",
         "--save-dir", str(out / "ckpt"), "--no-epoch-checkpoints", "--disable-validation", *model],
        **run,
    )  # fmt: skip
    return out / "ckpt" / "checkpoint_last.pt"


def fairseq_outputs(checkpoint: Path, data_bin: Path, spm_model: Path, pairs: list[list[str]], tmp: Path) -> list[dict]:
    (tmp / "pairs.json").write_text(json.dumps(pairs), encoding="utf-8")
    subprocess.run(
        [
            FAIRSEQ_PYTHON,
            str(SIDE),
            str(checkpoint),
            str(data_bin),
            str(spm_model),
            str(tmp / "pairs.json"),
            str(tmp / "out.json"),
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
    )
    return json.loads((tmp / "out.json").read_text(encoding="utf-8"))


@needs_fairseq
@pytest.mark.parametrize(
    "variant, preprocess, model",
    [
        ("post-norm, one dictionary, all embeddings shared", ["--joined-dictionary"], ["--share-all-embeddings"]),
        (
            "pre-norm, gelu, two dictionaries, tied decoder",
            [],
            [
                "--encoder-normalize-before",
                "--decoder-normalize-before",
                "--activation-fn",
                "gelu",
                "--share-decoder-input-output-embed",
            ],
        ),  # fmt: skip
    ],
)
def test_imported_checkpoint_scores_and_translates_as_fairseq(corpus, tmp_path, variant, preprocess, model):
    checkpoint = train_fairseq(corpus, tmp_path, preprocess, model)
    result = CliRunner().invoke(
        app, ["import", "fairseq", str(checkpoint), "--spm", str(corpus / "spm.model"), "-o", str(tmp_path / "run")]
    )
    assert result.exit_code == 0, result.output
    loaded = load_model(tmp_path / "run")
    sources, targets = lines("test.en.gz", 8), lines("test.de.gz", 8)
    theirs = fairseq_outputs(
        checkpoint, tmp_path / "data-bin", corpus / "spm.model", [list(p) for p in zip(sources, targets)], tmp_path
    )
    for source, target, expected in zip(sources, targets, theirs):
        torch.testing.assert_close(
            nmt_log_probs(loaded, source, target), torch.tensor(expected["log_probs"]), atol=1e-4, rtol=1e-4
        )
    from dataclasses import replace

    config = replace(loaded.recipe.decode, beam=1, max_len_a=0.0, max_len_b=10)
    greedy = [hyps[0][0] for hyps in Translator(loaded, config).translate(sources)]
    assert greedy == [expected["greedy"] for expected in theirs], variant


def fake_checkpoint(path: Path, **settings) -> Path:
    """A checkpoint in fairseq's layout (settings in cfg.model as an argparse.Namespace), random weights, no fairseq."""
    d, ff, vocab = 8, 16, 4 + 6
    model = {"encoder.embed_tokens.weight": torch.randn(vocab, d), "decoder.embed_tokens.weight": torch.randn(vocab, d)}
    model["decoder.output_projection.weight"] = model["decoder.embed_tokens.weight"]
    for side, parts in (("encoder", ("self_attn",)), ("decoder", ("self_attn", "encoder_attn"))):
        prefix = f"{side}.layers.0"
        for part in parts:
            for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                model[f"{prefix}.{part}.{proj}.weight"], model[f"{prefix}.{part}.{proj}.bias"] = (
                    torch.randn(d, d),
                    torch.randn(d),
                )
            model[f"{prefix}.{part}_layer_norm.weight"], model[f"{prefix}.{part}_layer_norm.bias"] = (
                torch.ones(d),
                torch.zeros(d),
            )
        model[f"{prefix}.fc1.weight"], model[f"{prefix}.fc1.bias"] = torch.randn(ff, d), torch.randn(ff)
        model[f"{prefix}.fc2.weight"], model[f"{prefix}.fc2.bias"] = torch.randn(d, ff), torch.randn(d)
        model[f"{prefix}.final_layer_norm.weight"], model[f"{prefix}.final_layer_norm.bias"] = torch.ones(d), torch.zeros(d)
    args = {
        "arch": "transformer", "encoder_embed_dim": d, "decoder_embed_dim": d, "encoder_ffn_embed_dim": ff,
        "decoder_ffn_embed_dim": ff, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
        "share_all_embeddings": True, "activation_fn": "relu", **settings,
    }  # fmt: skip
    task = {"source_lang": "en", "target_lang": "de", "data": str(path.parent)}
    torch.save({"args": None, "cfg": {"model": argparse.Namespace(**args), "task": task}, "model": model}, path)
    return path


@pytest.fixture
def tiny_spm(tmp_path) -> Path:
    text = ["a b c ab abc cab", "b a c ba cba"] * 50
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text), model_prefix=str(tmp_path / "tiny"), vocab_size=12, model_type="bpe",
        pad_id=0, unk_id=1, bos_id=2, eos_id=3, minloglevel=2,
    )  # fmt: skip
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "tiny.model"))
    pieces = [sp.id_to_piece(i) for i in range(4, sp.get_piece_size())][:6]
    for lang in ("en", "de"):
        (tmp_path / f"dict.{lang}.txt").write_text("".join(f"{p} 9\n" for p in pieces), encoding="utf-8")
    return tmp_path / "tiny.model"


def invoke(checkpoint: Path, spm_model: Path, out: Path, *extra: str):
    return CliRunner().invoke(app, ["import", "fairseq", str(checkpoint), "--spm", str(spm_model), "-o", str(out), *extra])


def test_a_checkpoint_in_fairseqs_layout_imports_and_translates(tmp_path, tiny_spm):
    result = invoke(fake_checkpoint(tmp_path / "checkpoint_last.pt"), tiny_spm, tmp_path / "run")
    assert result.exit_code == 0, result.output
    loaded = load_model(tmp_path / "run")
    assert loaded.recipe.data.src_lang == "en" and loaded.recipe.model.sinusoids == "fairseq"
    # the pieces the dictionary lacks keep ids of their own, never predicted
    missing = loaded.tgt_vocab.GetPieceSize() - 4 - 6
    assert missing > 0 and (loaded.model.output.bias[-missing:] < -1e3).all()
    assert loaded.model.output.bias[2] < -1e3 and loaded.model.output.bias[3] == 0  # <s> never, </s> kept
    assert len(list(Translator(loaded, loaded.recipe.decode).translate(["a b c"]))) == 1


@pytest.mark.parametrize(
    "settings, words",
    [
        ({"arch": "lstm"}, "arch is 'lstm'"),
        ({"activation_fn": "tanh"}, "activation_fn 'tanh'"),
        ({"layernorm_embedding": True}, "layernorm_embedding is True"),
        ({"encoder_learned_pos": True}, "encoder_learned_pos is True"),
        ({"decoder_ffn_embed_dim": 32}, "encoder_ffn_embed_dim (16) and decoder_ffn_embed_dim (32) differ"),
    ],
)
def test_what_nmt_cannot_express_is_one_line(tmp_path, tiny_spm, settings, words):
    result = invoke(fake_checkpoint(tmp_path / "checkpoint_last.pt", **settings), tiny_spm, tmp_path / "run")
    assert result.exit_code == 1 and words in result.output and "Traceback" not in result.output
    assert not (tmp_path / "run" / "model.pt").exists()


def test_bad_files_are_one_line_and_nothing_is_written(tmp_path, tiny_spm):
    checkpoint = fake_checkpoint(tmp_path / "checkpoint_last.pt")
    (tmp_path / "dict.de.txt").write_text("▁a 3\nno-count-here\n", encoding="utf-8")
    result = invoke(checkpoint, tiny_spm, tmp_path / "run")
    assert result.exit_code == 1 and "dict.de.txt, line 2: expected 'PIECE COUNT'" in result.output

    class Hostile:
        def __reduce__(self):
            return (os.system, ("echo owned > " + str(tmp_path / "owned"),))

    torch.save({"model": {}, "cfg": Hostile()}, tmp_path / "hostile.pt")
    result = invoke(tmp_path / "hostile.pt", tiny_spm, tmp_path / "run")
    assert result.exit_code == 1 and "not a fairseq checkpoint nmt can read safely" in result.output
    assert not (tmp_path / "owned").exists()

    result = invoke(tmp_path, tiny_spm, tmp_path / "run")
    assert result.exit_code == 1 and "is a folder; give the checkpoint file in it" in result.output

    result = invoke(tmp_path / "nowhere.pt", tiny_spm, tmp_path / "run")
    assert result.exit_code == 1 and "nowhere.pt: not found" in result.output
    assert not (tmp_path / "run").exists()
