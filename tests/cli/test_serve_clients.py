"""``nmt serve`` against the LibreTranslate client libraries people install, and a fuzz of hostile bodies.

A real ``nmt serve`` process on loopback; ``libretranslatepy`` 2.1.4, ``libretranslate-aio`` 0.1.3 and
``deep-translator`` 1.11.4 (dev extra) call it exactly as they call LibreTranslate: form-encoded bodies, the
query string, ``auto``, alternatives, an api_key given and ignored, languages, detect, settings, files. Then a
few thousand random and structured-hostile JSON, form and multipart bodies: no answer is a 5xx, the server stays up and
``/metrics`` counts every response.
"""

from __future__ import annotations

import asyncio
import io
import json
import random
import socket
import time

import pytest
from conftest import start_server

from nmt_cli.formats import EXTENSIONS

httpx = pytest.importorskip("httpx")
libretranslatepy = pytest.importorskip("libretranslatepy", reason="libretranslatepy is in the dev extra")
libretranslate_aio = pytest.importorskip("libretranslate_aio", reason="libretranslate-aio is in the dev extra")
pytest.importorskip("fastapi", reason="nmt serve needs the serve extra")
polib = pytest.importorskip("polib", reason="polib is in the files extra")


@pytest.fixture(scope="module")
def server(overfit):
    process, url, log, reader = start_server(
        overfit[0], "--threads", "1", "--max-sentences", "16", "--max-body-bytes", "20000", "--log-level", "info"
    )
    yield process, url, log, reader
    process.terminate()
    process.wait(60)


@pytest.fixture(scope="module")
def expected(overfit):
    """What ``nmt translate`` gives for the lines the clients send (the server must give the same)."""
    from nmt_cli.decode.loading import load_model
    from nmt_cli.decode.translator import Translator

    loaded = load_model(overfit[0])
    translator = Translator(loaded, loaded.recipe.decode, nbest=3)
    _, src, _ = overfit
    return {line: [text for text, *_ in hyps] for line, hyps in zip(src[:3], translator.translate(src[:3]))}


def test_libretranslatepy_translates_detects_and_lists_languages(server, expected):
    url = server[1]
    client = libretranslatepy.LibreTranslateAPI(url, api_key="any key: this server asks for none")
    line = next(iter(expected))
    assert client.translate(line, "en", "de") == expected[line][0]
    assert client.translate(line, "auto", "de") == expected[line][0]
    detected = client.detect(line)
    assert detected[0]["language"] == "en" and 50 < detected[0]["confidence"] <= 100
    assert client.languages() == [{"code": "en", "name": "English", "targets": ["de"]}]


def test_libretranslate_aio_sync_and_async_clients(server, expected):
    url = server[1]
    lines = list(expected)
    with libretranslate_aio.LibreTranslate(url, api_key="ignored") as client:
        one = client.translate(lines[0], "en", "de")
        assert one.translated_text == expected[lines[0]][0] and one.detected_language is None
        many = client.translate(lines, "auto", "de", alternatives=2)
        assert many.translated_text == [expected[line][0] for line in lines]
        assert many.alternatives == [expected[line][1:3] for line in lines]
        assert [d.language for d in many.detected_language] == ["en"] * len(lines)
        assert client.detect(lines[1])[0].language == "en"
        assert [(lang.code, lang.name, lang.targets) for lang in client.languages()] == [("en", "English", ["de"])]
        settings = client.frontend_settings()
        assert settings.supported_files_format == sorted(EXTENSIONS)
        assert (settings.language.source.name, settings.language.target.name) == ("English", "German")
        assert not settings.key_required and client.health()
        catalogue = (
            'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
            f'#, c-format\nmsgid "%s: {lines[0]}"\nmsgstr ""\n'
        )
        upload = io.BytesIO(catalogue.encode())
        upload.name = "messages.po"  # the client sends the file object's name as the file name
        download = client.translate_file(upload, "en", "de").translated_file_url
        assert download.startswith(url + "/download_file/") and download.endswith("/messages.po")
        translated = polib.pofile(httpx.get(download, timeout=60).text)
        assert translated.metadata["Language"] == "de"
        (entry,) = translated
        assert entry.msgstr.count("%s") == 1 and len(entry.msgstr) > 10 and entry.flags[0] == "fuzzy"
        with pytest.raises(libretranslate_aio.LibreTranslateError, match="not a document format") as raised:
            client.translate_file(io.BytesIO(b"<html></html>"), "en", "de")
        assert raised.value.status_code == 400

    async def run() -> str:
        async with libretranslate_aio.AsyncLibreTranslate(url) as client:
            return (await client.translate(lines[2], "en", "de")).translated_text

    assert asyncio.run(run()) == expected[lines[2]][0]


