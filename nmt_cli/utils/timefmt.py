"""Parsing of human durations such as ``90s``, ``30m`` or ``1.5h`` used in recipes."""

from __future__ import annotations

import re

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(text: str) -> float:
    """Return seconds for ``text`` (a bare number means seconds); raise ValueError otherwise."""
    match = _PATTERN.match(text)
    if not match:
        raise ValueError(f"'{text}' is not a duration; write e.g. 90s, 30m, 1.5h or 2d")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]
