"""Load test of ``nmt serve`` on loopback: concurrent clients against offline batched translation,
against the same server with batching off, and a lone request against ``nmt translate`` on one line.

    python benchmarks/bench_serve.py [--model RUN] [--sentences 400] [--clients 1,8,32,128]
                                     [--threads 2] [--soak 600]

Every client sends one Multi30k test 2016 sentence per request (LibreTranslate's shape), on its
own keep-alive connection, until the shared list is used up; each level sends the same
``--sentences`` sentences. Offline figures come from the translator in this process, with the model
loaded before the clock starts. ``--soak`` runs 32 clients for that many seconds and reports the
server's resident memory at its start and end. Bounded in count (the list) and in time
(``--level-timeout``). Clients and server share the machine's cores, as they would on one host.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

from common import ROOT, SHARED, WORK, print_table, record


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """``nmt serve`` in a child process."""

    def __init__(self, model: str, threads: int, batching: bool, glossary: Path | None = None) -> None:
        self.port = free_port()
        flag = "--batching" if batching else "--no-batching"
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nmt_cli",
                "serve",
                "-m",
                model,
                "--port",
                str(self.port),
                "--threads",
                str(threads),
                flag,
                "--log-level",
                "warning",
                "--max-queue",
                "100000",
                *(["--glossary", f"terms={glossary}"] if glossary is not None else []),
            ],
            cwd=ROOT,
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    sys.exit("the server did not start")
                time.sleep(0.2)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


SOCKET_TIMEOUT = 120.0  # a request slower than this counts as failed


def load(
    port: int,
    sentences: list[str],
    clients: int,
    timeout: float,
    glossary: str | None = None,
    bodies: list[dict] | None = None,
) -> dict:
    """``clients`` threads share ``sentences`` until they are used up or ``timeout`` seconds have passed
    (no new request starts after that; those in flight finish); per-request latencies and the wall time.
    ``bodies``: the requests themselves instead (each its own direction), one per sentence."""
    latencies: list[float] = []
    failures = [0]
    total = len(bodies) if bodies is not None else len(sentences)
    next_index = iter(range(total))
    lock = threading.Lock()
    deadline = time.monotonic() + timeout

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=SOCKET_TIMEOUT)
        while time.monotonic() < deadline:
            with lock:
                index = next(next_index, None)
            if index is None:
                break
            request = dict(bodies[index]) if bodies is not None else {"q": sentences[index], "source": "en", "target": "de"}
            if glossary is not None:
                request["glossary"] = glossary
            body = json.dumps(request)
            started = time.perf_counter()
            try:
                connection.request("POST", "/translate", body, {"Content-Type": "application/json"})
                answer = connection.getresponse()
                answer.read()
                ok = answer.status == 200
            except OSError:
                ok = False
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=SOCKET_TIMEOUT)
            with lock:
                if ok:
                    latencies.append(time.perf_counter() - started)
                else:
                    failures[0] += 1
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000 if ordered else float("nan")

    return {
        "clients": clients,
        "requests": len(latencies),
        "failed": failures[0],
        "unsent": total - len(latencies) - failures[0],
        "req_per_s": len(latencies) / wall,
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "wall_s": wall,
    }


def offline_figures(model: str, sentences: list[str], threads: int, repeats: int) -> dict:
    """Batched throughput of the translator on all sentences (median of ``repeats``, at its default batches
    and at 32 sentences per batch, the most a load of 32 one-sentence clients can put in flight), and its
    median latency on each sentence alone: the same sentences the clients send. Model loaded first."""
    import torch

    from nmt_cli.decode.loading import load_model
    from nmt_cli.decode.translator import Translator

    torch.set_num_threads(threads)
    loaded = load_model(model)
    figures = {}
    for label, batch_size in (("offline_sent_per_s", 0), ("offline_batch32_sent_per_s", 32)):
        translator = Translator(loaded, replace(loaded.recipe.decode, batch_size=batch_size))
        list(translator.translate(sentences[:32]))  # warm-up
        rates = []
        for _ in range(repeats):
            started = time.perf_counter()
            list(translator.translate(sentences))
            rates.append(len(sentences) / (time.perf_counter() - started))
        figures[label] = statistics.median(rates)
    single = []
    for sentence in sentences:
        started = time.perf_counter()
        list(translator.translate([sentence]))
        single.append((time.perf_counter() - started) * 1000)
    figures["offline_one_sentence_ms"] = statistics.median(single)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=str(WORK / "quality_multi30k_ende_30m"))
    parser.add_argument("--sentences", type=int, default=400)
    parser.add_argument("--clients", default="1,8,32,128")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=3, help="offline repeats (medians)")
    parser.add_argument("--level-timeout", type=float, default=300)
    parser.add_argument("--soak", type=float, default=0, help="seconds of 32 clients, watching memory")
    parser.add_argument("--soak-only", action="store_true", help="only the soak (no levels, no offline figures)")
    parser.add_argument("--source", type=Path, help="the requests' sentences, one a line (default: Multi30k test 2016)")
    parser.add_argument("--glossary", type=Path, help="only compare requests naming this glossary with requests without one")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the --glossary comparison")
    parser.add_argument(
        "--directions",
        help="a multilingual model's directions, e.g. en-de,de-en,en-fr,fr-en: requests of the first alone against "
        "requests cycling through all of them, alternating, on one server (Multi30k test 2016 in each language)",
    )
    args = parser.parse_args()
    if args.source is not None:
        text = args.source.read_text(encoding="utf-8")
    else:
        text = gzip.decompress((SHARED / "multi30k" / "test_2016_flickr.en.gz").read_bytes()).decode()
    sentences = text.splitlines()[: args.sentences]
    if args.glossary is not None:
        glossary_levels(args, sentences)
        return
    if args.directions:
        direction_levels(args)
        return
    if args.soak_only:
        server = Server(args.model, args.threads, True)
        load(server.port, sentences, 32, args.level_timeout)  # warm-up at the soak's load, before the first RSS
        row = soak(server, sentences, args.soak)
        server.stop()
        record("serve_soak", [row], "python benchmarks/bench_serve.py " + " ".join(sys.argv[1:]))
        return
    levels = [int(c) for c in args.clients.split(",")]
    offline = offline_figures(args.model, sentences, args.threads, args.repeats)
    print(json.dumps(offline), flush=True)
    rows = []
    for batching in (True, False):
        server = Server(args.model, args.threads, batching)
        load(server.port, sentences[:16], 4, args.level_timeout)  # warm-up
        for clients in levels:
            row = {
                "batching": batching,
                **load(server.port, sentences, clients, args.level_timeout),
                "server_rss_mib": rss_mib(server.process.pid),
            }
            row["vs_offline"] = row["req_per_s"] / offline["offline_sent_per_s"]
            row["vs_offline_batch32"] = row["req_per_s"] / offline["offline_batch32_sent_per_s"]
            print(json.dumps(row), flush=True)
            rows.append(row)
        if batching and args.soak:
            load(server.port, sentences, 32, args.level_timeout)  # the soak's load before its first RSS reading
            rows.append(soak(server, sentences, args.soak))
        server.stop()
    lone = next(r for r in rows if r.get("batching") and r.get("clients") == 1)
    summary = {
        **offline,
        "lone_p50_ms": lone["p50_ms"],
        "lone_vs_translate_one": lone["p50_ms"] / offline["offline_one_sentence_ms"],
    }
    for row in rows:
        if row.get("batching") and "p95_ms" in row:
            row["p95_vs_lone"] = row["p95_ms"] / lone["p50_ms"]
    print_table("nmt serve under load", rows + [summary])
    record("serve", rows + [summary], "python benchmarks/bench_serve.py " + " ".join(sys.argv[1:]))


def direction_levels(args: argparse.Namespace) -> None:
    """Each direction's requests alone against the same requests cycling through every direction of a
    multilingual model, on one server with continuous batching (one decoding loop for every direction),
    alternating, medians of ``--rounds`` per client level; the ratio compares the mixed load with the rate its
    requests would have at each direction's own rate (the directions' sentences differ in length: the first
    direction alone is not the mixed load's yardstick)."""
    pairs = [tuple(pair.split("-")) for pair in args.directions.split(",")]
    text = {
        lang: gzip.decompress((SHARED / "multi30k" / f"test_2016_flickr.{lang}.gz").read_bytes()).decode().splitlines()
        for lang in {lang for pair in pairs for lang in pair}
    }
    count = args.sentences
    alone = {f"{src}-{tgt}": [{"q": text[src][i], "source": src, "target": tgt} for i in range(count)] for src, tgt in pairs}
    mixed = [
        {"q": text[src][i], "source": src, "target": tgt} for i, (src, tgt) in zip(range(count), itertools.cycle(pairs))
    ]
    server = Server(args.model, args.threads, True)
    load(server.port, [], 4, args.level_timeout, bodies=mixed[:16])  # warm-up
    rows = []
    for clients in (int(c) for c in args.clients.split(",")):
        rates: dict[str, list[float]] = {name: [] for name in [*alone, "mixed"]}
        for _ in range(args.rounds):
            for name, bodies in [*alone.items(), ("mixed", mixed)]:
                rates[name].append(load(server.port, [], clients, args.level_timeout, bodies=bodies)["req_per_s"])
        medians = {name: statistics.median(values) for name, values in rates.items()}
        # the mixed load's requests, each direction's quarter at that direction's own rate: what mixing should keep
        expected = len(alone) / sum(1 / medians[name] for name in alone)
        rows.append(
            {
                "clients": clients,
                **{f"req/s {name} alone": medians[name] for name in alone},
                "req/s mixed": medians["mixed"],
                "mixed / alone": medians["mixed"] / expected,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    server.stop()
    print_table("nmt serve: each direction alone against mixed directions", rows)
    record("serve_directions", rows, "python benchmarks/bench_serve.py " + " ".join(sys.argv[1:]))


def glossary_levels(args: argparse.Namespace, sentences: list[str]) -> None:
    """Requests naming a served glossary against the same requests without one, on one server with continuous
    batching, alternating, medians of ``--rounds`` per client level."""
    server = Server(args.model, args.threads, True, args.glossary)
    load(server.port, sentences[:16], 4, args.level_timeout, "terms")  # warm-up
    rows = []
    for clients in (int(c) for c in args.clients.split(",")):
        rates: dict[str, list[float]] = {"none": [], "glossary": []}
        for _ in range(args.rounds):
            for name in rates:
                named = "terms" if name == "glossary" else None
                rates[name].append(load(server.port, sentences, clients, args.level_timeout, named)["req_per_s"])
        none, with_terms = statistics.median(rates["none"]), statistics.median(rates["glossary"])
        rows.append({"clients": clients, "req/s none": none, "req/s glossary": with_terms, "ratio": with_terms / none})
        print(json.dumps(rows[-1]), flush=True)
    server.stop()
    print_table("nmt serve: requests with a glossary against none", rows)
    record("serve_glossary", rows, "python benchmarks/bench_serve.py " + " ".join(sys.argv[1:]))


def soak(server: Server, sentences: list[str], seconds: float) -> dict:
    """32 clients for ``seconds``, cycling through the sentences; RSS at the start and end."""
    start_rss = rss_mib(server.process.pid)
    ended = time.monotonic() + seconds
    served, failed = 0, 0
    while time.monotonic() < ended:
        result = load(server.port, sentences, 32, max(1.0, ended - time.monotonic()))
        served += result["requests"]
        failed += result["failed"]
    end_rss = rss_mib(server.process.pid)
    row = {
        "soak_s": seconds,
        "requests": served,
        "failed": failed,
        "rss_start_mib": start_rss,
        "rss_end_mib": end_rss,
        "rss_growth": end_rss / start_rss - 1,
    }
    print(json.dumps(row), flush=True)
    return row


if __name__ == "__main__":
    main()
