"""One model, many languages (``data.pairs``): prepared with one joint vocabulary and a tag per target language,
trained on every direction with temperature sampling, validated per direction, translated with ``--to``/``--from``,
served with every direction and pivots through English."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import nmt_in_process

from nmt_cli.config import load_recipe
from nmt_cli.data.batches import collate
from nmt_cli.data.prepare import load_meta, prepare
from nmt_cli.data.vocab import BOS_ID, PAD_ID, load_vocab
from nmt_cli.train.dataset import load_dataset

PAIRS = ["en-de", "de-en", "en-fr", "fr-en"]


def multilingual_yaml(root, out, run, extra: str = "") -> str:
    return f"""
data:
  pairs: [{", ".join(PAIRS)}]
  root: {root}
  train: [train]
  valid: [val]
  test: [test]
  output: {out}
  workers: 1
vocab:
  size: 700
model:
  layers: 1
  d_model: 32
  n_heads: 4
  d_ff: 64
  dropout: 0.0
  max_positions: 128
train:
  dir: {run}
  max_tokens: 1500
  max_steps: 4
  lr: 0.003
  warmup: 2
  lr_schedule: inverse_sqrt
  validate_every: 0
  valid_bleu: true
  save_every: 2
  log_every: 2
  threads: 1
  calibrate: false
{extra}decode:  # an untrained model writes to its length limit: a short one keeps the tests quick
  beam: 2
  max_len_b: 8
