"""``nmt serve``: continuous batching decodes as offline search does; the HTTP API's shapes and errors;
a real server process with concurrent clients, a client that leaves, SIGTERM; the web page in Chromium."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import replace

import pytest
import torch
from conftest import nmt_in_process, start_server

from nmt_cli.config import DecodeConfig, ModelConfig
from nmt_cli.data.batches import pad_rows
from nmt_cli.data.vocab import EOS_ID
from nmt_cli.decode.continuous import ContinuousSearch
from nmt_cli.decode.loading import load_model
from nmt_cli.decode.protected import ProtectedEngine
from nmt_cli.decode.sampling import sample
from nmt_cli.decode.search import search
from nmt_cli.decode.translator import Translator
from nmt_cli.model.transformer import build_model

pytest.importorskip("fastapi", reason="nmt serve needs the serve extra")
UNSEEN = [
    "A dog runs through the grass.",
    "Two people.",
    "A woman in a red coat is walking on the street.",
    "A little girl climbs into a wooden playhouse.",
    "Men are playing football in the rain at night.",
]


@pytest.fixture(scope="module")
def loaded(overfit):
    return load_model(overfit[0])


def continuous(model, config, sources, nbest, seed=0, cancel=(), generator=None):
    """Decode ``sources`` joining the batch 0-3 at a time between steps; {index: hypotheses}."""
    lanes, rng, results, i = ContinuousSearch(model, config, nbest, generator=generator), random.Random(seed), {}, 0
    while i < len(sources) or len(lanes):
        j = min(len(sources), i + rng.randint(0, 3))
        lanes.add(sources[i:j], list(range(i, j)))
        i = j
        for done in lanes.step(set(cancel)):
            results[done.key] = done.hypotheses
    return results


def offline(model, config, sources, nbest):
    return [search(model, pad_rows([ids + [EOS_ID]]), config, nbest)[0] for ids in sources]


def assert_same(joined, alone):
    assert sorted(joined) == list(range(len(alone)))
    for i, hyps in enumerate(alone):
        assert [h.tokens for h in joined[i]] == [h.tokens for h in hyps], i
        assert [h.score for h in joined[i]] == pytest.approx([h.score for h in hyps], abs=1e-4)


@pytest.mark.parametrize(
    "beam, stop, alpha", [(4, "beam", 0.6), (1, "beam", 0.6), (1, "bound", 1.0), (3, "top", 1.0), (5, "bound", 0.0)]
)
def test_sentences_joining_a_running_batch_decode_as_offline_search(loaded, overfit, beam, stop, alpha):
    _, src, _ = overfit
    sources = [loaded.src_vocab.encode(line) for line in src[:24] + UNSEEN]
    config = replace(loaded.recipe.decode, beam=beam, stop=stop, alpha=alpha)
    nbest = min(2, beam)
    assert_same(continuous(loaded.model, config, sources, nbest), offline(loaded.model, config, sources, nbest))


@pytest.mark.parametrize("beam", [1, 4])
def test_a_running_batch_that_empties_takes_new_sentences_as_the_first_ones(loaded, overfit, beam):
    """Sentences joining after every earlier one left are searched as offline: nothing of the earlier ones stays."""
    _, src, _ = overfit
    sources = [loaded.src_vocab.encode(line) for line in src[:6] + UNSEEN]
    config = replace(loaded.recipe.decode, beam=beam)
    lane, joined = ContinuousSearch(loaded.model, config, nbest=1), {}
    for start in range(0, len(sources), 3):  # three at a time, each group alone in the batch
        lane.add(sources[start : start + 3], list(range(start, min(start + 3, len(sources)))))
        while len(lane):
            joined.update((done.key, done.hypotheses) for done in lane.step())
    assert_same(joined, offline(loaded.model, config, sources, 1))


def test_sampling_runs_in_a_running_batch_as_the_command_line_samples(loaded, overfit):
    """The continuous loop runs any strategy: sampling at top-k 1 (always the best token) is greedy search whatever
    joins when, and sentences that all join at once draw what the command line draws with the same seed."""
    _, src, _ = overfit
    sources = [loaded.src_vocab.encode(line) for line in src[:12] + UNSEEN]
    model, config = loaded.model, replace(loaded.recipe.decode, sampling=True, top_k=1)
    assert_same(continuous(model, config, sources, 1), offline(model, replace(config, sampling=False, beam=1), sources, 1))
    config = replace(loaded.recipe.decode, sampling=True, temperature=1.5)
    lane = ContinuousSearch(model, config, nbest=2, generator=torch.Generator().manual_seed(7))
    lane.add(sources, list(range(len(sources))))
    joined = {}
    while len(lane):
        joined.update((done.key, done.hypotheses) for done in lane.step())
    src_batch = pad_rows([ids + [EOS_ID] for ids in sources])
    alone = sample(model, src_batch, config, 2, torch.Generator().manual_seed(7))
    assert any(len(hyps) == 2 for hyps in alone)  # distinct samples, not one repeated
    assert_same(joined, alone)


@pytest.mark.parametrize("positions", ["relative", "xl", "learned"])
def test_joining_works_with_relative_xl_and_learned_positions(positions):
    """Late rows' positions count from their own first step (learned), or distances stay right (relative)."""
    torch.manual_seed(0)
    config = ModelConfig(layers=2, d_model=32, n_heads=4, d_ff=64, positions=positions, max_positions=64)
    model = build_model(config, 50, 50).eval()
    with torch.no_grad():  # sharper distributions than an untrained model's, so no near-ties
        model.tgt_embed.weight.mul_(8)
    decode = replace(DecodeConfig(), beam=3, max_len_a=0.0, max_len_b=12)
    rng = random.Random(1)
    sources = [[rng.randrange(4, 50) for _ in range(rng.randint(1, 10))] for _ in range(14)]
    assert_same(continuous(model, decode, sources, 2), offline(model, decode, sources, 2))


