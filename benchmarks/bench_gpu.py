"""GPU figures: training throughput (base, big) against a HuggingFace MarianMT loop, and decoding against ``generate``.

    python benchmarks/bench_gpu.py train  [--models base,big] [--max-tokens auto] [--steps 40] [--rounds 2]
                                          [--compile off,on] [--no-peer]
    python benchmarks/bench_gpu.py decode --model RUN [--beams 4,1] [--batch-sizes 1,16,64,0] [--dtype bf16]
    python benchmarks/bench_gpu.py profile --models big [--max-tokens 12288] [--model RUN --beam 4 --batch-size 64]

``profile`` runs torch.profiler over a few training updates of each arm (and, with ``--model``,
over decoding the same lines with both engines) and prints the top kernels by GPU time, the
GPU's busy share of the wall time and the host-side time per update: where a target is missed,
this says whether the GPU or the Python/launch side is the limit.

Training data is WMT-like: the source/target length pairs of newstest2014 (words x 1.3, the
pieces per word of a 37k joint BPE on news text), resampled to 200,000 pairs, with token ids
drawn uniformly from a 37,000-entry vocabulary (throughput does not depend on which ids).
The models are ``recipes/ende_base.yaml`` and ``ende_big.yaml`` with bf16 autocast. Both
toolkits train on the very same batches, in alternating rounds:
  nmt  ``Trainer.updates.run`` (the code ``nmt train`` runs), eager and/or torch.compile;
  hf   ``MarianMTModel`` with the same dimensions and shared embeddings, SDPA attention, bf16
       autocast, fused AdamW, label-smoothed cross-entropy over the logits (benchmarks/hf_peer.py).
MFU = useful model FLOPs/s (bench_train.py's count, real tokens only) / bf16 matmul peak
measured in the same process (8192^3, median of 10).

Decoding translates newstest2014 (3,003 lines) and Multi30k test 2016 with our engine and with
``transformers``' ``generate`` on the same weights mapped into MarianMT (same dtype, the same
length-sorted batches, beam stopping once BEAM hypotheses are finished, PAD/BOS banned).
``--lines N`` keeps the first N lines of each set, batch size 1 the first ``--bs1-lines``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from common import ROOT, SHARED, WORK, print_table, record

DEVICE = "cuda"  # --smoke runs everything on the CPU with tiny models, to check the script without a GPU
SMOKE_MODEL = ["model.layers=1", "model.d_model=64", "model.n_heads=4", "model.d_ff=128"]
WMT14 = SHARED / "wmt14" / "newstest2014"
MULTI30K = SHARED / "multi30k"
PIECES_PER_WORD = 1.3
VOCAB = 37_000


# --------------------------------------------------------------------------- shared


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def reset_peak() -> None:
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak_gib() -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if DEVICE == "cuda" else 0.0


def bf16_peak(size: int = 8192, repeats: int = 10) -> float:
    size = size if DEVICE == "cuda" else 512
    a = torch.randn(size, size, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=DEVICE, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        a @ b
        sync()
        times.append(time.perf_counter() - start)
    return 2 * size**3 / statistics.median(times)


def read_gz(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def device_line() -> str:
    if DEVICE != "cuda":
        return f"CPU smoke run, torch {torch.__version__}"
    props = torch.cuda.get_device_properties(0)
    return f"{props.name}, {props.total_memory / 2**30:.0f} GiB, torch {torch.__version__}, CUDA {torch.version.cuda}"


# --------------------------------------------------------------------------- training


def wmt_like_dataset(template: Path, out: Path, pairs: int, seed: int = 1) -> Path:
    """A prepared folder of ``pairs`` synthetic pairs with newstest2014's length pairs (see the module doc)."""
    from nmt_cli.data.binary import TokenArrayWriter, token_dtype

    rng = np.random.default_rng(seed)
    words = [
        (len(s.split()), len(t.split())) for s, t in zip(read_gz(Path(f"{WMT14}.en.gz")), read_gz(Path(f"{WMT14}.de.gz")))
    ]
    lengths = np.clip(np.ceil(np.asarray(words, dtype=np.float64) * PIECES_PER_WORD), 1, 250).astype(np.int64)
    chosen = lengths[rng.integers(0, len(lengths), pairs)]
    out.mkdir(parents=True, exist_ok=True)
    dtype = token_dtype(VOCAB)
    for column, lang in enumerate(("en", "de")):
        writer = TokenArrayWriter(out / f"train.{lang}", dtype)
        side = chosen[:, column]
        writer.append(rng.integers(4, VOCAB, int(side.sum())), side)
        writer.commit()
    meta = json.loads((template / "meta.json").read_text())
    for key in ("src_model", "tgt_model"):
        (out / meta["vocab"][key]).write_bytes((template / meta["vocab"][key]).read_bytes())
    meta["vocab"].update(src_size=VOCAB, tgt_size=VOCAB, size=VOCAB)
    meta["splits"] = {
        "train": {
            "sentences": pairs,
            "src_tokens": int(chosen[:, 0].sum()),
            "tgt_tokens": int(chosen[:, 1].sum()),
            "dtypes": [dtype.name, dtype.name],
        }
    }
    (out / "meta.json").write_text(json.dumps(meta))
    return out


