"""What the recipe keys mean, for ``--help`` and the reference page: help, defaults, kinds and bounds."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, fields
from typing import Any, Literal

import yaml

from .fields import key_of as _key_of
from .recipe import Recipe


def option_help(cls: type, name: str) -> str:
    """A command-line option's help, from the recipe key it overrides: its meaning, choices and default."""
    f = next(f for f in fields(cls) if f.name == name)
    hint = typing.get_type_hints(cls)[name]
    prefix = next(_key_of(r) for r in fields(Recipe) if typing.get_type_hints(Recipe)[r.name] is cls)
    default = f.default if hint is not bool else ("on" if f.default else "off")
    return f"{f.metadata['help']}. [recipe key {prefix}.{_key_of(f)}; default: {default}]"


@dataclass(frozen=True)
class KeyReference:
    """One recipe key as the reference page shows it: default in YAML, kind of value, bounds, meaning."""

    key: str
    default: str
    kind: str
    bounds: str
    help: str


def key_reference(cls: type = Recipe, prefix: str = "") -> list[KeyReference]:
    """Every leaf key of the recipe with its YAML default, its kind of value and its bounds (the reference page)."""
    rows: list[KeyReference] = []
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            rows += key_reference(hints[f.name], f"{prefix}{_key_of(f)}.")
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc,operator]
        shown = yaml.safe_dump(list(default) if isinstance(default, tuple) else default, default_flow_style=True)
        shown = shown.strip().removesuffix("...").strip()
        kind, bounds = _kind_text(hints[f.name]), _bounds_text(f.metadata)
        rows.append(KeyReference(prefix + _key_of(f), shown, kind, bounds, f.metadata.get("help", "")))
    return rows


def _kind_text(kind: Any) -> str:
    if typing.get_origin(kind) is Literal:
        return "one of " + ", ".join(str(choice) for choice in typing.get_args(kind))
    if typing.get_origin(kind) in (types.UnionType, typing.Union):
        return " or ".join(_kind_text(part) for part in typing.get_args(kind))
    if typing.get_origin(kind) is tuple:
        return "list of " + _kind_text(typing.get_args(kind)[0])
    if typing.get_origin(kind) is dict:
        return "mapping"
    names = {bool: "true or false", int: "integer", float: "number", str: "text"}
    return names.get(kind, getattr(kind, "__name__", str(kind)))


def _bounds_text(metadata: typing.Mapping[str, Any]) -> str:
    low = f"≥ {metadata['ge']:,}" if "ge" in metadata else f"> {metadata['gt']:,}" if "gt" in metadata else ""
    high = f"≤ {metadata['le']:,}" if "le" in metadata else f"< {metadata['lt']:,}" if "lt" in metadata else ""
    return ", ".join(part for part in (low, high) if part)


def field_help(cls: type = Recipe, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default as YAML, help) for every leaf field: used by ``nmt config --explain``."""
    return [(row.key, row.default, row.help) for row in key_reference(cls, prefix)]