def test_cancelled_sentences_leave_without_a_result_and_the_others_are_unchanged(loaded, overfit):
    _, src, _ = overfit
    sources = [loaded.src_vocab.encode(line) for line in src[30:40]]
    config = loaded.recipe.decode
    joined = continuous(loaded.model, config, sources, 1, cancel={2, 5})
    alone = offline(loaded.model, config, sources, 1)
    assert sorted(joined) == [i for i in range(10) if i not in (2, 5)]
    for i, hyps in joined.items():
        assert [h.tokens for h in hyps] == [h.tokens for h in alone[i]]


# --------------------------------------------------------------------------- the HTTP API, in process


def make_app(run_dir, **loop_options):
    from nmt_cli.serve.api import create_app
    from nmt_cli.serve.metrics import ServerMetrics
    from nmt_cli.serve.requests import Limits
    from nmt_cli.serve.server import load_served_models

    metrics = ServerMetrics()
    options = {"batch_tokens": None, "max_queue": 64, "batching": True, **loop_options}
    models = load_served_models([run_dir], torch.device("cpu"), torch.float32, metrics, **options)
    return create_app(models, Limits(max_body_bytes=4000, max_sentences=8, max_beam=6), metrics)


@pytest.fixture(scope="module")
def client(overfit):
    from fastapi.testclient import TestClient

    with TestClient(make_app(overfit[0])) as test_client:
        yield test_client


def translated(loaded, lines, **settings):
    """Offline translation as the server's text requests get it: protected spans masked (decode/protected.py)."""
    config = replace(loaded.recipe.decode, **{k: v for k, v in settings.items() if k != "nbest"})
    return list(ProtectedEngine(Translator(loaded, config, nbest=settings.get("nbest", 1))).translate(lines))


def test_libretranslate_shape(client, loaded, overfit):
    _, src, _ = overfit
    one = client.post("/translate", json={"q": src[0], "source": "en", "target": "de", "format": "text"})
    assert one.status_code == 200
    assert one.json() == {"translatedText": translated(loaded, [src[0]])[0][0][0]}
    many = client.post("/translate", json={"q": src[1:4], "source": "auto", "target": "de", "alternatives": 2})
    expected = translated(loaded, src[1:4], beam=4, nbest=3)
    assert many.json()["translatedText"] == [hyps[0][0] for hyps in expected]
    assert many.json()["alternatives"] == [[hyp.text for hyp in hyps[1:]] for hyps in expected]
    languages = client.get("/languages").json()
    assert languages == [{"code": "en", "name": "English", "targets": ["de"]}]