def template_dataset() -> Path:
    """A real prepared Multi30k folder, whose meta and SentencePiece files the synthetic set borrows."""
    from nmt_cli.config import load_recipe
    from nmt_cli.data.prepare import prepare

    recipe = load_recipe(
        ROOT / "recipes" / "multi30k_ende.yaml",
        [f"data.root={MULTI30K}", f"data.output={WORK / 'gpu_template'}", "data.test=[]"],
    )
    prepare(recipe, log=lambda _m: None, progress=False)
    return recipe.data_dir


def our_trainer(model: str, data: Path, max_tokens: str, compiled: bool, packed: bool = False):
    from nmt_cli.config import load_recipe
    from nmt_cli.train.distributed import init_distributed
    from nmt_cli.train.loop import Trainer

    run = WORK / f"gpu_{model}_{'compiled' if compiled else 'eager'}{'_packed' if packed else ''}"
    overrides = [
        f"data.output={data}",
        f"train.dir={run}",
        "train.precision=bf16",
        f"train.max_tokens={max_tokens}",
        f"train.compile={'true' if compiled else 'false'}",
        f"train.packed={'true' if packed else 'false'}",
        "train.device=cuda",
        "train.validate_every=0",
        "train.save_every=0",
        "train.save_minutes=0",
        "train.lr_schedule=inverse_sqrt",
        "train.lr=5e-4",
        "train.warmup=4000",
        *(SMOKE_MODEL if DEVICE == "cpu" else []),
    ]
    overrides = [o.replace("train.device=cuda", f"train.device={DEVICE}") for o in overrides]
    recipe = load_recipe(ROOT / "recipes" / f"ende_{model}.yaml", overrides)
    messages: list[str] = []
    trainer = Trainer(recipe, init_distributed(recipe.train), messages.append)
    trainer.prepare_run_dir(None)
    for line in messages:
        print(f"  [{model}] {line}", flush=True)
    return trainer


def time_ours(trainer, batches, warmup: int, steps: int) -> dict:
    from bench_train import batch_flops

    from nmt_cli.data.batches import collate

    trainer.model.train()
    for i in range(warmup):
        trainer.updates.run([batches[i % len(batches)]], i, 0.0)
    sync()
    reset_peak()
    tokens, real, slots, flops = 0, 0, 0, 0.0
    start = time.perf_counter()
    for i in range(warmup, warmup + steps):
        group = [batches[i % len(batches)]]
        sums = trainer.updates.run(group, i, 0.0)
        tokens += sums["tokens"]
        real, slots = real + sums["tokens"] + sums["src_tokens"], slots + sums["slots"]
    sync()
    seconds = time.perf_counter() - start
    for i in range(warmup, warmup + steps):
        flops += batch_flops(collate(trainer.data.train, batches[i % len(batches)]), trainer.recipe.model, VOCAB)[0]
    return {
        "tgt_tok_s": tokens / seconds,
        "tflops": flops / seconds / 1e12,
        "peak_gib": peak_gib(),
        "padding": 1 - real / max(slots, 1),  # share of the padded batch positions, both sides, that are padding
    }


