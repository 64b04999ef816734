"""Recipes read from YAML (``base:`` inheritance, ``--set`` overrides), built into the typed tree and checked, and
written back."""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

import yaml

from ..errors import RecipeError
from .fields import key_of as _key_of
from .recipe import Recipe, validate


def load_recipe(path: str | Path, overrides: typing.Sequence[str] = ()) -> Recipe:
    """Load ``path`` (following ``base:`` inheritance), apply ``KEY=VALUE`` overrides, validate."""
    path = Path(path)
    raw = _load_yaml_tree(path, seen=())
    raw.setdefault("name", path.stem.removesuffix(".yaml"))
    for item in overrides:
        _apply_override(raw, item)
    return recipe_from_dict(raw, source=str(path))


def recipe_from_dict(raw: dict[str, Any], source: str = "recipe") -> Recipe:
    """Build and validate a :class:`Recipe` from plain data (e.g. a checkpoint's copy)."""
    recipe = _build(Recipe, raw, "", source)
    validate(recipe, source)
    return recipe


def recipe_to_dict(recipe: Recipe) -> dict[str, Any]:
    """Plain nested dicts and lists, ready for YAML or a checkpoint."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value):
            return {_key_of(f): plain(getattr(value, f.name)) for f in fields(value)}
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(recipe)


def dump_recipe(recipe: Recipe) -> str:
    """The fully resolved recipe as YAML text."""
    return yaml.safe_dump(recipe_to_dict(recipe), sort_keys=False, allow_unicode=True)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error, not a silent overwrite."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, typing.Hashable) and key in first_line:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"'{key}' appears twice, at lines {first_line[key]} and {line}; keep one",
                    key_node.start_mark,
                )
            if isinstance(key, typing.Hashable):
                first_line[key] = line
        return super().construct_mapping(node, deep=deep)


def _load_yaml_tree(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    resolved = path.resolve()
    if resolved in seen:
        raise RecipeError(f"{path}: 'base' inheritance loops back to this file")
    if not path.is_file():
        where = f" (inherited by {seen[-1]})" if seen else ""
        raise RecipeError(f"{path}: recipe not found{where}; check the path")
    try:
        with open(path, encoding="utf-8") as handle:
            raw = yaml.load(handle, Loader=_UniqueKeyLoader)  # a SafeLoader: no Python objects
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise RecipeError(f"{path}:{line}: invalid YAML ({getattr(err, 'problem', err)})") from None
    except UnicodeDecodeError:
        raise RecipeError(f"{path}: not UTF-8 text; save the recipe as UTF-8") from None
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise RecipeError(f"{path}: a recipe is a mapping of sections (data, vocab, model, ...)")
    base = raw.pop("base", None)
    if base is None:
        return raw
    if not isinstance(base, str):
        raise RecipeError(f"{path}: base: expected a file name, got {base!r}")
    parent = _load_yaml_tree(path.parent / base, seen + (resolved,))
    parent.pop("name", None)  # a derived recipe is named after its own file
    return _deep_merge(parent, raw)


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _apply_override(raw: dict[str, Any], item: str) -> None:
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise RecipeError(f"--set {item}: write KEY=VALUE, e.g. --set model.layers=3")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text
    parts = key.strip().split(".")
    _check_override(item, parts, value)
    node = raw
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise RecipeError(f"--set {item}: '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def _check_override(item: str, parts: list[str], value: Any) -> None:
    """A ``--set`` key and value checked on their own, so that a typo is reported as the option's, not as an
    unknown key of the recipe file."""
    cls: Any = Recipe
    path = ""
    for depth, part in enumerate(parts):
        by_key = {_key_of(f): f for f in fields(cls)}
        if part not in by_key:
            close = difflib.get_close_matches(part, list(by_key), n=1)
            hint = f"did you mean '{path}{close[0]}'?" if close else f"valid keys: {', '.join(by_key)}"
            raise RecipeError(f"--set {item}: unknown key '{path}{part}'; {hint}")
        kind = typing.get_type_hints(cls)[by_key[part].name]
        if depth < len(parts) - 1:
            if not (isinstance(kind, type) and dataclasses.is_dataclass(kind)):
                raise RecipeError(f"--set {item}: '{path}{part}' is a value, not a section")
            cls, path = kind, f"{path}{part}."
        else:
            _coerce(kind, value, path + part, by_key[part].metadata, f"--set {item}")


def override_section(section: Any, values: typing.Mapping[str, Any], sources: typing.Mapping[str, str]) -> Any:
    """``section`` (e.g. a recipe's ``DecodeConfig``) with ``values`` by field name (None: keep), each checked
    as a recipe's value is checked (type, choices, range) and failing with the same message, which names
    ``sources[name]`` (the command-line flag it came from) where a recipe error names the file."""
    cls = type(section)
    prefix = next(_key_of(f) + "." for f in fields(Recipe) if typing.get_type_hints(Recipe)[f.name] is cls)
    hints = typing.get_type_hints(cls)
    changed = {}
    for f in fields(cls):
        if values.get(f.name) is not None:
            changed[f.name] = _coerce(hints[f.name], values[f.name], prefix + _key_of(f), f.metadata, sources[f.name])
    return dataclasses.replace(section, **changed)


# Keys nmt no longer has: (the value that asked for nothing, why it went). Every recipe a checkpoint stores lists all
# keys, so a stored recipe with the retired key at that value still loads; a recipe asking for more is told why.
RETIRED_KEYS: dict[str, tuple[Any, str]] = {
    "train.train_previous": (
        False,
        "a recurrent model now trains every pair once, in chains of consecutive pairs of a document "
        "(train.chain_tokens); remove the key",
    ),
}


def _build(cls: type, data: Any, path: str, source: str) -> Any:
    if not isinstance(data, dict):
        raise RecipeError(f"{source}: {path.rstrip('.') or 'recipe'}: expected a mapping of keys, got {_describe(data)}")
    hints = typing.get_type_hints(cls)
    names = [_key_of(f) for f in fields(cls)]
    data = {key: value for key, value in data.items() if not _retired(f"{path}{key}", value, source)}
    for key in data:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"did you mean '{path}{close[0]}'?" if close else f"valid keys: {', '.join(names)}"
            raise RecipeError(f"{source}: unknown key '{path}{key}'; {hint}")
    kwargs = {
        f.name: _coerce(hints[f.name], data[_key_of(f)], path + _key_of(f), f.metadata, source)
        for f in fields(cls)
        if _key_of(f) in data
    }
    return cls(**kwargs)


def _retired(key: str, value: Any, source: str) -> bool:
    """Whether ``key`` is retired at its do-nothing value (then it is dropped); retired at another, an error."""
    if key not in RETIRED_KEYS:
        return False
    inert, why = RETIRED_KEYS[key]
    if value != inert:
        raise RecipeError(f"{source}: {key} is gone: {why}")
    return True


def _coerce(kind: Any, value: Any, key: str, meta: typing.Mapping[str, Any], source: str) -> Any:
    def fail(expected: str) -> typing.NoReturn:
        raise RecipeError(f"{source}: {key}: expected {expected}, got {_describe(value)}")

    origin = typing.get_origin(kind)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _build(kind, value, key + ".", source)
    if origin is Literal:
        choices = typing.get_args(kind)
        if value not in choices:
            fail("one of " + ", ".join(map(str, choices)))
        return value
    if origin is dict:
        if not isinstance(value, dict):
            fail("a mapping of names to names")
        for name, given in value.items():
            if not isinstance(name, str) or not isinstance(given, str):
                # YAML reads "{en-fr:/data}" as one key without a value: the space after the colon is what it misses
                hint = "; put a space after each colon, {a: b}" if given is None and ":" in str(name) else ""
                raise RecipeError(f"{source}: {key}: expected a mapping of names to names, got {name!r}: {given!r}{hint}")
        return dict(value)
    if origin is tuple:
        item_kind = typing.get_args(kind)[0]
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            fail("a list")
        return tuple(_coerce(item_kind, v, f"{key}[{i}]", {}, source) for i, v in enumerate(items))
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(kind):
            return None
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        for arg in args:  # the first alternative that accepts the value
            try:
                return _coerce(arg, value, key, meta, source)
            except RecipeError as err:
                if "out of range" in str(err):
                    raise
        fail(" or ".join(_expected(arg) for arg in args))
    if kind is bool:
        if not isinstance(value, bool):
            fail("true or false")
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            fail("an integer")
    elif kind is float:
        if isinstance(value, str):  # YAML 1.1 reads 5e-4 (no dot) as a string
            value = _float_or_none(value) if value.strip() else value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail("a number")
        value = float(value)
        if not math.isfinite(value):  # .nan and .inf are YAML numbers; no setting means them
            fail("a finite number")
    elif kind is str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            fail("a string")
    _check_range(value, key, meta, source)
    return value


def _float_or_none(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _expected(kind: Any) -> str:
    """What a value of ``kind`` looks like, for error messages."""
    if typing.get_origin(kind) is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(kind)))
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(kind, str(kind))


def _check_range(value: Any, key: str, meta: typing.Mapping[str, Any], source: str) -> None:
    if isinstance(value, str):
        return
    for check, ok, words in (
        ("ge", lambda v, b: v >= b, ">="),
        ("gt", lambda v, b: v > b, ">"),
        ("le", lambda v, b: v <= b, "<="),
        ("lt", lambda v, b: v < b, "<"),
    ):
        if check in meta and not ok(value, meta[check]):
            raise RecipeError(f"{source}: {key}: {value} is out of range; it must be {words} {meta[check]}")


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    # said in the recipe's own words, not Python's ('abc' (str), None (NoneType))
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    return f"the text '{value}'"
