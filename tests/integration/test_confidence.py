"""``nmt translate --confidence`` and ``nmt calibrate`` on the tiny model: records, refusals, a calibrated copy."""

from __future__ import annotations

import json
import shutil

from conftest import nmt_in_process

from nmt_cli.utils import torchfile


def test_confidence_records_and_text_columns(overfit):
    run, src, _ = overfit
    lines = "\n".join(src[:5]) + "\n"
    plain = nmt_in_process("translate", "-m", str(run), stdin=lines)
    records = nmt_in_process("translate", "-m", str(run), "--confidence", "--format", "jsonl", "--alignments", stdin=lines)
    assert records.returncode == 0, records.stderr
    parsed = [json.loads(line) for line in records.stdout.splitlines()]
    assert [r["translation"] for r in parsed] == plain.stdout.splitlines()  # the same translations
    for r in parsed:
        assert 0 <= r["confidence"] <= 1 and r["calibrated"] is False and isinstance(r["flags"], list)
        assert set(r["features"]) >= {"mean_logprob", "coverage_low", "attention_to_uniform"} and r["alignment"]
    assert "has no calibration" in records.stderr
    text = nmt_in_process("translate", "-m", str(run), "--confidence", stdin=lines)
    columns = [line.split("\t") for line in text.stdout.splitlines()]
    assert [c[0] for c in columns] == plain.stdout.splitlines() and all(c[1].startswith("~") for c in columns)
    nbest = nmt_in_process(
        "translate", "-m", str(run), "--confidence", "--format", "tsv", "--nbest", "2", "--beam", "2", stdin=lines
    )
    rows = [line.split("\t") for line in nbest.stdout.splitlines()]
    assert len(rows) == 10 and [r[1] for r in rows[:2]] == ["0", "1"]  # each hypothesis its own


def test_confidence_refuses_what_it_cannot_assess(overfit):
    run = str(overfit[0])
    for extra, words, code in ((["--sampling"], "--sampling", 1), (["--format", "xml"], "'text', 'jsonl', 'tsv'", 2)):
        result = nmt_in_process("translate", "-m", run, "--confidence", *extra, stdin="x\n")
        assert result.returncode == code and words in result.stderr and "Traceback" not in result.stderr


