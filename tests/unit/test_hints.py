"""Hints a command prints are meant to be copied: each must keep its extra and run as printed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import tomllib

from nmt_cli.commands.common import command_line, console, translate_hint

ROOT = Path(__file__).resolve().parents[2]
PIP_HINT = re.compile(r"pip install '(nmt-cli(?:\[([\w,-]+)\])?)'")


def test_every_pip_install_hint_names_an_extra_the_package_declares():
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    hints = [
        (path, match)
        for path in sorted((ROOT / "nmt_cli").rglob("*.py"))
        for match in PIP_HINT.finditer(path.read_text(encoding="utf-8"))
    ]
    assert len(hints) >= 10
    for path, match in hints:
        assert match.group(2), f"{path}: {match.group(0)} names no extra"
        assert set(match.group(2).split(",")) <= extras, f"{path}: {match.group(0)}"


def test_a_hint_is_printed_with_its_brackets(capsys):
    """The commands' console reads no markup: "[align]" is not a style tag, ":100:" not an emoji."""
    console.print("note: without guided alignment (pip install 'nmt-cli[align]' adds it) at 50 :100:")
    assert "pip install 'nmt-cli[align]' adds it) at 50 :100:" in capsys.readouterr().err


def test_a_translate_hint_names_the_direction_a_multilingual_model_needs():
    assert translate_hint("runs/a b", ["en"], ["de"]) == "echo 'Cannot open file.' | nmt translate -m 'runs/a b'"
    many = shlex.split(translate_hint("m", ["en", "en", "de"], ["de", "fr", "en"]).split("|", 1)[1])
    assert many[many.index("--to") + 1] == "de" and many[many.index("--from") + 1] == "en"
    into_english = translate_hint("m", ["de"], ["en", "fr"])
    assert into_english.startswith("echo 'Die Datei") and "--to en" in into_english
    assert command_line("nmt", "prepare", "r.yaml", "--set", "data.root=/my data") == (
        "nmt prepare r.yaml --set 'data.root=/my data'"
    )


def test_the_choices_help_lists_are_the_libraries_own():
    """--tokenize lists sacreBLEU's tokenizers without importing sacreBLEU for --help: the same names."""
    from sacrebleu.metrics import BLEU

    from nmt_cli.commands.score import TOKENIZERS

    assert set(TOKENIZERS) == set(BLEU.TOKENIZERS)
