"""Training throughput on m30k-small and model FLOPs utilisation (MFU).

    python benchmarks/bench_train.py [--threads 2] [--steps 100] [--warmup-steps 10]

m30k-small: Multi30k EN->DE, joint BPE 8,000, 3+3 layers, d_model 256, 4 heads, d_ff 1024,
dropout 0.1, label smoothing 0.1, tied embeddings, 4,096-token batches (recipes/multi30k_ende.yaml).

MFU = model FLOPs per second / fp32 matmul peak (torch, 2048^3, same process and threads).
Model FLOPs of a batch = 3 x forward FLOPs (backward = 2 x forward), forward counted from the
padded shapes (B sentences, S source and T target positions, d = d_model, f = d_ff, L layers,
V vocabulary, N = non-padding target tokens):
  encoder  L * B*S * (8 d^2 + 4 d f + 4 S d)                 QKV+out projections, FFN, QK^T and AV
  decoder  L * B*T * (8 d^2 + 4 d f + 4 T d)                 self-attention block and FFN
         + L * (B*T * (4 d^2 + 4 S d) + B*S * 4 d^2)         cross-attention (Q, out; K, V on the source)
  output   N * 2 d V                                         projection to the vocabulary (non-pad only)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import ROOT, WORK, print_table, record


def matmul_peak(threads: int, size: int = 2048, repeats: int = 10) -> float:
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * size**3 / statistics.median(times)


def batch_flops(batch, model_config, vocab: int) -> float:
    b, s = batch.src.shape
    t = batch.tgt_in.shape[1]
    d, f, layers = model_config.d_model, model_config.d_ff, model_config.layers
    dec_layers = model_config.n_decoder_layers
    enc = layers * b * s * (8 * d * d + 4 * d * f + 4 * s * d)
    dec = dec_layers * (b * t * (8 * d * d + 4 * d * f + 4 * t * d) + b * t * (4 * d * d + 4 * s * d) + b * s * 4 * d * d)
    out = int((batch.tgt_out != 0).sum()) * 2 * d * vocab
    return 3.0 * (enc + dec + out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup-steps", type=int, default=10)
    args = parser.parse_args()
    from nmt_cli.config import load_recipe
    from nmt_cli.data.batches import collate
    from nmt_cli.data.prepare import prepare
    from nmt_cli.train.distributed import init_distributed
    from nmt_cli.train.loop import Trainer

    overrides = [f"data.root={ROOT.parent / 'shared' / 'data' / 'multi30k'}", f"data.output={WORK / 'm30k_small'}",
                 f"train.dir={WORK / 'bench_train_run'}", f"train.threads={args.threads}", "data.test=[]"]
    recipe = load_recipe(ROOT / "recipes" / "multi30k_ende.yaml", overrides)
    prepare(recipe, log=lambda _m: None, progress=False)
    peak = matmul_peak(args.threads)
    torch.set_num_threads(args.threads)
    trainer = Trainer(recipe, init_distributed(recipe.train), log=lambda _m: None)
    batches = trainer._epoch_batches()
    trainer.model.train()
    tokens, src_tokens, flops, times = 0, 0, 0.0, []
    for i in range(args.warmup_steps + args.steps):
        group = [batches[i]]
        start = time.perf_counter()
        sums = trainer._update(group)
        elapsed = time.perf_counter() - start
        if i >= args.warmup_steps:
            times.append(elapsed)
            tokens += sums["tokens"]
            src_tokens += sums["src_tokens"]
            flops += batch_flops(collate(trainer.data.train, group[0]), recipe.model, trainer.data.tgt_size)
    total = sum(times)
    row = {"threads": args.threads, "steps": args.steps, "target tok/s": tokens / total,
           "src+tgt tok/s": (tokens + src_tokens) / total, "model GFLOP/s": flops / total / 1e9,
           "matmul peak GFLOP/s": peak / 1e9, "MFU": flops / total / peak,
           "median step s": statistics.median(times)}
    print_table("nmt train, m30k-small", [row])
    record("train", [row], f"python benchmarks/bench_train.py --threads {args.threads} --steps {args.steps}")


if __name__ == "__main__":
    main()
