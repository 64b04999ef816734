#!/usr/bin/env python3
"""Rebuild the bundled EN-DE / EN-FR sample corpus from Debian's gettext catalogs.

Usage (on a Debian machine, from the project root):

    python scripts/build_sample_corpus.py --download      # apt-get download the packages listed below
    python scripts/build_sample_corpus.py --debs DIR      # or use .deb files already in DIR

Every ``usr/share/locale/{de,fr}/LC_MESSAGES/*.mo`` catalog of the packages is read with the
standard library's ``gettext`` parser. A message becomes a sentence pair when it is a single
line of 3 to 40 words, is translated (not copied), has no plural forms, and its English side was
not seen before. Pairs are split into train/valid/test by a hash of the English string, so no
source sentence is in two splits. The output goes to ``nmt_cli/sample/`` as gzip files, with a
README listing each package, its version and its licence.
"""

from __future__ import annotations

import argparse
import gettext
import gzip
import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

PACKAGES = [
    "coreutils",
    "git",
    "gpg",
    "gnupg-l10n",
    "dpkg",
    "apt",
    "libglib2.0-data",
    "libgtk-3-common",
    "postgresql-15",
    "postgresql-client-15",
    "util-linux-locales",
    "libc-l10n",
    "tar",
    "wget",
    "grep",
    "sed",
    "findutils",
    "diffutils",
    "gettext",
    "nano",
    "e2fsprogs-l10n",
    "man-db",
    "debconf-i18n",
    "binutils-common",
    "gdb",
    "bison",
    "make",
    "aptitude-common",
    "tasksel-data",
    "passwd",
    "procps",
    "psmisc",
    "sudo",
    "cups-common",
    "gimp-data",
    "libgphoto2-l10n",
    "xfce4-panel",
    "evince",
    "vim-runtime",
]
# gcc's catalogues are left out on purpose: 13k messages of compiler markup (%qE, %<...%>) would
# make up a third of the corpus. Catalogues that are lists of codes or names rather than sentences:
SKIP_CATALOGS = re.compile(r"^(iso_|iso-|xkeyboard|keyboard|tzdata|langpack)")
LANGS = ("de", "fr")
MIN_WORDS, MAX_WORDS = 3, 40
HELD_OUT = 3  # percent of source strings for valid, and again for test
PLACEHOLDER = re.compile(r"%[-+ #0-9.*lhjztL]*[a-zA-Z]|\{[^{}]*\}|\$\{?\w+\}?")


def deb_catalogs(deb: Path) -> dict[str, dict[str, bytes]]:
    """{lang: {catalog file name: .mo bytes}} of one .deb (read through dpkg-deb, nothing installed)."""
    tar_bytes = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    found: dict[str, dict[str, bytes]] = {lang: {} for lang in LANGS}
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        for member in tar.getmembers():
            match = re.search(r"usr/share/locale/([a-z]{2})/LC_MESSAGES/([^/]+)\.mo$", member.name)
            if match and match.group(1) in LANGS and member.isfile() and not SKIP_CATALOGS.match(match.group(2)):
                found[match.group(1)][match.group(2)] = tar.extractfile(member).read()
    return found


def messages(mo: bytes) -> dict[str, str]:
    """Single-form messages of a catalog (context prefixes removed)."""
    catalog = gettext.GNUTranslations(io.BytesIO(mo))._catalog  # the parsed msgid -> msgstr table
    out = {}
    for key, value in catalog.items():
        if not isinstance(key, str) or not key or not value:
            continue
        out[key.split("\x04", 1)[-1]] = value
    return out


def clean(text: str) -> str:
    text = re.sub(r"(?<![\w_])[_&](?=\w)", "", text)  # menu accelerators: _Open, &File
    return " ".join(text.split())


def usable(src: str, tgt: str) -> bool:
    if "\n" in src or "\n" in tgt or "\t" in src or "\t" in tgt:
        return False
    words = src.split()
    if not MIN_WORDS <= len(words) <= MAX_WORDS or src == tgt:
        return False
    if len(PLACEHOLDER.findall(src)) > 2 or sorted(PLACEHOLDER.findall(src)) != sorted(PLACEHOLDER.findall(tgt)):
        return False  # format strings must carry the same placeholders on both sides
    letters = sum(ch.isalpha() for ch in src)
    return letters >= 0.6 * len(src.replace(" ", ""))  # mostly words, not code or option lists


def split_of(src: str) -> str:
    bucket = int(hashlib.sha256(src.encode()).hexdigest(), 16) % 100
    return "test" if bucket < HELD_OUT else "valid" if bucket < 2 * HELD_OUT else "train"


