"""Several batches translated at once on the CPU, each on its share of the threads.

A decoder step of a beam search over a few dozen rows is many small operations: split over two
threads, each matrix product spends much of its time handing work out and waiting for the other
thread, and the operations between products use one thread anyway. Two batches translated at once,
one thread each, keep both cores busy with whole products instead. Marian's ``--cpu-threads`` and
CTranslate2's ``inter_threads`` work the same way (the measurements: docs/choices.md, "Decoding"). Large
batches (a few hundred decoder rows) already keep two threads busy and gain nothing, so by default workers
take on only small batches (``AUTO_MAX_ROWS``); ``decode.workers`` sets the number outright.

Each batch's search is a pure function of its inputs, so the outputs do not depend on which worker
runs it or on the order the batches finish; results come back in the batches' order. Threads, not
processes: the model's weights are shared, and PyTorch releases Python's global lock inside its
operations. A worker's thread count is its own (``torch.set_num_threads`` sets OpenMP's and MKL's
per-thread settings), so the calling thread keeps its threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

Batch = TypeVar("Batch")
Result = TypeVar("Result")


# What auto (``decode.workers: 0``) takes on: batches of at most this many decoder rows (sentences x
# beam), and at least two batches per worker (so that none waits long for the last): two workers paid
# up to 256 rows a batch and lost above (docs/choices.md).
AUTO_MAX_ROWS = 256
AUTO_MIN_BATCHES_PER_WORKER = 2


def worker_count(requested: int, threads: int, device: torch.device, batches: int, rows: int) -> int:
    """How many batches run at once: ``requested`` (never more than there are batches), or for 0 one
    per thread where the batches are small and many (see ``AUTO_MAX_ROWS``), else one; one on a GPU
    (its kernels already fill it; the host only queues them). ``rows`` is the largest batch's decoder rows."""
    if device.type != "cpu" or batches < 2:
        return 1
    if requested:
        return min(requested, batches)
    if threads < 2 or rows > AUTO_MAX_ROWS or batches < AUTO_MIN_BATCHES_PER_WORKER * threads:
        return 1
    return threads


def run_batches(search: Callable[[Batch], Result], batches: Sequence[Batch], workers: int, threads: int) -> Iterator[Result]:
    """``search`` of every batch, in order: in this thread when ``workers`` is 1, else on ``workers``
    threads with ``threads // workers`` (at least one) threads each."""
    if workers <= 1:
        yield from map(search, batches)
        return
    each = max(1, threads // workers)
    pool = ThreadPoolExecutor(max_workers=workers, initializer=torch.set_num_threads, initargs=(each,))
    try:
        yield from pool.map(search, batches)
    finally:
        # An error or Ctrl-C stops here at once: the batches not yet started are dropped, not run out.
        pool.shutdown(wait=True, cancel_futures=True)
