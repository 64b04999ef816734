"""The documentation site builds with no warning: every page in the navigation, every link and anchor found,
the generated reference pages (the command line, the recipe keys) made from the code as it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_documentation_site_builds_strictly(tmp_path):
    try:
        import material  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("mkdocs-material is not installed (pip install -e '.[docs]')")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "nmt translate" in cli and "--engine" in cli and "ctranslate2" in cli
    recipe = (tmp_path / "site" / "reference" / "recipe" / "index.html").read_text(encoding="utf-8")
    assert "decode.beam" in recipe and "train.max_time" in recipe
    _the_search_finds_options_and_topics_on_their_pages(tmp_path / "site")


def _the_search_finds_options_and_topics_on_their_pages(site: Path) -> None:
    """The built index through the theme's own search worker, as a reader's browser runs it (node)."""
    import json
    import shutil

    import material

    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI"):
            raise AssertionError("node is needed to run the site's search")
        pytest.skip("node is not installed: the site's search is not tried")
    worker = next((Path(material.__file__).parent / "templates" / "assets" / "javascripts" / "workers").glob("search.*.js"))
    wanted = {
        "--threads": "reference/cli/",
        "--docids": "documents/",
        "docids": "documents/",
        "max_len_b": "reference/recipe/",
        "opus-mt": "import/",
        "train.max_time": "reference/recipe/",
        "--glossary": "glossaries/",
        "-m": None,  # a one-letter option: found anywhere, but never a query the search cannot read
    }
    out = subprocess.run(
        [node, str(ROOT / "tests" / "unit" / "site_search.js"), str(worker), str(site), *wanted],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0 and "Invalid query" not in out.stderr, out.stderr[-2000:]
    found = json.loads(out.stdout)
    for query, page in wanted.items():
        assert found[query], query
        assert page is None or any(where.startswith(page) for where in found[query][:10]), (query, found[query][:10])


def test_the_recipe_table_lists_every_recipe():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "getting-started.md").read_text(encoding="utf-8")
    table = page.split("## Recipes", 1)[1].split("\n\n")[1:3]
    listed = set(re.findall(r"`([\w.]+\.yaml)`", "\n".join(table)))
    assert listed == {p.name for p in (root / "recipes").glob("*.yaml")}
