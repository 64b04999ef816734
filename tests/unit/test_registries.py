"""Every registry entry resolves: a name in a table that points at code elsewhere (a document format's
"module:function", a lazily imported public name) fails here, not in a user's run."""

from __future__ import annotations

import inspect
from importlib import import_module
from typing import get_args

import pytest

import nmt_cli
from nmt_cli import formats
from nmt_cli.commands.translate_options import ONLY, Engines
from nmt_cli.formats.document import DocumentFormat


@pytest.mark.parametrize("form", formats.DOCUMENT_FORMATS.values(), ids=lambda form: form.name)
def test_every_document_format_names_a_translating_function(form: DocumentFormat):
    module, function = form.function.split(":")
    found = getattr(import_module(f"nmt_cli.formats.{module}"), function)
    assert list(inspect.signature(found).parameters) == ["data", "request"]
    assert all(extension.startswith(".") for extension in form.extensions)  # none: chosen by --file-format only
    assert all(formats.EXTENSIONS[extension] == form.name for extension in form.extensions)  # no extension twice


@pytest.mark.parametrize("name", nmt_cli.__all__)
def test_every_public_name_resolves(name: str):
    assert getattr(nmt_cli, name) is not None


@pytest.mark.parametrize("name", [n for n in formats.__all__ if n[0].isupper() or n.startswith(("as_", "translate"))])
def test_every_lazy_format_name_resolves(name: str):
    assert getattr(formats, name) is not None


def test_every_engine_only_capability_names_an_engine():
    assert {owner for owner, _ in ONLY.values()} <= set(get_args(Engines))
    assert all(refusal.strip() and ";" in refusal for _, refusal in ONLY.values())  # each says what to do
