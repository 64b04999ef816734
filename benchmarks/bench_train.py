"""Training throughput on m30k-small and model FLOPs utilisation (MFU) on non-padding tokens.

    python benchmarks/bench_train.py [--threads 2] [--steps 100] [--warmup-steps 10] [--set train.precision=bf16]
                                     [--profile 5]

``--profile N`` then runs N more updates under the torch profiler and prints the operators by
self CPU time (where an update's time goes).

m30k-small: Multi30k EN->DE, joint BPE 8,000, 3+3 layers, d_model 256, 4 heads, d_ff 1024,
dropout 0.1, label smoothing 0.1, tied embeddings, 4,096-token batches (recipes/multi30k_ende.yaml).

MFU = useful model FLOPs per second / matmul peak of the same precision (torch, 2048^3, same
process and threads). The peak is timed once right after every measured update, and MFU is the
median over updates of (the update's useful FLOPs / its time) / (the product's FLOPs / its time): on
a shared machine both drift by 10-20% within minutes, and a ratio of figures taken at the same
moment cancels most of that drift (with one peak taken before training, runs read 57-72%; that
figure is still reported, as "MFU, peak before").
Useful FLOPs count real tokens only: a padded position is work the machine does but the model does
not need, so it is left out of the numerator and reported as the padding share instead. Model FLOPs
of a batch = 3 x forward FLOPs (backward = 2 x forward), with s_i and t_i the real source and target
lengths of sentence i (EOS included), N_s = sum s_i, N_t = sum t_i, d = d_model, f = d_ff, L layers, V vocabulary:
  encoder  L * (N_s * (8 d^2 + 4 d f) + 4 d * sum s_i^2)          QKV+out projections, FFN, QK^T and AV
  decoder  L * (N_t * (8 d^2 + 4 d f) + 4 d * sum t_i^2)          self-attention block and FFN
         + L * (N_t * 4 d^2 + N_s * 4 d^2 + 4 d * sum t_i s_i)    cross-attention (Q, out; K, V; scores)
  output   N_t * 2 d V                                            projection to the vocabulary
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import ROOT, WORK, print_table, record

PEAK_SIZE = 2048


def peak_operands(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Two PEAK_SIZE^2 matrices, multiplied a few times so the first timed product is warm."""
    a, b = torch.randn(PEAK_SIZE, PEAK_SIZE, dtype=dtype), torch.randn(PEAK_SIZE, PEAK_SIZE, dtype=dtype)
    for _ in range(3):
        a @ b
    return a, b


def matmul_flops_per_second(a: torch.Tensor, b: torch.Tensor) -> float:
    """FLOP/s of one product ``a @ b``, timed now."""
    start = time.perf_counter()
    a @ b
    return 2 * PEAK_SIZE**3 / (time.perf_counter() - start)


def batch_flops(batch, model_config, vocab: int) -> tuple[float, int, int]:
    """(useful model FLOPs, real tokens, padded positions) of one batch, source and target together."""
    src_len = (batch.src != 0).sum(1).double()
    tgt_len = (batch.tgt_out != 0).sum(1).double()
    n_s, n_t = float(src_len.sum()), float(tgt_len.sum())
    d, f, layers = model_config.d_model, model_config.d_ff, model_config.n_encoder_layers
    dec_layers = model_config.n_decoder_layers
    enc = layers * (n_s * (8 * d * d + 4 * d * f) + 4 * d * float((src_len**2).sum()))
    dec = dec_layers * (
        n_t * (8 * d * d + 4 * d * f)
        + 4 * d * float((tgt_len**2).sum())
        + n_t * 4 * d * d
        + n_s * 4 * d * d
        + 4 * d * float((tgt_len * src_len).sum())
    )
    out = n_t * 2 * d * vocab
    return 3.0 * (enc + dec + out), int(n_s + n_t), batch.src.numel() + batch.tgt_out.numel()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--set", action="append", default=[], help="recipe override, e.g. train.precision=bf16")
    parser.add_argument("--profile", type=int, default=0, help="profile this many more updates")
    args = parser.parse_args()
    from nmt_cli.config import load_recipe
    from nmt_cli.data.batches import collate
    from nmt_cli.data.prepare import prepare
    from nmt_cli.train.distributed import init_distributed
    from nmt_cli.train.loop import Trainer

    overrides = [
        f"data.root={ROOT.parent / 'shared' / 'data' / 'multi30k'}",
        f"data.output={WORK / 'm30k_small'}",
        f"train.dir={WORK / 'bench_train_run'}",
        f"train.threads={args.threads}",
        "data.test=[]",
        *args.set,
    ]
    recipe = load_recipe(ROOT / "recipes" / "multi30k_ende.yaml", overrides)
    prepare(recipe, log=lambda _m: None, progress=False)
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(recipe.train.precision, torch.float32)
    torch.set_num_threads(args.threads)
    peak_a, peak_b = peak_operands(low)
    peak_before = statistics.median(matmul_flops_per_second(peak_a, peak_b) for _ in range(10))  # the old way
    trainer = Trainer(recipe, init_distributed(recipe.train), log=lambda _m: None)
    batches = trainer._epoch_batches()
    trainer.model.train()
    tokens, src_tokens, flops, real, padded, times, peaks, step_mfu = 0, 0, 0.0, 0, 0, [], [], []
    for i in range(args.warmup_steps + args.steps):
        group = [batches[i % len(batches)]]
        start = time.perf_counter()
        sums = trainer.updates.run(group, i, 0.0)
        elapsed = time.perf_counter() - start
        if i >= args.warmup_steps:
            times.append(elapsed)
            tokens += sums["tokens"]
            src_tokens += sums["src_tokens"]
            batch_useful, batch_real, batch_padded = batch_flops(
                collate(trainer.data.train, group[0]), recipe.model, trainer.data.tgt_size
            )
            flops += batch_useful
            peaks.append(matmul_flops_per_second(peak_a, peak_b))
            step_mfu.append(batch_useful / elapsed / peaks[-1])
            real += batch_real
            padded += batch_padded
    total = sum(times)
    row = {
        "precision": recipe.train.precision,
        "threads": args.threads,
        "steps": args.steps,
        "target tok/s": tokens / total,
        "src+tgt tok/s": (tokens + src_tokens) / total,
        "useful GFLOP/s": flops / total / 1e9,
        "matmul peak GFLOP/s": statistics.median(peaks) / 1e9,
        "MFU": statistics.median(step_mfu),
        "MFU, peak before": flops / total / peak_before,
        "padding share": 1 - real / padded,
        "median step s": statistics.median(times),
    }
    print_table("nmt train, m30k-small", [row])
    mfu_quartiles = [f"{q:.1%}" for q in statistics.quantiles(step_mfu, n=4)]
    peak_quartiles = [f"{q / 1e9:.0f}" for q in statistics.quantiles(peaks, n=4)]
    print(f"MFU per update, quartiles: {mfu_quartiles}; peak GFLOP/s, quartiles: {peak_quartiles}")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for i in range(args.profile):
                trainer.updates.run([batches[(args.warmup_steps + args.steps + i) % len(batches)]], i, 0.0)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
    sets = "".join(f" --set {s}" for s in args.set)
    record("train", [row], f"python benchmarks/bench_train.py --threads {args.threads} --steps {args.steps}{sets}")


if __name__ == "__main__":
    main()
