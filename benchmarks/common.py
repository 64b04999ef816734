"""Helpers shared by the benchmark scripts: machine facts, timing children, the results log."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("NMT_TEST_DATA") or ROOT.parent / "shared" / "data")  # the corpora, as the tests read them
RESULTS = Path(__file__).with_name("results.jsonl")
WORK = Path(__file__).with_name("work")


def machine() -> dict:
    """CPU model, cores, memory, library versions: written next to every figure."""
    cpu, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu == "unknown":
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    import torch

    # What decides the fast paths: the vector ISA torch dispatches to and native bf16 (AVX512-BF16, AMX).
    capability = {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": sorted(flags & {"avx512_bf16", "amx_bf16", "amx_tile"}),
    }

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu": cpu,
        **capability,
        "cores": os.cpu_count(),
        "memory_gib": round(mem, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def timed_run(cmd: list[str], **kw) -> tuple[float, float, subprocess.CompletedProcess]:
    """Run ``cmd`` under GNU time: (wall seconds, peak RSS in MiB of the largest process, result)."""
    wrapped = ["/usr/bin/time", "-f", "__time__ %e %M", *cmd]
    result = subprocess.run(wrapped, capture_output=True, text=True, **kw)
    if result.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{result.stderr[-3000:]}")
    line = [x for x in result.stderr.splitlines() if x.startswith("__time__")][-1]
    _, seconds, rss_kib = line.split()
    return float(seconds), int(rss_kib) / 1024, result


def median(values: list[float]) -> float:
    return statistics.median(values)


def record(benchmark: str, rows: list[dict], command: str) -> None:
    """Append one JSON line per benchmark run to results.jsonl."""
    entry = {"benchmark": benchmark, "command": command, "machine": machine(), "rows": rows, "unix_time": int(time.time())}
    with open(RESULTS, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")


def print_table(title: str, rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(*rows[0].keys(), title=title)
    for row in rows:
        table.add_row(*(f"{v:,.2f}" if isinstance(v, float) else str(v) for v in row.values()))
    Console().print(table)


def alternate_translations(models: dict, lines: list[str], batch_sizes: str, rounds: int, reference: str) -> list[dict]:
    """Translate ``lines`` with each loaded model (name -> ``LoadedModel``), beam 4 and greedy, at each
    of ``batch_sizes`` ("1,16"), the models alternating round by round; one row per (model, batch,
    beam) with sentences/s (median of the rounds) and how many outputs equal ``reference``'s."""
    from dataclasses import replace

    from nmt_cli.decode.translator import Translator

    results: dict = {}
    for _ in range(rounds):
        for name, loaded in models.items():
            for batch in (int(b) for b in batch_sizes.split(",")):
                for beam in (4, 1):
                    translator = Translator(loaded, replace(loaded.recipe.decode, beam=beam, batch_size=batch))
                    start = time.perf_counter()
                    out = [h[0][0] for h in translator.translate(lines)]
                    results.setdefault((name, batch, beam), []).append((time.perf_counter() - start, out))
    rows = []
    for (name, batch, beam), runs in results.items():
        expected = results[(reference, batch, beam)][0][1]
        same = sum(a == b for a, b in zip(runs[0][1], expected))
        rate = len(lines) / statistics.median(r[0] for r in runs)
        row = {"variant": name, "batch": batch, "beam": beam, "sent/s": round(rate, 2)}
        rows.append(row | {"same output": f"{same}/{len(lines)}"})
        print(rows[-1], flush=True)
    return rows


# The Transformer of recipes/multi30k_ende.yaml in fairseq 0.12's terms (../shared/peers/train_side_by_side.sh):
# the peer arm of the races against fairseq.
FAIRSEQ_MODEL = [
    "--arch",
    "transformer",
    "--encoder-layers",
    "3",
    "--decoder-layers",
    "3",
    "--encoder-embed-dim",
    "256",
    "--decoder-embed-dim",
    "256",
    "--encoder-ffn-embed-dim",
    "1024",
    "--decoder-ffn-embed-dim",
    "1024",
    "--encoder-attention-heads",
    "4",
    "--decoder-attention-heads",
    "4",
    "--share-all-embeddings",
    "--criterion",
    "label_smoothed_cross_entropy",
    "--label-smoothing",
    "0.1",
    "--optimizer",
    "adam",
    "--adam-betas",
    "(0.9,0.98)",
    "--lr",
    "1e-3",
    "--lr-scheduler",
    "inverse_sqrt",
    "--warmup-updates",
    "400",
    "--max-tokens",
    "4096",
]


# nmt's side of a race against fairseq: no time limit, and no validation, checkpoint or average to interrupt it.
NMT_RACE_SETTINGS = [
    "train.max_time=",
    "train.valid_bleu=false",
    "train.validate_every=0",
    "train.save_every=0",
    "train.average_last=0",
]


def fairseq_train(venv: Path, data_bin: Path, dropout: float, steps: int) -> list[str]:
    """``fairseq-train`` on the CPU with that Transformer: how every race's fairseq command begins."""
    return [
        str(venv / "bin" / "fairseq-train"), str(data_bin), "--cpu", "--seed", "1", "--source-lang", "en",
        "--target-lang", "de", *FAIRSEQ_MODEL, "--dropout", str(dropout), "--max-update", str(steps),
    ]  # fmt: skip


def parse_arm(text: str) -> tuple[str, list[str]]:
    name, _, overrides = text.partition("=")
    return name, [item for item in overrides.split(",") if item]
