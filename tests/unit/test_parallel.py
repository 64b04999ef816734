"""Batches translated at once on the CPU (decode/parallel.py): how many, how large, in what order."""

from __future__ import annotations

import threading
import time

import torch

from nmt_cli.decode.parallel import AUTO_MAX_ROWS, run_batches, worker_count

CPU, GPU = torch.device("cpu"), torch.device("cuda")


def test_by_default_one_worker_per_thread_for_many_small_batches_one_on_a_gpu():
    assert worker_count(0, threads=2, device=CPU, batches=10, rows=64) == 2
    assert worker_count(0, threads=2, device=CPU, batches=10, rows=AUTO_MAX_ROWS + 1) == 1  # large batches
    assert worker_count(0, threads=2, device=CPU, batches=3, rows=64) == 1  # too few to share out evenly
    assert worker_count(0, threads=1, device=CPU, batches=10, rows=64) == 1
    assert worker_count(0, threads=2, device=CPU, batches=1, rows=4) == 1
    # asked for: taken whatever the batches' size, more than threads allowed, never more than batches
    assert worker_count(3, threads=2, device=CPU, batches=10, rows=AUTO_MAX_ROWS * 4) == 3
    assert worker_count(3, threads=2, device=CPU, batches=2, rows=4) == 2
    assert worker_count(1, threads=2, device=CPU, batches=10, rows=4) == 1
    assert worker_count(4, threads=2, device=GPU, batches=10, rows=4) == 1


def test_results_come_back_in_the_batches_order_each_worker_on_its_share_of_the_threads():
    threads_before = torch.get_num_threads()
    seen: dict[int, int] = {}

    def search(batch: int) -> int:
        time.sleep(0.02 * (5 - batch))  # the first batches finish last
        seen[threading.get_ident()] = torch.get_num_threads()
        return batch * 10

    assert list(run_batches(search, list(range(6)), workers=2, threads=4)) == [0, 10, 20, 30, 40, 50]
    assert len(seen) == 2 and threading.get_ident() not in seen
    assert set(seen.values()) == {2}
    assert torch.get_num_threads() == threads_before  # the calling thread keeps its threads
    seen.clear()
    assert list(run_batches(search, [1, 2], workers=1, threads=4)) == [10, 20]
    assert list(seen) == [threading.get_ident()]  # one worker: in the calling thread


def test_an_error_in_one_batch_stops_the_rest():
    started: list[int] = []

    def search(batch: int) -> int:
        started.append(batch)
        if batch == 0:
            raise ValueError("bad batch")
        time.sleep(0.05)
        return batch

    try:
        list(run_batches(search, list(range(40)), workers=2, threads=2))
    except ValueError as err:
        assert str(err) == "bad batch"
    else:
        raise AssertionError("the error did not reach the caller")
    assert len(started) < 10  # the batches not yet started were dropped