def time_hf(marian, data, batches, warmup: int, steps: int, label_smoothing: float, model_config) -> dict:
    from bench_train import batch_flops
    from hf_peer import hf_loss

    from nmt_cli.data.batches import collate

    marian.train()
    optimizer = torch.optim.AdamW(marian.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0, fused=True)

    def step(indices) -> int:
        batch = collate(data, indices).to(DEVICE)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss, n = hf_loss(marian, batch.src, batch.tgt_in, batch.tgt_out, label_smoothing)
        (loss / n).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        float(loss.detach())  # the logged loss, as our loop reads it
        return n

    for i in range(warmup):
        step(batches[i % len(batches)])
    sync()
    reset_peak()
    tokens = 0
    start = time.perf_counter()
    for i in range(warmup, warmup + steps):
        tokens += step(batches[i % len(batches)])
    sync()
    seconds = time.perf_counter() - start
    flops = sum(
        batch_flops(collate(data, batches[i % len(batches)]), model_config, VOCAB)[0] for i in range(warmup, warmup + steps)
    )  # the same useful work as ours: same batches
    timed = [collate(data, batches[i % len(batches)]) for i in range(warmup, warmup + steps)]
    real = sum(int((b.src != 0).sum() + (b.tgt_out != 0).sum()) for b in timed)
    slots = sum(b.src.numel() + b.tgt_out.numel() for b in timed)
    return {
        "tgt_tok_s": tokens / seconds,
        "tflops": flops / seconds / 1e12,
        "peak_gib": peak_gib(),
        "padding": 1 - real / max(slots, 1),
    }


def run_train_bench(args: argparse.Namespace) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from hf_peer import to_marian

    peak = bf16_peak()
    print(f"device: {device_line()}; bf16 matmul peak {peak / 1e12:.0f} TFLOP/s", flush=True)
    data = wmt_like_dataset(template_dataset(), WORK / "gpu_wmt_like", args.pairs)
    rows = []
    for model in args.models.split(","):
        arms = [(c == "on", p == "on") for c in args.compile.split(",") for p in args.packed.split(",")]
        trainers = {arm: our_trainer(model, data, args.max_tokens, *arm) for arm in arms}
        first = trainers[arms[0]]
        batches = first._epoch_batches()
        rng = np.random.default_rng(0)
        # The timed batches: a random sample of the epoch (its order is already shuffled), same for every arm.
        batches = [batches[i] for i in rng.permutation(len(batches))]
        marian = None
        if args.peer:
            marian = to_marian(first.model)
        results: dict[str, list[dict]] = {}
        # Round 0 is a whole untimed round per arm: on the H100 a first round ran at a third of the
        # later rounds' speed (the caching allocator growing to every batch shape), 20 warm-up updates or not.
        for round_ in range(args.rounds + 1):
            for (compiled, packed), trainer in trainers.items():
                name = "nmt" + (" compiled" if compiled else "") + (" packed" if packed else "")
                warmup = args.warmup
                figures = time_ours(trainer, batches, warmup, args.steps)
                print(f"  {model} round {round_} {name}: {figures}", flush=True)
                if round_:
                    results.setdefault(name, []).append(figures)
            if marian is not None:
                try:
                    figures = time_hf(
                        marian,
                        first.data.train,
                        batches,
                        args.warmup,
                        args.steps,
                        first.config.label_smoothing,
                        first.recipe.model,
                    )
                    print(f"  {model} round {round_} hf: {figures}", flush=True)
                    if round_:
                        results.setdefault("hf", []).append(figures)
                except torch.cuda.OutOfMemoryError:
                    print(f"  {model} hf: out of memory at max_tokens {first.max_tokens}", flush=True)
                    marian = None
                    torch.cuda.empty_cache()
                    results.pop("hf", None)
        hf_speed = statistics.median(r["tgt_tok_s"] for r in results["hf"]) if results.get("hf") else None
        for name, runs in results.items():
            speed = statistics.median(r["tgt_tok_s"] for r in runs)
            row = {
                "model": model,
                "arm": name,
                "max_tokens": first.max_tokens,
                "rounds": len(runs),
                "target tok/s": speed,
                "peak GiB": max(r["peak_gib"] for r in runs),
                "padding": statistics.median(r["padding"] for r in runs),
            }
            tflops = statistics.median(r["tflops"] for r in runs)
            row.update(
                {
                    "useful TFLOP/s": tflops,
                    "MFU": tflops * 1e12 / peak,
                    "vs hf": speed / hf_speed if hf_speed else float("nan"),
                }
            )
            rows.append(row)
        del trainers, first, marian
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    print_table(f"training throughput, bf16, {device_line()}", rows)
    if DEVICE == "cuda":
        record(
            "gpu_train",
            [{**r, "peak_tflops": peak / 1e12, "device": device_line()} for r in rows],
            f"python benchmarks/bench_gpu.py train --models {args.models} --max-tokens {args.max_tokens} "
            f"--steps {args.steps} --rounds {args.rounds} --compile {args.compile} --packed {args.packed}",
        )


