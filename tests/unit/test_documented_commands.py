"""Every `nmt` command line the README and the getting-started page show parses: the command exists, and its
options and values are accepted by the command line as it is (nothing is run)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from nmt_cli.cli import app

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md"]


def documented_command_lines() -> list[tuple[str, str]]:
    """(page, command line) for every `nmt ...` in a bash block, each part of a `&&` chain on its own,
    comments, redirections and pipes dropped."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            for line in block.splitlines():
                line = re.sub(r"\s+#.*$", "", line)
                for part in line.split("&&"):
                    part = re.split(r"[<>|]", part)[0].strip()
                    if part.startswith("nmt "):
                        found.append((page.name, part))
    return found


@pytest.mark.parametrize("page, line", documented_command_lines())
def test_a_documented_command_line_parses(page, line):
    words = shlex.split(line)[1:]
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
