"""``nmt import hf``: a MarianMT folder laid out as OPUS-MT publishes it (random weights, small SentencePiece
models trained here, no network) gives an nmt model whose per-token log-probabilities equal transformers' own
forward on the original folder, and whose greedy outputs equal transformers' generate."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import threading
from dataclasses import replace
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

transformers = pytest.importorskip("transformers", reason="transformers is in the dev extra")
SAMPLE = Path(str(resources.files("nmt_cli") / "sample" / "en-de"))


def lines(name: str, n: int) -> list[str]:
    return gzip.decompress((SAMPLE / name).read_bytes()).decode("utf-8").splitlines()[:n]


def marian_spm(text: list[str], size: int) -> bytes:
    """As OPUS-MT's: unigram, <unk> 0, </s> 1, no <s> or <pad> of its own."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_writer=model,
        vocab_size=size,
        model_type="unigram",
        unk_id=0,
        eos_id=1,
        bos_id=-1,
        pad_id=-1,
        minloglevel=2,
    )
    return model.getvalue()


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory) -> Path:
    """A MarianMT folder: config.json, model.safetensors, source.spm, target.spm, vocab.json, tokenizer_config.json."""
    return build_marian_folder(tmp_path_factory.mktemp("opus-mt-en-de"))


@pytest.fixture(scope="module")
def multilingual_folder(tmp_path_factory) -> Path:
    """As OPUS-MT's multilingual models are: target tags >>xxx<< in vocab.json, in neither SentencePiece model."""
    return build_marian_folder(tmp_path_factory.mktemp("opus-mt-en-mul"), (">>deu<<", ">>fra<<", ">>srp_Cyrl<<"), "mul")


def build_marian_folder(folder: Path, tags: tuple[str, ...] = (), target_lang: str = "de") -> Path:
    source, target = marian_spm(lines("train.en.gz", 3000), 300), marian_spm(lines("train.de.gz", 3000), 280)
    (folder / "source.spm").write_bytes(source)
    (folder / "target.spm").write_bytes(target)
    pieces: list[str] = []
    for blob in (source, target):
        sp = spm.SentencePieceProcessor()
        sp.LoadFromSerializedProto(blob)
        pieces += [sp.IdToPiece(i) for i in range(sp.GetPieceSize()) if not (sp.IsControl(i) or sp.IsUnknown(i))]
    ordered = ["</s>", "<unk>", *tags, *dict.fromkeys(pieces), "<pad>"]  # the converter's order: eos 0, unk 1, pad last
    vocab = {piece: i for i, piece in enumerate(ordered)}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"source_lang": "en", "target_lang": target_lang}))
    config = transformers.MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(vocab),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        activation_function="swish",
        max_position_embeddings=128,
        pad_token_id=len(vocab) - 1,
        eos_token_id=0,
        decoder_start_token_id=len(vocab) - 1,
        scale_embedding=True,
        dropout=0.1,
    )
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():  # non-trivial norms and logit bias, so that their mapping is checked too
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
        model.final_logits_bias.add_(torch.randn_like(model.final_logits_bias))
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def hf_side(folder: Path):
    tokenizer = transformers.MarianTokenizer(
        source_spm=str(folder / "source.spm"), target_spm=str(folder / "target.spm"), vocab=str(folder / "vocab.json")
    )
    return transformers.MarianMTModel.from_pretrained(folder).eval(), tokenizer


