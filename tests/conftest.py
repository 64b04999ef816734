"""Shared fixtures: real Multi30k slices, a prepared tiny dataset, a tiny trained model.

Tests come in three tiers, one folder each: ``unit`` (seeded random tiny models, no data files),
``integration`` (real data slices, trained tiny models) and ``cli`` (subprocesses, torchrun,
signals, servers); ``pytest -m unit`` runs the first alone.

Tests that need the real corpora read them from ``NMT_TEST_DATA`` (default: ``../shared/data`` beside the
checkout), which holds ``multi30k/`` (``train.en.gz``, ``val.de.gz``, ``test_2016_flickr.en.gz``, ...) and
``wmt14/`` (``newstest2014.en.gz``, ``newstest2014.de.gz``). They skip with a reason when it is missing, and
fail loudly when the ``CI`` environment variable is set (CI always has the data).
"""

from __future__ import annotations

import collections
import contextlib
import gzip
import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

# pytest-xdist runs the suite in several processes (pyproject's addopts), and tests start more (nmt commands,
# torchrun): more threads than cores. OpenMP's threads then wait for each other by yielding the core instead of
# spinning on it, or every torch operation crawls; set before torch starts its thread pool, inherited by every
# process a test starts. Only the speed changes.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

DATA = Path(os.environ.get("NMT_TEST_DATA") or Path(__file__).resolve().parents[1].parent / "shared" / "data")
MULTI30K = DATA / "multi30k"

# pytest-xdist runs the suite in several processes (pyproject's addopts): each takes its share of the cores, as
# more threads than cores make every torch operation wait on the others.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // WORKERS)))


TIERS = ("unit", "integration", "cli")  # the folders under tests/, and the markers they give


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test is marked with its tier (``pytest -m unit``); tests marked ``cuda`` skip cleanly on
    machines without a GPU (CI); the files that need the trained model run last."""
    tests = Path(__file__).resolve().parent
    # The files that need the trained ``overfit`` model run last: while one worker trains it (a minute), the
    # others run everything else instead of waiting for it. Within each half, the files with the most tests go
    # first, so that the last ones handed out are small and the workers finish together. pytest-xdist keeps this
    # order (``--no-loadscope-reorder`` in pyproject's addopts; its own order, by size alone, would hand out a file
    # that needs the model while it is still being trained).
    needing = {item.path for item in items if "overfit" in getattr(item, "fixturenames", ())}
    tests_in = collections.Counter(item.path for item in items)
    items.sort(key=lambda item: (item.path in needing, -tests_in[item.path], str(item.path)))
    skip = None if torch.cuda.is_available() else pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        tier = Path(item.path).resolve().relative_to(tests).parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
        if skip is not None and "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """A command run in this process (``nmt_in_process``) sets torch's threads for itself; the next test gets
    the worker's share back."""
    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def nmt_in_process(*args: object, stdin: str | None = None):
    """``nmt ARGS`` in this process (no interpreter and torch to start per call), as a finished process
    (``returncode``, ``stdout``, ``stderr``): for the tests where a real process is not the point."""
    import subprocess

    from typer.testing import CliRunner

    from nmt_cli.cli import app

    result = CliRunner().invoke(app, [str(arg) for arg in args], input=stdin)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def kill_at_first_checkpoint(cmd: list[str], run_dir: Path, timeout: float = 180) -> int:
    """Start ``nmt train`` (``cmd``), SIGKILL it once a step checkpoint exists; return that checkpoint's step."""
    import signal
    import subprocess
    import time

    from nmt_cli.train import checkpoint

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while not checkpoint.step_checkpoints(run_dir) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "training ended before it could be killed"
    return int(checkpoint.step_checkpoints(run_dir)[-1].stem.split("_")[1])


REPO = Path(__file__).resolve().parents[1]
DOCUMENTED_PAGES = [REPO / "README.md", REPO / "docs" / "getting-started.md"]


def documented_command_lines() -> list[tuple[str, str]]:
    """(page, command line) for every `nmt ...` in a bash block of the README and the getting-started page, in
    the order a reader meets them: each part of a `&&` chain on its own, comments dropped, redirections kept."""
    found = []
    for page in DOCUMENTED_PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            for line in block.splitlines():
                line = re.sub(r"\s+#.*$", "", line)
                for part in line.split("&&"):
                    if part.strip().startswith("nmt "):
                        found.append((page.name, part.strip()))
    return found


