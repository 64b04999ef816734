"""``nmt download`` against a local HTTP server on 127.0.0.1 (archives built by the test)."""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nmt_cli.config import load_recipe
from nmt_cli.data.download import download_all
from nmt_cli.errors import DownloadError

SGM = (
    '<srcset setid="newstest2014" srclang="any">\n<doc docid="1">\n<seg id="1">A &amp; B are here.</seg>\n'
    '<seg id="2">Second line.</seg>\n</doc>\n</srcset>\n'
)


def build_archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in (
            ("training/corpus.de-en.en", "Hello world.\nGood morning.\n"),
            ("training/corpus.de-en.de", "Hallo Welt.\nGuten Morgen.\n"),
            ("dev/newstest2014-deen-src.en.sgm", SGM),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue() + b"\0" * 200_000  # padding: big enough to be cut in the middle


class Server:
    """Serves files from a dict; supports Range; can cut the next transfer halfway."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.cut_next = False
        self.requests: list[tuple[str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_GET(self):
                outer.requests.append((self.path, self.headers.get("Range")))
                data = outer.files.get(self.path)
                if data is None:
                    self.send_error(404, "Not Found")
                    return
                start = 0
                if self.headers.get("Range"):
                    start = int(self.headers["Range"].split("=")[1].split("-")[0])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if outer.cut_next:
                    outer.cut_next = False
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def recipe_for(tmp_path: Path, url: str, sha: str, extract: bool = True):
    extract_block = (
        (
            "    extract:\n      training/corpus.de-en.en: corpus.en\n      training/corpus.de-en.de: corpus.de\n"
            "      dev/newstest2014-deen-src.en.sgm: newstest2014.en\n"
        )
        if extract
        else "    save_as: raw.bin\n"
    )
    path = tmp_path / "r.yaml"
    path.write_text(
        f"data: {{src_lang: en, tgt_lang: de, root: {tmp_path / 'corpora'}, train: [corpus]}}\n"
        f"download:\n  - url: {url}\n    sha256: '{sha}'\n{extract_block}"
    )
    return load_recipe(path)


def test_download_verify_unpack_and_cache(server, tmp_path):
    archive = build_archive()
    server.files["/wmt.tgz"] = archive
    recipe = recipe_for(tmp_path, server.url + "/wmt.tgz", hashlib.sha256(archive).hexdigest())
    logs: list[str] = []
    written = download_all(recipe, log=logs.append, progress=False, cache=tmp_path / "cache")
    root = tmp_path / "corpora"
    assert sorted(p.name for p in written) == ["corpus.de", "corpus.en", "newstest2014.en"]
    assert (root / "corpus.de").read_text() == "Hallo Welt.\nGuten Morgen.\n"
    assert (root / "newstest2014.en").read_text() == "A & B are here.\nSecond line.\n"
    download_all(recipe, log=logs.append, progress=False, cache=tmp_path / "cache")
    assert len(server.requests) == 1 and any("[skip]" in line for line in logs)


def test_interrupted_transfer_resumes_with_range(server, tmp_path):
    archive = build_archive()
    server.files["/wmt.tgz"] = archive
    server.cut_next = True
    recipe = recipe_for(tmp_path, server.url + "/wmt.tgz", hashlib.sha256(archive).hexdigest())
    with pytest.raises(DownloadError, match="interrupted .*run the same command again to resume"):
        download_all(recipe, progress=False, cache=tmp_path / "cache", log=lambda _m: None)
    partial = tmp_path / "cache" / "wmt.tgz.part"
    assert 0 < partial.stat().st_size < len(archive)
    assert not (tmp_path / "corpora" / "corpus.en").exists()
    resumed_from = partial.stat().st_size
    download_all(recipe, progress=False, cache=tmp_path / "cache", log=lambda _m: None)
    assert server.requests[-1][1] == f"bytes={resumed_from}-"  # asked only for what was missing
    assert (tmp_path / "cache" / "wmt.tgz").read_bytes() == archive
    assert (tmp_path / "corpora" / "corpus.en").read_text() == "Hello world.\nGood morning.\n"


def test_checksum_mismatch_is_refused_and_moved_aside(server, tmp_path):
    archive = build_archive()
    server.files["/bad.tgz"] = archive
    recipe = recipe_for(tmp_path, server.url + "/bad.tgz", "0" * 64)
    found = hashlib.sha256(archive).hexdigest()
    with pytest.raises(DownloadError, match=f"checksum mismatch \\(expected sha256 0{{64}}, found {found}\\).*bad.tgz.bad"):
        download_all(recipe, progress=False, cache=tmp_path / "cache", log=lambda _m: None)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["bad.tgz.bad"]
    assert (tmp_path / "cache" / "bad.tgz.bad").read_bytes() == archive
    assert not (tmp_path / "corpora" / "corpus.en").exists()


def test_wrong_file_in_the_cache_is_moved_aside_not_deleted(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "none.tgz").write_bytes(b"placed here by hand")
    recipe = recipe_for(tmp_path, "http://127.0.0.1:9/none.tgz", "1" * 64)
    logs: list[str] = []
    with pytest.raises(DownloadError) as err:
        download_all(recipe, progress=False, cache=cache, log=logs.append)
    found = hashlib.sha256(b"placed here by hand").hexdigest()
    message = str(err.value)
    assert "\n" not in message and "cannot download" in message
    assert f"wrong checksum: expected sha256 {'1' * 64}, found {found}" in message
    assert (cache / "none.tgz.bad").read_bytes() == b"placed here by hand"
    assert any("checksum mismatch" in line for line in logs)


def test_offline_download_lists_every_missing_file(tmp_path):
    path = tmp_path / "r.yaml"
    sources = "".join(
        f"  - url: http://127.0.0.1:9/part{i}.tgz\n    sha256: '{'0' * 64}'\n    save_as: part{i}.tgz\n" for i in range(3)
    )
    path.write_text(f"data: {{src_lang: en, tgt_lang: de, root: {tmp_path / 'corpora'}, train: [c]}}\ndownload:\n{sources}")
    logged: list[str] = []
    with pytest.raises(DownloadError) as err:
        download_all(load_recipe(path), progress=False, cache=tmp_path / "cache", log=logged.append)
    message = str(err.value)
    assert "\n" not in message and message.startswith("3 of 3 files could not be fetched (each above)")
    assert len(message) < 300 and str(tmp_path / "cache") in message and "--set data.root=" in message
    for i in range(3):  # each missing file on a line of its own, with where to put it
        line = next(line for line in logged if f"part{i}.tgz: cannot download" in line)
        assert str(tmp_path / "cache" / f"part{i}.tgz") in line


def test_http_404_and_no_network(server, tmp_path):
    recipe = recipe_for(tmp_path, server.url + "/missing.tgz", "0" * 64)
    with pytest.raises(DownloadError, match="HTTP 404"):
        download_all(recipe, progress=False, cache=tmp_path / "cache", log=lambda _m: None)
    unreachable = recipe_for(tmp_path, "http://127.0.0.1:9/none.tgz", "0" * 64)
    with pytest.raises(DownloadError, match=r"cannot download .*fetch it by hand and put it at .*none.tgz"):
        download_all(unreachable, progress=False, cache=tmp_path / "cache", log=lambda _m: None)


def test_plain_file_and_file_url(tmp_path):
    source = tmp_path / "train.en.gz"
    source.write_bytes(b"\x1f\x8b fake gzip bytes")
    sha = hashlib.sha256(source.read_bytes()).hexdigest()
    recipe = recipe_for(tmp_path, source.as_uri(), sha, extract=False)
    written = download_all(recipe, progress=False, cache=tmp_path / "cache", log=lambda _m: None)
    assert written == [tmp_path / "corpora" / "raw.bin"] and written[0].read_bytes() == source.read_bytes()


def test_bad_download_entries_are_recipe_errors(tmp_path):
    from nmt_cli.errors import RecipeError

    path = tmp_path / "r.yaml"
    path.write_text("download:\n  - url: http://x/y.tgz\n    sha256: abc\n")
    with pytest.raises(RecipeError, match=r"download\[0\]: needs a url and a 64-digit hex sha256"):
        load_recipe(path)