"""


@pytest.fixture(scope="module")
def multilingual(tmp_path_factory, m30k_slice):
    """A tiny four-direction model over the EN-DE-FR slice: (recipe path, run folder)."""
    folder = tmp_path_factory.mktemp("multilingual")
    path = folder / "multi.yaml"
    path.write_text(multilingual_yaml(m30k_slice, folder / "data", folder / "run"))
    prepare(load_recipe(path), log=lambda _m: None, progress=False)
    done = nmt_in_process("train", path)
    assert done.returncode == 0, done.stdout + done.stderr
    return path, folder / "run"


def test_prepare_writes_every_direction_with_one_joint_vocabulary_and_a_tag_per_target(multilingual, m30k_slice):
    recipe = load_recipe(multilingual[0])
    prepare(recipe, log=lambda _m: None, progress=False)  # up to date: every step is skipped
    meta = load_meta(recipe.data_dir)
    assert meta["pairs"] == PAIRS
    for pair in PAIRS:
        src, tgt = pair.split("-")
        for split in ("train", "valid", "test"):
            info = meta["splits"][f"{split}.{pair}"]
            assert info["direction"] == pair and info["sentences"] > 0
        # each direction's references are its own target side, as written
        refs = (recipe.data_dir / "text" / f"valid.{pair}.{tgt}").read_text(encoding="utf-8").splitlines()
        assert refs == [line.strip() for line in (m30k_slice / f"val.{tgt}").read_text(encoding="utf-8").splitlines()]
    vocab = load_vocab(recipe.data_dir / "spm.model")
    for lang in ("de", "en", "fr"):
        tag = f">>{lang}<<"
        assert vocab.PieceToId(tag) != vocab.unk_id()
        assert vocab.encode(f"{tag} A man.", out_type=str)[1] == tag  # one piece, never split
    assert meta["vocab"]["src_model"] == meta["vocab"]["tgt_model"] == "spm.model"
    report = nmt_in_process("prepare", multilingual[0])  # up to date: every step skipped, the report printed
    assert report.returncode == 0, report.stderr
    rows = {
        line.split()[1]: line.split() for line in report.stderr.splitlines() if line.split()[1:2] in ([p] for p in PAIRS)
    }
    assert sorted(rows) == sorted(PAIRS)  # each direction's training pairs and its share of an epoch


def test_training_reads_each_pair_with_its_target_tag_and_validates_per_direction(multilingual):
    recipe = load_recipe(multilingual[0])
    data = load_dataset(recipe)
    vocab = data.vocabs.src
    assert len(data.train) == sum(load_meta(recipe.data_dir)["splits"][f"train.{p}"]["sentences"] for p in PAIRS)
    assert [d.name for d in data.directions] == PAIRS
    for direction in data.directions:  # the first source token of every pair is its target language's tag
        target = direction.name.split("-")[1]
        first = data.valid.source(direction.rows[0])
        assert vocab.IdToPiece(int(first[0])) == f">>{target}<<"
        assert list(first[1:]) == list(data.valid.src[direction.rows[0]])
    records = [json.loads(line) for line in (multilingual[1] / "metrics.jsonl").read_text().splitlines()]
    validation = [r for r in records if "valid_loss" in r][-1]
    for pair in PAIRS:
        assert validation[f"valid_loss.{pair}"] > 0 and validation[f"valid_bleu.{pair}"] is not None
    bleus = [validation[f"valid_bleu.{pair}"] for pair in PAIRS]
    assert validation["valid_bleu"] == pytest.approx(sum(bleus) / len(bleus))


def test_the_decoder_reads_the_tag_after_bos_unscored_with_language_tag_target(multilingual):
    from nmt_cli.config import load_recipe as load

    recipe = load(multilingual[0], ["data.language_tag=target"])
    data = load_dataset(recipe)
    batch = collate(data.train, np.array([0, len(data.train) - 1]))
    tags = data.train.tags[[0, len(data.train) - 1]]
    assert batch.tgt_in[:, 0].tolist() == [BOS_ID, BOS_ID]
    assert batch.tgt_in[:, 1].tolist() == tags.tolist()  # read first, after BOS
    assert batch.tgt_out[:, 0].tolist() == [PAD_ID, PAD_ID]  # never scored
    assert batch.src[0, 0].item() == int(data.train.src[0][0])  # the source as written, no tag
    assert batch.target_tokens == sum(len(data.train.tgt[i]) + 1 for i in (0, len(data.train) - 1))


def test_translate_picks_the_direction_with_to_and_names_the_directions_it_knows(multilingual):
    run = multilingual[1]
    line = "A man is riding a bike.\n"
    for target in ("de", "fr"):
        done = nmt_in_process("translate", "-m", run, "--to", target, "--from", "en", "--beam", "1", stdin=line)
        assert done.returncode == 0, done.stdout + done.stderr
        assert ">>" not in done.stdout and len(done.stdout.splitlines()) == 1
    refused = nmt_in_process("translate", "-m", run, stdin=line)
    assert refused.returncode == 1 and "give --to" in refused.stderr and "en-de, de-en, en-fr, fr-en" in refused.stderr
    for args, words in ((["--to", "es"], "--to es"), (["--to", "de", "--from", "es"], "--from es")):
        refused = nmt_in_process("translate", "-m", run, *args, stdin=line)
        assert refused.returncode == 1 and words in refused.stderr and "its directions: en-de" in refused.stderr


def test_a_tag_read_by_the_decoder_is_forced_and_left_out_of_the_output(multilingual):
    """data.language_tag: target: every output starts with the tag (forced), which the translation leaves out."""
    from nmt_cli.config import DecodeConfig
    from nmt_cli.decode.loading import load_model
    from nmt_cli.decode.translator import Translator

    loaded = load_model(multilingual[1] / "model.pt")
    assert loaded.unwritten  # read from the source: never written
    loaded.unwritten = ()  # as a model trained with data.language_tag: target is loaded
    tag = loaded.src_vocab.PieceToId(">>fr<<")
    plain = Translator(loaded, DecodeConfig(beam=2, max_len_b=8))
    tagged = Translator(loaded, DecodeConfig(beam=2, max_len_b=8), target_tag=tag)
    source = loaded.src_vocab.encode("A man.", out_type=int)
    forced = plain.translate_encoded([source], prefixes=[[tag]])[0][0]
    left_out = tagged.translate_encoded([source])[0][0]
    assert forced.text.startswith(">>fr<<") and forced.text.removeprefix(">>fr<<").strip() == left_out.text
    assert ">>fr<<" not in left_out.text


def test_alignments_and_assessments_read_the_tag_the_decoder_read(multilingual, monkeypatch):
    """data.language_tag: target: the teacher-forced pass behind alignments and confidence reads the output after the
    tag, as the search wrote it, and leaves the tag's own row out (the model never saw an output without it)."""
    from nmt_cli.config import DecodeConfig
    from nmt_cli.decode.aligner import Aligner
    from nmt_cli.decode.attention_maps import cross_attention
    from nmt_cli.decode.loading import load_model
    from nmt_cli.decode.translator import Translator

    loaded = load_model(multilingual[1] / "model.pt")
    loaded.unwritten = ()  # as a model trained with data.language_tag: target is loaded
    tag = loaded.src_vocab.PieceToId(">>fr<<")
    source = loaded.src_vocab.encode("A man.", out_type=int)
    output = loaded.tgt_vocab.encode("Un homme.", out_type=int)
    read = cross_attention(loaded.model, [source], [output], 0, first=tag)[0]
    whole = cross_attention(loaded.model, [source], [[tag, *output]], 0)[0]
    untagged = cross_attention(loaded.model, [source], [output], 0)[0]
    assert read.shape == untagged.shape == (whole.size(0), len(output) + 1, len(source) + 1)
    assert torch.equal(read, whole[:, 1:])
    assert not torch.allclose(read, untagged)  # the tag changes what the decoder attends to
    seen = []
    monkeypatch.setattr(Aligner, "align", lambda self, *args: seen.append(args[-1]) or [["0-0"]])
    tagged = Translator(loaded, DecodeConfig(beam=2, max_len_b=8), target_tag=tag, alignments=True, assess=True)
    assert tagged.translate_encoded([source])[0][0].assessment is not None
    assert seen == [tag]


