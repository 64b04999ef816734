"""The ``nmt`` command line: global options, one line per command, errors to one-liners.

Commands are registered here, in one visible place. Torch is imported lazily by the
command modules, so ``nmt --help`` stays instant.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

from .errors import NmtError
from .utils.files import describe_os_error
from .utils.signals import Interrupted, signals_unwind
from .version import __version__

# `-h` as well as `--help`, on every command (as git and cargo take it).
HELP_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    name="nmt",
    context_settings=HELP_SETTINGS,
    help="Transformer neural machine translation: prepare, train, translate, score.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's own help: conventional metavars (PATH, INTEGER, [fp32|bf16]), ranges and defaults, wrapped to the
    # terminal without truncating option names, and help text printed as written (Rich markup would eat
    # "[hub]" and "[recipe key decode.beam; default 4]").
    rich_markup_mode=None,
)
# Messages are printed as written: a message quotes file names, terms and hints such as
# "pip install 'nmt-cli[serve]'", which Rich would read as style tags (or emoji codes such as ":100:").
_stderr = Console(stderr=True, soft_wrap=True, highlight=False, markup=False, emoji=False)


def report_error(message: str) -> None:
    """Print a user-facing error as one red line on stderr."""
    _stderr.print(Text.assemble(("error:", "bold red"), " ", message))


def friendly(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn NmtError (and file-system errors) into a one-line message and an exit code; SIGTERM and
    SIGUSR1 unwind the command (every temporary file removed) and exit 128 + the signal's number."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for name, value in kwargs.items():
            # Click reads "nan" and "inf" as floats, and NaN passes every min/max check: no option means them.
            if isinstance(value, float) and not math.isfinite(value):
                report_error(f"--{name.replace('_', '-')}: {value} is not a finite number")
                raise typer.Exit(2)
        try:
            with signals_unwind():
                return func(*args, **kwargs)
        except Interrupted as err:
            report_error(str(err))
            raise typer.Exit(err.exit_code) from None
        except NmtError as err:
            report_error(str(err))
            raise typer.Exit(err.exit_code) from None
        except BrokenPipeError:
            # The reader went away (`nmt translate ... | head`): stop quietly, as Unix tools do.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(141) from None
        except OSError as err:
            report_error(describe_os_error(err))
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            report_error("interrupted")
            raise typer.Exit(130) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        typer.echo(f"nmt {__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Transformer neural machine translation: prepare, train, translate, score."""


def _register() -> None:
    from .commands import (
        attention,
        average,
        calibrate,
        config,
        distill,
        download,
        export,
        import_model,
        plot,
        prepare,
        quickstart,
        score,
        serve,
        train,
        translate,
    )

    # Each command's one-line summary for `nmt --help`, whole (Click would cut the docstring's first sentence
    # at 45 characters with "...").
    commands = (
        ("quickstart", quickstart.run, "Run the whole job on a bundled corpus (offline, CPU)."),
        ("prepare", prepare.run, "Clean corpora, learn the vocabulary, encode the data."),
        ("train", train.run, "Train the model a recipe describes (resumes by default)."),
        ("translate", translate.run, "Translate lines or documents with a trained model."),
        ("score", score.run, "Score translations (BLEU, chrF, TER) or score with a model."),
        ("calibrate", calibrate.run, "Fit --confidence to your data; writes a new model file."),
        ("distill", distill.run, "Train a small, fast student on what a teacher translates."),
        ("average", average.run, "Average the parameters of several checkpoints."),
        ("config", config.run, "Print a recipe fully resolved, or every key explained."),
        ("download", download.run, "Download a recipe's public corpora, checksums verified."),
        ("export", export.run, "Export a model for CTranslate2 or HuggingFace."),
        ("plot", plot.run, "Plot the learning curves of one or several runs."),
        ("attention", attention.run, "Draw a model's attention heatmaps for one sentence."),
        ("serve", serve.run, "Serve models over HTTP (LibreTranslate's API, a web page)."),
    )
    for name, run, summary in commands:
        app.command(name, short_help=summary, context_settings=HELP_SETTINGS)(friendly(run))
    imports = typer.Typer(
        help=import_model.HELP, no_args_is_help=True, rich_markup_mode=None, context_settings=HELP_SETTINGS
    )
    imports.command("hf", short_help="Import a HuggingFace MarianMT (OPUS-MT) model.", context_settings=HELP_SETTINGS)(
        friendly(import_model.hf)
    )
    imports.command("fairseq", short_help="Import a fairseq Transformer checkpoint.", context_settings=HELP_SETTINGS)(
        friendly(import_model.fairseq)
    )
    app.add_typer(imports, name="import", short_help="Bring in a model trained by another toolkit.")


_register()