def package_info(deb: Path) -> dict[str, str]:
    fields = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Package", "Version", "Source"], capture_output=True, text=True, check=True
    ).stdout
    info = dict(line.split(": ", 1) for line in fields.splitlines() if ": " in line)
    return info


def licence_of(deb: Path) -> str:
    """The licence names from the package's machine-readable copyright file, if it has one."""
    tar_bytes = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        for member in tar.getmembers():
            if member.name.endswith("/copyright") and "usr/share/doc/" in member.name and member.isfile():
                text = tar.extractfile(member).read().decode("utf-8", "replace")
                names = Counter(m.strip() for m in re.findall(r"^License:\s*(.+)$", text, re.MULTILINE))
                if names:
                    return ", ".join(name for name, _ in names.most_common(4))
                return f"see /usr/share/doc/{member.name.split('/')[-2]}/copyright"
    return "see the package's copyright file"


def build(debs: list[Path], out: Path) -> dict:
    pairs: dict[str, dict[str, dict[str, str]]] = {lang: {} for lang in LANGS}
    sources = []
    for deb in sorted(debs):
        catalogs = deb_catalogs(deb)
        counts = {}
        for lang in LANGS:
            before = len(pairs[lang])
            for name in sorted(catalogs[lang]):
                for msgid, msgstr in messages(catalogs[lang][name]).items():
                    src, tgt = clean(msgid), clean(msgstr)
                    if usable(src, tgt) and src not in pairs[lang]:
                        pairs[lang][src] = {"tgt": tgt, "package": deb.name}
            counts[lang] = len(pairs[lang]) - before
        if any(counts.values()):
            info = package_info(deb)
            sources.append({**info, "licence": licence_of(deb), "pairs": counts})
    stats = {}
    out.mkdir(parents=True, exist_ok=True)
    for lang in LANGS:
        for split in ("train", "valid", "test"):
            chosen = sorted(src for src in pairs[lang] if split_of(src) == split)
            stats[f"en-{lang} {split}"] = len(chosen)
            for side, lines in (("en", chosen), (lang, [pairs[lang][s]["tgt"] for s in chosen])):
                path = out / f"en-{lang}" / f"{split}.{side}.gz"
                path.parent.mkdir(parents=True, exist_ok=True)
                with gzip.GzipFile(path, "wb", mtime=0) as handle:  # mtime 0: byte-identical rebuilds
                    handle.write("".join(line + "\n" for line in lines).encode("utf-8"))
    return {"stats": stats, "sources": sources}


def write_readme(out: Path, result: dict) -> None:
    rows = "\n".join(
        f"| {s['Package']} | {s['Version']} | {s.get('Source', s['Package']).split()[0]} | "
        f"{s['pairs'].get('de', 0)} | {s['pairs'].get('fr', 0)} | {s['licence']} |"
        for s in result["sources"]
    )
    stats = "\n".join(f"| {k} | {v:,} |" for k, v in result["stats"].items())
    (out / "README.md").write_text(f"""# Sample corpus: software messages (EN-DE, EN-FR)

Real parallel text for `nmt quickstart`: the English messages of Debian packages and their
German and French translations, taken from the packages' gettext catalogs (`.mo` files).
Rebuilt by `scripts/build_sample_corpus.py` (see its docstring for the filters): single-line
messages of {MIN_WORDS}-{MAX_WORDS} words, translated, placeholders matching on both sides,
no duplicate English strings, no code-list catalogues; split into train/valid/test by a hash of
the English string ({HELD_OUT}% valid, {HELD_OUT}% test), so no source string is in two splits.

| split | pairs |
| --- | --- |
{stats}

The translations belong to their translators and are distributed under the licences of the
packages they come from (the licence names below are read from each package's
`debian/copyright`; see that file for the exact terms):

| package | version | source | EN-DE pairs | EN-FR pairs | licence |
| --- | --- | --- | --- | --- | --- |
{rows}
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--debs", type=Path, default=Path("build/debs"), help="folder of .deb files")
    parser.add_argument("--download", action="store_true", help="apt-get download the packages first")
    parser.add_argument("--out", type=Path, default=Path("nmt_cli/sample"))
    args = parser.parse_args()
    if args.download:
        args.debs.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", *PACKAGES], cwd=args.debs, check=True)
    debs = sorted(args.debs.glob("*.deb"))
    if not debs:
        sys.exit(f"{args.debs}: no .deb files; run with --download on a Debian machine")
    result = build(debs, args.out)
    write_readme(args.out, result)
    (args.out / "sources.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(json.dumps(result["stats"], indent=1))


if __name__ == "__main__":
    main()
