"""Hostile inputs: each class of failure fixed for the class, each with a test.

Control characters have one declared policy in every command; every numeric option of every command
and recipe key has a checked range (finite, bounded); thread counts far above the machine are refused
before anything starts; ``nmt average`` checks vocabularies and duplicates; the CLI's messages name the
option that is wrong and suggest only what the same command accepts.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from nmt_cli.cli import app
from nmt_cli.config import Recipe, load_recipe
from nmt_cli.data.corpus import HashingReader
from nmt_cli.errors import RecipeError
from nmt_cli.train import checkpoint
from nmt_cli.utils.cpu import PER_CORE_LIMIT, cores
from nmt_cli.utils.text import replace_control_characters


def nmt(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nmt_cli", *args], input=stdin, capture_output=True, text=True, timeout=300)


def invoke(*args: str) -> subprocess.CompletedProcess:
    """``nmt ARGS`` in this process (for refusals that come before any model is loaded: no start-up cost)."""
    result = CliRunner().invoke(app, list(args), input="")
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def one_error(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    return " ".join(result.stderr[result.stderr.index("error:") :].split())


# --------------------------------------------------------------------------- control characters


def test_control_characters_become_spaces_tab_and_unicode_separators_stay():
    text = "a\x00b\x1bc\x7fd\x85e\tf\u2028g"
    assert replace_control_characters(text) == "a b c d e\tf\u2028g"


def test_prepare_replaces_control_characters_and_says_so(tmp_path):
    corpus = tmp_path / "train.en"
    corpus.write_bytes(b"a clean line\nNUL\x00inside\nescape\x1b[0m here\n")
    reader = HashingReader(corpus, "strict")
    assert list(reader) == ["a clean line", "NUL inside", "escape [0m here"]
    assert any("2 line(s) held control characters" in note for note in reader.notes())


def test_translate_and_score_replace_control_characters_and_say_so(overfit, tmp_path):
    run, src, _ = overfit
    line = src[0]
    with_nul = line.replace(" ", "\x00", 1)
    result = nmt("translate", "-m", str(run), stdin=f"{with_nul}\n{line}\n")
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first == second  # a NUL is translated as the space it replaced
    assert "1 input line(s) held control characters" in " ".join(result.stderr.split())
    hyp, ref = tmp_path / "hyp.de", tmp_path / "ref.de"
    hyp.write_text("ein\x00Hund\n", encoding="utf-8")
    ref.write_text("ein Hund\n", encoding="utf-8")
    scored = nmt("score", str(hyp), str(ref), "--metrics", "chrf")
    assert scored.returncode == 0 and "= 100.0" in scored.stdout
    assert "1 line(s) held control characters" in " ".join(scored.stderr.split())


# --------------------------------------------------------------------------- numbers


def _numeric_fields(cls: type = Recipe, prefix: str = ""):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        key = prefix + f.metadata.get("key", f.name)
        if dataclasses.is_dataclass(kind):
            yield from _numeric_fields(kind, key + ".")
            continue
        kinds = {kind, *typing.get_args(kind)}
        if bool not in kinds and (int in kinds or float in kinds):
            yield key, float in kinds, f.metadata


def test_every_numeric_recipe_key_has_a_lower_and_an_upper_bound():
    unbounded = [key for key, _, meta in _numeric_fields() if not ({"ge", "gt"} & set(meta) and {"le", "lt"} & set(meta))]
    assert not unbounded, f"declare ge/gt and le/lt for: {unbounded}"


def test_no_float_recipe_key_takes_nan_or_infinity(prepared):
    recipe_file = Path(prepared.run_dir.parent / "tiny.yaml")
    floats = [key for key, is_float, _ in _numeric_fields() if is_float]
    assert len(floats) > 15
    for key in floats:
        for value in (".nan", ".inf", "-.inf"):
            with pytest.raises(RecipeError, match=rf"--set {key}={value}: {key}: expected a finite number"):
                load_recipe(recipe_file, [f"{key}={value}"])


def _numeric_options():
    """(command, option name, min, max, help) of every int or float option, under the Typer in use (its own
    parameter classes, or Click's with range types)."""
    command = typer.main.get_command(app)
    for name, sub in command.commands.items():  # type: ignore[attr-defined]
        for param in sub.params:
            if getattr(param, "param_type_name", "option") != "option":
                continue
            descriptor = getattr(param, "type_descriptor", None)
            if descriptor is not None:
                kind, low, high = descriptor.annotation, param.min, param.max
            else:
                click_type = param.type
                kind = {"integer": int, "float": float}.get(getattr(click_type, "name", "").split(" ")[0])
                low, high = getattr(click_type, "min", None), getattr(click_type, "max", None)
            if kind in (int, float):
                yield name, param.opts[0], low, high, param.help or ""


def test_every_numeric_option_has_a_range_or_is_a_checked_recipe_key():
    options = list(_numeric_options())
    assert len(options) > 20
    unchecked = [
        f"nmt {command} {flag}"
        for command, flag, low, high, help_text in options
        if None in (low, high) and "[recipe key" not in help_text  # recipe keys: checked by with_decoding
    ]
    assert not unchecked, f"give these a min and a max: {unchecked}"


@pytest.mark.parametrize(
    "args",
    [
        ["translate", "-m", "M", "--sampling", "--temperature", "nan"],
        ["translate", "-m", "M", "--alpha", "inf"],
        ["translate", "-m", "M", "--max-len-a", "-inf"],
        ["translate", "-m", "M", "--sampling", "--top-p", "nan"],
        ["quickstart", "--minutes", "nan"],
    ],
)
def test_non_finite_numbers_are_refused_on_every_command_line(args):
    result = invoke(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr


def test_absurd_decoding_numbers_are_refused_before_loading(overfit):
    run = str(overfit[0])
    for flag, value in (("--alpha", "1e6"), ("--beam", "100000"), ("--max-len-a", "1e9")):
        result = invoke("translate", "-m", run, flag, value)
        assert result.returncode == 2 and flag in one_error(result)


# --------------------------------------------------------------------------- threads and processes


def test_thread_counts_far_above_the_machine_are_refused_in_one_line(overfit, prepared, tmp_path):
    too_many = str(PER_CORE_LIMIT * cores() + 1)
    translate = invoke("translate", "-m", str(overfit[0]), "--threads", too_many)
    assert translate.returncode == 1 and f"--threads {too_many}: this machine gives this process" in one_error(translate)
    serve = invoke("serve", "-m", str(overfit[0]), "--threads", too_many, "--port", "0")
    assert serve.returncode == 1 and "--threads" in one_error(serve)
    run = tmp_path / "run"
    recipe = str(prepared.run_dir.parent / "tiny.yaml")
    train = invoke("train", recipe, "--set", f"train.dir={run}", "--set", f"train.threads={too_many}")
    assert train.returncode == 1 and "train.threads" in one_error(train)
    assert not run.exists()  # refused before the run folder and its lock
    launch = invoke("train", recipe, "--set", f"train.dir={run}", "--nproc", too_many)
    assert launch.returncode == 1 and "--nproc" in one_error(launch) and not run.exists()


# --------------------------------------------------------------------------- nmt average


def test_average_refuses_other_vocabularies_and_one_file_twice(overfit, tmp_path):
    run = overfit[0]
    first, second = checkpoint.step_checkpoints(run)[-2:]
    payload = checkpoint.load(second)
    foreign = tmp_path / "foreign.pt"
    checkpoint.save(
        foreign, {**payload, "vocab": {**payload["vocab"], "tgt": payload["vocab"]["tgt"] + b"\0"}}, kind="training"
    )
    out = tmp_path / "avg.pt"
    mixed = invoke("average", str(first), str(foreign), "-o", str(out))
    assert mixed.returncode == 1 and "tgt vocabulary" in one_error(mixed) and not out.exists()

    twice = invoke("average", str(first), str(first.parent / ".." / "checkpoints" / first.name), "-o", str(out))
    assert twice.returncode == 1 and "given twice" in one_error(twice) and not out.exists()
    link = tmp_path / "link.pt"
    os.link(first, link)
    linked = invoke("average", str(first), str(link), "-o", str(out))
    assert linked.returncode == 1 and "given twice" in one_error(linked)
    assert invoke("average", str(first), str(second), "-o", str(out)).returncode == 0


def test_every_hint_of_average_names_a_file_the_same_command_accepts(overfit, tmp_path):
    run = overfit[0]
    inputs = [str(p) for p in checkpoint.step_checkpoints(run)[-2:]]
    for output in (run / "checkpoints" / "avg.pt", Path(inputs[0]), run / "checkpoints", tmp_path / "step_00000001.pt"):
        refused = invoke("average", *inputs, "-o", str(output))
        message = one_error(refused)
        suggested = message.rsplit("e.g. ", 1)[1].strip()
        accepted = invoke("average", *inputs, "-o", suggested)
        assert accepted.returncode == 0, (message, accepted.stderr)
        Path(suggested).unlink()


# --------------------------------------------------------------------------- the command line


def test_an_empty_metrics_list_is_refused(tmp_path):
    hyp = tmp_path / "h.txt"
    hyp.write_text("a\n")
    for metrics in ("", " , "):
        result = invoke("score", str(hyp), str(hyp), "--metrics", metrics)
        assert result.returncode == 1 and "names no metric" in one_error(result)


def test_a_typo_in_set_is_reported_as_the_option(prepared):
    recipe = str(prepared.run_dir.parent / "tiny.yaml")
    for item, words in (
        ("trian.lr=1", "--set trian.lr=1: unknown key 'trian'; did you mean 'train'?"),
        ("train.lrr=1", "--set train.lrr=1: unknown key 'train.lrr'; did you mean 'train.lr'?"),
        ("train.lr=abc", "--set train.lr=abc: train.lr: expected a number"),
    ):
        result = invoke("config", recipe, "--set", item)
        assert result.returncode == 2 and words in one_error(result)
