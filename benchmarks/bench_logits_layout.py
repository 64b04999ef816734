"""Decode-time layouts of the output projection on the CPU (issue 12).

    python benchmarks/bench_logits_layout.py MODEL --micro [--repeats 30]
    python benchmarks/bench_logits_layout.py MODEL [--lines 60] [--rounds 2] [--batch-sizes 1,16]

``--micro`` times the product of a decoder step's hidden rows with MODEL's output weight for 1-512
rows, for the output weight (V x D) and the decoder's largest input projection (3D x D):
``F.linear(h, W)`` with W in PyTorch's layout against W stored transposed (as
``load_model`` keeps it for CPU decoding in fp32 where it does not use oneDNN, ``NMT_CPU_LINEAR=blas``;
see ``bench_cpu_linear.py``); medians of the repeats. Without it,
``nmt``'s translation is timed end to end with the output weight stored transposed (as shipped) and in
PyTorch's layout (as before), alternating round by round; it prints sentences/s (median of the
rounds) and whether the outputs agree.
"""

import argparse
import gzip
import os
import statistics
import sys
import time

import torch
from common import SHARED, alternate_translations, record

import nmt_cli.decode.translator as translator_module
from nmt_cli.decode.translator import load_model

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--micro", action="store_true")
parser.add_argument("--repeats", type=int, default=30)
parser.add_argument("--lines", type=int, default=60)
parser.add_argument("--rounds", type=int, default=2)
parser.add_argument("--batch-sizes", default="1")
parser.add_argument("--threads", type=int, default=2)
args = parser.parse_args()
torch.set_num_threads(args.threads)
loaded = load_model(args.model)
weight = loaded.model.output.weight.detach()
command = "python benchmarks/bench_logits_layout.py " + " ".join(sys.argv[1:])


def milliseconds(fn, hidden) -> float:
    for _ in range(3):
        fn(hidden)
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        fn(hidden)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


if args.micro:
    qkv = loaded.model.decoder_layers[0].self_attn.qkv.weight.detach()
    rows_out = []
    with torch.inference_mode():
        for name, plain in (("output", weight), ("decoder QKV", qkv)):
            transposed = plain.t().contiguous().t()  # same values, (in, out) storage
            for n in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048):
                hidden = torch.randn(n, plain.size(1))
                before = milliseconds(lambda h, w=plain: torch.nn.functional.linear(h, w), hidden)
                after = milliseconds(lambda h, w=transposed: torch.nn.functional.linear(h, w), hidden)
                row = {"weight": f"{name} {tuple(plain.shape)}", "rows": n, "PyTorch layout ms": round(before, 3)}
                row |= {"transposed ms": round(after, 3), "speed-up": round(before / after, 2)}
                rows_out.append(row)
                print(row, flush=True)
    record("logits_layout_micro", rows_out, command)
    raise SystemExit(0)

raw = gzip.decompress((SHARED / "multi30k" / "test_2016_flickr.en.gz").read_bytes()).decode()
lines = raw.split("\n")[: args.lines]
os.environ["NMT_CPU_LINEAR"] = "blas"  # the layouts of the BLAS path (oneDNN: bench_cpu_linear.py)
shipped = translator_module.prepare_for_cpu_inference
models = {"transposed (shipped)": load_model(args.model)}
translator_module.prepare_for_cpu_inference = lambda _model, _output: None  # as before: PyTorch's layout
models["PyTorch layout (before)"] = load_model(args.model)
translator_module.prepare_for_cpu_inference = shipped
rows_out = alternate_translations(models, lines, args.batch_sizes, args.rounds, reference="PyTorch layout (before)")
record("logits_layout", rows_out, command)
