"""``nmt distill RECIPE``: a student trained on what its teacher translates, in one command.

Stages, each said as it starts, each picking up where a killed run stopped:

1. the training sources gathered (``corpus.gather_sources``);
2. the teacher translates them (``corpus.teach``: committed in blocks, so a kill loses one block at most);
3. the pairs the teacher got wrong dropped (``corpus.keep_taught``: empty, copied, out of length ratio, doubted);
4. the student's data prepared from the distilled corpus (``nmt prepare``'s steps, cached as there) and
5. the student trained (``nmt train``: it resumes from its checkpoints);
6. a report: teacher and student on the recipe's test sets, their speed and size (``report.py``).

The student is the recipe's model; its ``data.train`` is the distilled corpus (and the original pairs with
``distill.keep_original``); the recipe it is trained with is written beside the corpus (``student.yaml``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..config import Recipe, dump_recipe, recipe_from_dict, recipe_to_dict
from ..data.prepare import prepare
from ..errors import NmtError
from ..utils.files import atomic_open, ensure_writable_dir
from ..utils.run_folder import RunFolder
from .corpus import Filtered, gather_sources, keep_taught, teach, work_dir
from .teachers import Teacher, teacher_of

Log = Callable[[str], None]
Progress = Callable[[Iterator[str], int, int], Iterator[str]]


@dataclass
class Distilled:
    """What a distillation made: the student's recipe and run folder, the filter's counts, each stage's time."""

    student: Recipe
    folder: Path
    filtered: Filtered
    seconds: dict[str, float] = field(default_factory=dict)


def distill(
    recipe: Recipe,
    log: Log = print,
    progress: Progress = lambda items, done, total: items,
    restart: bool = False,
    device: str = "cpu",
    teacher: Teacher | None = None,
) -> Distilled:
    """Every stage of the module's docstring but the report; ``teacher`` defaults to ``recipe.distill``'s."""
    folder = ensure_writable_dir(work_dir(recipe))
    src, tgt = recipe.data.src_lang, recipe.data.tgt_lang
    seconds: dict[str, float] = {}
    clock = _Clock(seconds)

    # one distillation at a time in a folder: two would write the same teacher.tsv
    with RunFolder(folder).locked(log, "nmt distill", "give this one another distill.dir"):
        with clock("sources"):
            pairs = gather_sources(recipe, folder)
            if not pairs:
                raise NmtError(f"data.train: no training pairs to distil (read {', '.join(recipe.data.train) or 'none'})")
            log(f"distill 1/5: {pairs:,} training pairs gathered into {folder}")
        with clock("teacher"):
            teacher = teacher or teacher_of(recipe, device)
            log(f"distill 2/5: the teacher translates them into {folder / 'teacher.tsv'} (kept every "
                f"{recipe.distill.chunk_lines:,} lines: a run started again goes on from there)")  # fmt: skip
            teach(teacher, folder / f"source.{src}", folder / "teacher.tsv", recipe.distill, progress, restart)
        with clock("filter"):
            filtered = keep_taught(folder / f"source.{src}", folder / "teacher.tsv", folder, src, tgt, recipe.distill)
            log(f"distill 3/5: {filtered.summary()}; the distilled corpus is {folder / 'distilled'}.{{{src},{tgt}}}")
    student = student_recipe(recipe, folder)
    with atomic_open(folder / "student.yaml", "w") as handle:
        handle.write(dump_recipe(student))
    with clock("prepare"):
        log(f"distill 4/5: preparing the student's data in {student.data_dir}")
        prepare(student, log=log)
    with clock("train"):
        from ..train.loop import train

        log(f"distill 5/5: training the student in {student.run_dir}")
        train(student, resume=None, log=log)
    return Distilled(student, folder, filtered, seconds)


def student_recipe(recipe: Recipe, folder: Path) -> Recipe:
    """``recipe`` with its training corpus the distilled one (absolute, so ``data.root`` still finds the
    validation and test sets), and the original corpora beside it with ``distill.keep_original``."""
    raw = recipe_to_dict(recipe)
    data = raw["data"]
    root = Path(data["root"] or ".")
    originals = [str((root / prefix).resolve()) for prefix in data["train"]] if recipe.distill.keep_original else []
    data["train"] = [str((folder / "distilled").resolve()), *originals]
    data["synthetic"] = [str((root / p).resolve()) for p in data["synthetic"]] if originals else []
    data["tag_synthetic"] = bool(data["synthetic"]) and data["tag_synthetic"]
    return recipe_from_dict(raw, source=str(folder / "student.yaml"))


class _Clock:
    """``with clock(stage):`` adds the stage's wall-clock seconds to ``seconds``."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = seconds

    def __call__(self, stage: str) -> _Clock:
        self.stage = stage
        return self

    def __enter__(self) -> None:
        self.started = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        self.seconds[self.stage] = self.seconds.get(self.stage, 0.0) + time.monotonic() - self.started


__all__ = ["Distilled", "distill", "student_recipe"]
