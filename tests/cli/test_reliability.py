"""Nothing a user has trained is lost or silently wrong.

Each test plays a careless or hostile user on real Multi30k slices and asserts three things: the
one-line message (naming the file or key and the fix), the exit code, and that every file that
existed before is byte-identical after.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import nmt_in_process, read_lines, tiny_recipe_yaml, write_slice
from typer.testing import CliRunner

from nmt_cli.cli import app
from nmt_cli.train import checkpoint
from nmt_cli.utils.files import atomic_path

runner = CliRunner()


def snapshot(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder``, by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def nmt(*args: str) -> subprocess.CompletedProcess:
    """``nmt ARGS`` run in this process: these tests check what a command refuses and writes, not how a
    process ends, and starting an interpreter and torch for each would take most of their time."""
    return nmt_in_process(*args)


def one_line_error(result) -> str:
    """The error line of a failed command: exactly one line, starting with 'error:'."""
    text = result.stderr if isinstance(result, subprocess.CompletedProcess) else result.output
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in text, text
    return " ".join(text[text.index("error:") :].split())  # rich wraps long lines; join them back


@pytest.fixture()
def recipe_file(prepared, tmp_path) -> Path:
    """The prepared tiny recipe, training into a fresh run folder under tmp_path."""
    text = Path(prepared.run_dir.parent / "tiny.yaml").read_text()
    path = tmp_path / "r.yaml"
    path.write_text(text.replace(f"dir: {prepared.run_dir}", f"dir: {tmp_path / 'run'}"))
    return path


def train_args(recipe: Path, *sets: str) -> list[str]:
    return ["train", str(recipe), "--set", "train.keep_last=0", *[x for s in sets for x in ("--set", s)]]


# --------------------------------------------------------------------------- one owner for the run folder


def test_second_train_on_a_busy_folder_is_refused_and_the_first_is_undisturbed(recipe_file, tmp_path):
    run = tmp_path / "run"
    first = subprocess.Popen(
        [sys.executable, "-m", "nmt_cli", *train_args(recipe_file, "train.max_steps=12")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not checkpoint.step_checkpoints(run) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    first.send_signal(signal.SIGSTOP)  # hold the first run mid-training, its lock taken
    try:
        before = snapshot(run)
        second = nmt(*train_args(recipe_file, "train.max_steps=12", "train.lr=0.01"))
        assert snapshot(run) == before
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert second.returncode == 1
    assert f"in use by another `nmt train` (PID {first.pid}" in one_line_error(second)
    assert not (run / ".lock").exists()

    lone = tmp_path / "lone"
    assert nmt(*train_args(recipe_file, "train.max_steps=12", f"train.dir={lone}")).returncode == 0
    ours, alone = checkpoint.load(run / "model.pt")["model"], checkpoint.load(lone / "model.pt")["model"]
    assert all(torch.equal(ours[k], alone[k]) for k in ours)


def test_lock_of_a_dead_process_is_taken_over(recipe_file, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (run / ".lock").write_text(f"{dead.pid} {socket.gethostname()}\n")
    result = nmt(*train_args(recipe_file, "train.max_steps=3"))
    assert result.returncode == 0, result.stderr
    assert f"taking over the lock of a run that is no longer running (PID {dead.pid}" in " ".join(result.stderr.split())
    assert (run / "model.pt").is_file() and not (run / ".lock").exists()


def test_lock_of_a_live_process_refuses(recipe_file, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").write_text(f"{os.getpid()} {socket.gethostname()}\n")
    before = snapshot(run)
    result = nmt(*train_args(recipe_file, "train.max_steps=3"))
    assert result.returncode == 1 and f"(PID {os.getpid()} on {socket.gethostname()})" in one_line_error(result)
    assert snapshot(run) == before


# --------------------------------------------------------------------------- resume checks before any write


@pytest.fixture(scope="module")
def trained_short_run(prepared, tmp_path_factory) -> Path:
    """A run trained once for 6 updates by ``nmt train``, checkpoints at 3 and 6 (all kept)."""
    folder = tmp_path_factory.mktemp("short_run")
    text = Path(prepared.run_dir.parent / "tiny.yaml").read_text()
    recipe = folder / "r.yaml"
    recipe.write_text(text.replace(f"dir: {prepared.run_dir}", f"dir: {folder / 'run'}"))
    result = nmt(*train_args(recipe, "train.max_steps=6"))
    assert result.returncode == 0, result.stderr
    return folder / "run"


@pytest.fixture()
def short_run(trained_short_run, recipe_file, tmp_path) -> Path:
    """Each test's own copy of the short run, in the folder ``recipe_file`` trains into (a run resumes from a
    copied folder as from its own)."""
    shutil.copytree(trained_short_run, tmp_path / "run")
    return tmp_path / "run"


def test_resume_with_another_model_section_is_refused_before_writing(short_run, recipe_file):
    before = snapshot(short_run)
    result = nmt(*train_args(recipe_file, "train.max_steps=9", "model.d_model=64"))
    message = one_line_error(result)
    assert result.returncode == 1
    assert "model.d_model is 32 in the run but 64 in the recipe" in message and "--set model.d_model=32" in message
    assert snapshot(short_run) == before


def test_resume_with_another_vocabulary_of_the_same_size_is_refused_before_writing(short_run, recipe_file, tmp_path):
    other_data = tmp_path / "other_data"
    result = nmt("prepare", str(recipe_file), "--set", f"data.output={other_data}", "--set", "vocab.type=unigram")
    assert result.returncode == 0, result.stderr
    before = snapshot(short_run)
    result = nmt(*train_args(recipe_file, "train.max_steps=9", f"data.output={other_data}"))
    message = one_line_error(result)
    assert result.returncode == 1
    assert "trained with another src vocabulary (SentencePiece model sha256" in message
    assert str(other_data) in message
    assert snapshot(short_run) == before


def test_resume_against_changed_prepared_data_is_refused(short_run, recipe_file, prepared, tmp_path):
    import json

    changed = tmp_path / "changed_data"
    shutil.copytree(prepared.data_dir, changed)
    meta = json.loads((changed / "meta.json").read_text())
    meta["splits"]["train"]["sentences"] -= 1  # as if re-prepared from a corpus with one pair less
    (changed / "meta.json").write_text(json.dumps(meta))
    before = snapshot(short_run)
    result = nmt(*train_args(recipe_file, "train.max_steps=9", f"data.output={changed}"))
    message = one_line_error(result)
    n = meta["splits"]["train"]["sentences"]
    assert result.returncode == 1 and f"train_pairs: {n + 1} then, {n} in {changed}" in message
    assert snapshot(short_run) == before


def test_a_finished_run_does_nothing(short_run, recipe_file):
    before = snapshot(short_run)
    result = nmt(*train_args(recipe_file, "train.max_steps=6"))
    assert result.returncode == 0
    assert "already finished (train.max_steps 6 reached at update 6); nothing to do" in " ".join(result.stderr.split())
    assert snapshot(short_run) == before


def test_corrupt_newest_checkpoint_names_the_previous_good_one(short_run, recipe_file):
    newest = short_run / "checkpoints" / "step_00000006.pt"
    newest.write_bytes(newest.read_bytes()[:4000])
    before = snapshot(short_run)
    result = nmt(*train_args(recipe_file, "train.max_steps=9"))
    message = one_line_error(result)
    assert result.returncode == 1
    assert f"{newest}: truncated or corrupt checkpoint" in message and "--resume-from 3" in message
    assert snapshot(short_run) == before
    resumed = nmt(*train_args(recipe_file, "train.max_steps=9"), "--resume-from", "3")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stderr and "step_00000003.pt (update 3" in " ".join(resumed.stderr.split())
    assert checkpoint.load(short_run / "checkpoints" / "step_00000009.pt")["train_state"]["step"] == 9


def test_a_weights_only_file_is_never_resumed_from(short_run, recipe_file):
    before = snapshot(short_run)
    result = nmt(*train_args(recipe_file, "train.max_steps=9"), "--resume-from", str(short_run / "model.pt"))
    assert result.returncode == 1 and "holds model weights only" in one_line_error(result)
    missing = nmt(*train_args(recipe_file, "train.max_steps=9"), "--from", "5")  # the old spelling still works
    assert missing.returncode == 1 and "kept steps: 3, 6" in one_line_error(missing)
    assert "nmt train --from is deprecated; use --resume-from" in missing.stderr
    assert snapshot(short_run) == before


def test_stale_temporary_files_of_dead_processes_are_removed(short_run, recipe_file):
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = [short_run / f".model.pt.tmp{dead.pid}", short_run / "checkpoints" / f".step_00000009.pt.tmp{dead.pid}"]
    living = subprocess.Popen(["sleep", "300"])  # another process still writing: its file is left alone
    alive = short_run / f".best.pt.tmp{living.pid}"
    for path in (*stale, alive):
        path.write_bytes(b"partial")
    try:
        result = nmt(*train_args(recipe_file, "train.max_steps=9"))
    finally:
        living.kill()
        living.wait()
    assert result.returncode == 0, result.stderr
    assert not any(p.exists() for p in stale) and alive.exists()
    assert str(stale[0]) in " ".join(result.stderr.split())


def test_atomic_path_leaves_nothing_when_the_write_fails(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.txt"]


# --------------------------------------------------------------------------- export and average never destroy


def test_export_force_never_replaces_a_run_or_its_parent(short_run, tmp_path):
    before = snapshot(tmp_path)
    for target in (short_run, tmp_path):
        result = runner.invoke(app, ["export", str(short_run), str(target), "--force"])
        assert result.exit_code == 1
        message = one_line_error(result)
        assert "holds the model being exported" in message or "not an earlier `nmt export` folder" in message
    unrelated = tmp_path / "notes"
    unrelated.mkdir()
    (unrelated / "a.txt").write_text("mine")
    result = runner.invoke(app, ["export", str(short_run), str(unrelated), "--force"])
    assert result.exit_code == 1 and "--force replaces only those" in one_line_error(result)
    assert snapshot(tmp_path) == {**before, "notes/a.txt": hashlib.sha256(b"mine").hexdigest()}


def test_average_never_writes_into_checkpoints_or_over_its_inputs(short_run):
    before = snapshot(short_run)
    inside = runner.invoke(app, ["average", str(short_run), "--last", "2", "-o", str(short_run / "checkpoints" / "a.pt")])
    assert inside.exit_code == 1 and "inside the training checkpoints" in one_line_error(inside)
    newest = short_run / "checkpoints" / "step_00000006.pt"
    over = runner.invoke(app, ["average", str(short_run), "--last", "2", "-o", str(newest)])
    assert over.exit_code == 1 and "one of the checkpoints being averaged" in one_line_error(over)
    assert snapshot(short_run) == before


def test_average_output_carries_the_newest_step_and_weights_kind(short_run, tmp_path):
    out = tmp_path / "avg.pt"
    paths = [short_run / "checkpoints" / "step_00000006.pt", short_run / "checkpoints" / "step_00000003.pt"]
    checkpoint.average_checkpoints(paths, out)
    payload = checkpoint.load(out)
    assert payload["step"] == 6 and payload["kind"] == "weights" and "optimizer" not in payload
    first, second = (checkpoint.load(p)["model"] for p in paths)
    key = next(k for k, v in first.items() if v.is_floating_point() and not torch.equal(v, second[k]))
    expected = ((first[key].double() + second[key].double()) / 2).float()
    assert torch.equal(payload["model"][key], expected)


def test_translate_never_writes_over_its_input(short_run, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("A man.\n")
    result = runner.invoke(app, ["translate", "-m", str(short_run), "-i", str(source), "-o", str(source)])
    assert result.exit_code == 1 and "is also what this command reads" in one_line_error(result)
    assert source.read_text() == "A man.\n"


def test_crafted_checkpoint_recipe_is_checked_before_allocation(short_run, tmp_path):
    payload = checkpoint.load(short_run / "model.pt")
    crafted = tmp_path / "crafted.pt"
    payload["recipe"]["model"]["d_model"] = 2**40  # out of model.d_model's range
    torch.save(payload, crafted)
    result = runner.invoke(app, ["translate", "-m", str(crafted)], input="A man.\n")
    assert result.exit_code == 1 and "model.d_model" in one_line_error(result)
    payload["recipe"]["model"].update(d_model=32768, d_ff=1 << 20, layers=1000)  # in range, ~10^14 parameters
    torch.save(payload, crafted)
    result = runner.invoke(app, ["translate", "-m", str(crafted)], input="A man.\n")
    assert result.exit_code == 1 and "weights do not fit the stored model settings" in one_line_error(result)


# --------------------------------------------------------------------------- validation through the Translator


def test_validation_truncates_long_sources_like_translate(recipe_file, tmp_path):
    run = tmp_path / "run"
    result = nmt(*train_args(recipe_file, "train.max_steps=3", "train.validate_every=3", "model.max_positions=12"))
    assert result.returncode == 0, result.stderr
    assert "longer than model.max_positions (12) and were truncated for validation BLEU" in " ".join(result.stderr.split())
    import json

    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("valid_bleu") is not None for r in records)


# --------------------------------------------------------------------------- text in


def _prepare_recipe(tmp_path: Path, corpus: Path) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(tiny_recipe_yaml(corpus, tmp_path / "data", tmp_path / "run"))
    return path


def test_empty_validation_split_is_refused_at_prepare(m30k_slice, tmp_path):
    corpus = tmp_path / "c"
    shutil.copytree(m30k_slice, corpus)
    for lang in ("en", "de"):
        (corpus / f"val.{lang}").write_text("")
    result = runner.invoke(app, ["prepare", str(_prepare_recipe(tmp_path, corpus))])
    message = one_line_error(result)
    assert result.exit_code == 1
    assert f"{corpus / 'val.en'}" in message and "the valid split is empty (0 lines read, 0 kept)" in message
    assert "or remove data.valid" in message


def test_bom_and_lone_cr_are_normalised_and_reported(multi30k, tmp_path):
    corpus = tmp_path / "c"
    src, tgt = read_lines(multi30k / "train.en.gz", 400), read_lines(multi30k / "train.de.gz", 400)
    val_src, val_tgt = read_lines(multi30k / "val.en.gz", 30), read_lines(multi30k / "val.de.gz", 30)
    val_src[4] = val_src[4].replace(" ", " \r", 1)  # a lone CR inside a validation line
    src[0] = "\ufeff" + src[0]
    write_slice(corpus, "train", {"en": src, "de": tgt})
    write_slice(corpus, "val", {"en": val_src, "de": val_tgt})
    write_slice(corpus, "test", {"en": val_src, "de": val_tgt})
    result = runner.invoke(app, ["prepare", str(_prepare_recipe(tmp_path, corpus))])
    assert result.exit_code == 0, result.output
    # compared without whitespace: the console folds a path longer than its width (a worker's temporary folder)
    output = "".join(result.output.split())
    said = [
        f"{corpus / 'train.en'}: removed the UTF-8 byte-order mark",
        f"{corpus / 'val.en'}: 1 line(s) held a lone carriage return (CR)",
    ]
    for message in said:
        assert "".join(message.split()) in output
    cleaned = (tmp_path / "data" / "text" / "valid.en").read_text(encoding="utf-8")
    assert "\r" not in cleaned and len(cleaned.split("\n")) - 1 == 30
    assert not (tmp_path / "data" / "text" / "train.en").read_text(encoding="utf-8").startswith("\ufeff")


def test_replaced_invalid_utf8_is_counted(m30k_slice, tmp_path):
    corpus = tmp_path / "c"
    shutil.copytree(m30k_slice, corpus)
    lines = (corpus / "val.de").read_bytes().split(b"\n")
    for i in (0, 1, 2):
        lines[i] += b" \xff"  # a stray Latin-1 byte in three lines
    (corpus / "val.de").write_bytes(b"\n".join(lines))
    recipe = _prepare_recipe(tmp_path, corpus)
    strict = runner.invoke(app, ["prepare", str(recipe)])
    assert strict.exit_code == 1 and "val.de:" in one_line_error(strict) and "invalid UTF-8" in strict.output
    replaced = runner.invoke(app, ["prepare", str(recipe), "--set", "data.encoding_errors=replace"])
    assert replaced.exit_code == 0, replaced.output
    assert "3 line(s) had invalid UTF-8, replaced by U+FFFD" in " ".join(replaced.output.split())


@pytest.mark.parametrize("damage", ["truncated", "not gzip"])
def test_corrupt_gzip_names_the_file(m30k_slice, tmp_path, damage):
    corpus = tmp_path / "c"
    shutil.copytree(m30k_slice, corpus)
    path = corpus / "train.de.gz"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"plain text, not gzip\n" * 100)
    before = snapshot(corpus)
    result = runner.invoke(app, ["prepare", str(_prepare_recipe(tmp_path, corpus))])
    message = one_line_error(result)
    assert result.exit_code == 1 and f"{path}:" in message and "download or compress it again" in message
    assert ("truncated" in message) if damage == "truncated" else ("not valid gzip data" in message)
    assert snapshot(corpus) == before


# --------------------------------------------------------------------------- recipes and options


def test_duplicate_recipe_section_names_both_lines(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("model:\n  layers: 2\ntrain:\n  lr: 0.001\nmodel:\n  d_model: 64\n")
    result = runner.invoke(app, ["config", str(path)])
    assert result.exit_code == 2
    assert "'model' appears twice, at lines 1 and 5; keep one" in one_line_error(result)
    nested = tmp_path / "nested.yaml"
    nested.write_text("train:\n  lr: 0.001\n  warmup: 10\n  lr: 0.002\n")
    assert "'lr' appears twice, at lines 2 and 4" in one_line_error(runner.invoke(app, ["config", str(nested)]))


def test_out_of_range_and_unknown_choices_are_one_line_errors(tmp_path):
    seed = runner.invoke(app, ["config", "recipes/multi30k_ende.yaml", "--set", "train.seed=-1"])
    assert seed.exit_code == 2 and "train.seed" in one_line_error(seed)
    hyp = tmp_path / "h.txt"
    hyp.write_text("a b c\n")
    tokenize = runner.invoke(app, ["score", str(hyp), str(hyp), "--tokenize", "bogus"])
    message = one_line_error(tokenize)
    assert tokenize.exit_code == 1 and "--tokenize bogus" in message and "13a" in message and "intl" in message


# --------------------------------------------------------------------------- prepare's workers


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_prepare_workers_die_with_their_parent(multi30k, tmp_path):
    corpus = tmp_path / "c"
    src, tgt = read_lines(multi30k / "train.en.gz"), read_lines(multi30k / "train.de.gz")
    write_slice(corpus, "train", {"en": src * 4, "de": tgt * 4}, gz=True)
    write_slice(corpus, "val", {"en": src[:50], "de": tgt[:50]})
    recipe = _prepare_recipe(tmp_path, corpus)
    recipe.write_text(
        recipe.read_text().replace("workers: 1", "workers: 2\n  chunk_lines: 500").replace("  test: [test]\n", "")
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "nmt_cli", "prepare", str(recipe)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 240
    workers: list[int] = []
    while len(workers) < 2 and proc.poll() is None and time.monotonic() < deadline:
        workers = [c for c in _children(proc.pid) if b"spawn" in _cmdline(c)]
        time.sleep(0.01)
    assert len(workers) >= 2, "prepare ended before its workers could be seen"
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{w}").exists() and "Z" not in _state(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{w}").exists() and "Z" not in _state(w) for w in workers)


def _cmdline(pid: int) -> bytes:
    """The process's command line; empty once it has ended (a child may exit between being listed and read)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_gzip_corpus_reading_matches_plain(m30k_slice, tmp_path):
    """The gzip guard passes data through unchanged (the same pairs as the plain files)."""
    from nmt_cli.data.corpus import CorpusPair, ParallelReader

    plain = tmp_path / "plain"
    plain.mkdir()
    for lang in ("en", "de"):
        (plain / f"train.{lang}").write_bytes(gzip.decompress((m30k_slice / f"train.{lang}.gz").read_bytes()))
    gz_pairs = list(ParallelReader(CorpusPair(m30k_slice / "train.en.gz", m30k_slice / "train.de.gz")))
    plain_pairs = list(ParallelReader(CorpusPair(plain / "train.en", plain / "train.de")))
    assert gz_pairs == plain_pairs and len(gz_pairs) == 3000