def test_the_server_serves_every_direction_and_pivots_through_english(multilingual):
    pytest.importorskip("fastapi", reason="nmt serve needs the serve extra")
    from fastapi.testclient import TestClient

    from nmt_cli.serve.api import create_app
    from nmt_cli.serve.metrics import ServerMetrics
    from nmt_cli.serve.requests import Limits
    from nmt_cli.serve.server import load_served_models

    run = multilingual[1]
    metrics = ServerMetrics()
    models = load_served_models([run], torch.device("cpu"), torch.float32, metrics, None, 64, True)
    assert sorted(m.name for m in models) == sorted([*PAIRS, "de-fr", "fr-de"])
    assert len({id(m.loop) for m in models}) == 1
    text = "Ein Mann fährt Fahrrad."
    with TestClient(create_app(models, Limits(), metrics)) as client:
        listed = {entry["code"]: entry["targets"] for entry in client.get("/languages").json()}
        assert listed == {"de": ["en", "fr"], "en": ["de", "fr"], "fr": ["de", "en"]}
        described = {m["name"]: m.get("pivot") for m in client.get("/models").json()}
        assert described["de-fr"] == "en" and described["de-en"] is None
        pivoted = client.post("/translate", json={"q": text, "source": "de", "target": "fr"}).json()
        assert pivoted["pivot"] == "en"
        # through English: the German->English answer, translated English->French
        english = client.post("/translate", json={"q": text, "source": "de", "target": "en"}).json()
        assert "pivot" not in english
        french = client.post("/translate", json={"q": english["translatedText"], "source": "en", "target": "fr"}).json()
        assert pivoted["translatedText"] == french["translatedText"]
        ours = client.post("/translate", json={"text": [text], "source": "de", "target": "fr", "beam": 1}).json()
        assert ours["model"] == "de-fr" and ours["pivot"] == "en"
        refused = client.post(
            "/translate", json={"q": text, "source": "de", "target": "fr", "glossary": [["Mann", "homme"]]}
        )
        assert refused.status_code == 400 and "goes through en" in refused.json()["error"]
        # confidence is for a trained direction, as nmt translate --confidence says
        refused = client.post("/translate", json={"q": text, "source": "de", "target": "fr", "confidence": True})
        assert refused.status_code == 400 and "goes through en" in refused.json()["error"], refused.json()
        sampled = client.post("/translate", json={"text": text, "source": "de", "target": "fr", "sampling": True})
        assert sampled.status_code == 200 and sampled.json()["pivot"] == "en"  # both steps on the model's one loop
        refused = client.post("/translate", json={"q": text, "source": "de", "target": "es"})
        assert refused.status_code == 400 and "de-fr" in refused.json()["error"]
        # a document through the pivot too: its sentence translated as the text request's
        pair = {"source": "de", "target": "fr"}
        upload = client.post("/translate_file", files={"file": ("page.md", f"{text}\n".encode())}, data=pair)
        assert upload.status_code == 200, upload.json()
        document = client.get(upload.json()["translatedFileUrl"].split("testserver", 1)[1]).text
        assert document.strip() == pivoted["translatedText"]


