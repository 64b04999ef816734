"""The whole job in one call, as ``nmt quickstart`` runs it: prepare, train, average, translate, score.

Works offline on the sample corpus shipped inside the package (``nmt_cli/sample``), so a new
user sees a real result within minutes on a CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .config import Recipe, load_recipe
from .data.align import aligner_installed
from .data.prepare import prepare, text_paths
from .decode.loading import load_model
from .decode.translator import Translator
from .errors import NmtError
from .score.metrics import MetricResult, score
from .train.loop import train
from .utils.allocator import release_freed_memory
from .utils.files import atomic_open, split_lines

PAIRS = ("en-de", "en-fr")
Log = Callable[[str], None]


@dataclass(frozen=True)
class QuickstartResult:
    """What the summary shows."""

    recipe: Recipe
    run_dir: Path
    test_source: Path
    test_reference: Path
    hypotheses: Path
    scores: list[MetricResult]
    baseline: list[MetricResult]
    examples: list[tuple[str, str, str]]
    seconds: dict[str, float]


def sample_root(pair: str) -> Path:
    """The bundled corpus folder of a language pair."""
    if pair not in PAIRS:
        raise NmtError(f"--pair {pair}: the sample corpus has {', '.join(PAIRS)}")
    folder = Path(str(resources.files("nmt_cli") / "sample" / pair))
    if not (folder / "train.en.gz").is_file():
        raise NmtError(f"{folder}: the bundled sample corpus is missing; reinstall nmt")
    return folder


def quickstart_recipe(pair: str, workdir: Path, minutes: float, overrides: Sequence[str] = ()) -> Recipe:
    """The bundled quickstart recipe, pointed at the sample corpus and ``workdir``."""
    recipe_path = Path(str(resources.files("nmt_cli") / "recipes" / "quickstart.yaml"))
    src, tgt = pair.split("-")
    settings = [
        f"name=quickstart_{src}{tgt}",
        f"data.src_lang={src}",
        f"data.tgt_lang={tgt}",
        f"data.root={sample_root(pair)}",
        f"data.output={workdir / 'data'}",
        f"train.dir={workdir / 'model'}",
        f"train.max_time={minutes:g}m",
    ]
    if not aligner_installed():  # guided alignment needs the align extra; the quickstart runs without it
        settings += ["data.align=false", "train.guided_alignment=0"]
    return load_recipe(recipe_path, [*settings, *overrides])


def run_quickstart(recipe: Recipe, log: Log = print, examples: int = 5) -> QuickstartResult:
    """Prepare, train (for the recipe's time budget), average, translate the test set, score it."""
    seconds: dict[str, float] = {}
    clock = time.monotonic()
    prepare(recipe, log=log)
    seconds["prepare"] = time.monotonic() - clock
    clock = time.monotonic()
    train(recipe, resume=None, log=log)
    release_freed_memory()  # training's heap, before the translation allocates its own
    seconds["train"] = time.monotonic() - clock
    clock = time.monotonic()
    source, reference = text_paths(recipe.data_dir, "test", recipe)
    sources = split_lines(source.read_text(encoding="utf-8"))
    references = split_lines(reference.read_text(encoding="utf-8"))
    loaded = load_model(recipe.run_dir)
    translator = Translator(loaded, recipe.decode)  # the recipe's decoding settings, as nmt translate
    outputs = [hyps[0].text for hyps in translator.translate(sources)]
    hypotheses = recipe.run_dir / "test.hyp"
    with atomic_open(hypotheses, "w", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in outputs))
    seconds["translate"] = time.monotonic() - clock
    step = max(1, len(sources) // examples)
    shown = [(sources[i], references[i], outputs[i]) for i in range(0, len(sources), step)][:examples]
    return QuickstartResult(
        recipe,
        recipe.run_dir,
        source,
        reference,
        hypotheses,
        score(outputs, [references], ("bleu", "chrf")),
        score(sources, [references], ("bleu", "chrf")),
        shown,
        seconds,
    )