def _hostile_bodies(rng: random.Random, line: str) -> list[tuple[str, bytes | dict, str]]:
    """(content type, body, route) cases: structured-hostile ones, then random ones."""
    deep = b"[" * 50_000 + b"]" * 50_000
    cases = [
        ("application/json", b'{"q": "\\ud800", "source": "en", "target": "de"}', "/translate"),
        ("application/json", b'{"q": "a", "source": "\\udfff", "target": "de"}', "/translate"),
        ("application/json", b'{"q": "a", "target": "de", "alternatives": ' + b"9" * 5000 + b"}", "/translate"),
        ("application/json", deep, "/translate"),
        ("application/json", b'{"text": "a", "alpha": NaN}', "/translate"),
        ("application/json", b'{"text": "a", "alpha": -Infinity}', "/translate"),
        ("application/json", b'{"text": "a", "beam": 1e999}', "/translate"),
        ("application/json", b'{"text": "a\\u0000b\\u001bc", "model": "en-de"}', "/translate"),
        ("application/json", json.dumps({"q": line, "target": "de", "unknown": [1, {"x": None}]}).encode(), "/translate"),
        ("application/json", b'{"q": {"nested": "dict"}, "target": "de"}', "/translate"),
        ("application/json", b'{"q": "a", "source": ["en"], "target": {"de": 1}}', "/translate"),
        ("application/json", b"\xff\xfe\x00{", "/translate"),
        ("application/json", b'{"q": "\\ud800"}', "/detect"),
        ("application/json", deep, "/detect"),
        ("application/x-www-form-urlencoded", b"q=%ff%fe&source=en&target=de", "/translate"),
        ("application/x-www-form-urlencoded", b"q=a&alternatives=1e9&target=de", "/translate"),
        ("application/x-www-form-urlencoded", b"&&&===&q", "/translate"),
        ("application/x-www-form-urlencoded", b"x=1&" * 2000, "/translate"),
        ("multipart/form-data; boundary=zz", b"--zz\r\nnot a part", "/translate"),
        ("multipart/form-data", b"--\r\n\r\n", "/translate"),
        ("text/plain", line.encode(), "/translate"),
        ("", b"", "/translate"),
        ("", b"", "/detect"),
        (
            "multipart/form-data; boundary=zz",
            b'--zz\r\nContent-Disposition: form-data; name="file"; filename="a.po"\r\n\r\nmsgid "x\r\n--zz--\r\n',
            "/translate_file",
        ),
        ("application/json", b'{"file": "a.po"}', "/translate_file"),
    ]
    alphabet = [
        b"{",
        b"}",
        b"[",
        b"]",
        b'"q"',
        b'"text"',
        b":",
        b",",
        b"1",
        b"-1e308",
        b"null",
        b"true",
        b'"\\ud800"',
        b'"\\u0000"',
        b"\xff",
        b"\x00",
        b"=",
        b"&",
        b"%",
        b"q",
        b"source",
        b"en",
        b'"de"',
    ]
    for _ in range(900):
        body = b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        kind = rng.choice(["application/json", "application/x-www-form-urlencoded", "multipart/form-data; boundary=b", ""])
        cases.append((kind, body, rng.choice(["/translate", "/translate", "/detect"])))
    fields = {
        "q": line,
        "text": line,
        "source": "en",
        "target": "de",
        "alternatives": 1,
        "beam": 2,
        "nbest": 1,
        "alpha": 0.6,
        "format": "text",
        "model": "en-de",
        "api_key": "k",
    }
    odd = [None, -1, 10**30, 1.5, "", "\x00", ["x"], {"a": 1}, True, "auto", "html", "x" * 300]
    for _ in range(900):
        body_fields = {k: (rng.choice(odd) if rng.random() < 0.3 else v) for k, v in fields.items() if rng.random() < 0.6}
        if rng.random() < 0.5:
            cases.append(("application/json", json.dumps(body_fields).encode(), "/translate"))
        else:
            form = {k: v if isinstance(v, str) else json.dumps(v) for k, v in body_fields.items()}
            cases.append(("form", form, rng.choice(["/translate", "/detect", "/translate_file"])))
    return cases


