"""Ways to draw and apply a dropout mask on the CPU, timed on one activation of m30k-small (issue 12).

    python benchmarks/bench_dropout_mask.py [--rows 3800] [--width 256] [--p 0.1] [--threads 2] [--repeats 40]

Prints the median milliseconds of each way of drawing a keep mask (``bernoulli_``, ``rand``, ``randint``,
``random_`` on int32, 64-bit words cut into 16-bit pieces as ``nmt_cli/model/dropout.py`` does) and its
keep rate, then of applying one (``x.mul(mask)`` against ``torch.where``), then ``F.dropout`` against
:func:`apply_dropout`, forward and backward.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from nmt_cli.model.dropout import apply_dropout, keep_mask

parser = argparse.ArgumentParser()
parser.add_argument("--rows", type=int, default=3800)
parser.add_argument("--width", type=int, default=256)
parser.add_argument("--p", type=float, default=0.1)
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--repeats", type=int, default=40)
args = parser.parse_args()
torch.set_num_threads(args.threads)
x = torch.randn(args.rows, args.width)
shape, p = x.shape, args.p


def median_ms(fn) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


draws = {
    "bernoulli_ (F.dropout's draw)": lambda: torch.empty_like(x).bernoulli_(1 - p) != 0,
    "rand >= p": lambda: torch.rand_like(x) >= p,
    "randint uint8": lambda: torch.randint(0, 256, shape, dtype=torch.uint8) >= round(p * 256),
    "random_ int32, 16 bits": lambda: torch.empty(shape, dtype=torch.int32).random_(0, 65536) >= round(p * 65536),
    "64-bit words in 16-bit pieces (ours)": lambda: keep_mask(shape, p)[0],
}
for name, draw in draws.items():
    print(f"draw  {name:40s} {median_ms(draw):7.2f} ms  keep rate {draw().float().mean().item():.5f}")
mask, scale = keep_mask(shape, p)
zero = torch.zeros((), dtype=x.dtype)
print(f"apply x.mul(mask).mul_(scale)                 {median_ms(lambda: x.mul(mask).mul_(scale)):7.2f} ms")
print(f"apply torch.where(mask, x, 0).mul_(scale)     {median_ms(lambda: torch.where(mask, x, zero).mul_(scale)):7.2f} ms")
leaf = x.clone().requires_grad_(True)
grad = torch.randn_like(x)
print(f"F.dropout forward + backward      {median_ms(lambda: F.dropout(leaf, p, True).backward(grad)):7.2f} ms")
print(f"apply_dropout forward + backward  {median_ms(lambda: apply_dropout(leaf, p, True).backward(grad)):7.2f} ms")