def command() -> Any:
    """The ``nmt`` command as Click runs it, its values named the conventional way in ``--help``: ``PATH``,
    ``INTEGER``, ``FLOAT``, ``TEXT``, the choices ``[fp32|bf16]``, a command's arguments in capitals (Typer's
    own labels are Python's types: ``<list[Path]>``, ``<int range>``, ``<str>``); translate's many options
    under titles."""
    from .commands.translate import OPTION_GROUPS

    group: Any = typer.main.get_command(app)
    _name_values(group)
    _group_options(group.commands["translate"], OPTION_GROUPS)
    _wrap_at_spaces_only()
    return group


def _group_options(command: Any, groups: dict[str, tuple[str, ...]]) -> None:
    """``--help`` lists ``command``'s options under ``groups``' titles (Click has one flat list); an option no
    group names, and ``--help`` itself, come last under "Other"."""
    by_name = {param.name: param for param in command.params}
    unknown = {name for names in groups.values() for name in names} - set(by_name)
    assert not unknown, f"option groups name no option: {unknown}"

    def format_options(ctx: Any, formatter: Any) -> None:
        listed: set[str] = set()
        for title, names in [*groups.items(), ("Other", ())]:
            if title == "Other":
                names = tuple(p.name for p in command.get_params(ctx) if p.name not in listed)
            records = [r for r in (by_name.get(n, _help_param(command, ctx, n)).get_help_record(ctx) for n in names) if r]
            listed.update(names)
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)

    command.format_options = format_options


def _help_param(command: Any, ctx: Any, name: str) -> Any:
    return next(p for p in command.get_params(ctx) if p.name == name)


def _wrap_at_spaces_only() -> None:
    """Help text wraps at spaces, never inside an option name or word at its hyphen (``--paper-`` /
    ``bleu's``): Click's wrapper is the standard library's, whose hyphen rule is one class attribute."""
    import textwrap

    wrapper = importlib.import_module(_click_exceptions().__name__.rsplit(".", 1)[0] + "._textwrap").TextWrapper
    wrapper.wordsep_re = textwrap.TextWrapper.wordsep_simple_re


def _name_values(command: Any) -> None:
    for param in command.params:
        if param.param_type_name == "argument":
            _name_argument(param)
        elif param.metavar is None and not getattr(param, "is_flag", False):
            param.metavar = _value_name(param)
    for sub in getattr(command, "commands", {}).values():
        _name_values(sub)


def _click_value_name(param: Any) -> str:
    """The value name from the option's Click type: what :func:`_value_name` reads from Typer where it can."""
    import click

    kind = param.type
    if isinstance(kind, click.Choice):
        return "[" + "|".join(str(choice) for choice in kind.choices) + "]"
    if isinstance(kind, click.File):
        return "FILE"
    if isinstance(kind, click.Path):
        return "PATH"
    name = str(getattr(kind, "name", ""))
    return "INTEGER" if name.startswith("integer") else "FLOAT" if name.startswith("float") else "TEXT"


def _name_argument(param: Any) -> None:
    """An argument as Click names it: ``SOURCE`` in the usage line (``[SOURCE]`` when optional, ``...`` when
    repeated) and in its help row, without Typer's type label. Typer reads these from the instance's methods,
    so the instance gets its own."""
    name = str(param.name).upper()
    usage = (name if param.required else f"[{name}]") + ("..." if param.nargs != 1 else "")
    param.metavar = name
    param._usage_display_name = lambda: usage
    param.display_type_rich = lambda ctx: None


def _value_name(param: Any) -> str:
    described = getattr(param, "type_descriptor", None)
    if described is None:  # Typer before it described types (0.27 has no type_descriptor): Click's own types
        return _click_value_name(param)
    if described.is_choice:
        return "[" + "|".join(str(choice) for choice in described.choices) + "]"
    if described.is_file:
        return "FILE"
    kind = described.annotation
    if typing.get_origin(kind) in (list, tuple) and typing.get_args(kind):
        kind = typing.get_args(kind)[0]
    if described.is_path or kind is Path:
        return "PATH"
    return {int: "INTEGER", float: "FLOAT"}.get(kind, "TEXT")


def main() -> None:
    """Console-script entry point. A mistyped option or value is one line too, naming the option and
    where the choices are listed (Click would draw a box around it)."""
    usage_error = _click_exceptions().UsageError
    try:
        code = command()(standalone_mode=False)
    except usage_error as err:
        message = err.format_message().replace("Value error, ", "")  # Typer's choice check speaks Python
        if message:  # none when Click has just shown the help of a command given no arguments
            where = err.ctx.command_path if err.ctx is not None else "nmt"
            report_error(f"{message} (see {where} --help)")
        sys.exit(err.exit_code)
    except typer.Abort:
        report_error("interrupted")
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


def _click_exceptions() -> Any:
    """Click's exceptions: recent Typer carries its own copy of Click, earlier ones use Click itself."""
    try:
        return importlib.import_module("typer._click.exceptions")
    except ImportError:
        return importlib.import_module("click.exceptions")
