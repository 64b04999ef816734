"""MkDocs hook: the reference pages that must not drift from the code, generated at every build.

- ``reference/cli.md``: every command and option, read from the Typer application (``nmt_cli.cli.app``);
- ``reference/recipe.md``: every recipe key with its default and meaning, read from the config dataclasses
  (what ``nmt config --explain`` prints).
"""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    files.append(File.generated(config, "reference/recipe.md", content=recipe_reference()))
    return files


def cli_reference() -> str:
    import typer

    from nmt_cli.cli import app

    root = typer.main.get_command(app)
    lines = [
        "# Command line",
        "",
        "Generated from the command line itself at every build of these pages; `nmt COMMAND --help` prints the same.",
        "",
    ]
    for path, command in _commands(root, "nmt"):
        lines += [f"## `{path}`", "", _cell_text(command.help or ""), ""]
        arguments = [p for p in command.params if p.param_type_name == "argument"]
        if arguments:
            lines += ["| argument | meaning |", "| --- | --- |"]
            lines += [f"| `{a.name.upper()}` | {_cell_text(getattr(a, 'help', None) or '')} |" for a in arguments]
            lines.append("")
        options = [p for p in command.params if p.param_type_name == "option" and not getattr(p, "hidden", False)]
        if options:
            context = typer.Context(command)
            lines += ["| option | value | default | meaning |", "| --- | --- | --- | --- |"]
            for option in options:
                lines.append(_option_row(option, context))
            lines.append("")
    return "\n".join(lines)


def _commands(command: Any, path: str) -> list[tuple[str, Any]]:
    """(path, command) for every runnable command under ``command``, in the order the app lists them."""
    subcommands = getattr(command, "commands", None)
    if not subcommands:
        return [(path, command)]
    found = []
    for name, sub in subcommands.items():
        found += _commands(sub, f"{path} {name}")
    return found


def _option_row(option: Any, context: Any) -> str:
    names = ", ".join(f"`{name}`" for name in [*option.opts, *option.secondary_opts])
    value = "" if option.is_flag else f"`{_value_kind(option, context)}`".replace("|", "\\|")
    default = option.default
    shown = "" if default is None or callable(default) or option.show_default is False else f"`{default}`"
    return f"| {names} | {value} | {shown} | {_cell_text(option.help or '')} |"


def _value_kind(option: Any, context: Any) -> str:
    """What the option takes (``int``, ``path``, ``nmt|ctranslate2`` ...), as ``--help`` shows it: Typer's own
    rendering where it has one (recent Typer carries its own Click), else Click's type name."""
    if hasattr(option, "display_type"):
        return str(option.display_type(context)).strip("<>")
    return str(option.type.name)


def recipe_reference() -> str:
    from nmt_cli.config import field_help

    lines = [
        "# Recipe keys",
        "",
        "Every key a recipe may set, with its default and meaning, generated from the configuration classes at "
        "every build of these pages (`nmt config --explain` prints the same). A recipe names only what it changes; "
        "`--set KEY=VALUE` overrides any key on the command line.",
        "",
    ]
    section = None
    for key, default, text in field_help():
        top = key.split(".")[0]
        if top != section:
            section = top
            lines += ["", f"## `{top}`", "", "| key | default | meaning |", "| --- | --- | --- |"]
        lines.append(f"| `{key}` | `{default}` | {_cell_text(text)} |")
    return "\n".join(lines) + "\n"


def _cell_text(text: str) -> str:
    """Help text for one Markdown table cell (or paragraph): one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")