# --------------------------------------------------------------------------- decoding


def ours_decode(loaded, lines: list[str], beam: int, batch_size: int, graphs: bool = True) -> tuple[list[str], float, int]:
    from dataclasses import replace

    from nmt_cli.decode.translator import Translator

    config = replace(loaded.recipe.decode, beam=beam, batch_size=batch_size, stop="beam", cuda_graphs=graphs)
    translator = Translator(loaded, config, DEVICE)
    sync()
    start = time.perf_counter()
    outputs = [hyps[0][0] for hyps in translator.translate(lines)]
    sync()
    return outputs, time.perf_counter() - start, translator.stats.output_tokens


@torch.inference_mode()
def hf_decode(
    marian, loaded, lines: list[str], beam: int, batch_size: int, batch_tokens: int, max_len_b: int
) -> tuple[list[str], float, int]:
    from nmt_cli.data.vocab import BOS_ID, EOS_ID, PAD_ID

    encoded = [
        ids[: loaded.recipe.model.max_positions - 1] + [EOS_ID]
        for ids in loaded.src_vocab.encode([line.strip() for line in lines], out_type=int)
    ]
    order = sorted(range(len(lines)), key=lambda i: len(encoded[i]), reverse=True)
    batches, batch = [], []
    for i in order:  # the same length-sorted batching as our Translator
        width = len(encoded[batch[0]]) if batch else len(encoded[i])
        if batch and ((batch_size and len(batch) >= batch_size) or (len(batch) + 1) * width > batch_tokens):
            batches.append(batch)
            batch = []
        batch.append(i)
    batches.append(batch)
    outputs, tokens = [""] * len(lines), 0
    sync()
    start = time.perf_counter()
    for batch in batches:
        width = max(len(encoded[i]) for i in batch)
        src = torch.full((len(batch), width), PAD_ID, dtype=torch.long)
        for row, i in enumerate(batch):
            src[row, : len(encoded[i])] = torch.tensor(encoded[i])
        src = src.to(DEVICE)
        generated = marian.generate(
            input_ids=src,
            attention_mask=src != PAD_ID,
            num_beams=beam,
            do_sample=False,
            early_stopping=True,
            max_new_tokens=width + max_len_b,
            length_penalty=1.0,
            bad_words_ids=[[PAD_ID], [BOS_ID]],
        )
        for row, i in enumerate(batch):
            ids = [t for t in generated[row].tolist()[1:] if t not in (PAD_ID,)]
            if EOS_ID in ids:
                ids = ids[: ids.index(EOS_ID)]
            tokens += len(ids) + 1
            outputs[i] = loaded.tgt_vocab.decode(ids)
    sync()
    return outputs, time.perf_counter() - start, tokens