def test_calibrate_writes_a_calibrated_copy_beside_the_model(overfit, tmp_path):
    shared, src, tgt = overfit
    run = tmp_path / "run"  # a copy: the calibrated file beside the shared model would change it for other tests
    run.mkdir()
    shutil.copy2(shared / "model.pt", run / "model.pt")
    model_file = run / "model.pt"
    before = model_file.read_bytes()
    source, reference = tmp_path / "src.en", tmp_path / "ref.de"
    source.write_text("\n".join(src * 2) + "\n", encoding="utf-8")  # 128 pairs: enough to fit six weights
    # the model has memorised its pairs: half the references are another sentence's, so some translations are bad
    reference.write_text("\n".join(tgt + tgt[1:] + tgt[:1]) + "\n", encoding="utf-8")
    result = nmt_in_process("calibrate", "-m", str(run), "--src", str(source), "--ref", str(reference))
    assert result.returncode == 0, result.stderr
    calibrated = run / "model.calibrated.pt"
    assert calibrated.is_file() and model_file.read_bytes() == before  # next to the old one, never over it
    assert "calibrated on 128 pairs" in " ".join(result.stderr.split())
    records = nmt_in_process("translate", "-m", str(calibrated), "--confidence", "--format", "jsonl", stdin=src[0] + "\n")
    (record,) = [json.loads(line) for line in records.stdout.splitlines()]
    assert record["calibrated"] is True and 0 <= record["confidence"] <= 1 and "has no calibration" not in records.stderr
    payload = torchfile.load(calibrated)
    assert set(payload["calibration"]["flag_maps"]) == {"hallucination", "omission"}
    payload["calibration"]["flag_maps"]["hallucination"]["bias"] = 40.0  # a map that flags everything
    kind = payload.pop("kind")
    torchfile.save(tmp_path / "flags-all.pt", {k: v for k, v in payload.items() if k != "format_version"}, kind)
    flagged = nmt_in_process(
        "translate", "-m", str(tmp_path / "flags-all.pt"), "--confidence", "--format", "jsonl", stdin=src[0] + "\n"
    )
    assert "hallucination" in json.loads(flagged.stdout)["flags"]  # learnt flags reach the output

    one_src, one_ref = tmp_path / "one.en", tmp_path / "one.de"  # ten copies of one pair: said before the fit
    one_src.write_text((src[0] + "\n") * 10, encoding="utf-8")
    one_ref.write_text((tgt[0] + "\n") * 10, encoding="utf-8")
    repeated = nmt_in_process("calibrate", "-m", str(run), "--src", str(one_src), "--ref", str(one_ref), "--threads", "1",
                   "-o", str(tmp_path / "one.pt"))  # fmt: skip
    assert "9 of the 10 pairs repeat another pair" in " ".join((repeated.stdout + repeated.stderr).split())

    short = tmp_path / "short.de"
    short.write_text("\n".join(tgt[:10]) + "\n", encoding="utf-8")
    mismatched = nmt_in_process("calibrate", "-m", str(run), "--src", str(source), "--ref", str(short))
    assert mismatched.returncode == 1 and "one reference per source line" in mismatched.stderr
    few = nmt_in_process("calibrate", "-m", str(run), "--src", str(short), "--ref", str(short))
    assert few.returncode == 1 and "at least 100" in few.stderr
    all_good = nmt_in_process("calibrate", "-m", str(run), "--src", str(source), "--ref", str(source), "--threshold", "0")
    assert all_good.returncode == 1 and "needs good and bad ones" in all_good.stderr


def test_training_ends_by_calibrating_on_the_validation_set(overfit, tmp_path):
    from dataclasses import replace

    from nmt_cli.config import recipe_from_dict
    from nmt_cli.data.prepare import text_paths
    from nmt_cli.train.fit_at_end import calibrate_model_file

    run, src, tgt = overfit
    original = torchfile.load(run / "model.pt")
    recipe = recipe_from_dict(original["recipe"])
    recipe = replace(recipe, data=replace(recipe.data, output=str(tmp_path / "data")))
    valid_src, valid_ref = text_paths(recipe.data_dir, "valid", recipe)
    valid_src.parent.mkdir(parents=True)
    model_file = tmp_path / "model.pt"
    model_file.write_bytes((run / "model.pt").read_bytes())
    logged: list[str] = []

    valid_src.write_text("\n".join(src[:50]) + "\n", encoding="utf-8")
    valid_ref.write_text("\n".join(tgt[:50]) + "\n", encoding="utf-8")
    calibrate_model_file(model_file, recipe, torch_cpu(), logged.append)
    assert "fewer than the 100" in logged[-1] and "nmt calibrate -m" in logged[-1]
    assert "calibration" not in torchfile.load(model_file)  # a small validation set: no calibration, said so

    valid_src.write_text("\n".join(src * 2) + "\n", encoding="utf-8")
    valid_ref.write_text("\n".join(tgt + tgt[1:] + tgt[:1]) + "\n", encoding="utf-8")  # half of them wrong
    calibrate_model_file(model_file, recipe, torch_cpu(), logged.append)
    assert "calibrated on 128 validation pairs" in logged[-1]
    stored = torchfile.load(model_file)
    assert stored["calibration"]["threshold"] == recipe.train.calibrate_chrf and stored["step"] == original["step"]
    records = nmt_in_process("translate", "-m", str(model_file), "--confidence", "--format", "jsonl", stdin=src[0] + "\n")
    assert json.loads(records.stdout)["calibrated"] is True


def torch_cpu():
    import torch

    return torch.device("cpu")