def test_the_hf_export_keeps_the_tags_and_imports_back_multilingual(multilingual, tmp_path):
    """`nmt export --for hf` writes the tags into vocab.json, where MarianTokenizer finds them (one id each, the
    model's own); `nmt import hf` of that folder is a multilingual model again, translating as the original."""
    transformers = pytest.importorskip("transformers")
    from nmt_cli.decode.loading import load_model

    run, folder, again = multilingual[1], tmp_path / "hf", tmp_path / "again"
    assert nmt_in_process("export", run, folder, "--for", "hf").returncode == 0
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    loaded = load_model(run / "model.pt")
    tokenizer = transformers.MarianTokenizer(
        source_spm=str(folder / "source.spm"), target_spm=str(folder / "target.spm"), vocab=str(folder / "vocab.json")
    )
    for lang in ("de", "en", "fr"):
        tag = loaded.src_vocab.PieceToId(f">>{lang}<<")
        assert vocab[f">>{lang}<<"] == tag
        assert tokenizer(f">>{lang}<< A man.").input_ids[0] == tag
    assert nmt_in_process("import", "hf", folder, "-o", again).returncode == 0
    line = "A man is riding a bike.\n"
    for target in ("de", "fr"):
        same = ["--to", target, "--beam", "1", "--max-len-a", "1", "--max-len-b", "8"]  # the import keeps no limits
        ours = nmt_in_process("translate", "-m", run, *same, stdin=line)
        back = nmt_in_process("translate", "-m", again, *same, stdin=line)
        assert back.returncode == 0 and back.stdout == ours.stdout, back.stderr


def test_forced_scores_read_the_direction_to_names(multilingual, tmp_path):
    """`nmt score --model` of a multilingual model: the source starts with the tag --to picks, as translation's does."""
    from nmt_cli.config import DecodeConfig
    from nmt_cli.decode.forced import forced_scores
    from nmt_cli.decode.loading import load_model

    run = multilingual[1]
    (tmp_path / "src").write_text("A man.\n", encoding="utf-8")
    (tmp_path / "hyp").write_text("Un homme.\n", encoding="utf-8")
    loaded = load_model(run / "model.pt")
    source, hypothesis = (loaded.src_vocab.encode(t, out_type=int) for t in ("A man.", "Un homme."))
    for target in ("fr", "de"):
        done = nmt_in_process("score", "--model", run, "--to", target, tmp_path / "src", tmp_path / "hyp")
        assert done.returncode == 0, done.stderr
        tag = loaded.src_vocab.PieceToId(f">>{target}<<")
        pairs = [([tag, *source], hypothesis)]
        expected = forced_scores(loaded.model, pairs, DecodeConfig(), torch.device("cpu"), unwritten=loaded.unwritten)[0]
        assert json.loads(done.stdout)["total"] == pytest.approx(expected.total, abs=1e-3)
    refused = nmt_in_process("score", "--model", run, tmp_path / "src", tmp_path / "hyp")
    assert refused.returncode == 1 and "give --to" in refused.stderr
    trained = nmt_in_process("score", "--model", run, "--from", "en", "--to", "fr", tmp_path / "src", tmp_path / "hyp")
    assert trained.returncode == 0 and "never trained" not in trained.stderr
    # a direction never trained is scored as zero-shot, and says so
    (tmp_path / "src").write_text("Ein Mann.\n", encoding="utf-8")
    zero = nmt_in_process("score", "--model", run, "--from", "de", "--to", "fr", tmp_path / "src", tmp_path / "hyp")
    assert zero.returncode == 0 and "de-fr was never trained" in zero.stderr and "zero-shot" in zero.stderr


def test_an_untrained_direction_goes_through_english_unless_zero_shot(multilingual, tmp_path):
    """--from de --to fr (never trained): German->English, then English->French, as two commands would; the
    word alignments are joined through the English words. --zero-shot reads the German with the >>fr<< tag."""
    run = multilingual[1]
    line = "Ein Mann fährt Fahrrad.\n"
    pivoted = nmt_in_process("translate", "-m", run, "--from", "de", "--to", "fr", stdin=line)
    assert pivoted.returncode == 0 and "through en" in pivoted.stderr, pivoted.stderr
    english = nmt_in_process("translate", "-m", run, "--from", "de", "--to", "en", stdin=line)
    french = nmt_in_process("translate", "-m", run, "--from", "en", "--to", "fr", stdin=english.stdout)
    assert pivoted.stdout == french.stdout
    direct = nmt_in_process("translate", "-m", run, "--from", "de", "--to", "fr", "--zero-shot", stdin=line)
    tagged = nmt_in_process("translate", "-m", run, "--to", "fr", stdin=line)  # no --from: the text as it comes
    assert direct.returncode == 0 and "through" not in direct.stderr and direct.stdout == tagged.stdout
    aligned = nmt_in_process(
        "translate", "-m", run, "--from", "de", "--to", "fr", "--alignments", "--format", "jsonl", stdin=line
    )
    record = json.loads(aligned.stdout)
    words_in, words_out = len(line.split()), len(record["translation"].split())
    for link in record["alignment"].split():
        i, j = map(int, link.split("-"))
        assert 0 <= i < words_in and 0 <= j < words_out
    (tmp_path / "terms.tsv").write_text("Mann\thomme\n", encoding="utf-8")
    refused = nmt_in_process(
        "translate", "-m", run, "--from", "de", "--to", "fr", "--glossary", tmp_path / "terms.tsv", stdin=line
    )
    assert refused.returncode == 1 and "goes through en" in refused.stderr