def test_text_requests_keep_paths_urls_and_numbers_as_the_command_line_does(client, overfit):
    run_dir, src, _ = overfit
    lines = [f"{src[0]} /etc/passwd", f"{src[1]} https://example.org/a.tar.gz 1,024"]
    answer = client.post("/translate", json={"q": "\n".join(lines), "source": "en", "target": "de"}).json()
    served = answer["translatedText"].split("\n")
    for span in ("/etc/passwd", "https://example.org/a.tar.gz", "1,024"):
        assert sum(line.count(span) for line in served) == 1, (span, served)
    command_line = nmt_in_process("translate", "-m", run_dir, stdin="\n".join(lines) + "\n").stdout.splitlines()
    assert served == command_line


def test_format_html_keeps_the_markup_and_translates_the_text(client, loaded, overfit):
    from importlib import resources

    from nmt_cli.formats import EXTENSIONS
    from nmt_cli.formats.markup import strip
    from nmt_cli.formats.markup_tree import tag_tree

    _, src, _ = overfit
    words = src[0].split()
    page = f"<p>{' '.join(words[:2])} <b>{' '.join(words[2:4])}</b> {' '.join(words[4:])}</p>"
    answer = client.post("/translate", json={"q": page, "source": "en", "target": "de", "format": "html"})
    assert answer.status_code == 200
    out = answer.json()["translatedText"]
    assert tag_tree(out) == tag_tree(page)
    assert strip(out).split() == translated(loaded, [src[0]])[0][0][0].split()
    ours = client.post("/translate", json={"text": [page, "<i>x</i>"], "format": "html"}).json()
    assert ours["format"] == "html" and ours["translations"][0]["text"] == out
    accepted = resources.files("nmt_cli.serve").joinpath("page.html").read_text(encoding="utf-8")
    assert f'accept="{",".join(EXTENSIONS)}"' in accepted  # the web page offers every format the server reads


def test_our_shape_has_nbest_lists_scores_and_timing(client, loaded, overfit):
    _, src, _ = overfit
    text = f"{src[5]}\n\n{src[6]}"  # lines are sentences; an empty one stays empty
    body = client.post("/translate", json={"text": [text, UNSEEN[0]], "beam": 5, "nbest": 3, "alpha": 1.0}).json()
    assert body["model"] == "en-de" and body["beam"] == 5 and body["alpha"] == 1.0 and body["time_ms"] > 0
    expected = translated(loaded, [src[5], "", src[6], UNSEEN[0]], beam=5, alpha=1.0, nbest=3)
    first, second = body["translations"]
    assert first["text"] == "\n".join(hyps[0][0] for hyps in expected[:3])
    assert [a["text"] for a in second["nbest"]] == [hyp.text for hyp in expected[3]]
    assert [a["score"] for a in second["nbest"]] == pytest.approx([hyp.score for hyp in expected[3]], abs=1e-4)
    assert second["score"] == pytest.approx(expected[3][0][1], abs=1e-4) and not second["truncated"]


def test_confidence_and_flags_are_given_when_asked(client, loaded, overfit):
    _, src, _ = overfit
    expected = list(Translator(loaded, loaded.recipe.decode, nbest=2, assess=True).translate([src[5], UNSEEN[0]]))
    plain = client.post("/translate", json={"text": [src[5], UNSEEN[0]], "nbest": 2}).json()
    assert "confidence" not in plain["translations"][0]  # the shape is unchanged unless asked
    body = client.post("/translate", json={"text": [src[5], f"{src[5]}\n{UNSEEN[0]}"], "nbest": 2, "confidence": True})
    one, two = body.json()["translations"]
    known, unseen = (hyps[0].assessment for hyps in expected)
    assert one["confidence"] == pytest.approx(known.shown_confidence, abs=1e-3) and one["calibrated"] is False
    assert one["flags"] == known.flags and "lines" not in one
    assert [a["confidence"] for a in one["nbest"]] == pytest.approx(
        [h.assessment.shown_confidence for h in expected[0]], abs=1e-3
    )
    # a text of two lines: each line's own, and the text as trusted as its weaker line
    assert [line["confidence"] for line in two["lines"]] == pytest.approx(
        [known.shown_confidence, unseen.shown_confidence], abs=1e-3
    )
    assert two["confidence"] == pytest.approx(min(known.shown_confidence, unseen.shown_confidence), abs=1e-3)
    libre = client.post("/translate", json={"q": [src[5]], "source": "en", "target": "de", "confidence": True}).json()
    assert libre["translatedText"] == [expected[0][0][0]]  # LibreTranslate's fields as they were
    assert libre["confidence"][0]["confidence"] == pytest.approx(known.shown_confidence, abs=1e-3)
    assert client.get("/models").json()[0]["calibrated"] is False
    for refused, words in (({"confidence": "yes"}, "true or false"), ({"confidence": True, "format": "html"}, "HTML")):
        answer = client.post("/translate", json={"text": "Hi", **refused})
        assert answer.status_code == 400 and words in answer.json()["error"]


