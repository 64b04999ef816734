"""Library errors said to users as one plain phrase."""

from __future__ import annotations


def test_library_errors_are_said_without_python_internals():
    import io
    import pickle

    from nmt_cli.errors import reason

    assert reason(ValueError(f"Package not found at '{io.BytesIO()!r}'")) == "Package not found at the input"
    unsafe = pickle.UnpicklingError(
        "Weights only load failed. This file can still be loaded, to do so you have two options, do those steps "
        "only if you trust the source of the checkpoint.\n\t(1) In PyTorch 2.6, we changed the default value of "
        "the `weights_only` argument in `torch.load` from `False` to `True`. Re-running `torch.load` with "
        "`weights_only` set to `False` will likely succeed...\n WeightsUnpickler error: Unsupported global: "
        "GLOBAL os.system was not an allowed global by default."
    )
    said = reason(unsafe)
    assert "os.system" in said and "could run code" in said and "weights_only" not in said
    assert len(reason(RuntimeError("x" * 500))) <= 160 and reason(RuntimeError("")) == "RuntimeError"


def _extra_hints() -> list[str]:
    """Every "pip install 'nmt-cli[EXTRA]'" hint written in the package's source."""
    import re
    from pathlib import Path

    import nmt_cli

    root = Path(nmt_cli.__file__).parent
    hints = {m for path in root.rglob("*.py") for m in re.findall(r"pip install 'nmt-cli\[[a-z0-9,]+\]'", path.read_text())}
    return sorted(hints)


def test_every_extra_hint_reaches_the_terminal_whole(capsys):
    from nmt_cli.cli import report_error

    hints = _extra_hints()
    assert len(hints) >= 6  # serve, files, plot, hub, align, ...
    for hint in hints:
        report_error(f"this needs an extra: {hint}")
        assert capsys.readouterr().err.strip() == f"error: this needs an extra: {hint}"


def test_errors_quoting_markup_or_emoji_codes_print_as_written(capsys):
    from nmt_cli.cli import report_error

    for quoted in ("[/x]", "[/]", "[bold]", "[", "a:100:b", "[link=file:///etc]x[/link]", "\\[escaped]"):
        report_error(f"{quoted}: no such file")
        assert capsys.readouterr().err.strip() == f"error: {quoted}: no such file"


def test_the_command_line_prints_a_markup_like_path_whole(tmp_path):
    from typer.testing import CliRunner

    from nmt_cli.cli import app

    odd = tmp_path / "runs[/]x[bold]:100:"
    done = CliRunner().invoke(app, ["translate", "-m", str(odd)], input="")
    assert done.exit_code != 0 and "Traceback" not in done.output
    assert done.stderr.startswith(f"error: {odd}: ")