def test_the_ctranslate2_engine_gives_the_tag_where_training_put_it(multilingual, tmp_path):
    """`nmt export` of a multilingual model: the CTranslate2 engine puts the tag where training did, the source's
    first piece (data.language_tag: source) or the decoder's first, as a target prefix the output leaves out
    (target). That CTranslate2 then decodes as ours is the bilingual export tests' (test_export.py)."""
    pytest.importorskip("ctranslate2")
    from nmt_cli.config import DecodeConfig
    from nmt_cli.decode.ctranslate2_engine import CTranslate2Engine
    from nmt_cli.decode.targets import route

    run = multilingual[1]
    model = run / "model.pt"
    payload = torch.load(model, weights_only=True)
    payload["recipe"]["data"]["language_tag"] = "target"
    decoder_tagged = tmp_path / "target.pt"
    torch.save(payload, decoder_tagged)
    for side, weights in (("source", model), ("target", decoder_tagged)):
        folder = tmp_path / f"ct2-{side}"
        assert nmt_in_process("export", weights, folder).returncode == 0
        engine = CTranslate2Engine(folder, "cpu", 1, "default", 1)
        assert engine.data.language_tag == side
        way = route(engine.data, engine.src, "fr", str(folder))
        engine.source_prefix = [engine.src.IdToPiece(i) for i in way.source_prefix]
        engine.target_prefix = [engine.src.IdToPiece(way.target_tag)] if way.target_tag is not None else []
        calls: list = []
        engine.translator = _Spy(engine.translator, calls)
        found = engine.translate(["A man."], DecodeConfig(beam=1, max_len_b=5))
        (pieces, options), results = calls[0]
        if side == "source":
            assert pieces[0][0] == ">>fr<<" and options.get("target_prefix") is None
            assert found[0][0].text == engine.tgt.decode_pieces(results[0].hypotheses[0])
        else:
            assert pieces[0][0] != ">>fr<<" and options["target_prefix"] == [[">>fr<<"]]
            assert results[0].hypotheses[0][0] == ">>fr<<"  # CTranslate2 returns the prefix: left out
            assert found[0][0].text == engine.tgt.decode_pieces(results[0].hypotheses[0][1:])
        cli = nmt_in_process(
            "translate", "-m", folder, "--engine", "ctranslate2", "--to", "fr", "--beam", "1", stdin="A man.\n"
        )
        assert cli.returncode == 0, cli.stderr
        if side == "source":  # a tag read from the source is never written, even by this untrained model
            assert ">>" not in cli.stdout


class _Spy:
    """A CTranslate2 translator that records each translate_batch call's pieces, options and results."""

    def __init__(self, real, calls: list) -> None:
        self.real, self.calls = real, calls

    def translate_batch(self, pieces, **options):
        options = {**options, "asynchronous": False}
        results = self.real.translate_batch(pieces, **options)
        self.calls.append(((pieces, options), results))
        return [_Done(r) for r in results]


class _Done:
    def __init__(self, result) -> None:
        self._result = result

    def result(self):
        return self._result


