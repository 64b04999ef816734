"""Option value names (``--beam INTEGER``) where Typer does not describe an option's type (Typer 0.27, whose
options are Click's, without ``type_descriptor``): read from the Click type, as newer Typer describes them."""

import click
import pytest

from nmt_cli.cli import _click_value_name, _value_name


@pytest.mark.parametrize(
    "kind, name",
    [
        (click.Choice(["text", "jsonl"]), "[text|jsonl]"),
        (click.INT, "INTEGER"),
        (click.IntRange(0, 9), "INTEGER"),
        (click.FLOAT, "FLOAT"),
        (click.FloatRange(0.0, 1.0), "FLOAT"),
        (click.Path(), "PATH"),
        (click.File(), "FILE"),
        (click.STRING, "TEXT"),
    ],
)
def test_an_option_without_a_typer_description_is_named_from_its_click_type(kind, name):
    option = click.Option(["--x"], type=kind)
    assert not hasattr(option, "type_descriptor")
    assert _click_value_name(option) == _value_name(option) == name
