"""Word alignments of the prepared training pairs, for guided alignment (Garg et al. 2019, "Jointly Learning to
Align and Translate with Transformer Models").

``nmt prepare`` with ``data.align: true`` aligns the encoded pairs, subword piece to subword piece, with eflomal
(Östling and Tiedemann 2016: a Bayesian IBM model with a Markov chain Monte Carlo sampler, the aligner OPUS-MT
and Bergamot's guided-alignment training use; ``pip install 'nmt-cli[align]'``) in both directions, and joins
the two directions with grow-diag-final-and (Koehn et al. 2005), the symmetrisation fast_align's ``atools``,
Moses and Marian's recipes use. The links go to ``train.align.bin``/``.idx``: pairs ``(source piece, target
piece)`` flattened, in the token-array format of :mod:`.binary`, so pair ``i``'s links are read as the
sentences are.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from ..errors import DataError
from ..utils.process import die_with_parent, pid_alive
from .binary import TokenArray, TokenArrayWriter

LINK_DTYPE = np.dtype("<u2")  # piece positions: sentences are far shorter than 65,536 pieces
INSTALL_HINT = "run pip install 'nmt-cli[align]'"
# eflomal leaves sentences of 1,024 tokens or more unaligned (its MAX_SENT_LEN); such a pair gets no links.
EFLOMAL_MAX_TOKENS = 1023


def aligner_installed() -> bool:
    """Whether eflomal can be imported (it is an optional extra)."""
    return importlib.util.find_spec("eflomal") is not None


def eflomal_links(sources: Iterable[str], targets: Iterable[str], workdir: Path) -> Iterator[tuple[str, str]]:
    """eflomal's forward and reverse Pharaoh links for each pair of whitespace-token lines, one pair per line."""
    if not aligner_installed():
        raise DataError(f"data.align: true needs eflomal (the word aligner); {INSTALL_HINT}")
    import eflomal

    forward, reverse = workdir / "forward.links", workdir / "reverse.links"
    # quiet=True: eflomal's own progress lines would interleave with ours
    with children_die_with_this_process(), temporary_files_in(workdir):
        aligner = eflomal.Aligner()
        aligner.align(list(sources), list(targets), links_filename_fwd=str(forward), links_filename_rev=str(reverse))
    with open(forward, encoding="ascii") as fwd, open(reverse, encoding="ascii") as rev:
        yield from zip(fwd, rev)


@contextlib.contextmanager
def children_die_with_this_process() -> Iterator[None]:
    """While it lasts, every process started through ``subprocess.Popen`` dies with this one, even on ``kill -9``
    (Linux's parent-death signal). eflomal starts its aligner binary so and takes no options for it: a killed
    ``nmt prepare`` left it running for minutes."""
    original = subprocess.Popen
    parent = os.getpid()

    class Tied(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            kwargs.setdefault("preexec_fn", lambda: die_with_parent(parent))
            super().__init__(*args, **kwargs)

    subprocess.Popen = Tied  # type: ignore[misc]
    try:
        yield
    finally:
        subprocess.Popen = original  # type: ignore[misc]


@contextlib.contextmanager
def temporary_files_in(folder: Path) -> Iterator[None]:
    """Python's temporary files (eflomal's inputs) go into ``folder`` while it lasts: one folder to remove."""
    original = tempfile.tempdir
    tempfile.tempdir = str(folder)
    try:
        yield
    finally:
        tempfile.tempdir = original


@contextlib.contextmanager
def aligner_workdir() -> Iterator[Path]:
    """A temporary folder named by this process's PID; the folders of killed processes are removed first."""
    for stale in Path(tempfile.gettempdir()).glob("nmt-align-*"):
        owner = re.match(r"nmt-align-(\d+)-", stale.name)
        if owner and stale.is_dir() and not pid_alive(int(owner.group(1))):
            shutil.rmtree(stale, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f"nmt-align-{os.getpid()}-") as workdir:
        yield Path(workdir)


def parse_links(text: str) -> set[tuple[int, int]]:
    """``"0-0 1-2"`` -> ``{(0, 0), (1, 2)}``."""
    return {(int(i), int(j)) for i, j in (pair.split("-") for pair in text.split())}


def grow_diag_final_and(forward: set[tuple[int, int]], reverse: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """Koehn et al.'s symmetrisation: start from the links both directions agree on, grow into neighbouring
    (also diagonal) links of their union that touch an unaligned word, then add union links whose words are
    both still unaligned. Links are (source, target) positions; sorted by target, then source."""
    union = forward | reverse
    links = forward & reverse
    aligned_src, aligned_tgt = {i for i, _ in links}, {j for _, j in links}
    neighbours = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]
    grown = True
    while grown:
        grown = False
        for i, j in sorted(links):
            for di, dj in neighbours:
                candidate = (i + di, j + dj)
                if (
                    candidate in union
                    and candidate not in links
                    and (candidate[0] not in aligned_src or candidate[1] not in aligned_tgt)
                ):
                    links.add(candidate)
                    aligned_src.add(candidate[0])
                    aligned_tgt.add(candidate[1])
                    grown = True
    for direction in (forward, reverse):  # final-and: both words unaligned
        for i, j in sorted(direction):
            if i not in aligned_src and j not in aligned_tgt:
                links.add((i, j))
                aligned_src.add(i)
                aligned_tgt.add(j)
    return sorted(links, key=lambda link: (link[1], link[0]))


def symmetrised(sources: Iterable[str], targets: Iterable[str]) -> Iterator[list[tuple[int, int]]]:
    """Per pair of whitespace-token lines, its grow-diag-final-and links from eflomal's two directions."""
    with aligner_workdir() as workdir:
        for fwd, rev in eflomal_links(sources, targets, workdir):
            yield grow_diag_final_and(parse_links(fwd), parse_links(rev))


def align_pieces(src: TokenArray, tgt: TokenArray, prefix: Path) -> int:
    """Align the encoded pairs ``src``/``tgt`` piece by piece; write the links to ``prefix``.bin/.idx; return
    how many links were written."""
    if len(src) != len(tgt):
        raise DataError(f"{prefix}: {len(src)} source and {len(tgt)} target sentences; re-run `nmt prepare --force`")
    as_words = lambda array: (" ".join(map(str, array[i].tolist())) for i in range(len(array)))  # noqa: E731
    writer = TokenArrayWriter(prefix, LINK_DTYPE)
    links_written = 0
    try:
        for links in symmetrised(as_words(src), as_words(tgt)):
            flat = np.asarray(links, dtype=np.int64).reshape(-1)
            writer.append(flat, np.asarray([len(flat)]))
            links_written += len(links)
        if writer.sentences != len(src):
            raise DataError(f"{prefix}: eflomal returned {writer.sentences} alignments for {len(src)} pairs")
    except BaseException:
        writer.abort()
        raise
    writer.commit()
    return links_written


def load_links(prefix: Path) -> TokenArray:
    """The links written by :func:`align_pieces`: row ``i`` is pair ``i``'s (source, target) positions, flattened."""
    return TokenArray(prefix, LINK_DTYPE)
