"""Learning a vocabulary in a short-lived process of its own (``python -m nmt_cli.data.vocab_process``).

SentencePiece's trainer and the word counts leave the heap of the process that ran them fragmented:
every later step of ``nmt prepare`` would start about 10 MB larger. In a child, the memory goes back
to the system when it ends. A plain subprocess rather than multiprocessing: it never imports the
caller's main module, so a script that calls ``prepare()`` needs no ``if __name__ == "__main__"``
guard for this step, and a failure comes back as the child's one-line message.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ..config import VocabConfig
from ..errors import DataError, NmtError
from ..utils.process import die_with_parent
from .vocab import learn_vocab

_USER_ERROR = 3  # exit status of the child when its last stderr line is a one-line error for the user


def learn_vocab_apart(inputs: Sequence[Path], output: Path, config: VocabConfig, symbols: Sequence[str]) -> str:
    """:func:`learn_vocab` in a child process; returns what it was learned from, for the log."""
    spec = {
        "inputs": [str(p) for p in inputs],
        "output": str(output),
        "config": dataclasses.asdict(config),
        "symbols": list(symbols),
        "parent": os.getpid(),
    }
    child = subprocess.run(
        [sys.executable, "-m", __name__], input=json.dumps(spec), capture_output=True, text=True, check=False
    )
    if child.returncode == 0:
        return str(json.loads(child.stdout))
    last_line = (child.stderr.strip().splitlines() or [""])[-1]
    if child.returncode == _USER_ERROR:
        raise DataError(last_line)
    how = f"was killed by signal {-child.returncode}" if child.returncode < 0 else f"failed ({last_line})"
    raise DataError(
        f"{Path(inputs[0]).parent}: the process learning the vocabulary {how}; nothing half-written was kept. "
        "If it ran out of memory, lower vocab.input_sentence_size; then run `nmt prepare` again"
    )


def main() -> int:
    spec = json.loads(sys.stdin.read())
    die_with_parent(spec["parent"])
    config = VocabConfig(**spec["config"])
    try:
        learned_from = learn_vocab([Path(p) for p in spec["inputs"]], Path(spec["output"]), config, symbols=spec["symbols"])
    except NmtError as err:
        print(err, file=sys.stderr)
        return _USER_ERROR
    print(json.dumps(learned_from.summary()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
