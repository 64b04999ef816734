"""MkDocs hook: the reference pages that must not drift from the code, generated at every build.

- ``reference/cli.md``: every command and option, read from the Typer application (``nmt_cli.cli.app``);
- ``reference/recipe.md``: every recipe key with its default and meaning, read from the config dataclasses
  (what ``nmt config --explain`` prints);
- ``changelog.md``: the repository's CHANGELOG.md;
- the signatures at the end of ``reference/python-api.md``: every name ``nmt_cli.__all__`` exports, with its
  signature and the first paragraph of its docstring, read from the code.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    files.append(File.generated(config, "reference/recipe.md", content=recipe_reference()))
    files.append(File.generated(config, "changelog.md", content=CHANGELOG.read_text(encoding="utf-8")))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri == "reference/python-api.md":
        return markdown + "\n" + api_signatures()
    return markdown


def api_signatures() -> str:
    """One entry per exported name: ``name(signature)`` in a code block, then its docstring's first paragraph."""
    import inspect

    import nmt_cli

    lines = ["## Signatures", "", "Generated from the code at every build of these pages.", ""]
    for name in nmt_cli.__all__:
        if name.startswith("_"):
            continue
        obj = getattr(nmt_cli, name)
        try:
            signature = f"{name}{_signature(inspect.signature(obj))}"
        except (TypeError, ValueError):  # a protocol or a class without an inspectable constructor
            signature = name
        kind = "class" if inspect.isclass(obj) else "def"
        doc = (inspect.getdoc(obj) or "").split("\n\n")[0].replace("\n", " ")
        doc = re.sub(r":(?:class|func|meth|attr|mod|data):`~?\.?([^`]+)`", r"`\1`", doc)  # Sphinx roles: names
        lines += [f"### `{name}`", "", "```python", f"{kind} {signature}", "```", "", doc, ""]
    return "\n".join(lines)


def _signature(signature: Any) -> str:
    """A signature as its source writes it: annotations as written (not ``ForwardRef('str')``), a function
    default by its name (not ``<built-in function print>``)."""
    import inspect

    def annotation(value: Any) -> str:
        if isinstance(value, str):
            return value
        if getattr(value, "__forward_arg__", None):
            return value.__forward_arg__
        return inspect.formatannotation(value).replace("ForwardRef('", "").replace("')", "")

    parts = []
    for parameter in signature.parameters.values():
        text = (
            "*" if parameter.kind is parameter.VAR_POSITIONAL else "**" if parameter.kind is parameter.VAR_KEYWORD else ""
        ) + parameter.name
        if parameter.annotation is not parameter.empty:
            text += f": {annotation(parameter.annotation)}"
        if parameter.default is not parameter.empty:
            default = parameter.default
            shown = getattr(default, "__qualname__", None) if callable(default) else repr(default)
            text += f" = {shown or repr(default)}"
        parts.append(text)
    returned = "" if signature.return_annotation is signature.empty else f" -> {annotation(signature.return_annotation)}"
    return f"({', '.join(parts)}){returned}"


CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"  # the repository's, shown on the site as written


def cli_reference() -> str:
    from nmt_cli.cli import command

    root = command()  # as `nmt --help` names values: PATH, INTEGER, [fp32|bf16]
    lines = [
        "# Command line",
        "",
        "Generated from the command line itself at every build of these pages: the options `nmt COMMAND --help` lists, "
        "under the same titles, with the same values and defaults.",
        "",
    ]
    for path, runnable in _commands(root, "nmt"):
        lines += [f"## `{path}`", "", _cell_text(runnable.help or ""), ""]
        arguments = [p for p in runnable.params if p.param_type_name == "argument"]
        if arguments:
            lines += ["| argument | meaning |", "| --- | --- |"]
            lines += [
                f"| `{a.name.upper()}` | {_required(a)}{_cell_text(getattr(a, 'help', None) or '')} |" for a in arguments
            ]
            lines.append("")
        options = [p for p in runnable.params if p.param_type_name == "option" and not getattr(p, "hidden", False)]
        for title, grouped in _option_groups(path, options):
            lines += [f"### {title}", ""] if title else []
            lines += ["| option | value | default | meaning |", "| --- | --- | --- | --- |"]
            lines += [_option_row(option) for option in grouped]
            lines.append("")
    return "\n".join(lines)


