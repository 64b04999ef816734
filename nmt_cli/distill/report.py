"""The distillation's report: teacher and student on the recipe's test sets, how fast each translates, how big.

Quality: BLEU and chrF (sacreBLEU) of each on every ``data.test`` set, both translating as ``nmt translate``
does, and the student also as ``--dtype int8`` runs it. Speed: sentences a second on the first test set in this
process (its threads), one sentence at a time and with the default batches; a server teacher's speed is the
server's and is not measured here. Size: the model files on disk, and the weights' bytes in memory.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..config import Recipe
from ..data.corpus import resolve_corpus
from ..data.prepare import pair_root
from ..score.metrics import read_lines, score
from ..utils.files import atomic_open
from .teachers import ModelTeacher, Teacher


@dataclass(frozen=True)
class Side:
    """One model's figures: per test set (BLEU, chrF); sentences a second at batch 1 and by default; sizes."""

    scores: dict[str, tuple[float, float]]
    per_second_batch1: float | None = None
    per_second_default: float | None = None
    file_bytes: int | None = None
    parameter_bytes: int | None = None


def report(student: Recipe, teacher: Teacher, folder: Path, seconds: dict[str, float]) -> dict[str, Any]:
    """Both sides measured, written to ``folder``/report.json, and returned."""
    from ..decode.loading import load_model
    from ..decode.protected import ProtectedEngine
    from ..decode.translator import Translator

    loaded = load_model(student.run_dir)
    engine = ProtectedEngine(Translator(loaded, loaded.recipe.decode))
    tests = _test_sets(student)
    student_side = _side(lambda lines: [h[0].text for h in engine.translate(lines)], tests)
    batch1, default = _speeds(lambda config: ProtectedEngine(Translator(loaded, config)), loaded.recipe.decode, tests)
    student_side = replace(
        student_side,
        per_second_batch1=batch1,
        per_second_default=default,
        file_bytes=(student.run_dir / "model.pt").stat().st_size,
        parameter_bytes=_parameter_bytes(loaded.model),
    )
    student_int8 = _int8_side(student, tests)
    teacher_side = _side(lambda lines: [text for text, _ in teacher.translate(iter(lines))], tests)
    if isinstance(teacher, ModelTeacher):
        translator = teacher.engine.engine
        batch1, default = _speeds(
            lambda config: ProtectedEngine(replace_config(translator, config)), translator.config, tests
        )
        teacher_side = replace(
            teacher_side,
            per_second_batch1=batch1,
            per_second_default=default,
            file_bytes=sum(Path(f).stat().st_size for f in teacher.files),
            parameter_bytes=_parameter_bytes(translator.loaded.model),
        )
    found = {"teacher": asdict(teacher_side), "student": asdict(student_side), "seconds": seconds}
    if student_int8 is not None:
        found["student_int8"] = asdict(student_int8)
    with atomic_open(folder / "report.json", "w") as handle:
        json.dump(found, handle, indent=2)
    return found


def _int8_side(student: Recipe, tests: dict[str, tuple[list[str], list[str]]]) -> Side | None:
    """The student as ``nmt translate --dtype int8`` runs it (what a CPU deployment would): its scores and speeds;
    None where this PyTorch has no int8 products."""
    from ..decode.loading import load_model
    from ..decode.protected import ProtectedEngine
    from ..decode.translator import Translator
    from ..inference.cpu_linear import int8_usable

    if not int8_usable():
        return None
    loaded = load_model(student.run_dir, int8=True)
    engine = ProtectedEngine(Translator(loaded, loaded.recipe.decode))
    side = _side(lambda lines: [h[0].text for h in engine.translate(lines)], tests)
    batch1, default = _speeds(lambda config: ProtectedEngine(Translator(loaded, config)), loaded.recipe.decode, tests)
    return replace(side, per_second_batch1=batch1, per_second_default=default)


def replace_config(translator: Any, config: Any) -> Any:
    """The teacher's translator with other batches (the same model, not loaded again)."""
    from ..decode.translator import Translator

    return Translator(
        translator.loaded, config, translator.device, source_prefix=tuple(translator.source_prefix),
        target_tag=translator.target_tag,
    )  # fmt: skip


def _test_sets(recipe: Recipe) -> dict[str, tuple[list[str], list[str]]]:
    src, tgt = recipe.data.src_lang, recipe.data.tgt_lang
    sets = {}
    for prefix in recipe.data.test:
        pair = resolve_corpus(pair_root(recipe, src, tgt), prefix, src, tgt)
        sets[Path(prefix).name] = (read_lines(pair.src), read_lines(pair.tgt))
    return sets


def _side(translate: Any, tests: dict[str, tuple[list[str], list[str]]]) -> Side:
    scores = {}
    for name, (sources, references) in tests.items():
        bleu, chrf = score(translate(sources), [references], ("bleu", "chrf"))
        scores[name] = (round(bleu.score, 2), round(chrf.score, 2))
    return Side(scores)


def _speeds(
    engine_for: Any, config: Any, tests: dict[str, tuple[list[str], list[str]]]
) -> tuple[float | None, float | None]:
    """Sentences a second on the first test set: one sentence a batch, and the recipe's batches."""
    if not tests:
        return None, None
    sources = next(iter(tests.values()))[0]
    found = []
    for batches in (replace(config, batch_size=1), config):
        engine = engine_for(batches)
        started = time.perf_counter()
        for _ in engine.translate(sources):
            pass
        found.append(round(len(sources) / max(time.perf_counter() - started, 1e-9), 2))
    return found[0], found[1]


def _parameter_bytes(model: Any) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def table(found: dict[str, Any]) -> list[str]:
    """The report as lines to print."""
    teacher, student, int8 = found["teacher"], found["student"], found.get("student_int8")
    lines = ["test set | teacher BLEU / chrF | student BLEU / chrF" + (" | student int8" if int8 else "")]
    for name in student["scores"]:
        t, s = teacher["scores"].get(name, (None, None)), student["scores"][name]
        lines.append(f"{name} | {_pair(t)} | {_pair(s)}" + (f" | {_pair(int8['scores'].get(name))}" if int8 else ""))
    for label, key in (("sentences/s, batch 1", "per_second_batch1"), ("sentences/s, default", "per_second_default")):
        extra = f" | {_value(int8[key])}" if int8 else ""
        lines.append(f"{label} | {_value(teacher[key])} | {_value(student[key])}{extra}")
    for label, key in (("model file", "file_bytes"), ("weights in memory", "parameter_bytes")):
        lines.append(f"{label} | {_size(teacher[key])} | {_size(student[key])}" + (" |" if int8 else ""))
    spent = ", ".join(f"{stage} {s / 60:.1f} min" for stage, s in found["seconds"].items())
    return lines + [f"time: {spent}"]


def _pair(scores: Any) -> str:
    return "n/a" if scores is None or scores[0] is None else f"{scores[0]:.2f} / {scores[1]:.2f}"


def _value(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def _size(value: int | None) -> str:
    return "n/a" if value is None else f"{value / (1 << 20):,.1f} MiB"


__all__ = ["report", "table"]
