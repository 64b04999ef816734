"""Batches translated at once on the CPU (decode/parallel.py): how many, how large, in what order."""

from __future__ import annotations

import threading
import time

import torch

from nmt_cli.decode.parallel import run_batches, tokens_per_batch, worker_count

CPU, GPU = torch.device("cpu"), torch.device("cuda")


def test_one_worker_per_thread_by_default_never_more_than_batches_and_one_on_a_gpu():
    assert worker_count(0, threads=2, device=CPU, batches=10) == 2
    assert worker_count(0, threads=8, device=CPU, batches=3) == 3
    assert worker_count(3, threads=2, device=CPU, batches=10) == 3  # asked for: more than threads is allowed
    assert worker_count(0, threads=2, device=CPU, batches=1) == 1
    assert worker_count(1, threads=2, device=CPU, batches=10) == 1
    assert worker_count(0, threads=1, device=CPU, batches=10) == 1
    assert worker_count(4, threads=2, device=GPU, batches=10) == 1


def test_a_chunk_is_shared_out_so_every_worker_gets_a_batch():
    lengths = [30, 20, 20, 10, 10, 10]  # 100 tokens
    assert tokens_per_batch(6000, lengths, workers=2) == 50
    assert tokens_per_batch(40, lengths, workers=2) == 40  # the configured size when that is smaller
    assert tokens_per_batch(6000, [90, 5, 5], workers=4) == 90  # never below the longest sentence
    assert tokens_per_batch(6000, lengths, workers=1) == 6000
    assert tokens_per_batch(6000, [], workers=2) == 6000


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