def test_sampling_draws_what_nmt_translate_draws_with_the_same_seed(client, loaded, overfit):
    """One pipeline: "sampling" with its settings gives the samples ``nmt translate --sampling`` gives."""
    _, src, _ = overfit
    lines = [src[7], UNSEEN[2], f"{src[8]} /etc/hosts"]
    settings = {"sampling": True, "top_k": 10, "temperature": 1.5, "seed": 3}
    body = client.post("/translate", json={"text": lines, "nbest": 3, "beam": 1, **settings}).json()
    expected = translated(loaded, lines, nbest=3, beam=1, **settings)
    assert [[a["text"] for a in t["nbest"]] for t in body["translations"]] == [[h.text for h in hyps] for hyps in expected]
    assert "/etc/hosts" in body["translations"][2]["text"]  # protected as every text request is
    assert body["sampling"] is True and "sampling" not in client.post("/translate", json={"text": "Hi"}).json()
    again = client.post("/translate", json={"text": lines, "nbest": 3, "beam": 1, **settings}).json()
    assert again["translations"] == body["translations"]  # the same seed, the same samples
    for refused, words in (
        ({"format": "html"}, '"format": "html"'),
        ({"glossary": [["man", "Kerl"]]}, '"glossary"'),
        ({"top_p": 0}, '"top_p"'),
    ):
        answer = client.post("/translate", json={"text": "Hi", "sampling": True, **refused})
        assert answer.status_code == 400 and words in answer.json()["error"], answer.json()


def test_keep_terms_and_a_greedy_glossary_answer_as_the_command_line(client, loaded, overfit, tmp_path):
    """ "keep_terms" copies names as ``--keep-terms`` does; a glossary under greedy search searches the lines with
    terms with a beam and the others greedily, as ``nmt translate --beam 1 --glossary`` does."""
    from nmt_cli.terms.glossary import glossary_from_pairs

    run_dir, src, _ = overfit
    lines = [f"{src[0]} Zorblax", f"Zorblax {src[1]}"]
    names = tmp_path / "names.txt"
    names.write_text("Zorblax\n", encoding="utf-8")
    command_line = nmt_in_process("translate", "-m", run_dir, "--keep-terms", names, stdin="\n".join(lines) + "\n")
    answer = client.post(
        "/translate", json={"q": "\n".join(lines), "source": "en", "target": "de", "keep_terms": ["Zorblax"]}
    )
    assert answer.json()["translatedText"].split("\n") == command_line.stdout.splitlines()
    assert all(line.count("Zorblax") == 1 for line in command_line.stdout.splitlines())
    with_terms = [next(s for s in src if " man " in f" {s.lower()} "), src[2], UNSEEN[1]]
    glossary = glossary_from_pairs([["man", "Kerl"]], "test")
    config = replace(loaded.recipe.decode, beam=1)
    expected = ProtectedEngine(Translator(loaded, config, glossary=glossary)).translate(with_terms)
    body = client.post("/translate", json={"text": with_terms, "beam": 1, "glossary": [["man", "Kerl"]]}).json()
    assert [t["text"] for t in body["translations"]] == [hyps[0].text for hyps in expected]
    assert "Kerl" in body["translations"][0]["text"] and body["translations"][0]["missing_terms"] == []
    refused = client.post("/translate", json={"text": "Hi", "keep_terms": "Zorblax"})
    assert refused.status_code == 400 and "list of names" in refused.json()["error"]


