"""Every command's ``--help`` at 80 columns (the default terminal): conventional value names, nothing cut,
no bracket of the help text eaten."""

from __future__ import annotations

import re

import pytest
import typer.testing
from typer.testing import CliRunner

from nmt_cli.cli import command

GROUP = command()
COMMANDS = [[name] for name in GROUP.commands if name != "import"] + [
    ["import", n] for n in GROUP.commands["import"].commands
]


@pytest.fixture(autouse=True)
def runs_the_click_command(monkeypatch):
    """Typer's runner takes a Typer app; these tests run the Click command ``nmt`` runs (value names set)."""
    monkeypatch.setattr(typer.testing, "_get_command", lambda app: app)


PYTHON_TYPES = re.compile(r"<(?:str|int|float|bool|path|list\[[^]]*\]|[a-z]+ range)>|list\[Path\]")


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_help_at_80_columns_names_values_conventionally(path):
    result = CliRunner().invoke(GROUP, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    text = result.output
    assert not PYTHON_TYPES.search(text), PYTHON_TYPES.search(text)
    assert "…" not in text  # no option name or help cut short
    assert max(len(line) for line in text.splitlines()) <= 80
    sub = GROUP
    for name in path:
        sub = sub.commands[name]
    flat = " ".join(text.split())
    for param in sub.params:
        for option in param.opts:
            if option.startswith("--"):
                assert option in text, option  # every option's name in full
        words = " ".join((param.help or "").split())
        for bracketed in re.findall(r"\[[^\]]+\]", words):
            assert " ".join(bracketed.split()) in flat, bracketed  # Rich markup would have eaten it


def test_choices_and_install_hints_survive():
    runner = CliRunner()
    translate = " ".join(runner.invoke(GROUP, ["translate", "--help"], terminal_width=80).output.split())
    assert "[fp32|bf16|fp16|int8]" in translate and "[recipe key decode.beam; default 4]" in translate
    hub = " ".join(runner.invoke(GROUP, ["import", "hf", "--help"], terminal_width=80).output.split())
    assert "pip install 'nmt-cli[hub]'" in hub and "Usage: nmt import hf [OPTIONS] SOURCE" in hub