def test_imported_model_scores_and_translates_as_transformers(marian_folder, tmp_path):
    result = CliRunner().invoke(app, ["import", "hf", str(marian_folder), "-o", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    loaded = load_model(tmp_path / "run")
    theirs, tokenizer = hf_side(marian_folder)
    sources, targets = lines("test.en.gz", 8), lines("test.de.gz", 8)
    for source, target in zip(sources, targets):
        src_ids = tokenizer(source, return_tensors="pt").input_ids  # pieces + </s>
        tgt_ids = tokenizer(text_target=target, return_tensors="pt").input_ids[0]  # pieces + </s>
        start = torch.tensor([[theirs.config.decoder_start_token_id]])
        with torch.no_grad():
            logits = theirs(input_ids=src_ids, decoder_input_ids=torch.cat([start, tgt_ids[None, :-1]], 1)).logits[0]
        expected = torch.log_softmax(logits, -1)[torch.arange(len(tgt_ids)), tgt_ids]

        ours_src = loaded.src_vocab.encode(source, out_type=int) + [3]
        ours_tgt = loaded.tgt_vocab.encode(target, out_type=int)
        assert loaded.src_vocab.encode(source, out_type=str) == tokenizer.convert_ids_to_tokens(src_ids[0][:-1])
        with torch.no_grad():
            memory, mask = loaded.model.encode(torch.tensor([ours_src]))
            hidden = loaded.model.decode(torch.tensor([[2] + ours_tgt]), memory, mask)
            log_probs = torch.log_softmax(loaded.model.logits(hidden)[0], -1)
        ours = log_probs[torch.arange(len(ours_tgt) + 1), torch.tensor(ours_tgt + [3])]
        torch.testing.assert_close(ours, expected, atol=1e-4, rtol=1e-4)

    config = replace(loaded.recipe.decode, beam=1, max_len_a=0.0, max_len_b=11)
    greedy = [hyps[0][0] for hyps in Translator(loaded, config).translate(sources)]
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        # 12 steps, the last one forced to </s> (MarianConfig's forced_eos_token_id): 11 tokens at most, as ours
        generated = theirs.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=12)
    assert greedy == tokenizer.batch_decode(generated, skip_special_tokens=True)


def test_what_nmt_cannot_read_is_one_line(marian_folder, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("source.spm", "target.spm", "vocab.json", "model.safetensors", "tokenizer_config.json"):
        (broken / name).write_bytes((marian_folder / name).read_bytes())
    config = json.loads((marian_folder / "config.json").read_text())
    for change, words in (
        ({"scale_embedding": False}, "scale_embedding is False"),
        ({"activation_function": "tanh"}, "activation_function 'tanh'"),
        ({"model_type": "bart"}, "model_type is 'bart'"),
        # a config that disagrees with its weights or its vocabulary, before anything is built
        ({"d_model": 64}, "but d_model 64 and d_ff 64 give it"),
        ({"encoder_ffn_dim": 32, "decoder_ffn_dim": 32}, "but d_model 32 and d_ff 32 give it"),
        ({"vocab_size": config["vocab_size"] + 1}, "the config and the vocabulary disagree"),
        ({"encoder_attention_heads": 3, "decoder_attention_heads": 3}, "(3, config.json) do not divide d_model (32)"),
    ):
        (broken / "config.json").write_text(json.dumps({**config, **change}))
        result = CliRunner().invoke(app, ["import", "hf", str(broken), "-o", str(tmp_path / "out")])
        assert result.exit_code == 1 and words in result.output and "Traceback" not in result.output
    (broken / "config.json").unlink()
    missing = CliRunner().invoke(app, ["import", "hf", str(broken), "-o", str(tmp_path / "out")])
    assert missing.exit_code == 1 and "config.json: not found" in missing.output


def hf_log_probs(folder: Path, source: str, target: str) -> torch.Tensor:
    theirs, tokenizer = hf_side(folder)
    src_ids = tokenizer(source, return_tensors="pt").input_ids
    tgt_ids = tokenizer(text_target=target, return_tensors="pt").input_ids[0]
    start = torch.tensor([[theirs.config.decoder_start_token_id]])
    with torch.no_grad():
        logits = theirs(input_ids=src_ids, decoder_input_ids=torch.cat([start, tgt_ids[None, :-1]], 1)).logits[0]
    return torch.log_softmax(logits, -1)[torch.arange(len(tgt_ids)), tgt_ids]


def test_exported_folders_score_in_transformers_as_in_nmt(marian_folder, prepared, overfit, tmp_path):
    """`nmt export --for hf`: an imported model going back, and a model nmt trained (joint vocabulary)."""
    from nmt_cli.config import load_recipe
    from nmt_cli.train.loop import train

    imported = tmp_path / "run"
    assert CliRunner().invoke(app, ["import", "hf", str(marian_folder), "-o", str(imported)]).exit_code == 0
    recipe = load_recipe(prepared.run_dir.parent / "tiny.yaml", [f"train.dir={tmp_path / 'trained'}"])
    trained = train(recipe, log=lambda _m: None)  # the paper's post-norm model, 6 updates
    _, src, tgt = overfit
    for model, sources, targets in ((imported, lines("test.en.gz", 4), lines("test.de.gz", 4)), (trained, src[:4], tgt[:4])):
        folder = tmp_path / f"hf-{model.name}"
        result = CliRunner().invoke(app, ["export", str(model), str(folder), "--for", "hf"])
        assert result.exit_code == 0, result.output
        loaded = load_model(model)
        for source, target in zip(sources, targets):
            torch.testing.assert_close(
                hf_log_probs(folder, source, target), nmt_log_probs(loaded, source, target), atol=1e-4, rtol=1e-4
            )
    again = CliRunner().invoke(app, ["export", str(trained), str(tmp_path / f"hf-{trained.name}"), "--for", "hf"])
    assert again.exit_code == 1 and "not empty" in again.output
    pre_norm = CliRunner().invoke(app, ["export", str(overfit[0]), str(tmp_path / "hf-pre"), "--for", "hf"])
    assert pre_norm.exit_code == 1 and "model.norm is pre; MarianMT expresses model.norm: post" in pre_norm.output


def test_an_imported_model_fine_tunes_on_new_data(marian_folder, tmp_path):
    """RUN/recipe.yaml is ready to fine-tune: the data prepared with the imported SentencePiece models (one id
    space over two files, shared embeddings), training from the imported weights; a few updates on the bundled
    software messages lower the loss on their validation pairs."""
    from nmt_cli.config import load_recipe
    from nmt_cli.data.prepare import prepare
    from nmt_cli.decode.forced import forced_scores
    from nmt_cli.train.loop import train

    run = tmp_path / "run"
    assert CliRunner().invoke(app, ["import", "hf", str(marian_folder), "-o", str(run)]).exit_code == 0
    recipe = load_recipe(
        run / "recipe.yaml",
        [
            f"data.root={SAMPLE}",
            "data.train=[train]",
            "data.valid=[valid]",
            f"data.output={tmp_path / 'data'}",
            f"train.dir={tmp_path / 'tuned'}",
            "train.max_steps=8",
            "train.max_tokens=2048",
            "train.lr_schedule=constant",
            "train.lr=0.001",
            "train.validate_every=0",
            "train.valid_bleu=false",
            "train.calibrate=false",
            "train.save_every=0",
            "train.threads=1",
        ],
    )
    prepare(recipe, log=lambda _m: None, progress=False)
    messages: list[str] = []
    tuned = train(recipe, log=messages.append)
    assert any(m.startswith("fine-tuning from") for m in messages)
    pairs_src, pairs_tgt = lines("valid.en.gz", 64), lines("valid.de.gz", 64)

    def mean_nll(model_dir: Path) -> float:
        loaded = load_model(model_dir)
        pairs = list(zip(loaded.src_vocab.encode(pairs_src, out_type=int), loaded.tgt_vocab.encode(pairs_tgt, out_type=int)))
        scores = forced_scores(loaded.model, pairs, loaded.recipe.decode, torch.device("cpu"))
        return -sum(s.total for s in scores) / sum(s.tokens for s in scores)

    assert mean_nll(tuned) < mean_nll(run)


class FakeHub(http.server.BaseHTTPRequestHandler):
    """The two requests huggingface_hub makes per file: HEAD (commit, ETag, size) then GET, at
    /OWNER/NAME/resolve/REVISION/FILE; a missing file is a 404 marked EntryNotFound, as the hub says it."""

    root: Path
    seen: list[str]

    def log_message(self, *args) -> None:
        pass

    def do_HEAD(self) -> None:
        self.answer(with_body=False)

    def do_GET(self) -> None:
        self.answer(with_body=True)

    def answer(self, with_body: bool) -> None:
        parts = self.path.split("?")[0].strip("/").split("/")
        found = (
            self.root / parts[-1] if len(parts) == 5 and parts[:3] == ["Helsinki-NLP", "opus-mt-en-de", "resolve"] else None
        )
        self.seen.append(f"{self.command} {self.path}")
        if found is None or not found.is_file():
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound" if found is None else "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = found.read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
        self.send_header("X-Repo-Commit", "0" * 40)
        self.end_headers()
        if with_body:
            self.wfile.write(data)


def test_a_hub_name_is_fetched_only_by_that_command(marian_folder, tmp_path, monkeypatch, caplog):
    pytest.importorskip("huggingface_hub")
    handler = type("Hub", (FakeHub,), {"root": marian_folder, "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    try:
        result = CliRunner().invoke(app, ["import", "hf", "Helsinki-NLP/opus-mt-en-de", "-o", str(tmp_path / "run")])
        assert result.exit_code == 0, result.output
        fetched = {line.split()[1].rsplit("/", 1)[-1] for line in handler.seen if line.startswith("GET")}
        # what the import reads, the safetensors weights rather than both copies
        assert fetched == {
            "config.json",
            "vocab.json",
            "source.spm",
            "target.spm",
            "model.safetensors",
            "tokenizer_config.json",
        }
        loaded = load_model(tmp_path / "run")
        assert loaded.recipe.name == "opus-mt-en-de"
        local = CliRunner().invoke(app, ["import", "hf", str(marian_folder), "-o", str(tmp_path / "local")])
        assert local.exit_code == 0
        assert torch.equal(loaded.model.output.weight, load_model(tmp_path / "local").model.output.weight)

        missing = CliRunner().invoke(app, ["import", "hf", "Helsinki-NLP/opus-mt-xx-yy", "-o", str(tmp_path / "other")])
        assert missing.exit_code == 1 and "no such model on the hub" in missing.output and "Traceback" not in missing.output
    finally:
        server.shutdown()
        server.server_close()
    # no network and nothing in the cache: said in one line (the library reads HF_HUB_OFFLINE once, at import)
    monkeypatch.setattr(pytest.importorskip("huggingface_hub.constants"), "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    offline = CliRunner().invoke(app, ["import", "hf", "Helsinki-NLP/opus-mt-en-de", "-o", str(tmp_path / "third")])
    assert offline.exit_code == 1 and "could not fetch it" in offline.output and "Traceback" not in offline.output
    # a hub that cannot be reached (a closed port here, a closed network there): the cache is read, no retries
    monkeypatch.setattr(pytest.importorskip("huggingface_hub.constants"), "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    unreachable = CliRunner().invoke(app, ["import", "hf", "Helsinki-NLP/opus-mt-en-de", "-o", str(tmp_path / "4th")])
    assert unreachable.exit_code == 1 and "could not fetch it" in unreachable.output
    assert "Traceback" not in unreachable.output
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()]  # huggingface_hub logs its retries


def test_the_folder_export_writes_imports_again(marian_folder, tmp_path):
    """`nmt export --for hf` then `nmt import hf` of that folder: the same model, the same translations."""
    imported, exported, again = tmp_path / "run", tmp_path / "hf", tmp_path / "again"
    assert CliRunner().invoke(app, ["import", "hf", str(marian_folder), "-o", str(imported)]).exit_code == 0
    assert CliRunner().invoke(app, ["export", str(imported), str(exported), "--for", "hf"]).exit_code == 0
    result = CliRunner().invoke(app, ["import", "hf", str(exported), "-o", str(again)])
    assert result.exit_code == 0, result.output
    first, second = load_model(imported), load_model(again)
    for source in lines("test.en.gz", 3):
        torch.testing.assert_close(nmt_log_probs(first, source, "Ein Hund."), nmt_log_probs(second, source, "Ein Hund."))


def test_a_multilingual_model_translates_into_the_language_to_names(multilingual_folder, tmp_path):
    """`--to fr` (or fra, fre) starts every source with >>fra<< as MarianTokenizer does: the greedy outputs are
    transformers' for ">>fra<< " + the line; a model of several targets needs --to, and names them."""
    run = tmp_path / "run"
    assert CliRunner().invoke(app, ["import", "hf", str(multilingual_folder), "-o", str(run)]).exit_code == 0
    theirs, tokenizer = hf_side(multilingual_folder)
    sources = lines("test.en.gz", 6)
    batch = tokenizer([f">>fra<< {line}" for line in sources], return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = theirs.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=12)
    expected = tokenizer.batch_decode(generated, skip_special_tokens=True)
    text = "\n".join(sources) + "\n"
    for to in ("fr", "fra", "fre"):
        args = ["translate", "-m", str(run), "--to", to, "--beam", "1", "--max-len-a", "0", "--max-len-b", "11"]
        result = CliRunner().invoke(app, [*args, "--no-protect"], input=text)
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == expected
    serbian = CliRunner().invoke(app, ["translate", "-m", str(run), "--to", "sr"], input=text)
    assert serbian.exit_code == 0, serbian.output
    for args, words in (
        ([], "translates into 3 languages: give --to (one of deu, fra, srp_Cyrl)"),
        (["--to", "es"], "--to es: " + str(run) + " does not translate into it; its targets: deu, fra, srp_Cyrl"),
    ):
        refused = CliRunner().invoke(app, ["translate", "-m", str(run), *args], input=text)
        assert refused.exit_code == 1 and words in refused.output, refused.output


def test_the_server_serves_every_direction_of_a_multilingual_model(multilingual_folder, tmp_path):
    """One model, three directions, one decoding loop: /languages lists them and each request's target picks its
    tag; the answers are the command line's."""
    from fastapi.testclient import TestClient

    from nmt_cli.serve.api import create_app
    from nmt_cli.serve.metrics import ServerMetrics
    from nmt_cli.serve.requests import Limits
    from nmt_cli.serve.server import load_served_models

    run = tmp_path / "run"
    assert CliRunner().invoke(app, ["import", "hf", str(multilingual_folder), "-o", str(run)]).exit_code == 0
    metrics = ServerMetrics()
    models = load_served_models([run], torch.device("cpu"), torch.float32, metrics, None, 64, True)
    assert [(m.name, m.target) for m in models] == [("en-de", "de"), ("en-fr", "fr"), ("en-sr", "sr")]
    assert len({id(m.loop) for m in models}) == 1
    vocab = models[0].loaded.src_vocab
    assert [vocab.IdToPiece(m.source_prefix[0]) for m in models] == [">>deu<<", ">>fra<<", ">>srp_Cyrl<<"]
    sources = lines("test.en.gz", 3)
    with TestClient(create_app(models, Limits(), metrics)) as client:
        assert client.get("/languages").json() == [{"code": "en", "name": "English", "targets": ["de", "fr", "sr"]}]
        answers = {}
        for target in ("fr", "de"):  # greedy: the same search as the command line's, whatever the batch
            body = {"text": sources, "source": "en", "target": target, "beam": 1}
            answers[target] = [t["text"] for t in client.post("/translate", json=body).json()["translations"]]
            args = ["translate", "-m", str(run), "--to", target, "--beam", "1"]
            command = CliRunner().invoke(app, args, input="\n".join(sources) + "\n")
            assert answers[target] == command.stdout.splitlines()

        refused = client.post("/translate", json={"q": "Hello.", "source": "en", "target": "es"})
        assert refused.status_code == 400 and "en-de, en-fr, en-sr" in refused.json()["error"], refused.json()