@pytest.mark.parametrize(
    "body, status, words",
    [
        (b'{"q": ', 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b'{"q": "a", "text": "b"}', 400, "exactly one"),
        (b'{"source": "en"}', 400, "exactly one"),
        (b'{"q": "   ", "source": "en", "target": "de"}', 400, "empty"),
        (b'{"q": [], "source": "en", "target": "de"}', 400, "non-empty list"),
        (b'{"q": "Hi", "source": "fr", "target": "de"}', 400, "no model translates fr"),
        (b'{"text": "Hi", "model": "de-en"}', 400, "GET /models"),
        (b'{"text": "Hi", "beam": 0}', 400, '"beam"'),
        (b'{"text": "Hi", "beam": 2, "nbest": 3}', 400, '"nbest"'),
        (b'{"text": "Hi", "alpha": "x"}', 400, '"alpha"'),
        (b'{"q": "Hi", "target": "de", "format": "pdf"}', 400, "format"),
        (json.dumps({"text": "\n".join(["Hi"] * 9)}).encode(), 413, "more than 8 lines"),
        (json.dumps({"text": "x" * 5000}).encode(), 413, "limit is 4,000"),
    ],
)
def test_bad_requests_get_a_json_error_and_the_server_goes_on(client, body, status, words):
    answer = client.post("/translate", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == status
    assert words in answer.json()["error"]
    assert client.post("/translate", json={"text": "A dog."}).status_code == 200


def test_queue_limit_answers_429_and_unknown_routes_404(overfit):
    from fastapi.testclient import TestClient

    with TestClient(make_app(overfit[0], max_queue=1)) as test_client:
        full = test_client.post("/translate", json={"text": ["One dog.", "Two dogs."]})
        assert full.status_code == 429 and "limit 1" in full.json()["error"] and full.headers["Retry-After"]
        missing = test_client.get("/nowhere")
        assert missing.status_code == 404 and missing.json() == {"error": "Not Found"}


def test_models_health_metrics_and_page(client, loaded):
    (model,) = client.get("/models").json()
    assert (model["name"], model["source"], model["target"]) == ("en-de", "en", "de")
    assert model["parameters"] == sum(p.numel() for p in loaded.model.parameters())
    assert client.get("/health").json()["status"] == "ok"
    client.post("/translate", json={"text": "A dog."})
    metrics = client.get("/metrics").text
    for name in (
        'nmt_requests_total{status="ok"}',
        'nmt_queue_sentences{model="en-de"}',
        "nmt_batch_occupancy",
        "nmt_request_latency_seconds_bucket",
        "nmt_step_batch_sentences_bucket",
    ):
        assert name in metrics
    page = client.get("/")
    assert page.status_code == 200 and 'id="go"' in page.text
    # no generated API page that loads its scripts from a CDN and shows no request bodies
    assert all(client.get(route).status_code == 404 for route in ("/docs", "/redoc", "/openapi.json"))


# --------------------------------------------------------------------------- a real server process


def post(url, payload, timeout=120):
    request = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return answer.status, json.loads(answer.read())


def metric(url, name) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
    return 0.0


def wait_for(condition, what, timeout=120):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture()
def server(overfit):
    """`nmt serve` in its own process, with a small token budget so long requests take many steps."""
    process, url, _, _ = start_server(overfit[0], "--threads", "1", "--batch-tokens", "40", "--log-level", "warning")
    yield process, url
    if process.poll() is None:
        process.kill()
        process.wait()


def test_concurrent_clients_get_what_offline_translation_gives(server, loaded, overfit):
    _, url = server
    _, src, _ = overfit
    lines = src[:40] + UNSEEN
    answers: dict[int, str] = {}

    def client(index):
        answers[index] = post(url + "/translate", {"text": lines[index]})[1]["translations"][0]["text"]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(lines))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [answers[i] for i in range(len(lines))] == [hyps[0][0] for hyps in translated(loaded, lines)]
    assert metric(url, 'nmt_decoder_steps_total{model="en-de"}') > 0


