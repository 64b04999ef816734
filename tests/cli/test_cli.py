"""The command line as a user meets it: help, version, config, translate, average, errors."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nmt_cli import __version__
from nmt_cli.cli import app

runner = CliRunner()


COMMANDS = (
    "quickstart",
    "prepare",
    "train",
    "translate",
    "score",
    "average",
    "config",
    "download",
    "export",
    "plot",
    "attention",
    "serve",
)


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_is_registered_with_its_own_help(command):
    """`nmt COMMAND --help` shows that command's usage (an unregistered name fails: no such command)."""
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert f"Usage: nmt {command}" in " ".join(result.stdout.split())


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and __version__ in result.stdout


def test_version_is_the_newest_release_in_the_changelog():
    """`nmt --version` names the newest `## [X.Y.Z] - DATE` section of CHANGELOG.md (a release bumps both)."""
    changelog = Path(__file__).resolve().parents[2] / "CHANGELOG.md"
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog.read_text(), re.MULTILINE)
    assert released, "CHANGELOG.md has no released version"
    assert released[0] == __version__, f"nmt --version says {__version__}; the newest release is {released[0]}"


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "nmt_cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and __version__ in out.stdout


@pytest.mark.parametrize(
    "args, named",
    [
        (["translate", "-m", "nowhere", "--engine", "marian"], "--engine"),
        (["translate", "-m", "nowhere", "--dtype", "int4"], "--dtype"),
        (["translate", "-m", "nowhere", "--beam", "four"], "--beam"),
        (["translate", "-m", "nowhere", "--bean", "4"], "--bean"),
        (["transalte"], "transalte"),
    ],
)
def test_a_mistyped_option_or_value_is_one_error_line_naming_it(args, named):
    """Click's usage errors reach the user as our other errors do: one line on stderr, exit code 2."""
    out = subprocess.run([sys.executable, "-m", "nmt_cli", *args], capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0] and "--help" in lines[0], out.stderr


def test_config_prints_resolved_recipe_and_rejects_typos():
    result = runner.invoke(app, ["config", "recipes/multi30k_ende.yaml", "--set", "model.layers=2"])
    assert result.exit_code == 0 and "layers: 2" in result.stdout and "d_model: 256" in result.stdout
    bad = runner.invoke(app, ["config", "recipes/multi30k_ende.yaml", "--set", "model.dmodel=2"])
    assert bad.exit_code == 2 and "did you mean 'model.d_model'?" in bad.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["serve", "-m", "nowhere", "--batch-tokens", "0"], "--batch-tokens: decode.batch_tokens: 0 is out of range"),
        (["attention", "-m", "nowhere", "-o", "a.png", "--beam", "0", "A dog."], "--beam: decode.beam: 0 is out of range"),
    ],
)
def test_decoding_flags_of_serve_and_attention_are_checked_as_the_recipe_key_before_loading(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_translate_cli_keeps_lines_and_writes_atomically(overfit, tmp_path):
    run_dir, src, tgt = overfit
    lines = [src[0], "", src[1], ""]
    result = runner.invoke(app, ["translate", "-m", str(run_dir), "--beam", "1"], input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.split("\n")[:4] == [tgt[0], "", tgt[1], ""]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(src[:5]) + "\n")
    out = tmp_path / "out.txt"
    result = runner.invoke(app, ["translate", "-m", str(run_dir / "model.pt"), "-i", str(source), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text().splitlines() == tgt[:5]
    nbest = runner.invoke(app, ["translate", "-m", str(run_dir), "--nbest", "3"], input=src[2] + "\n")
    rows = [line.split("\t") for line in nbest.stdout.splitlines()]
    assert len(rows) == 3 and all(r[0] == "0" for r in rows) and rows[0][2] == tgt[2]
    for stop in ("top", "bound"):
        result = runner.invoke(app, ["translate", "-m", str(run_dir), "--stop", stop], input=src[3] + "\n")
        assert result.exit_code == 0 and result.stdout == tgt[3] + "\n", result.output


def test_translate_errors_are_one_line(overfit, tmp_path):
    run_dir, _, _ = overfit
    bad = tmp_path / "bad.pt"
    bad.write_bytes((run_dir / "model.pt").read_bytes()[:5000])
    for args in (
        ["-m", str(bad)],
        ["-m", str(tmp_path / "none")],
        ["-m", str(run_dir), "-i", str(tmp_path / "x")],
        ["-m", str(run_dir), "--nbest", "9"],
        ["-m", str(run_dir), "--stop", "early"],
    ):
        result = runner.invoke(app, ["translate", *args], input="A man.\n")
        assert result.exit_code != 0
        assert result.output.startswith("error:") and result.output.count("\n") == 1, result.output
    invalid = runner.invoke(app, ["translate", "-m", str(run_dir)], input=b"ok\n\xff\xfe\n")
    assert "<stdin>:2: invalid UTF-8" in invalid.output


def test_average_command(overfit, tmp_path):
    run_dir, _, _ = overfit
    out = tmp_path / "avg.pt"
    result = runner.invoke(app, ["average", str(run_dir), "--last", "2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.is_file() and "averaged 2 checkpoints" in result.output
    missing = runner.invoke(app, ["average", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "-o", str(out)])
    assert missing.exit_code != 0 and "a.pt: checkpoint not found" in missing.output


def test_prepare_cli_error_is_one_line(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"data: {{src_lang: en, tgt_lang: de, root: {tmp_path}, train: [nope], output: {tmp_path}/o}}\n")
    result = runner.invoke(app, ["prepare", str(recipe)])
    assert result.exit_code == 1
    assert result.output.startswith("error:") and "nope.en: file not found" in result.output
