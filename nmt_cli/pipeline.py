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
from .data.prepare import prepare, split_text
from .decode.loading import LoadedModel, load_model
from .decode.targets import route
from .decode.translator import Translator
from .errors import NmtError
from .score.metrics import MetricResult, score
from .train.loop import train
from .utils.allocator import release_freed_memory
from .utils.files import atomic_open, split_lines

PAIRS = ("en-de", "en-fr")
BOTH = "en-de,en-fr"  # one multilingual model of both bundled pairs
Log = Callable[[str], None]


@dataclass(frozen=True)
class TestResult:
    """One direction's held-out test set: its files, scores against the copy-the-source baseline, examples."""

    direction: str
    test_source: Path
    test_reference: Path
    hypotheses: Path
    scores: list[MetricResult]
    baseline: list[MetricResult]
    examples: list[tuple[str, str, str]]


@dataclass(frozen=True)
class QuickstartResult:
    """What the summary shows: per direction (one, or each of a multilingual model's), its test results."""

    recipe: Recipe
    run_dir: Path
    tests: list[TestResult]
    seconds: dict[str, float]

    # the first direction's, as a bilingual quickstart has only one
    @property
    def test_source(self) -> Path:
        return self.tests[0].test_source

    @property
    def test_reference(self) -> Path:
        return self.tests[0].test_reference

    @property
    def hypotheses(self) -> Path:
        return self.tests[0].hypotheses

    @property
    def scores(self) -> list[MetricResult]:
        return self.tests[0].scores

    @property
    def baseline(self) -> list[MetricResult]:
        return self.tests[0].baseline

    @property
    def examples(self) -> list[tuple[str, str, str]]:
        return self.tests[0].examples


def sample_root(pair: str) -> Path:
    """The bundled corpus folder of a language pair."""
    if pair not in PAIRS:
        raise NmtError(f"--pair {pair}: the sample corpus has {', '.join(PAIRS)}")
    folder = Path(str(resources.files("nmt_cli") / "sample" / pair))
    if not (folder / "train.en.gz").is_file():
        raise NmtError(f"{folder}: the bundled sample corpus is missing; reinstall nmt")
    return folder


def quickstart_recipe(pair: str, workdir: Path, minutes: float, overrides: Sequence[str] = ()) -> Recipe:
    """The bundled quickstart recipe, pointed at the sample corpus and ``workdir``; ``pair`` "en-de,en-fr"
    trains one multilingual model of both (each corpus from its own folder, ``data.roots``)."""
    recipe_path = Path(str(resources.files("nmt_cli") / "recipes" / "quickstart.yaml"))
    common = [f"data.output={workdir / 'data'}", f"train.dir={workdir / 'model'}", f"train.max_time={minutes:g}m"]
    if pair == BOTH:
        roots = ", ".join(f"{p}: '{sample_root(p)}'" for p in PAIRS)
        settings = ["name=quickstart_multi", "data.src_lang=", "data.tgt_lang=", f"data.pairs=[{BOTH}]"]
        # guided alignment is not available for several directions yet (config.py)
        settings += [f"data.roots={{{roots}}}", "data.align=false", "train.guided_alignment=0"]
    else:
        src, tgt = pair.split("-")
        settings = [f"name=quickstart_{src}{tgt}", f"data.src_lang={src}", f"data.tgt_lang={tgt}"]
        settings.append(f"data.root={sample_root(pair)}")
    if not aligner_installed():  # guided alignment needs the align extra; the quickstart runs without it
        settings += ["data.align=false", "train.guided_alignment=0"]
    return load_recipe(recipe_path, [*settings, *common, *overrides])


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
    loaded = load_model(recipe.run_dir)
    tests = [_test_result(recipe, loaded, src, tgt, examples) for src, tgt in recipe.directions]
    seconds["translate"] = time.monotonic() - clock
    return QuickstartResult(recipe, recipe.run_dir, tests, seconds)


def _test_result(recipe: Recipe, loaded: LoadedModel, src: str, tgt: str, examples: int) -> TestResult:
    """One direction's test set translated (the recipe's decoding settings, as nmt translate) and scored."""
    split = f"test.{src}-{tgt}" if recipe.multilingual else "test"
    source, reference = split_text(recipe.data_dir, split, src, tgt)
    sources = split_lines(source.read_text(encoding="utf-8"))
    references = split_lines(reference.read_text(encoding="utf-8"))
    way = route(recipe.data, loaded.src_vocab, tgt if recipe.multilingual else None, str(recipe.run_dir), None)
    translator = Translator(loaded, recipe.decode, source_prefix=way.source_prefix, target_tag=way.target_tag)
    outputs = [hyps[0].text for hyps in translator.translate(sources)]
    hypotheses = recipe.run_dir / (f"test.{src}-{tgt}.hyp" if recipe.multilingual else "test.hyp")
    with atomic_open(hypotheses, "w", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in outputs))
    step = max(1, len(sources) // examples)
    shown = [(sources[i], references[i], outputs[i]) for i in range(0, len(sources), step)][:examples]
    return TestResult(
        f"{src}-{tgt}",
        source,
        reference,
        hypotheses,
        score(outputs, [references], ("bleu", "chrf")),
        score(sources, [references], ("bleu", "chrf")),
        shown,
    )