def test_a_client_that_disconnects_frees_its_rows(server, overfit):
    _, url = server
    _, src, _ = overfit
    port = int(url.rsplit(":", 1)[1])
    body = json.dumps({"text": "\n".join(src[:100])}).encode()
    connection = socket.create_connection(("127.0.0.1", port))
    connection.sendall(
        b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    wait_for(lambda: metric(url, 'nmt_batch_sentences{model="en-de"}') > 0, "the request to run")
    connection.close()
    wait_for(lambda: metric(url, 'nmt_requests_total{status="cancelled"}') == 1, "the cancellation")
    wait_for(lambda: metric(url, 'nmt_batch_sentences{model="en-de"}') == 0, "its rows to leave")
    # its waiting sentences leave the queue too, and the gauge says so (it once kept counting them)
    wait_for(lambda: metric(url, 'nmt_queue_sentences{model="en-de"}') == 0, "its queued rows to leave")
    assert metric(url, 'nmt_sentences_total{model="en-de",status="ok"}') == 0
    assert post(url + "/translate", {"text": src[0]})[0] == 200  # the loop goes on


def test_sigterm_finishes_the_requests_in_flight_then_exits(server, loaded, overfit):
    process, url = server
    _, src, _ = overfit
    lines = src[:64]
    answer: dict = {}
    thread = threading.Thread(target=lambda: answer.update(post(url + "/translate", {"text": lines})[1]))
    thread.start()
    wait_for(lambda: metric(url, 'nmt_batch_sentences{model="en-de"}') > 0, "the request to run")
    process.send_signal(signal.SIGTERM)
    thread.join(120)
    assert [t["text"] for t in answer["translations"]] == [hyps[0][0] for hyps in translated(loaded, lines)]
    # uvicorn re-raises the signal once it has drained, so a supervisor sees the process ended by SIGTERM
    assert process.wait(60) == -signal.SIGTERM


def test_serve_errors_are_one_line(tmp_path, overfit):
    def nmt(*args):
        return subprocess.run([sys.executable, "-m", "nmt_cli", "serve", *args], capture_output=True, text=True, timeout=120)

    missing = nmt("-m", str(tmp_path / "nothing"))
    assert missing.returncode == 1 and "model not found" in missing.stderr
    assert "Traceback" not in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = nmt("-m", str(overfit[0]), "--port", str(taken.getsockname()[1]), "--log-level", "critical")
    assert busy.returncode == 1 and "Traceback" not in busy.stderr
    assert busy.stderr.strip().splitlines() == [busy.stderr.strip().splitlines()[0]]
    assert "cannot listen on 127.0.0.1" in busy.stderr and "--port" in busy.stderr


# --------------------------------------------------------------------------- the web page in a real browser


def browser_or_skip():
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.skip("no Chromium: apt-get install chromium chromium-driver (.ci/run does)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ):
        options.add_argument(flag)
    from selenium.webdriver.chrome.service import Service

    return webdriver.Chrome(options=options, service=Service(executable_path=driver))


def test_web_page_translates_in_a_real_browser(server, loaded, overfit, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    _, url = server
    _, src, _ = overfit
    browser = browser_or_skip()
    try:
        browser.get(url + "/")
        wait = WebDriverWait(browser, 60)
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#pair option"))
        browser.find_element(By.ID, "text").send_keys(src[3])
        nbest = browser.find_element(By.ID, "nbest")
        nbest.clear()
        nbest.send_keys("2")
        browser.find_element(By.ID, "go").click()
        wait.until(expected_conditions.text_to_be_present_in_element((By.ID, "time"), "ms"))
        shown = [item.text for item in browser.find_elements(By.CSS_SELECTOR, "#result .translation")]
        browser.save_screenshot(str(tmp_path / "page.png"))
    finally:
        browser.quit()
    assert shown == [hyp.text for hyp in translated(loaded, [src[3]], nbest=2)[0]]
    assert (tmp_path / "page.png").stat().st_size > 1000
    if os.environ.get("NMT_SCREENSHOT"):  # docs/images/serve.png is taken this way
        shutil.copy(tmp_path / "page.png", os.environ["NMT_SCREENSHOT"])


def test_web_page_keeps_lines_and_shows_source_and_target_side_by_side(server, loaded, overfit):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _, url = server
    _, src, _ = overfit
    lines = [src[0], src[5], UNSEEN[0]]
    browser = browser_or_skip()
    try:
        browser.set_window_size(1280, 900)
        browser.get(url + "/")
        wait = WebDriverWait(browser, 60)
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#pair option"))
        pair = browser.find_element(By.CSS_SELECTOR, "#pair option").text
        browser.find_element(By.ID, "text").send_keys("\n".join(lines))  # typed: Enter between the lines
        browser.find_element(By.ID, "go").click()
        wait.until(lambda b: b.find_element(By.ID, "output").text.strip())
        shown = browser.find_element(By.ID, "output").text  # as rendered: line breaks included
        marks = [span.get_attribute("title") for span in browser.find_elements(By.CSS_SELECTOR, "#output span")]
        shaded = [span.get_attribute("class") for span in browser.find_elements(By.CSS_SELECTOR, "#output span")]
        note = browser.find_element(By.ID, "trust-note").text
        source_box = browser.find_element(By.ID, "text").rect
        target_box = browser.find_element(By.ID, "output").rect
        copy_button = browser.find_element(By.ID, "copy").is_displayed()
    finally:
        browser.quit()
    assert shown.split("\n") == [hyps[0][0] for hyps in translated(loaded, lines)]
    assert len(marks) == 3 and all(title.startswith("confidence ") for title in marks)  # each line its own
    assessed = [hyps[0].assessment for hyps in Translator(loaded, loaded.recipe.decode, assess=True).translate(lines)]
    doubtful = [bool(a.flags) or a.shown_confidence < 0.5 for a in assessed]
    assert [bool(c) for c in shaded] == doubtful and "no calibration" in note
    assert target_box["x"] > source_box["x"] + source_box["width"] / 2  # beside it, not below
    assert abs(target_box["y"] - source_box["y"]) < 5
    assert pair.startswith("English → German") and copy_button


def test_web_page_translates_an_uploaded_catalogue(server, overfit, tmp_path):
    polib = pytest.importorskip("polib", reason="polib is in the files extra")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _, url = server
    _, src, _ = overfit
    catalogue = tmp_path / "app.pot"
    catalogue.write_text(f'msgid ""\nmsgstr ""\n\n#, c-format\nmsgid "%s {src[1]}"\nmsgstr ""\n', encoding="utf-8")
    browser = browser_or_skip()
    try:
        browser.get(url + "/")
        wait = WebDriverWait(browser, 60)
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#pair option"))
        browser.find_element(By.ID, "file").send_keys(str(catalogue))
        browser.find_element(By.ID, "translate-file").click()
        wait.until(lambda b: b.find_element(By.ID, "download").is_displayed())
        link = browser.find_element(By.ID, "download").get_attribute("href")
    finally:
        browser.quit()
    with urllib.request.urlopen(link, timeout=60) as answer:
        translated = polib.pofile(answer.read().decode("utf-8"))
    (entry,) = translated
    assert translated.metadata["Language"] == "de" and entry.msgstr.count("%s") == 1 and "fuzzy" in entry.flags


def test_a_glossary_named_or_sent_steers_the_translation(overfit):
    """A request's "glossary" (its own pairs, or the name of one served) puts each term's translation in the
    answer, says which it lacks, and lists the served ones at /glossaries; bad glossaries are 400s."""
    from fastapi.testclient import TestClient

    from nmt_cli.serve.api import create_app
    from nmt_cli.serve.metrics import ServerMetrics
    from nmt_cli.serve.requests import Limits
    from nmt_cli.serve.server import load_served_models
    from nmt_cli.terms.glossary import glossary_from_pairs

    run_dir, src, _ = overfit
    line = next(s for s in src if " man " in f" {s.lower()} ")
    metrics = ServerMetrics()
    models = load_served_models([run_dir], torch.device("cpu"), torch.float32, metrics, None, 64, True)
    served = {"people": glossary_from_pairs([["man", "Kerl"]], "test")}
    with TestClient(create_app(models, Limits(glossaries=served), metrics)) as client:
        assert client.get("/glossaries").json() == [{"name": "people", "terms": 1}]
        by_name = client.post("/translate", json={"text": line, "glossary": "people"}).json()["translations"][0]
        inline = client.post("/translate", json={"q": line, "source": "en", "target": "de", "glossary": [["man", "Kerl"]]})
        assert "Kerl" in by_name["text"] and by_name["missing_terms"] == []
        assert by_name["glossary_terms"] == [{"source": "man", "target": "Kerl"}]
        assert inline.json()["translatedText"] == by_name["text"] and inline.json()["missingTerms"] == []
        page = client.post("/translate", json={"text": f"<p><b>{line}</b></p>", "format": "html", "glossary": "people"})
        assert page.status_code == 200 and "Kerl" in page.json()["translations"][0]["text"], page.json()
        for glossary, words in (("staff", 'no glossary named "staff"; served: people'), ([["man", ""]], "an empty term")):
            answer = client.post("/translate", json={"text": line, "glossary": glossary})
            assert answer.status_code == 400 and words in answer.json()["error"], answer.json()
        # an uploaded document: the same terms from a form field (a name, or the pairs as JSON)
        for glossary in ("people", '[["man", "Kerl"]]'):
            upload = {"file": ("page.md", f"# {line}\n\n{line}\n".encode())}
            form = {"source": "en", "target": "de", "glossary": glossary}
            answer = client.post("/translate_file", files=upload, data=form)
            assert answer.status_code == 200, answer.json()
            document = client.get(answer.json()["translatedFileUrl"].split("testserver", 1)[1]).text
            assert document.count("Kerl") == 2, document
        refused = client.post("/translate_file", files=upload, data={"source": "en", "target": "de", "glossary": "[["})
        assert refused.status_code == 400 and '"glossary" is not valid JSON' in refused.json()["error"]
        # a gettext catalogue notes the terms each entry was made to use, as nmt translate writes it
        catalogue = f'msgid ""\nmsgstr ""\n\nmsgid "{line}"\nmsgstr ""\n'.encode()
        form = {"source": "en", "target": "de", "glossary": "people"}
        answer = client.post("/translate_file", files={"file": ("app.po", catalogue)}, data=form)
        assert answer.status_code == 200, answer.json()
        po = client.get(answer.json()["translatedFileUrl"].split("testserver", 1)[1]).text
        assert "# nmt glossary: man = Kerl" in po, po
        # terms that could never be met, or are not one line, are refused as the command line refuses them
        for pairs, words in (([["man", "K" * 300]], "a term of 300 characters"), ([["man", "a\nb"]], "line break")):
            answer = client.post("/translate", json={"text": line, "glossary": pairs})
            assert answer.status_code == 400 and words in answer.json()["error"], answer.json()
        lone = b'{"text": "a man", "glossary": [["man", "K\\ud800"]]}'
        answer = client.post("/translate", content=lone, headers={"Content-Type": "application/json"})
        assert answer.status_code == 400 and "U+D800" in answer.json()["error"], answer.text


def test_a_server_with_int8_layers_answers_as_nmt_translate_with_dtype_int8(overfit):
    """``nmt serve --dtype int8``: the model's linear layers in int8, as ``nmt translate --dtype int8`` loads it."""
    from fastapi.testclient import TestClient

    from nmt_cli.inference.cpu_linear import Int8Linear, int8_usable
    from nmt_cli.serve.api import create_app
    from nmt_cli.serve.metrics import ServerMetrics
    from nmt_cli.serve.requests import Limits
    from nmt_cli.serve.server import load_served_models

    if not int8_usable():
        pytest.skip("this PyTorch lacks the fbgemm int8 operators")
    run_dir, src, _ = overfit
    metrics = ServerMetrics()
    models = load_served_models([run_dir], torch.device("cpu"), torch.float32, metrics, None, 64, True, int8=True)
    assert isinstance(models[0].loaded.model.output, Int8Linear)
    lines = src[:3]
    offline = nmt_in_process("translate", "-m", run_dir, "--dtype", "int8", stdin="".join(f"{s}\n" for s in lines))
    assert offline.returncode == 0, offline.stderr
    with TestClient(create_app(models, Limits(), metrics)) as client:
        answers = [client.post("/translate", json={"text": s}).json()["translations"][0]["text"] for s in lines]
    assert answers == offline.stdout.splitlines()