def run_decode_bench(args: argparse.Namespace) -> None:
    import sys

    from sacrebleu import corpus_bleu

    sys.path.insert(0, str(Path(__file__).parent))
    from hf_peer import to_marian

    from nmt_cli.decode.loading import load_model

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    loaded = load_model(args.model, DEVICE, dtype)
    marian = to_marian(loaded.model).eval()
    sets = {
        "newstest2014": (read_gz(Path(f"{WMT14}.en.gz")), read_gz(Path(f"{WMT14}.de.gz"))),
        "multi30k test2016": (read_gz(MULTI30K / "test_2016_flickr.en.gz"), read_gz(MULTI30K / "test_2016_flickr.de.gz")),
    }
    print(f"device: {device_line()}; model {args.model} in {args.dtype}", flush=True)
    ours_decode(loaded, sets["multi30k test2016"][0][:64], 4, 16)  # warm-up (CUDA context, kernels)
    hf_decode(marian, loaded, sets["multi30k test2016"][0][:64], 4, 16, loaded.recipe.decode.batch_tokens, 50)
    rows = []
    wanted = {"newstest": "newstest2014", "multi30k": "multi30k test2016"}
    sets = {wanted[name]: sets[wanted[name]] for name in args.sets.split(",")}
    for set_name, (sources, references) in sets.items():
        for beam in map(int, args.beams.split(",")):
            for batch_size in map(int, args.batch_sizes.split(",")):
                n = args.bs1_lines if batch_size == 1 else min(args.lines, len(sources))
                lines, refs = sources[:n], references[:n]
                figures: dict[str, list] = {"nmt": [], "hf": [], **({"nmt eager": []} if args.eager_too else {})}
                for _ in range(args.repeats):  # alternating
                    figures["nmt"].append(ours_decode(loaded, lines, beam, batch_size))
                    if args.eager_too:  # CUDA graphs off: the decoder step launched kernel by kernel
                        figures["nmt eager"].append(ours_decode(loaded, lines, beam, batch_size, graphs=False))
                    figures["hf"].append(
                        hf_decode(
                            marian,
                            loaded,
                            lines,
                            beam,
                            batch_size,
                            loaded.recipe.decode.batch_tokens,
                            loaded.recipe.decode.max_len_b,
                        )
                    )
                speeds = {k: statistics.median(len(lines) / seconds for _, seconds, _ in v) for k, v in figures.items()}
                same = sum(a == b for a, b in zip(figures["nmt"][0][0], figures["hf"][0][0])) / len(lines)
                row = {
                    "set": set_name,
                    "lines": len(lines),
                    "beam": beam,
                    "batch": batch_size or "default",
                    "nmt sent/s": speeds["nmt"],
                    "hf sent/s": speeds["hf"],
                    "nmt tok/s": figures["nmt"][0][2] / statistics.median(s for _, s, _ in figures["nmt"]),
                    "hf tok/s": figures["hf"][0][2] / statistics.median(s for _, s, _ in figures["hf"]),
                    "ratio": speeds["nmt"] / speeds["hf"],
                    "same output": same,
                    **(
                        {
                            "eager sent/s": speeds["nmt eager"],
                            "graphs = eager": sum(a == b for a, b in zip(figures["nmt"][0][0], figures["nmt eager"][0][0]))
                            / len(lines),
                        }
                        if args.eager_too
                        else {}
                    ),
                    "nmt BLEU": corpus_bleu(figures["nmt"][0][0], [refs]).score,
                    "hf BLEU": corpus_bleu(figures["hf"][0][0], [refs]).score,
                }
                rows.append(row)
                print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    print_table(f"decoding, {args.dtype}, {device_line()}", rows)
    if DEVICE == "cuda":
        record(
            "gpu_decode",
            [{**r, "device": device_line(), "dtype": args.dtype} for r in rows],
            f"python benchmarks/bench_gpu.py decode --model {args.model} --beams {args.beams} "
            f"--batch-sizes {args.batch_sizes} --dtype {args.dtype}",
        )


# --------------------------------------------------------------------------- profiles


def profiled(name: str, work, repeats: int, out: Path | None) -> None:
    """Run ``work()`` ``repeats`` times under torch.profiler; print wall time, GPU busy share, top kernels."""
    from torch.profiler import ProfilerActivity, profile

    sync()
    start = time.perf_counter()
    work()  # untimed: wall time without the profiler's own overhead
    sync()
    plain = time.perf_counter() - start
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            work()
        sync()
    averages = prof.key_averages()
    kernel_us = sum(e.self_device_time_total for e in averages if e.device_type.name == "CUDA")
    launches = sum(
        e.count
        for e in averages
        if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
    )
    print(
        f"== profile {name}: {plain * 1e3:.1f} ms per run without the profiler; under it, GPU kernels "
        f"{kernel_us / repeats / 1e3:.1f} ms per run = {kernel_us / repeats / 1e6 / plain:.0%} of the plain wall "
        f"time; {launches / repeats:.0f} kernel launches per run",
        flush=True,
    )
    shares = kernel_categories(averages)
    print(
        "   GPU time by kind: " + ", ".join(f"{kind} {us / max(kernel_us, 1):.0%}" for kind, us in shares.items()),
        flush=True,
    )
    print(averages.table(sort_by="self_device_time_total", row_limit=22, max_name_column_width=60), flush=True)
    print(averages.table(sort_by="self_cpu_time_total", row_limit=8, max_name_column_width=60), flush=True)
    if out is not None:
        prof.export_chrome_trace(str(out / f"trace_{name.replace(' ', '_')}.json"))