def need(path: Path) -> Path:
    """Return ``path``, or skip (fail under CI) when the shared data is not there."""
    if not path.exists():
        message = f"test data not found at {path}; set NMT_TEST_DATA to the folder holding multi30k/ and wmt14/"
        if os.environ.get("CI"):
            pytest.fail(message + " (it must be present in CI)")
        pytest.skip(message)
    return path


def read_lines(path: Path, n: int | None = None, start: int = 0) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in itertools.islice(handle, start, None if n is None else start + n)]


def write_slice(folder: Path, prefix: str, pairs: dict[str, list[str]], gz: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for lang, lines in pairs.items():
        path = folder / (f"{prefix}.{lang}" + (".gz" if gz else ""))
        opener = gzip.open if gz else open
        with opener(path, "wt", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))


@contextlib.contextmanager
def built_once(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[tuple[Path, bool]]:
    """A folder for a session fixture's files built once for the whole run: (folder, whether to build it now).
    Under pytest-xdist the workers share it (the first to ask builds it while the others wait for it, as a trained
    model takes a minute); without, it is a fresh temporary folder."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield tmp_path_factory.mktemp(name), True
        return
    from filelock import FileLock  # a dependency of torch

    shared = tmp_path_factory.getbasetemp().parent  # pytest-N/, above each worker's popen-gwK/
    folder, done = shared / name, shared / f"{name}.done"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            folder.mkdir(exist_ok=True)
            yield folder, True
            done.touch()
        else:
            yield folder, False


@pytest.fixture(scope="session")
def multi30k() -> Path:
    return need(MULTI30K)


@pytest.fixture(scope="session")
def m30k_slice(tmp_path_factory: pytest.TempPathFactory, multi30k: Path) -> Path:
    """3,000 training pairs (gzip), 100 validation and 100 test pairs of Multi30k EN-DE-FR."""
    with built_once(tmp_path_factory, "m30k") as (folder, build):
        if build:
            langs = ("en", "de", "fr")
            train = {lang: read_lines(multi30k / f"train.{lang}.gz", 3000) for lang in langs}
            write_slice(folder, "train", train, gz=True)
            write_slice(folder, "val", {lang: read_lines(multi30k / f"val.{lang}.gz", 100) for lang in langs})
            test = {lang: read_lines(multi30k / f"test_2016_flickr.{lang}.gz", 100) for lang in langs}
            write_slice(folder, "test", test)
    return folder


def tiny_recipe_yaml(root: Path, out: Path, run: Path, tgt: str = "de", extra: str = "") -> str:
    return f"""
data:
  src_lang: en
  tgt_lang: {tgt}
  root: {root}
  train: [train]
  valid: [val]
  test: [test]
  output: {out}
  workers: 1
vocab:
  size: 500
model:
  layers: 2
  d_model: 32
  n_heads: 4
  d_ff: 64
  dropout: 0.0
  max_positions: 128
train:
  dir: {run}
  max_tokens: 1500
  max_steps: 6
  lr_schedule: inverse_sqrt
  lr: 0.003
  warmup: 5
  validate_every: 0
  save_every: 3
  log_every: 3
  threads: 1
  calibrate: false  # the confidence fit at the end costs seconds per run; the tests that need it turn it on
{extra}"""


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory, m30k_slice: Path):
    """A recipe and its prepared dataset built from the slice."""
    from nmt_cli.config import load_recipe
    from nmt_cli.data.prepare import prepare

    with built_once(tmp_path_factory, "prepared") as (folder, build):
        path = folder / "tiny.yaml"
        if build:
            path.write_text(tiny_recipe_yaml(m30k_slice, folder / "data", folder / "run"))
            prepare(load_recipe(path), log=lambda _m: None, progress=False)
    return load_recipe(path)


# By update 250 the training loss is near zero (the fixture run's metrics.jsonl): every pair memorised, in less
# time than more updates would take on the worker that trains it while the others wait for it.
OVERFIT_STEPS = 250
OVERFIT_SETTINGS = [
    "vocab.size=900",
    "data.clean.max_ratio=0",
    "model.d_model=128",
    "model.d_ff=512",
    "model.norm=pre",
    f"train.max_steps={OVERFIT_STEPS}",
    "train.label_smoothing=0",
    "train.log_every=50",
    f"train.save_every={OVERFIT_STEPS // 2}",
    "train.max_tokens=3000",
    "train.lr_schedule=inverse_sqrt",
    "train.warmup=100",
    "train.lr=0.003",
    "train.threads=2",
    "train.average_last=0",
]


@pytest.fixture(scope="session")
def overfit(tmp_path_factory: pytest.TempPathFactory, multi30k: Path):
    """A tiny model trained to memorise 64 real Multi30k pairs (label smoothing off)."""
    from nmt_cli.config import load_recipe
    from nmt_cli.data.prepare import prepare
    from nmt_cli.train.loop import train

    src, tgt = read_lines(multi30k / "train.en.gz", 64), read_lines(multi30k / "train.de.gz", 64)
    with built_once(tmp_path_factory, "overfit") as (folder, build):
        path = folder / "overfit.yaml"
        if build:
            for split in ("train", "val", "test"):
                write_slice(folder / "c", split, {"en": src, "de": tgt})
            path.write_text(tiny_recipe_yaml(folder / "c", folder / "data", folder / "run"))
            recipe = load_recipe(path, OVERFIT_SETTINGS)
            prepare(recipe, log=lambda _m: None, progress=False)
            train(recipe, log=lambda _m: None)
    return load_recipe(path, OVERFIT_SETTINGS).run_dir, src, tgt


@pytest.fixture(scope="session", autouse=True)
def _first_worker_trains_the_model(request: pytest.FixtureRequest) -> None:
    """Under pytest-xdist the first worker trains the shared ``overfit`` model before its first test, while the
    others run the tests that do not need it: the files that do, all scheduled last, then find it ready."""
    if os.environ.get("PYTEST_XDIST_WORKER") != "gw0" or not MULTI30K.exists():
        return
    if any("overfit" in getattr(item, "fixturenames", ()) for item in request.session.items):
        request.getfixturevalue("overfit")


def start_server(model: Path, *args: str) -> tuple:
    """``nmt serve -m MODEL ARGS`` in its own process on a free loopback port, once it answers /health:
    (process, url, log lines, the thread that reads them; a full pipe would stop the server)."""
    import socket
    import subprocess
    import sys
    import threading
    import time
    import urllib.error
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "nmt_cli", "serve", "-m", str(model), "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    log: list[str] = []
    reader = threading.Thread(target=lambda: log.extend(process.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while True:
        if process.poll() is not None:
            reader.join(10)
            raise AssertionError(f"the server exited: {''.join(log)}")
        try:
            if urllib.request.urlopen(url + "/health", timeout=5).status == 200:
                return process, url, log, reader
        except (urllib.error.URLError, ConnectionError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError("the server did not start")
        time.sleep(0.05)


def nmt_log_probs(loaded, source: str, target: str) -> torch.Tensor:
    """An nmt model's log-probability of each target piece and of </s>, teacher-forced: what an import's
    tests compare with the original toolkit's forward."""
    src = loaded.src_vocab.encode(source, out_type=int) + [3]
    tgt = loaded.tgt_vocab.encode(target, out_type=int)
    with torch.no_grad():
        memory, mask = loaded.model.encode(torch.tensor([src]))
        hidden = loaded.model.decode(torch.tensor([[2] + tgt]), memory, mask)
        log_probs = torch.log_softmax(loaded.model.logits(hidden)[0], -1)
    return log_probs[torch.arange(len(tgt) + 1), torch.tensor(tgt + [3])]


# Rows of a batch for train.packed's tests: every row but one padded on at least one side.
PACKING_LENGTHS = [(7, 5), (3, 9), (11, 2), (1, 1), (6, 6)]


def padded_pairs(lengths: list[tuple[int, int]], seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
    """Random right-padded rows (pad id 0) of the given (source, target) lengths, as ``data/batches.py`` pads
    them, with the counts a real batch carries: (src, tgt_in, tgt_out, target tokens, source tokens)."""
    generator = torch.Generator().manual_seed(seed)
    rows, width_s, width_t = len(lengths), max(s for s, _ in lengths), max(t for _, t in lengths)
    src = torch.full((rows, width_s), 0)
    tgt = torch.full((rows, width_t + 1), 0)
    for row, (s, t) in enumerate(lengths):
        src[row, :s] = torch.randint(4, 60, (s,), generator=generator)
        tgt[row, : t + 1] = torch.randint(4, 60, (t + 1,), generator=generator)
    tgt_in, tgt_out = tgt[:, :-1].clone(), tgt[:, 1:].clone()
    for row, (_, t) in enumerate(lengths):
        tgt_out[row, t:] = 0  # tgt_in holds t tokens (BOS y), tgt_out the same t (y EOS)
        tgt_in[row, t:] = 0
    return src, tgt_in, tgt_out, sum(t for _, t in lengths), sum(s for s, _ in lengths)
