"""Training curves of one or several runs, drawn from their ``metrics.jsonl`` (``nmt plot``).

Four panels, runs overlaid with a legend: the training and validation loss, the validation
perplexity (log scale), the validation BLEU and the learning rate, against updates or against
training time. matplotlib is an optional extra (``pip install 'nmt-cli[plot]'``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .errors import NmtError
from .utils.files import atomic_path
from .utils.run_folder import METRICS_FILE

XAxis = Literal["updates", "hours"]


@dataclass
class RunCurves:
    """The series of one run: x positions (updates) and values, per metric."""

    name: str
    hours_at: dict[int, float] = field(default_factory=dict)  # update -> training hours (from training records)
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


def read_run(folder: Path, name: str) -> RunCurves:
    """The metrics of a run folder; one-line errors for a missing or unreadable file."""
    path = folder / METRICS_FILE if folder.is_dir() else folder
    if not path.is_file():
        raise NmtError(f"{path}: not found; name a run folder written by nmt train (or its metrics.jsonl)")
    run = RunCurves(name)
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                raise NmtError(
                    f"{path}:{number}: not a JSON line; the file is damaged (a killed writer leaves "
                    "at most its last line so: delete that line)"
                ) from None
            _add(run, record)
    if not run.series:
        raise NmtError(f"{path}: holds no training or validation records yet")
    return run


def _add(run: RunCurves, record: dict) -> None:
    step = record.get("step")
    if not isinstance(step, int):
        return
    if isinstance(record.get("elapsed"), (int, float)):
        run.hours_at[step] = record["elapsed"] / 3600
    directions = [k for k in record if k.startswith("valid_bleu.")]  # a multilingual model's, one per direction
    for key in ("loss", "lr", "valid_loss", "valid_ppl", "valid_bleu", *directions):
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            run.series.setdefault(key, []).append((step, float(value)))


def _with_directions(run: RunCurves, metrics: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """A panel's metrics, the BLEU panel's with each direction of a multilingual run beside the mean (dotted)."""
    if not any(metric == "valid_bleu" for metric, _, _ in metrics):
        return metrics
    directions = sorted(key for key in run.series if key.startswith("valid_bleu."))
    mean = [("valid_bleu", "mean" if directions else "", "-")]
    return mean + [(key, key.split(".", 1)[1], ":") for key in directions]


def _x(run: RunCurves, steps: list[int], axis: XAxis) -> list[float]:
    if axis == "updates":
        return [float(s) for s in steps]
    known = sorted(run.hours_at.items())
    if not known:
        raise NmtError(f"{run.name}: its metrics carry no training time; plot against updates")
    out = []
    for step in steps:  # validation records carry no time: use the last training record at or before them
        before = [hours for at, hours in known if at <= step]
        out.append(before[-1] if before else 0.0)
    return out


PANELS = (  # (title, [(metric, label suffix, line style)], log scale)
    ("loss (per target token)", [("loss", "train", "-"), ("valid_loss", "valid", "--")], False),
    ("validation perplexity", [("valid_ppl", "", "-")], True),
    ("validation BLEU", [("valid_bleu", "", "-")], False),
    ("learning rate", [("lr", "", "-")], False),
)


def plot_runs(runs: list[RunCurves], output: Path, axis: XAxis = "updates") -> None:
    """Draw the panels for ``runs`` into the PNG ``output`` (written atomically)."""
    figure = draw_runs(runs, axis)
    with atomic_path(output) as tmp:
        figure.savefig(tmp, format="png", dpi=100)
    import matplotlib.pyplot as plt

    plt.close(figure)


def draw_runs(runs: list[RunCurves], axis: XAxis = "updates"):  # type: ignore[no-untyped-def]
    """The figure of :func:`plot_runs` (matplotlib's): four panels, a curve per run and metric."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError:
        raise NmtError("nmt plot needs matplotlib: pip install 'nmt-cli[plot]'") from None
    figure, axes = plt.subplots(2, 2, figsize=(12, 8), constrained_layout=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for axis_box, (title, metrics, log_scale) in zip(axes.flat, PANELS):
        for index, run in enumerate(runs):
            for metric, suffix, style in _with_directions(run, list(metrics)):
                points = run.series.get(metric, [])
                if not points:
                    continue
                label = f"{run.name} {suffix}".strip()
                axis_box.plot(
                    _x(run, [s for s, _ in points], axis),
                    [v for _, v in points],
                    style,
                    marker="o" if len(points) == 1 else "",  # a line through one point draws nothing
                    color=colours[index % len(colours)],
                    label=label,
                    linewidth=1.4,
                )
        axis_box.set_title(title)
        axis_box.set_xlabel("updates" if axis == "updates" else "training hours")
        axis_box.grid(alpha=0.3)
        if log_scale and axis_box.lines:
            axis_box.set_yscale("log")
        if axis_box.lines:
            axis_box.legend(fontsize=8)
        else:
            axis_box.text(0.5, 0.5, "no records", ha="center", va="center", transform=axis_box.transAxes)
    return figure


def run_names(folders: list[Path]) -> list[str]:
    """Legend names: the folder names, or longer paths where two runs share a name."""
    names = [f.name if f.is_dir() else f.parent.name for f in folders]
    if len(set(names)) == len(names):
        return names
    return [str(f) for f in folders]


__all__ = ["RunCurves", "read_run", "plot_runs", "run_names"]
