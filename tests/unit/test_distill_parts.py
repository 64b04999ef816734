"""Distillation's parts without a model (``nmt_cli/distill/``): the filter, the resumable teacher job, the
server teacher's requests, retries and answers, and the student's recipe."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nmt_cli.config import DistillConfig, load_recipe
from nmt_cli.distill.corpus import keep_taught, teach
from nmt_cli.distill.pipeline import student_recipe
from nmt_cli.distill.teachers import ServerTeacher
from nmt_cli.errors import NmtError, RecipeError


class Upper:
    """A teacher that writes each source in capitals, sure of every line but the ones holding "doubt"."""

    identity = {"teacher": "upper"}
    gives_confidence = True

    def __init__(self, stop_after: int | None = None) -> None:
        self.stop_after, self.asked = stop_after, 0

    def translate(self, lines: Iterator[str]) -> Iterator[tuple[str, float | None]]:
        for line in lines:
            if self.stop_after is not None and self.asked == self.stop_after:
                raise KeyboardInterrupt  # a kill in the middle of a run
            self.asked += 1
            yield line.upper(), 0.1 if "doubt" in line else 0.9


def _sources(folder: Path, n: int) -> Path:
    path = folder / "source.en"
    path.write_text("".join(f"line number {k}\n" for k in range(n)), encoding="utf-8")
    return path


def test_a_killed_teacher_job_goes_on_after_its_last_block_and_a_changed_teacher_is_refused(tmp_path):
    sources, out = _sources(tmp_path, 25), tmp_path / "teacher.tsv"
    config = DistillConfig(chunk_lines=10)
    with pytest.raises(KeyboardInterrupt):
        teach(Upper(stop_after=17), sources, out, config, lambda items, done, total: items)
    assert not out.exists()  # only the partial file and its record
    resumed = Upper()
    assert teach(resumed, sources, out, config, lambda items, done, total: items) == 15  # lines 10..24
    rows = out.read_text(encoding="utf-8").splitlines()
    assert rows == [f"0.9000\tLINE NUMBER {k}" for k in range(25)]
    again = Upper()
    assert teach(again, sources, out, config, lambda items, done, total: items) == 0 and again.asked == 0
    other = Upper()
    other.identity = {"teacher": "another"}
    with pytest.raises(NmtError, match="another teacher or of other sources; add --restart"):
        teach(other, sources, out, config, lambda items, done, total: items)
    assert teach(other, sources, out, config, lambda items, done, total: items, restart=True) == 25


def test_the_filter_keeps_what_the_teacher_got_right_and_counts_the_rest(tmp_path):
    sources = tmp_path / "source.en"
    sources.write_text(
        "Open the file.\nLinux kernel\n\nA short one.\nI doubt this one.\nOne two three four five.\n", encoding="utf-8"
    )
    taught = tmp_path / "teacher.tsv"
    rows = [
        "0.9\tÖffne die Datei.",
        "0.9\tLinux kernel",  # a copy
        "0.9\t",  # nothing to translate
        "0.9\tEin kurzer.",
        "0.1\tIch bezweifle das.",  # doubted
        "0.9\tEins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn.",  # out of ratio
    ]
    taught.write_text("".join(row + "\n" for row in rows), encoding="utf-8")
    found = keep_taught(sources, taught, tmp_path, "en", "de", DistillConfig(min_confidence=0.5))
    assert (found.pairs, found.kept, found.copied, found.empty, found.ratio, found.doubted) == (6, 2, 1, 1, 1, 1)
    assert (tmp_path / "distilled.de").read_text(encoding="utf-8") == "Öffne die Datei.\nEin kurzer.\n"
    assert (tmp_path / "distilled.en").read_text(encoding="utf-8") == "Open the file.\nA short one.\n"
    assert json.loads((tmp_path / "filtered.json").read_text())["copied"] == 1


class _Server(BaseHTTPRequestHandler):
    """A LibreTranslate-compatible /translate that fails its first request (503, Retry-After 0) and then answers
    each text in capitals."""

    requests: list[dict] = []
    failures = 1

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        if type(self).failures:
            type(self).failures -= 1
            self.send_response(503)
            self.send_header("Retry-After", "0")
            self.end_headers()
            return
        answer = {"translatedText": [text.upper() for text in body["q"]]}
        if body.get("confidence"):
            answer["confidence"] = [{"confidence": 0.8, "calibrated": True, "flags": []} for _ in body["q"]]
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    _Server.requests, _Server.failures = [], 1
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_a_server_teacher_asks_in_batches_tries_again_and_reads_the_confidence(server):
    config = DistillConfig(endpoint=server, batch_lines=2, retries=2, min_confidence=0.5)
    teacher = ServerTeacher(config, "en", "de")
    got = list(teacher.translate(iter(["one", "", "two", "three"])))
    assert got == [("ONE", 0.8), ("", None), ("TWO", 0.8), ("THREE", 0.8)]
    asked = [r["q"] for r in _Server.requests]
    assert asked == [["one"], ["one"], ["two", "three"]]  # the 503 tried again; the empty line never sent
    assert all(r["source"] == "en" and r["target"] == "de" and r["confidence"] for r in _Server.requests)


def test_a_server_teacher_that_never_answers_is_one_line_that_says_the_run_goes_on(tmp_path):
    config = DistillConfig(endpoint="http://127.0.0.1:9", retries=0)
    with pytest.raises(NmtError, match=r"no answer after 1 tries .* goes on from here when started again"):
        list(ServerTeacher(config, "en", "de").translate(iter(["one"])))


def test_the_student_trains_on_the_distilled_corpus_and_a_teacher_is_one_thing(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(
        f"data: {{src_lang: en, tgt_lang: de, root: {tmp_path}, train: [c1, c2], valid: [v], test: [t]}}\n"
        "distill: {teacher: [runs/big]}\n"
    )
    recipe = load_recipe(path)
    alone = student_recipe(recipe, tmp_path / "distill")
    assert alone.data.train == (str((tmp_path / "distill" / "distilled").resolve()),)
    assert alone.data.valid == ("v",) and alone.data.root == str(tmp_path)
    beside = student_recipe(load_recipe(path, ["distill.keep_original=true"]), tmp_path / "distill")
    assert beside.data.train[1:] == (str(tmp_path / "c1"), str(tmp_path / "c2"))
    with pytest.raises(RecipeError, match="distill.endpoint: and distill.teacher are two teachers"):
        load_recipe(path, ["distill.endpoint=http://localhost:8080"])
    with pytest.raises(RecipeError, match="is not an http"):
        load_recipe(path, ["distill.teacher=[]", "distill.endpoint=localhost:8080"])


def test_a_corpus_inside_the_distillation_folder_is_never_written_over_and_two_runs_never_share_it(tmp_path):
    import os
    import socket

    from nmt_cli.distill.corpus import gather_sources
    from nmt_cli.distill.pipeline import distill
    from nmt_cli.utils.run_folder import LOCK_FILE

    (tmp_path / "source.en").write_text("Open the file.\n", encoding="utf-8")
    (tmp_path / "source.de").write_text("Öffne die Datei.\n", encoding="utf-8")
    path = tmp_path / "r.yaml"
    path.write_text(
        f"data: {{src_lang: en, tgt_lang: de, root: {tmp_path}, train: [source]}}\ndistill: {{dir: {tmp_path}}}\n"
    )
    recipe = load_recipe(path)
    with pytest.raises(NmtError, match=r"source.en: a training corpus inside distill.dir .* another folder"):
        gather_sources(recipe, tmp_path)
    assert (tmp_path / "source.en").read_text(encoding="utf-8") == "Open the file.\n"
    other = tmp_path / "work"
    other.mkdir()
    (other / LOCK_FILE).write_text(f"{os.getpid()} {socket.gethostname()}\n")  # a living distillation holds it
    busy = load_recipe(path, [f"distill.dir={other}"])
    with pytest.raises(NmtError, match=r"in use by another `nmt distill` .* give this one another distill.dir"):
        distill(busy, log=lambda _m: None, teacher=Upper())
