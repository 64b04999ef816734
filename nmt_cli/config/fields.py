"""How a recipe key is declared: a dataclass field with its help text and range checks."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any


def _opt(default: Any, help: str, **checks: Any) -> Any:
    """A dataclass field with its help text and range checks (ge, gt, le) in metadata."""
    if isinstance(default, (list, dict)):
        raise TypeError("use tuples for defaults")  # guards against shared mutable defaults
    return field(default=default, metadata={"help": help, **checks})


def _sub(cls: type) -> Any:
    return field(default_factory=cls, metadata={"help": cls.__doc__ or ""})


def key_of(f: dataclasses.Field) -> str:
    """A field's key in recipes: its name, or the metadata's ``key`` where the name is a Python keyword."""
    return f.metadata.get("key", f.name)