KERNEL_KINDS = (  # first match wins; names as cuBLAS, cuDNN, PyTorch and Triton kernels carry them on Hopper GPUs
    ("attention", ("fmha", "flash", "attention", "attn")),
    ("matrix products", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "sm90_", "sm80_")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("compiled (fused by torch.compile)", ("triton",)),
    ("normalisation", ("layer_norm", "layernorm", "rms")),
    ("dropout", ("dropout", "bernoulli", "philox")),
    ("reductions", ("reduce",)),
    ("element-wise", ("elementwise", "vectorized", "unrolled", "fill", "copy", "index", "scatter", "gather", "cat")),
)


def kernel_categories(averages) -> dict[str, float]:
    """GPU microseconds per kind of kernel (matrix products, attention, optimizer, ...), largest first."""
    totals: dict[str, float] = {}
    for event in averages:
        if event.device_type.name != "CUDA" or not event.self_device_time_total:
            continue
        name = event.key.lower()
        kind = next((k for k, marks in KERNEL_KINDS if any(m in name for m in marks)), "other")
        totals[kind] = totals.get(kind, 0.0) + event.self_device_time_total
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def attention_variant(name: str):
    """A context for one profiled variant: ``plain``; ``nomask`` (padding masks dropped: the mask's cost,
    an upper bound); ``flash``/``efficient``/``cudnn``/``math`` (SDPA forced to that kernel where it applies)."""
    import contextlib

    from torch.nn.attention import SDPBackend, sdpa_kernel

    import nmt_cli.model.attention as attention_module

    if name == "plain":
        return contextlib.nullcontext()
    if name == "nomask":
        original = attention_module.attention

        @contextlib.contextmanager
        def unmasked():
            attention_module.attention = lambda q, k, v, mask=None, *a, **kw: original(q, k, v, None, *a, **kw)
            try:
                yield
            finally:
                attention_module.attention = original

        return unmasked()
    backend = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }[name]
    return sdpa_kernel([backend, SDPBackend.MATH] if name != "math" else [backend])


def profile_training(model: str, data: Path, max_tokens: str, args: argparse.Namespace, out: Path | None) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from hf_peer import to_marian

    trainer = our_trainer(model, data, max_tokens, args.compile == "on")
    batches = trainer._epoch_batches()
    batches = [batches[i] for i in np.random.default_rng(0).permutation(len(batches))]
    updates = iter(range(10**9))
    label = f"{model} {max_tokens} tokens{' compiled' if args.compile == 'on' else ''}"
    for variant in args.variants.split(","):
        with attention_variant(variant):
            warm = time_ours(trainer, batches, 3, 3)  # warm the allocator and the kernels' autotuning
            print(f"   {label}: padding {warm['padding']:.1%} of the batch positions (both sides)", flush=True)
            profiled(
                f"nmt {label} {variant} train x{args.updates}",
                lambda: [trainer.updates.run([batches[(n := next(updates)) % 64]], n, 0.0) for _ in range(args.updates)],
                2,
                out,
            )
    if args.peer:
        marian, data_train = to_marian(trainer.model), trainer.data.train
        trainer.model.cpu()  # leave the GPU's memory to the peer
        profile_hf(marian, data_train, batches, label, args, out)


def profile_hf(marian, data_train, batches, label: str, args: argparse.Namespace, out: Path | None) -> None:
    from hf_peer import hf_loss

    from nmt_cli.data.batches import collate

    optimizer = torch.optim.AdamW(marian.parameters(), lr=5e-4, fused=True)
    marian.train()
    updates = iter(range(10**9))

    def hf_updates() -> None:
        for _ in range(args.updates):
            batch = collate(data_train, batches[next(updates) % 64]).to(DEVICE)
            with torch.autocast(DEVICE, dtype=torch.bfloat16):
                loss, n = hf_loss(marian, batch.src, batch.tgt_in, batch.tgt_out, 0.1)
            (loss / n).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            float(loss.detach())

    hf_updates()
    hf_updates()
    profiled(f"hf {label} train x{args.updates}", hf_updates, 2, out)


