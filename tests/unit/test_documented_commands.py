"""Every `nmt` command line the README and the getting-started page show parses: the command exists, and its
options and values are accepted by the command line as it is (tests/cli/test_documented_runs.py runs them)."""

from __future__ import annotations

import re
import shlex

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
