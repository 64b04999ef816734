"""The package's public API is what the Python API page of the documentation says, and importing it stays light."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import nmt_cli

API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "python-api.md"


def api_page_imports() -> list[tuple[str, str]]:
    """(module, name) of every import in the Python API page's first code block."""
    code = re.search(r"```python\n(.*?)```", API_PAGE.read_text(encoding="utf-8"), re.S).group(1)
    return [
        (node.module, alias.name)
        for node in ast.parse(code).body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]


def test_every_name_the_api_page_imports_exists_and_the_package_exports_exactly_its_own():
    imports = api_page_imports()
    assert imports
    for module, name in imports:
        assert callable(getattr(__import__(module, fromlist=[name]), name)), (module, name)
    top_level = {name for module, name in imports if module == "nmt_cli"}
    assert set(nmt_cli.__all__) == top_level | {"__version__"}


def test_importing_the_package_does_not_import_torch():
    code = "import sys, nmt_cli; print('torch' in sys.modules, nmt_cli.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", nmt_cli.__version__]