def test_deep_translator_sends_its_fields_in_the_query_string(server, expected, tmp_path):
    deep_translator = pytest.importorskip("deep_translator", reason="deep-translator is in the dev extra")
    url = server[1].rstrip("/") + "/"
    lines = list(expected)
    client = deep_translator.LibreTranslator(source="en", target="de", api_key="ignored", custom_url=url)
    assert client.translate(lines[0]) == expected[lines[0]][0]
    assert client.translate_batch(lines) == [expected[line][0] for line in lines]
    document = tmp_path / "lines.txt"
    document.write_text(lines[1], encoding="utf-8")
    assert client.translate_file(str(document)) == expected[lines[1]][0]
    auto = deep_translator.LibreTranslator(source="auto", target="de", api_key="ignored", custom_url=url)
    assert auto.translate(lines[2]) == expected[lines[2]][0]
    # the body's fields win over the query string's; a JSON body is read alone, as LibreTranslate reads it
    form = httpx.post(url + "translate?target=fr&q=ignored", data={"q": lines[0], "source": "en", "target": "de"})
    assert form.status_code == 200 and form.json()["translatedText"] == expected[lines[0]][0]
    empty = httpx.post(url + "translate")
    assert empty.status_code == 400 and "JSON" in empty.json()["error"]


def test_an_uploaded_decompression_bomb_is_413_naming_the_limit(server):
    import zipfile

    url = server[1].rstrip("/")
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"<w:p><w:r><w:t>boom</w:t></w:r></w:p>" * 100_000)  # 3.7 MB
    assert len(packed.getvalue()) < 20_000  # under the body limit: only the unpacking is too much
    answer = httpx.post(
        url + "/translate_file", files={"file": ("bomb.docx", packed.getvalue())}, data={"source": "en", "target": "de"}
    )
    assert answer.status_code == 413 and "--max-unpack-ratio" in answer.json()["error"]


def test_json_sent_as_a_form_is_told_to_name_its_content_type(server):
    """`curl URL -d '{"q": ...}'` sends JSON labelled as a form; the answer says which header to add."""
    _, url, _, _ = server
    body = b'{"q": "A man rides a bike.", "source": "en", "target": "de"}'
    with httpx.Client(base_url=url, timeout=60) as client:
        mislabelled = client.post("/translate", content=body, headers={"Content-Type": "application/x-www-form-urlencoded"})
        labelled = client.post("/translate", content=body, headers={"Content-Type": "application/json"})
    assert mislabelled.status_code == 400 and "Content-Type: application/json" in mislabelled.json()["error"]
    assert labelled.status_code == 200 and labelled.json()["translatedText"]


def test_fuzzed_bodies_get_no_5xx_and_every_response_is_counted(server, expected):
    process, url, log, reader = server
    rng = random.Random(39)
    cases = _hostile_bodies(rng, next(iter(expected)))
    statuses: dict[int, int] = {}
    with httpx.Client(base_url=url, timeout=60) as client:
        before = _responses(client)
        for kind, body, route in cases:
            if kind == "form":
                answer = (
                    client.post(route, data=body) if rng.random() < 0.5 else client.post(route, files={"f": b"x"}, data=body)
                )
            else:
                answer = client.post(route, content=body, headers={"Content-Type": kind} if kind else {})
            statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
            assert answer.status_code < 500, (kind, body[:200] if isinstance(body, bytes) else body, answer.text)
            assert isinstance(answer.json(), (dict, list))  # JSON whatever happened
            if answer.status_code >= 400:
                assert "\n" not in answer.json()["error"]  # one line
        after = _responses(client)
    assert process.poll() is None
    assert sum(after.values()) - sum(before.values()) == len(cases) + 1  # + the /metrics read that took `before`
    assert statuses.get(200, 0) > 100 and statuses.get(400, 0) > 100  # both kinds were really exercised


def _responses(client) -> dict[str, float]:
    counts = {}
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("nmt_http_responses_total{"):
            key, value = line.rsplit(" ", 1)
            counts[key] = float(value)
    return counts


def test_two_hundred_disconnects_are_one_log_line_each(server):
    process, url, log, reader = server
    host, port = url.removeprefix("http://").split(":")
    for _ in range(200):
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"
            )
    with httpx.Client(base_url=url, timeout=60) as client:
        deadline = time.monotonic() + 60
        while _responses(client).get('nmt_http_responses_total{code="499",route="/translate"}', 0) < 200:
            assert time.monotonic() < deadline, _responses(client)
            time.sleep(0.1)
    process.terminate()
    process.wait(60)
    reader.join(30)
    output = "".join(log)
    assert "Traceback" not in output
    assert output.count("a client went away before its request was read") == 200
