"""Record what ``nmt serve`` answers to a fixed set of requests, to compare two checkouts byte for byte
(``scripts/compare_versions.sh`` does the same for the command line).

    PYTHONPATH=/tmp/before python scripts/server_answers.py --model runs/ende -o before.json
    PYTHONPATH=.           python scripts/server_answers.py --model runs/ende -o after.json
    cmp before.json after.json

Cases: text in both request shapes (n-best, alternatives, beam and alpha, confidence, a glossary, paths and numbers
to keep, empty lines), HTML, uploaded files (Markdown, gettext, HTML); with ``--multi`` a multilingual model's
every direction, pivoted ones included; with ``--context`` a model reading document context (text and a file).
Timings (and a catalogue's revision date) are left out.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path

import torch
from fastapi.testclient import TestClient

from nmt_cli.serve.api import create_app
from nmt_cli.serve.metrics import ServerMetrics
from nmt_cli.serve.requests import Limits
from nmt_cli.serve.server import load_served_models

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="a sentence-level EN-DE run folder")
    parser.add_argument("--multi", type=Path, help="a multilingual run folder (de, en, fr)")
    parser.add_argument("--context", type=Path, help="a run folder of a model reading document context (EN-DE)")
    parser.add_argument("--lines", type=int, default=40, help="test 2016 lines to translate")
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    source = _lines(SHARED / "multi30k" / "test_2016_flickr.en.gz", args.lines)
    answers: dict[str, object] = {}
    answers.update(_sentence_level(args.model, source))
    if args.multi is not None:
        german = _lines(SHARED / "multi30k" / "test_2016_flickr.de.gz", 10)
        answers.update(_multilingual(args.multi, source[:10], german))
    if args.context is not None:
        paragraphs = _lines(SHARED / "manpages" / "test.en-de.en.gz", 12)
        answers.update(_in_context(args.context, paragraphs))
    args.output.write_text(json.dumps(answers, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def _sentence_level(run: Path, source: list[str]) -> dict[str, object]:
    spans = [f"{source[0]} /etc/passwd", f"{source[1]} https://example.org/a.tar.gz 1,024", f"{source[2]} --force"]
    glossary = [["man", "Kerl"], ["dog", "Hund"], ["street", "Straße"]]
    words = source[3].split()
    page = f"<p>{' '.join(words[:2])} <b>{' '.join(words[2:4])}</b> {' '.join(words[4:])}</p><p>{source[4]}</p>"
    requests = {
        "libre_one": {"q": source[0], "source": "en", "target": "de"},
        "libre_many_alternatives": {"q": source[:8], "source": "en", "target": "de", "alternatives": 2},
        "libre_lines_and_spans": {"q": "\n".join(spans + ["", source[5]]), "source": "en", "target": "de"},
        "libre_confidence": {"q": source[8:12], "source": "en", "target": "de", "confidence": True},
        "libre_glossary": {"q": source[12:24], "source": "en", "target": "de", "glossary": glossary},
        "ours_nbest": {"text": source[24:32], "beam": 5, "nbest": 3, "alpha": 1.0},
        "ours_greedy": {"text": ["\n".join(source[32:36]), source[36]], "beam": 1},
        "ours_greedy_glossary": {"text": source[12:24], "beam": 1, "glossary": glossary},
        "ours_confidence_nbest": {"text": [f"{source[37]}\n{source[38]}"], "nbest": 2, "confidence": True},
        "html": {"q": page, "source": "en", "target": "de", "format": "html"},
        "html_glossary": {"text": [page], "format": "html", "glossary": glossary},
    }
    files = {
        "page.md": f"# {source[0]}\n\n{source[1]} *{source[2]}*\n\n- {source[3]}\n- `ls -l` {source[4]}\n",
        "app.po": "".join(f'msgid "{line}"\nmsgstr ""\n\n' for line in source[5:9]),
        "page.html": f"<html><body><h1>{source[9]}</h1><p>{source[10]} <a href='x'>{source[11]}</a></p></body></html>",
    }
    return _answers(run, "sentence", requests, files, {"source": "en", "target": "de"})


def _multilingual(run: Path, english: list[str], german: list[str]) -> dict[str, object]:
    requests = {}
    for src, tgt, text in (("en", "de", english), ("en", "fr", english), ("de", "en", german), ("de", "fr", german)):
        requests[f"{src}_{tgt}"] = {"q": text, "source": src, "target": tgt, "alternatives": 1}
        requests[f"{src}_{tgt}_ours"] = {"text": ["\n".join(text[:3])], "source": src, "target": tgt, "nbest": 2}
    files = {"page.md": f"# {german[0]}\n\n{german[1]} *{german[2]}*\n"}
    return _answers(run, "multi", requests, files, {"source": "de", "target": "fr"})


def _in_context(run: Path, paragraphs: list[str]) -> dict[str, object]:
    requests = {
        "document": {"q": "\n".join(paragraphs[:6]), "source": "en", "target": "de"},
        "document_ours": {"text": ["\n".join(paragraphs[6:12])], "nbest": 2},
    }
    files = {"page.md": "\n\n".join(paragraphs[:6]) + "\n"}
    return _answers(run, "context", requests, files, {"source": "en", "target": "de"})


def _answers(
    run: Path, name: str, requests: dict[str, dict], files: dict[str, str], pair: dict[str, str]
) -> dict[str, object]:
    metrics = ServerMetrics()
    models = load_served_models([run], torch.device("cpu"), torch.float32, metrics, None, 1024, True)
    found: dict[str, object] = {}
    with TestClient(create_app(models, Limits(max_sentences=128), metrics)) as client:
        for case, body in requests.items():
            answer = client.post("/translate", json=body)
            found[f"{name}/{case}"] = {"status": answer.status_code, "body": _untimed(answer.json())}
        for filename, text in files.items():
            upload = client.post("/translate_file", files={"file": (filename, text.encode())}, data=pair)
            url = upload.json().get("translatedFileUrl", "")
            document = client.get(url.split("testserver", 1)[1]).text if url else upload.text
            document = re.sub(r'"PO-Revision-Date: [^"]*"', '"PO-Revision-Date: (when)"', document)  # the clock's
            found[f"{name}/file/{filename}"] = {"status": upload.status_code, "document": document}
    return found


def _untimed(body: object) -> object:
    return {k: v for k, v in body.items() if k != "time_ms"} if isinstance(body, dict) else body


def _lines(path: Path, count: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [next(f).strip() for _ in range(count)]


if __name__ == "__main__":
    main()