def run_profile(args: argparse.Namespace) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from hf_peer import to_marian

    out = Path(args.trace_dir) if args.trace_dir else None
    print(f"device: {device_line()}", flush=True)
    if args.models:
        data = wmt_like_dataset(template_dataset(), WORK / "gpu_wmt_like", args.pairs)
    for model in filter(None, args.models.split(",")):
        for max_tokens in args.max_tokens.split(","):
            profile_training(model, data, max_tokens, args, out)
    if args.model:
        from nmt_cli.decode.loading import load_model

        loaded = load_model(args.model, DEVICE, torch.bfloat16)
        marian = to_marian(loaded.model).eval()
        lines = read_gz(MULTI30K / "test_2016_flickr.en.gz")[: args.lines]
        for beam in (args.beam, 1):
            ours_decode(loaded, lines, beam, args.batch_size)
            profiled(
                f"nmt decode beam {beam} batch {args.batch_size} x{len(lines)}",
                lambda beam=beam: ours_decode(loaded, lines, beam, args.batch_size),
                1,
                None,
            )
            hf_args = (loaded.recipe.decode.batch_tokens, loaded.recipe.decode.max_len_b)
            hf_decode(marian, loaded, lines, beam, args.batch_size, *hf_args)
            profiled(
                f"hf decode beam {beam} batch {args.batch_size} x{len(lines)}",
                lambda beam=beam, hf_args=hf_args: hf_decode(marian, loaded, lines, beam, args.batch_size, *hf_args),
                1,
                None,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    train = sub.add_parser("train")
    train.add_argument("--models", default="base,big")
    train.add_argument("--max-tokens", default="auto")
    train.add_argument("--steps", type=int, default=40)
    train.add_argument("--warmup", type=int, default=8)
    train.add_argument("--rounds", type=int, default=2)
    train.add_argument("--pairs", type=int, default=200_000)
    train.add_argument("--compile", default="off", help="off, on, or off,on")
    train.add_argument("--packed", default="off", help="train.packed: off, on, or off,on (arms: every pairing)")
    train.add_argument("--no-peer", dest="peer", action="store_false")
    decode = sub.add_parser("decode")
    decode.add_argument("--model", required=True)
    decode.add_argument("--beams", default="4,1")
    decode.add_argument("--batch-sizes", default="1,16,64,0")
    decode.add_argument("--lines", type=int, default=3003, help="first N lines of each set")
    decode.add_argument("--bs1-lines", type=int, default=200)
    decode.add_argument("--repeats", type=int, default=2)
    decode.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"])
    decode.add_argument("--eager-too", action="store_true", help="also time our decoder without CUDA graphs")
    decode.add_argument("--sets", default="newstest,multi30k", help="newstest and/or multi30k (test 2016)")
    prof = sub.add_parser("profile")
    prof.add_argument("--models", default="big", help="training arms to profile ('' for none)")
    prof.add_argument("--max-tokens", default="12288")
    prof.add_argument("--pairs", type=int, default=200_000)
    prof.add_argument("--updates", type=int, default=3, help="updates per profiled run")
    prof.add_argument("--variants", default="plain", help="plain,nomask,flash,efficient,cudnn,math (attention)")
    prof.add_argument("--no-peer", dest="peer", action="store_false")
    prof.add_argument("--compile", default="off", choices=["off", "on"], help="profile train.compile's layers")
    prof.add_argument("--model", help="a trained run folder: also profile decoding with it")
    prof.add_argument("--beam", type=int, default=4)
    prof.add_argument("--batch-size", type=int, default=64)
    prof.add_argument("--lines", type=int, default=256)
    prof.add_argument("--trace-dir", help="write Chrome traces of the training profiles here")
    parser.add_argument("--smoke", action="store_true", help="check the script on the CPU with tiny models")
    args = parser.parse_args()
    global DEVICE
    if args.smoke:
        DEVICE = "cpu"
    elif not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py needs a CUDA GPU (or --smoke to check the script on the CPU)")
    torch.backends.cuda.matmul.allow_tf32 = False
    {"train": run_train_bench, "decode": run_decode_bench, "profile": run_profile}[args.what](args)


if __name__ == "__main__":
    main()