def test_a_new_language_is_added_by_fine_tuning_with_the_parents_vocabulary(m30k_slice, tmp_path):
    """A model of EN<->DE grows into one of EN<->DE and EN<->FR: vocab.from its model appends the tag it lacks
    (>>fr<<; old ids unchanged) and train.init_from starts from its weights, the embeddings grown by one row."""
    parent_yaml = tmp_path / "parent.yaml"
    parent_yaml.write_text(
        multilingual_yaml(m30k_slice, tmp_path / "pdata", tmp_path / "parent").replace(
            "pairs: [en-de, de-en, en-fr, fr-en]", "pairs: [en-de, de-en]"
        )
    )
    prepare(load_recipe(parent_yaml), log=lambda _m: None, progress=False)
    assert nmt_in_process("train", parent_yaml).returncode == 0
    parent = load_vocab(tmp_path / "pdata" / "spm.model")
    assert parent.PieceToId(">>fr<<") == parent.unk_id()
    child_yaml = tmp_path / "child.yaml"
    text = multilingual_yaml(m30k_slice, tmp_path / "cdata", tmp_path / "child", f"  init_from: {tmp_path / 'parent'}\n")
    text = text.replace("vocab:\n  size: 700", f"vocab:\n  size: 700\n  from: {tmp_path / 'parent' / 'model.pt'}")
    child_yaml.write_text(text)
    prepare(load_recipe(child_yaml), log=lambda _m: None, progress=False)
    child = load_vocab(tmp_path / "cdata" / "spm.model")
    assert child.GetPieceSize() == parent.GetPieceSize() + 1 and child.PieceToId(">>fr<<") == parent.GetPieceSize()
    assert all(child.IdToPiece(i) == parent.IdToPiece(i) for i in range(parent.GetPieceSize()))
    done = nmt_in_process("train", child_yaml)
    assert done.returncode == 0, done.stderr
    out = nmt_in_process("translate", "-m", tmp_path / "child", "--to", "fr", stdin="A dog.\n")
    assert out.returncode == 0 and out.stdout.strip(), out.stderr


def test_a_document_is_translated_into_the_language_to_names(multilingual, tmp_path):
    """A gettext catalogue through a multilingual model: its Language header is --to's, for both routes."""
    catalogue = tmp_path / "messages.pot"
    catalogue.write_text(
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\nmsgid "A dog runs."\nmsgstr ""\n',
        encoding="utf-8",
    )
    for args, language in ((["--to", "fr"], "fr"), (["--from", "de", "--to", "fr"], "fr"), (["--to", "de"], "de")):
        out = tmp_path / f"{'-'.join(args)}.po"
        done = nmt_in_process("translate", "-m", multilingual[1], "-i", catalogue, "-o", out, *args)
        assert done.returncode == 0, done.stderr
        assert f'"Language: {language}\\n"' in out.read_text(encoding="utf-8")


def test_each_direction_reads_its_own_calibration(multilingual, tmp_path):
    """A multilingual model stores one confidence map per direction; translation and the server read the map of
    the direction asked for, and a direction without one is said to be uncalibrated."""
    import shutil

    from nmt_cli.decode.fit_confidence import store_in_place, write_calibrated
    from nmt_cli.decode.loading import load_model
    from nmt_cli.quality.confidence_map import Calibration
    from nmt_cli.quality.features import FEATURES

    n = len(FEATURES)  # a map as fitting writes one (its numbers do not matter here: that it is stored and read)
    calibration = Calibration(tuple(FEATURES), (0.0,) * n, (1.0,) * n, (0.5,) * n, 0.1, 50.0, 100)
    model = tmp_path / "model.pt"
    shutil.copy(multilingual[1] / "model.pt", model)
    store_in_place(model, {"en-de": calibration})
    write_calibrated(model, calibration, tmp_path / "more.pt", "fr-en")  # a second map kept beside the first
    loaded = load_model(tmp_path / "more.pt")
    assert sorted(loaded.calibrations) == ["en-de", "fr-en"] and loaded.calibration is None
    assert loaded.for_direction("en", "de").calibration is not None
    assert loaded.for_direction(None, "deu").calibration is not None  # the one direction into German
    assert loaded.for_direction(None, "en").calibration is not None  # the one direction into English calibrated
    assert loaded.for_direction("en", "fr").calibration is None
    for to, calibrated in (("de", True), ("fr", False)):
        done = nmt_in_process("translate", "-m", model, "--to", to, "--confidence", stdin="A dog.\n")
        assert done.returncode == 0 and ("has no calibration" not in done.stderr) == calibrated, done.stderr
    (tmp_path / "lines").write_text("A dog.\n", encoding="utf-8")
    lines = tmp_path / "lines"
    refused = nmt_in_process("calibrate", "-m", model, "--src", lines, "--ref", lines, "--to", "es")
    assert refused.returncode == 1 and "--to es" in refused.stderr