def test_score_reads_gzip_and_names_a_damaged_one(multi30k, tmp_path):
    reference = multi30k / "test_2016_flickr.de.gz"
    plain = tmp_path / "ref.de"
    plain.write_bytes(gzip.decompress(reference.read_bytes()))
    same = runner.invoke(app, ["score", str(plain), str(reference), "--json"])
    assert same.exit_code == 0 and '"score": 100.0' in same.output
    cut = tmp_path / "cut.de.gz"
    cut.write_bytes(reference.read_bytes()[:3000])
    result = runner.invoke(app, ["score", str(plain), str(cut)])
    assert result.exit_code == 1 and f"{cut}: truncated gzip file" in one_line_error(result)


def test_ctranslate2_compute_type_it_cannot_run_is_one_line(short_run, tmp_path):
    pytest.importorskip("ctranslate2")
    folder = tmp_path / "ct2"
    assert runner.invoke(app, ["export", str(short_run), str(folder)]).exit_code == 0
    result = runner.invoke(
        app,
        ["translate", "-m", str(folder), "--engine", "ctranslate2", "--dtype", "fp16", "--device", "cpu"],
        input="A man.\n",
    )
    assert result.exit_code == 1 and "CTranslate2 cannot run it with compute type float16 on cpu" in one_line_error(result)
    fp32 = runner.invoke(
        app, ["translate", "-m", str(folder), "--engine", "ctranslate2", "--dtype", "fp32"], input="A man.\n"
    )
    assert fp32.exit_code == 0 and fp32.output.count("\n") >= 1
    damaged = folder / "model.bin"
    damaged.write_bytes(damaged.read_bytes()[:10_000])
    result = runner.invoke(app, ["translate", "-m", str(folder), "--engine", "ctranslate2"], input="A man.\n")
    assert result.exit_code == 1 and "write the folder again with nmt export" in one_line_error(result)


def test_int8_runs_through_ctranslate2_and_our_engine(short_run, tmp_path):
    pytest.importorskip("ctranslate2")
    folder = tmp_path / "ct2"
    assert runner.invoke(app, ["export", str(short_run), str(folder)]).exit_code == 0
    source, output = tmp_path / "in.en", tmp_path / "out.de"
    source.write_text("A man.\nA dog.\n")
    int8 = runner.invoke(
        app,
        ["translate", "-m", str(folder), "--engine", "ctranslate2", "--dtype", "int8", "-i", str(source), "-o", str(output)],
    )
    assert int8.exit_code == 0 and len(output.read_text().splitlines()) == 2
    ours = runner.invoke(app, ["translate", "-m", str(short_run), "--dtype", "int8"], input="A man.\nA dog.\n")
    assert ours.exit_code == 0 and len(ours.stdout.splitlines()) == 2


def test_unknown_export_quantization_is_one_line_and_writes_nothing(short_run, tmp_path):
    pytest.importorskip("ctranslate2")
    result = runner.invoke(app, ["export", str(short_run), str(tmp_path / "ct2"), "--quantization", "bogus"])
    message = one_line_error(result)
    assert result.exit_code == 1 and "--quantization bogus" in message and "int8" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml", "run"]
