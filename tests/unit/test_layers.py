"""The import layers of docs/architecture.md: every import between two parts of the package goes down.

cli -> commands -> pipeline -> distill -> train / export / convert / serve / attention_figure -> decode -> quality ->
inference -> terms -> data / model / score / curves / formats / languages -> config -> utils -> errors -> version.
Imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "nmt_cli"
LAYER = {
    "__main__": 9,
    "cli": 8,
    "commands": 7,
    "pipeline": 6,
    "distill": 5.5,
    "train": 5,
    "export": 5,
    "convert": 5,
    "serve": 5,
    "attention_figure": 5,
    "decode": 4,
    "data": 3,
    "model": 3,
    "score": 3,
    "curves": 3,
    "formats": 3,
    "languages": 3,
    "terms": 3.1,
    "quality": 3.5,
    "inference": 3.2,
    "config": 2,
    "utils": 1.5,
    "errors": 1,
    "version": 0,
    "__init__": 0,
}


def imported_parts(path: Path) -> set[str]:
    """The top-level parts of the package (``decode``, ``config``, ...) that a module imports."""
    where = list(path.relative_to(PACKAGE).parent.parts)
    parts = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = where[: len(where) - (node.level - 1)]
            names = base + (node.module.split(".") if node.module else [])
            parts.update([names[0]] if names else [alias.name for alias in node.names])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nmt_cli."):
            parts.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            parts.update(a.name.split(".")[1] for a in node.names if a.name.startswith("nmt_cli."))
    return parts


def test_every_part_of_the_package_has_a_layer():
    parts = {
        p.stem if p.is_file() else p.name
        for p in PACKAGE.iterdir()
        if (p.is_file() and p.suffix == ".py") or (p / "__init__.py").exists()
    }
    assert parts <= set(LAYER), parts - set(LAYER)


def test_imports_only_go_down_the_layers():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        for part in imported_parts(path) - {own}:
            if own != "__init__" and LAYER[part] >= LAYER[own]:
                upward.append(f"{path.relative_to(PACKAGE)} imports {part}")
    assert not upward, upward