def test_the_curves_draw_each_directions_bleu_beside_the_mean(multilingual, tmp_path):
    from nmt_cli.curves import _with_directions, plot_runs, read_run

    run = read_run(multilingual[1], "multi")
    assert {f"valid_bleu.{pair}" for pair in PAIRS} <= set(run.series)
    drawn = _with_directions(run, [("valid_bleu", "", "-")])
    assert drawn[0] == ("valid_bleu", "mean", "-") and sorted(label for _, label, _ in drawn[1:]) == sorted(PAIRS)
    pytest.importorskip("matplotlib")
    plot_runs([run], tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_the_server_gives_a_decoder_read_tag_as_translate_does(multilingual, tmp_path):
    """data.language_tag: target: the server's continuous batches force the tag as each output's first token and
    leave it out, as nmt translate does; the answers are the command line's (greedy: whatever the batch)."""
    pytest.importorskip("fastapi", reason="nmt serve needs the serve extra")
    from fastapi.testclient import TestClient

    from nmt_cli.serve.api import create_app
    from nmt_cli.serve.metrics import ServerMetrics
    from nmt_cli.serve.requests import Limits
    from nmt_cli.serve.server import load_served_models

    payload = torch.load(multilingual[1] / "model.pt", weights_only=True)
    payload["recipe"]["data"]["language_tag"] = "target"
    model = tmp_path / "target.pt"
    torch.save(payload, model)
    metrics = ServerMetrics()
    models = load_served_models([model], torch.device("cpu"), torch.float32, metrics, None, 64, True)
    served = {m.name: m for m in models}
    assert served["en-fr"].target_tag is not None and served["en-fr"].source_prefix == ()
    sources = ["A man is riding a bike.", "Two dogs play.", "A woman sings on a stage in the evening."]
    with TestClient(create_app(models, Limits(), metrics)) as client:
        for target in ("fr", "de"):
            body = {"text": sources, "source": "en", "target": target, "beam": 1}
            answers = [t["text"] for t in client.post("/translate", json=body).json()["translations"]]
            command = nmt_in_process(
                "translate", "-m", model, "--to", target, "--beam", "1", stdin="\n".join(sources) + "\n"
            )
            assert answers == command.stdout.splitlines()


def test_a_translation_is_one_line_whatever_pieces_the_model_writes(multilingual):
    """Byte-fallback pieces can spell a line break or a tab; a translation is written as one line all the same
    (here: an untrained model's, which wrote "\\n" in the quickstart's test set and shifted every line after)."""
    from nmt_cli.config import DecodeConfig
    from nmt_cli.decode.loading import load_model
    from nmt_cli.decode.search import Hypothesis
    from nmt_cli.decode.translator import Translator

    loaded = load_model(multilingual[1] / "model.pt")
    vocab = loaded.tgt_vocab
    tokens = [
        *vocab.encode("A", out_type=int),
        vocab.PieceToId("<0x0A>"),
        vocab.PieceToId("<0x09>"),
        *vocab.encode("b", out_type=int),
    ]
    assert "\n" in vocab.decode(tokens)
    text = Translator(loaded, DecodeConfig())._detokenize(Hypothesis(tokens, 0.0), None, None).text
    assert text == "A   b"  # the line break and the tab a space each, then the word's own space


def test_a_multilingual_run_resumes_exactly_across_its_epochs_draws(m30k_slice, tmp_path):
    """Each epoch's draw of the directions is a function of the seed and the epoch: a run stopped and resumed ends
    with the weights of a run that went straight through (here across two epochs of a small training split)."""
    path = tmp_path / "small.yaml"
    path.write_text(
        multilingual_yaml(m30k_slice, tmp_path / "data", tmp_path / "unused").replace("train: [train]", "train: [val]")
    )
    prepare(load_recipe(path), log=lambda _m: None, progress=False)
    runs = {}
    for name, stops in (("straight", [8]), ("resumed", [3, 8])):
        for steps in stops:
            sets = [
                f"train.dir={tmp_path / name}",
                f"train.max_steps={steps}",
                "train.save_every=1",
                "train.valid_bleu=false",
            ]
            done = nmt_in_process("train", path, *[a for s in sets for a in ("--set", s)])
            assert done.returncode == 0, done.stderr
        runs[name] = torch.load(tmp_path / name / "checkpoints" / "step_00000008.pt", weights_only=True)
    assert runs["straight"]["train_state"]["epoch"] >= 1  # the run crossed an epoch: a second draw was made
    a, b = runs["straight"]["model"], runs["resumed"]["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_commands_hints_run_as_printed_on_a_multilingual_model(multilingual, tmp_path):
    """The "try it" line `nmt export` prints (and `nmt import`, `nmt train` and the quickstart print through the same
    printer) names the direction a multilingual model needs, and runs as printed."""
    import os
    import subprocess
    import sys

    pytest.importorskip("ctranslate2")
    run = multilingual[1]
    exported = nmt_in_process("export", run, tmp_path / "ct2")
    assert exported.returncode == 0, exported.stderr
    hint = exported.stderr.split("try it: ", 1)[1].strip()
    assert "--to" in hint and "--engine ctranslate2" in hint, hint
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    ran = subprocess.run(hint, shell=True, capture_output=True, text=True, env={**os.environ, "PATH": path})
    assert ran.returncode == 0 and ran.stdout.strip(), ran.stderr


def test_validation_scores_each_pair_once_and_decodes_a_shared_sample(multilingual, monkeypatch):
    """The loss over all directions is the loss over every pair (each scored once, not once more per direction);
    BLEU decodes at most train.valid_bleu_sentences, shared evenly by the directions, the same ones each time."""
    from nmt_cli.decode.loading import load_model
    from nmt_cli.decode.translator import Translator
    from nmt_cli.train.validate import bleu_sample, validate, validation_loss

    recipe = load_recipe(multilingual[0], ["train.valid_bleu_sentences=8"])
    data = load_dataset(recipe)
    model = load_model(multilingual[1] / "model.pt", torch.device("cpu")).model
    decoded: list[list[int]] = []
    original = Translator.translate_encoded

    def counting(self, sources, *args, **kwargs):
        decoded.extend(sources)
        return original(self, sources, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate_encoded", counting)
    result = validate(model, data.valid, data.valid_refs, data.vocabs, recipe, torch.device("cpu"), data.directions)
    whole, _ = validation_loss(model, data.valid, recipe, torch.device("cpu"))
    assert result.loss == pytest.approx(whole, rel=1e-5)
    assert len(decoded) == 8  # 2 per direction
    first = [direction.rows[i] for direction in data.directions for i in bleu_sample(len(direction.rows), 2)]
    assert decoded == [data.valid.source(row).tolist() for row in first]
    assert bleu_sample(10, 4) == [0, 2, 5, 7] and bleu_sample(3, 4) == bleu_sample(3, 0) == [0, 1, 2]


def test_from_auto_translates_each_line_from_its_language_and_keeps_the_rest(multilingual, m30k_slice):
    """A file mixing German, French, English and Spanish lines into English: each German and French line as
    ``--from de``/``--from fr`` translates it alone, English lines (the target) and the Spanish one (no model reads
    it) kept as written, each marked in jsonl; what needs one language pair refused in one line."""
    pytest.importorskip("py3langid", reason="--from auto needs the langid extra")
    run = multilingual[1]
    german = (m30k_slice / "val.de").read_text(encoding="utf-8").splitlines()[:3]
    french = (m30k_slice / "val.fr").read_text(encoding="utf-8").splitlines()[:3]
    english = (m30k_slice / "val.en").read_text(encoding="utf-8").splitlines()[:2]
    spanish = "¿Dónde está la biblioteca municipal? Me gustaría leer un libro esta tarde con mis amigos."
    german.append("Öffnen Sie die Datei /etc/hosts mit einem Editor und speichern Sie sie danach.")  # a span: may go twice
    mixed = [german[0], french[0], english[0], german[1], spanish, french[1], "", german[2], english[1], french[2]]
    mixed.append(german[3])
    done = nmt_in_process(
        "translate", "-m", run, "--from", "auto", "--to", "en", "--beam", "1", "--format", "jsonl",
        stdin="\n".join(mixed) + "\n",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["line"] for r in records] == list(range(len(mixed)))
    by_language = {}
    for language, lines in (("de", german), ("fr", french)):
        alone = nmt_in_process(
            "translate", "-m", run, "--from", language, "--to", "en", "--beam", "1", stdin="\n".join(lines) + "\n"
        )
        by_language.update(zip(lines, alone.stdout.splitlines()))
    for record, line in zip(records, mixed):
        if line in by_language:
            assert record["source_language"] == ("de" if line in german else "fr") and "kept" not in record
            assert record["translation"] == by_language[line]
        elif line:
            assert record["translation"] == line and record["kept"]
    assert records[4]["source_language"] == "es" and "does not read" in records[4]["kept"]
    assert records[2]["source_language"] == "en" and "target language" in records[2]["kept"]
    assert "--from auto: translated from de 4, fr 3" in " ".join(done.stderr.split())  # each line counted once
    assert "/etc/hosts" in records[-1]["translation"]
    for args in (["--prefix", str(m30k_slice / "val.de")], ["--zero-shot"], ["--glossary", str(m30k_slice / "val.de")]):
        refused = nmt_in_process("translate", "-m", run, "--from", "auto", "--to", "en", *args, stdin="Ein Hund.\n")
        assert refused.returncode == 1 and "--from auto:" in refused.stderr, refused.stderr
