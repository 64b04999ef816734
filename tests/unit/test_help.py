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
        if getattr(param, "hidden", False):  # an old spelling kept for scripts, not shown
            continue
        for option in param.opts:
            if option.startswith("--"):
                assert option in text, option  # every option's name in full
        words = " ".join((param.help or "").split())
        for bracketed in re.findall(r"\[[^\]]+\]", words):
            assert " ".join(bracketed.split()) in flat, bracketed  # Rich markup would have eaten it


def test_choices_and_install_hints_survive():
    runner = CliRunner()
    translate = " ".join(runner.invoke(GROUP, ["translate", "--help"], terminal_width=80).output.split())
    assert "[fp32|bf16|fp16|int8]" in translate and "[recipe key decode.beam; default: 4]" in translate
    hub = " ".join(runner.invoke(GROUP, ["import", "hf", "--help"], terminal_width=80).output.split())
    assert "pip install 'nmt-cli[hub]'" in hub and "Usage: nmt import hf [OPTIONS] SOURCE" in hub


def _help(path: list[str], width: int = 80) -> str:
    result = CliRunner().invoke(GROUP, [*path, "-h"], env={"COLUMNS": str(width)}, terminal_width=width)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", [[], *COMMANDS], ids=lambda p: " ".join(p) or "nmt")
def test_dash_h_is_help_and_fits_60_columns_without_splitting_words_at_hyphens(path):
    text = _help(path, 60)
    assert text.startswith("Usage: nmt")
    assert max(len(line) for line in text.splitlines()) <= 60
    # a hyphenated option or word is never cut at its hyphen: no line ends with "word-"
    assert not [line for line in text.splitlines() if re.search(r"\w-$", line)]


def test_every_command_has_a_whole_one_line_summary():
    text = _help([])
    rows = text.split("Commands:\n", 1)[1].splitlines()
    summaries = {row.split()[0]: row.split(None, 1)[1] for row in rows if row.strip()}
    assert set(summaries) == set(GROUP.commands)
    for name, summary in summaries.items():
        assert not summary.endswith("..."), name
        assert summary == GROUP.commands[name].short_help, name


def test_one_meaning_per_option_name_across_commands():
    """A short letter or a long name means one thing in every command that shows it."""
    meanings: dict[str, set[str]] = {}
    for path in COMMANDS:
        sub = GROUP
        for name in path:
            sub = sub.commands[name]
        for param in sub.params:
            if getattr(param, "hidden", False) or param.param_type_name != "option":
                continue
            for opt in param.opts:
                meanings.setdefault(opt, set()).add(max(param.opts, key=len))
    clashes = {opt: names for opt, names in meanings.items() if len(names) > 1}
    assert not clashes


def test_translate_lists_its_options_under_titles():
    text = _help(["translate"])
    titles = [line[:-1] for line in text.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert titles == ["Input and output", "Search", "Documents", "Terminology", "Quality", "Long jobs", "Engine", "Other"]
    every = sum(1 for p in GROUP.commands["translate"].params if not getattr(p, "hidden", False))
    listed = sum(1 for line in text.splitlines() if re.match(r"  -", line))
    assert listed == every + 1  # and -h, --help


@pytest.mark.parametrize(
    "path, shown",
    [
        (["translate"], ["[hard|soft]", "[text|jsonl|tsv]", "[gnmt|average]", "[beam|top|bound]", "FORMAT", "docx"]),
        (["serve"], ["[fp32|bf16|fp16|int8]", "[critical|error|warning|info|debug]"]),
        (["export"], ["[ctranslate2|hf]"]),
        (["score"], ["[jsonl|tsv]"]),
        (["prepare"], ["[strict|replace]"]),
    ],
)
def test_options_with_fixed_values_show_their_choices(path, shown):
    flat = " ".join(_help(path).split())
    for choices in shown:
        assert choices in flat, choices
    assert "default True" not in flat and "default False" not in flat


def test_old_spellings_still_work_with_a_deprecation_line(tmp_path):
    hyp = tmp_path / "hyp"
    hyp.write_text("a small cat\n")
    result = CliRunner().invoke(GROUP, ["score", "-m", "chrf", str(hyp), str(hyp)])
    assert result.exit_code == 0, result.output
    assert "chrF2" in result.stdout and "-m chrf" in result.stderr and "--metrics" in result.stderr


def test_a_value_outside_the_choices_is_one_line_naming_them():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "nmt_cli", "score", "--model", "m", "a", "b", "--format", "xml"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--format': 'xml' is not one of 'jsonl', 'tsv'" in done.stderr and "score --help" in done.stderr
