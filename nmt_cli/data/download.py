"""``nmt download``: fetch the corpora a recipe names, verify them, unpack them into data.root.

Runs only when the user asks (``nmt download`` or ``nmt prepare --download``). Archives are
cached under ``~/.cache/nmt/downloads`` (or ``$NMT_CACHE``); a partial download is resumed
with an HTTP Range request; every file is checked against its SHA-256 before use. Without
network the error says what to fetch and where to put it.
"""

from __future__ import annotations

import gzip
import html
import os
import re
import shutil
import sys
import tarfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from tqdm import tqdm

from ..config import DownloadSource, Recipe
from ..errors import DownloadError
from ..utils.files import atomic_open, ensure_writable_dir, sha256_file

Log = Callable[[str], None]
BLOCK = 1 << 20
_SEG = re.compile(r"<seg[^>]*>(.*)</seg>", re.IGNORECASE)


def cache_dir() -> Path:
    """Where archives are kept: ``$NMT_CACHE`` or ``~/.cache/nmt``, plus ``downloads``."""
    return Path(os.environ.get("NMT_CACHE") or Path.home() / ".cache" / "nmt") / "downloads"


def download_all(recipe: Recipe, log: Log = print, progress: bool = True, cache: Path | None = None) -> list[Path]:
    """Fetch, verify and unpack every source of ``recipe.download``; return the files written."""
    if not recipe.download:
        raise DownloadError(f"recipe {recipe.name}: names no download sources (the 'download' list is empty)")
    cache = ensure_writable_dir(cache or cache_dir())
    root = ensure_writable_dir(recipe.data.root)
    written: list[Path] = []
    failures: list[str] = []
    for source in recipe.download:
        try:
            archive = fetch(source, cache, log, progress)
        except DownloadError as err:  # go on: the user learns every missing file at once
            failures.append(str(err))
            continue
        written += unpack(source, archive, root, log)
    if len(failures) == 1:
        raise DownloadError(failures[0])
    if failures:  # each on a line of its own, then one short error (a line of them all was thousands of characters)
        for failure in failures:
            log(f"  {failure}")
        raise DownloadError(
            f"{len(failures)} of {len(recipe.download)} files could not be fetched (each above); without network, "
            f"fetch them by hand into {cache}, or point data.root at a copy you have (--set data.root=PATH)"
        )
    return written


def file_name(source: DownloadSource) -> str:
    return Path(urlparse(source.url).path).name or "download"


def fetch(source: DownloadSource, cache: Path, log: Log = print, progress: bool = True) -> Path:
    """The verified local copy of ``source``: from the cache, or downloaded (resuming a partial file)."""
    target = cache / file_name(source)
    bad = target.with_name(target.name + ".bad")
    note = ""
    if target.is_file():
        digest = sha256_file(target)
        if digest == source.sha256:
            log(f"[skip] {target.name} is in the cache and verified")
            return target
        os.replace(target, bad)  # kept for the user to inspect, never silently deleted
        note = (
            f" (the cached {target} had the wrong checksum: expected sha256 {source.sha256}, found {digest}; "
            f"moved aside to {bad})"
        )
        log(
            f"{target}: checksum mismatch (expected sha256 {source.sha256}, found {digest}); moved aside to {bad}, "
            "downloading again"
        )
    partial = target.with_name(target.name + ".part")
    try:
        _transfer(source.url, partial, progress, target)
    except DownloadError as err:
        raise DownloadError(f"{err}{note}") from None
    digest = sha256_file(partial)
    if digest != source.sha256:
        os.replace(partial, bad)
        raise DownloadError(
            f"{source.url}: checksum mismatch (expected sha256 {source.sha256}, found {digest}); "
            f"the file was moved aside to {bad}: run again, or check the URL and checksum in the recipe"
        )
    os.replace(partial, target)
    log(f"downloaded and verified {target}")
    return target


def _transfer(url: str, partial: Path, progress: bool, target: Path) -> None:
    have = partial.stat().st_size if partial.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "nmt-download"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # the partial file is already complete
            return
        raise DownloadError(f"{url}: HTTP {err.code} {err.reason}; check the URL in the recipe") from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise DownloadError(
            f"{url}: cannot download ({reason}); without network, fetch it by hand and put it at {target}"
        ) from None
    with response:
        resumed = getattr(response, "status", 200) == 206  # file:// responses have no status or length
        mode = "ab" if resumed else "wb"
        declared = response.headers.get("Content-Length")
        total = int(declared) + (have if resumed else 0) if declared else None
        with (
            open(partial, mode) as handle,
            tqdm(
                total=total,
                initial=have if resumed else 0,
                unit="B",
                unit_scale=True,
                desc=partial.name[:-5],
                leave=False,
                disable=None if progress else True,
                file=sys.stderr,
            ) as bar,
        ):
            try:
                while chunk := response.read(BLOCK):
                    handle.write(chunk)
                    bar.update(len(chunk))
            except (OSError, urllib.error.URLError) as err:
                raise DownloadError(
                    f"{url}: the transfer was interrupted ({err}); run the same command again to resume"
                ) from None
        if total is not None and partial.stat().st_size < total:
            raise DownloadError(
                f"{url}: the transfer was interrupted ({partial.stat().st_size:,} of {total:,} bytes); "
                "run the same command again to resume"
            )


def unpack(source: DownloadSource, archive: Path, root: Path, log: Log = print) -> list[Path]:
    """Write the files ``source`` asks for into ``root`` (tar members, a plain copy, SGML to text)."""
    if not source.extract:
        target = root / (source.save_as or archive.name)
        with atomic_open(target, "wb") as out, open(archive, "rb") as src:
            shutil.copyfileobj(src, out, BLOCK)
        return [target]
    if not tarfile.is_tarfile(archive):
        raise DownloadError(f"{archive}: not a tar archive, but the recipe lists members to extract from it")
    written = []
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        for member, output in source.extract.items():
            if member not in names:
                raise DownloadError(f"{archive}: has no member '{member}'; check 'extract' in the recipe")
            handle = tar.extractfile(member)
            if handle is None:
                raise DownloadError(f"{archive}: '{member}' is not a regular file")
            written.append(_write_member(handle, member, root / output))
            log(f"unpacked {member} -> {root / output}")
    return written


def _write_member(handle, member: str, target: Path) -> Path:
    raw = gzip.GzipFile(fileobj=handle) if member.endswith(".gz") and not target.name.endswith(".gz") else handle
    if member.endswith(".sgm") or member.endswith(".sgm.gz"):
        with atomic_open(target, "w", encoding="utf-8") as out:
            for line in raw:
                match = _SEG.search(line.decode("utf-8"))
                if match:
                    out.write(html.unescape(match.group(1)).strip() + "\n")
        return target
    with atomic_open(target, "wb") as out:
        shutil.copyfileobj(raw, out, BLOCK)
    return target