def _option_groups(path: str, options: list[Any]) -> list[tuple[str, list[Any]]]:
    """The options under the titles ``--help`` shows them in (``nmt translate``'s groups), else one untitled list."""
    from nmt_cli.commands.translate import OPTION_GROUPS

    if path != "nmt translate":
        return [("", options)] if options else []
    by_name = {option.name: option for option in options}
    groups = [(title, [by_name[n] for n in names if n in by_name]) for title, names in OPTION_GROUPS.items()]
    placed = {option.name for _, grouped in groups for option in grouped}
    groups.append(("Other", [option for option in options if option.name not in placed]))
    return [(title, grouped) for title, grouped in groups if grouped]


def _required(param: Any) -> str:
    return "**required.** " if getattr(param, "required", False) else ""


def _commands(command: Any, path: str) -> list[tuple[str, Any]]:
    """(path, command) for every runnable command under ``command``, in the order the app lists them."""
    subcommands = getattr(command, "commands", None)
    if not subcommands:
        return [(path, command)]
    found = []
    for name, sub in subcommands.items():
        found += _commands(sub, f"{path} {name}")
    return found


def _option_row(option: Any) -> str:
    names = ", ".join(f"`{name}`" for name in [*option.opts, *option.secondary_opts])
    value = "" if option.is_flag else _value_kind(option)
    default = option.default
    shown = "" if default is None or callable(default) or option.show_default is False else f"`{_yaml(default)}`"
    return f"| {names} | {value} | {shown} | {_required(option)}{_cell_text(option.help or '')} |"


def _value_kind(option: Any) -> str:
    """What the option takes, as ``--help`` names it (``INTEGER``, ``PATH``, choices), with its bounds."""
    metavar = str(option.metavar or "")
    if metavar.startswith("[") and metavar.endswith("]"):
        return "one of " + ", ".join(f"`{choice}`" for choice in metavar[1:-1].split("|"))
    bounds = option._get_number_range_help_str() if hasattr(option, "_get_number_range_help_str") else None
    return f"`{metavar}`" + (f" ({_cell_text(bounds)})" if bounds else "")


def _yaml(value: Any) -> str:
    import yaml

    if isinstance(value, (tuple, list)):
        value = [str(item) if not isinstance(item, (int, float, bool)) else item for item in value]
    elif not isinstance(value, (int, float, bool, str)):
        value = str(value)  # a Path
    text = yaml.safe_dump(value, default_flow_style=True)
    return text.strip().removesuffix("...").strip()


def recipe_reference() -> str:
    from nmt_cli.config import key_reference

    lines = [
        "# Recipe keys",
        "",
        "Every key a recipe may set, with its default (as YAML), the values it takes and its meaning, generated "
        "from the configuration classes at every build of these pages (`nmt config --explain` prints the same). "
        "A recipe names only what it changes; `--set KEY=VALUE` overrides any key on the command line.",
        "",
    ]
    section = None
    for row in key_reference():
        top = row.key.split(".")[0]
        if top != section:
            section = top
            lines += ["", f"## `{top}`", "", "| key | default | values | meaning |", "| --- | --- | --- | --- |"]
        values = _cell_text(row.kind + (f" ({row.bounds})" if row.bounds else ""))
        lines.append(f"| `{row.key}` | `{_cell_text(row.default)}` | {values} | {_cell_text(row.help)} |")
    return "\n".join(lines) + "\n"


def _cell_text(text: str) -> str:
    """Help text for one Markdown table cell (or paragraph): one line, HTML's special characters escaped (so
    that "<BT>" and "<tab>" show), pipes escaped."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")
