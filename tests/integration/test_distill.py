"""`nmt distill` end to end on a tiny model: the teacher (a local model; the same model behind `nmt serve`)
translates the training sources, the student trains on what it kept, and the report compares them."""

from __future__ import annotations

import json

import pytest
from conftest import nmt_in_process, start_server, tiny_recipe_yaml


@pytest.fixture(scope="module")
def distilled(overfit, tmp_path_factory):
    """A student distilled from the overfit model (a teacher that knows its 64 pairs by heart)."""
    run, _, _ = overfit
    folder = tmp_path_factory.mktemp("distill")
    corpus = run.parent / "c"  # the teacher's own training pairs (conftest's overfit fixture)
    recipe = folder / "student.yaml"
    recipe.write_text(tiny_recipe_yaml(corpus, folder / "data", folder / "run"))  # beam 4, as the server
    done = nmt_in_process("distill", recipe, "--teacher", run, "--set", "train.max_steps=2", "--threads", "1")
    assert done.returncode == 0, done.stderr
    return folder, done


def test_the_student_is_trained_on_the_teachers_translations_and_compared_with_it(distilled, overfit):
    folder, done = distilled
    work = folder / "run" / "distill"
    sources = (work / "source.en").read_text(encoding="utf-8").splitlines()
    taught = [row.split("\t", 1)[1] for row in (work / "teacher.tsv").read_text(encoding="utf-8").splitlines()]
    assert len(sources) == len(taught) == 64
    assert sum(t == ref for t, ref in zip(taught, overfit[2])) >= 32  # it knows them by heart
    kept = (work / "distilled.de").read_text(encoding="utf-8").splitlines()
    assert kept and set(kept) <= set(taught)
    assert (folder / "run" / "model.pt").exists() and (work / "student.yaml").exists()
    for words in ("distill 1/5", "teacher:", "distill 5/5", "teacher BLEU / chrF", "sentences/s, batch 1", "model file"):
        assert words in done.stderr, words
    report = json.loads((work / "report.json").read_text())
    if "student_int8" in report:  # where PyTorch has int8 products: the student as --dtype int8 deploys it
        assert report["student_int8"]["scores"].keys() == report["student"]["scores"].keys()
        assert report["student_int8"]["per_second_batch1"] > 0 and "student int8" in done.stderr
    again = nmt_in_process("distill", folder / "student.yaml", "--teacher", overfit[0], "--set", "train.max_steps=2",
                           "--no-report")  # fmt: skip
    assert again.returncode == 0 and "teacher:" not in again.stderr  # nothing asked of the teacher again


def test_the_same_model_behind_nmt_serve_teaches_the_same_translations(distilled, overfit, tmp_path):
    pytest.importorskip("fastapi", reason="nmt serve needs the serve extra")
    from nmt_cli.config import DistillConfig
    from nmt_cli.distill.corpus import teach
    from nmt_cli.distill.teachers import ServerTeacher

    folder, _ = distilled
    work = folder / "run" / "distill"
    process, url, _, _ = start_server(overfit[0], "--threads", "1")
    try:
        teacher = ServerTeacher(DistillConfig(endpoint=url, batch_lines=16), "en", "de")
        teach(teacher, work / "source.en", tmp_path / "served.tsv", DistillConfig(), lambda items, done, total: items)
    finally:
        process.terminate()
        process.wait(30)
    served = [row.split("\t", 1)[1] for row in (tmp_path / "served.tsv").read_text(encoding="utf-8").splitlines()]
    local = [row.split("\t", 1)[1] for row in (work / "teacher.tsv").read_text(encoding="utf-8").splitlines()]
    assert served == local


def test_an_ensemble_teacher_is_measured_as_its_models_together(overfit, tmp_path):
    """Two teachers (an ensemble): the report counts both models' files and weights."""
    from nmt_cli.decode.loading import load_model

    run = overfit[0]
    recipe = tmp_path / "student.yaml"
    recipe.write_text(tiny_recipe_yaml(run.parent / "c", tmp_path / "data", tmp_path / "run"))
    done = nmt_in_process(
        "distill", recipe, "--teacher", run, "--teacher", run, "--set", "train.max_steps=2", "--threads", "1"
    )
    assert done.returncode == 0, done.stderr
    teacher = json.loads((tmp_path / "run" / "distill" / "report.json").read_text())["teacher"]
    one = sum(p.numel() * p.element_size() for p in load_model(run).model.parameters())
    assert teacher["parameter_bytes"] == 2 * one and teacher["file_bytes"] == 2 * (run / "model.pt").stat().st_size
