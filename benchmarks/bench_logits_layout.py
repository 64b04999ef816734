"""Decode-time layouts of the output projection, end to end at batch 1 (issue 12).

    python benchmarks/bench_logits_layout.py MODEL [--lines 60] [--rounds 2]

Swaps ``Transformer.logits`` for each variant, alternating variants round by round; prints
sentences/s (mean of the rounds) and whether the output equals the current code's.
"""

import argparse
import gzip
import time
from dataclasses import replace

import torch
from common import SHARED

from nmt_cli.decode.translator import Translator, load_model

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--lines", type=int, default=60)
parser.add_argument("--rounds", type=int, default=2)
args = parser.parse_args()
torch.set_num_threads(2)
loaded = load_model(args.model)
model = loaded.model
W = model.output.weight
Wt = W.detach().t().contiguous()
variants = {
    "F.linear (now)": lambda h: torch.nn.functional.linear(h, W),
    "h @ W.T contiguous": lambda h: (h.reshape(-1, h.shape[-1]) @ Wt).reshape(*h.shape[:-1], -1),
    "(W @ h.T).T": lambda h: (W @ h.reshape(-1, h.shape[-1]).t()).t().reshape(*h.shape[:-1], -1),
}
raw = gzip.decompress((SHARED / "multi30k" / "test_2016_flickr.en.gz").read_bytes()).decode()
lines = raw.split("\n")[: args.lines]
results = {}
for _ in range(args.rounds):
    for name, fn in variants.items():
        model.logits = fn
        for beam in (4, 1):
            t = Translator(loaded, replace(loaded.recipe.decode, beam=beam, batch_size=1))
            start = time.perf_counter()
            out = [h[0][0] for h in t.translate(lines)]
            results.setdefault((name, beam), []).append((time.perf_counter() - start, out))
base = {b: results[("F.linear (now)", b)][0][1] for b in (4, 1)}
for (name, beam), runs in results.items():
    secs = sorted(r[0] for r in runs)
    same = sum(a == b for a, b in zip(runs[0][1], base[beam]))
    rate = len(lines) / (sum(secs) / len(secs))
    print(
        f"{name:22s} beam {beam}: {rate:.2f} sent/s (runs {', '.join(f'{s:.1f}' for s in secs)} s), "
        f"same output {same}/{len(lines)}"
    )
