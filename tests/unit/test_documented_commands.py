"""Every `nmt` command line the README and the getting-started page show parses: the command exists, and its
options and values are accepted by the command line as it is (tests/cli/test_documented_runs.py runs them)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
from conftest import documented_command_lines

from nmt_cli.cli import app


@pytest.mark.parametrize("page, line", documented_command_lines())
def test_a_documented_command_line_parses(page, line):
    words = shlex.split(re.split(r"[<>|]", line)[0])[1:]  # redirections and pipes are the shell's
    words = [w for w in words if not (w.startswith("[") or w.endswith("]"))]  # "[--quantization int8]": optional
    command = typer.main.get_command(app)
    path = []
    while isinstance(command, typer.core.TyperGroup) and words and words[0] in command.commands:
        path.append(words[0])
        command = command.commands[words.pop(0)]
    assert path, f"{page}: `{line}` names no nmt command"
    command.make_context(" ".join(["nmt", *path]), list(words))  # raises on an unknown option or a bad value


def test_the_pages_show_command_lines():
    assert len(documented_command_lines()) >= 10


DOC_PAGES = sorted((Path(__file__).resolve().parents[2] / "docs").glob("*.md")) + [
    Path(__file__).resolve().parents[2] / "README.md"
]


def documented_overrides() -> list[tuple[str, str]]:
    """(page, KEY=VALUE) for every `--set` on the pages, placeholders (N, GPUS, VALUE) left out."""
    found = []
    for page in DOC_PAGES:
        for item in re.findall(r"--set\s+'?([a-z_][\w.]*=[^\s`'\"]*)", page.read_text(encoding="utf-8")):
            if not re.search(r"[A-Z]{2,}|=N$|=$", item):
                found.append((page.name, item))
    return found


@pytest.mark.parametrize("page, item", documented_overrides())
def test_every_documented_override_names_a_key_and_a_value_the_recipe_takes(page, item):
    from nmt_cli.config import load_recipe

    quickstart = Path(__file__).resolve().parents[2] / "nmt_cli" / "recipes" / "quickstart.yaml"
    companion = COMPANIONS.get(item.split("=")[0])
    load_recipe(quickstart, [*([companion] if companion else []), item])  # raises RecipeError naming the key or value


# Keys that a rule across keys ties to another setting, which the pages give on the same line.
COMPANIONS = {
    "train.warmup_fraction": "train.lr_schedule=linear",
    "train.context_dropout": "model.concat=1",
    "train.init_optimizer": "train.init_from=runs/parent",
}


def test_every_route_and_format_a_page_names_exists():
    from nmt_cli.formats import EXTENSIONS

    docs = Path(__file__).resolve().parents[2] / "docs"
    serve = Path(__file__).resolve().parents[2] / "nmt_cli" / "serve"
    code = "".join(path.read_text(encoding="utf-8") for path in serve.glob("*.py"))  # routes live in several modules
    routes = {re.sub(r"\{\w+\}", "X", r) for r in re.findall(r'@router\.(?:get|post)\("([^"]+)"', code)}
    page = (docs / "serving.md").read_text(encoding="utf-8")
    named = {re.sub(r"\{\w+\}|[A-Z]+", "X", r) for r in re.findall(r"`(?:GET|POST) (/[\w/{}]*)`", page)}
    assert named and named <= routes, named - routes
    headings = re.findall(r"^## .*", (docs / "formats.md").read_text(encoding="utf-8"), re.M)
    extensions = {ext for heading in headings for ext in re.findall(r"`(\.\w+)`", heading)}
    assert extensions and extensions <= set(EXTENSIONS), extensions - set(EXTENSIONS)
