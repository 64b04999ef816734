"""Which kernel should run a linear layer at inference on the CPU, in fp32.

    python benchmarks/studies/bench_cpu_linear.py MODEL --micro [--rows 1,2,4,8,16,32,64,128] [--repeats 3]
    python benchmarks/studies/bench_cpu_linear.py MODEL [--lines 60] [--rounds 3] [--batch-sizes 1,16]

PyTorch runs ``F.linear`` in fp32 through its BLAS (MKL in the official x86 wheels). On processors
that MKL does not tune for (AMD here), products with few rows, as in a decoder step, run far below
what the processor can do; CTranslate2 on the same processor uses oneDNN for them
(``CT2_VERBOSE=1``: "SGEMM backend: DNNL").

``--micro`` times the products of one decoder step of MODEL: every decoder weight and the output
projection, one after another as a step runs them (so each weight is read from the shared cache,
not from the core's own, as in a step), for 1-128 input rows. Kernels: ``F.linear`` (PyTorch's
layout), ``F.linear`` with only the output weight stored transposed (``NMT_CPU_LINEAR=blas``), with every
weight stored transposed, oneDNN's inner product (plain and packed weights), the product with swapped operands (W x^T through
the BLAS), and ``InferenceLinear`` (chosen by rows; what ``load_model`` ships where ``NMT_CPU_LINEAR``
resolves to oneDNN). Each cell is the median over
``--repeats`` rounds of the mean over about 0.3 s of steps, the kernels alternating within a round.

Without ``--micro``, ``nmt``'s translation of the first ``--lines`` of Multi30k test 2016 is timed end
to end, beam 4 and greedy, for each ``NMT_CPU_LINEAR`` value of ``--choices`` (default: ``auto``, the
kernels as shipped, and ``blas``, the BLAS only with the output weight stored transposed), alternating
round by round; it prints sentences/s (median of the rounds) and whether the outputs agree.
"""

import argparse
import gzip
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the helpers every script shares
from common import SHARED, alternate_translations, record  # noqa: E402

from nmt_cli.decode.loading import load_model
from nmt_cli.inference.cpu_linear import (
    InferenceLinear,
    cpu_vendor,
    one_row_in_parts,
    onednn_linear,
    onednn_packed_weight,
    swapped_operands_linear,
)

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--micro", action="store_true")
parser.add_argument("--rows", default="1,2,4,8,16,32,64,128")
parser.add_argument("--repeats", type=int, default=3)
parser.add_argument("--lines", type=int, default=60)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--batch-sizes", default="1,16")
parser.add_argument(
    "--choices", default="auto,blas", help="NMT_CPU_LINEAR values to compare end to end (the last is the reference)"
)
parser.add_argument("--threads", type=int, default=2)
args = parser.parse_args()
torch.set_num_threads(args.threads)
command = "python benchmarks/studies/bench_cpu_linear.py " + " ".join(sys.argv[1:])


def step_microseconds(products, inputs: dict, budget_s: float = 0.3) -> float:
    """Mean time of one decoder step's products, over as many steps as fit in about ``budget_s``."""
    for _ in range(3):
        products(inputs)
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < budget_s:
        products(inputs)
        steps += 1
    return 1e6 * (time.perf_counter() - start) / steps


def micro() -> None:
    in_parts = one_row_in_parts()  # as NMT_CPU_LINEAR (default auto) ships it on this processor
    os.environ["NMT_CPU_LINEAR"] = "blas"  # plain layers, to take their weights
    model = load_model(args.model).model
    linears = [m for m in model.decoder.modules() if isinstance(m, torch.nn.Linear)] + [model.output]
    weights = [(m.weight.detach().contiguous(), None if m.bias is None else m.bias.detach()) for m in linears]
    transposed_output = weights[:-1] + [(weights[-1][0].t().contiguous().t(), None)]
    transposed_all = [(w.t().contiguous().t(), b) for w, b in weights]
    packed = [(onednn_packed_weight(w), b) for w, b in weights]
    shipped = [
        InferenceLinear.sharing(torch.nn.Linear(w.size(1), w.size(0), bias=b is not None), True, in_parts)
        for w, b in weights
    ]
    with torch.no_grad():
        for layer, (w, b) in zip(shipped, weights):
            layer.weight.copy_(w)
            if b is not None:
                layer.bias.copy_(b)
    kernels = {
        "F.linear": lambda x: [F.linear(x[w.size(1)], w, b) for w, b in weights],
        "F.linear, output transposed (blas)": lambda x: [F.linear(x[w.size(1)], w, b) for w, b in transposed_output],
        "F.linear, every weight transposed": lambda x: [F.linear(x[w.size(1)], w, b) for w, b in transposed_all],
        "oneDNN": lambda x: [onednn_linear(x[w.size(1)], w, b) for w, b in weights],
        "oneDNN, packed weights": lambda x: [onednn_linear(x[w.size(1)], w, b) for w, b in packed],
        "swapped operands": lambda x: [swapped_operands_linear(x[w.size(1)], w, b) for w, b in weights],
        "InferenceLinear (by rows)": lambda x: [layer(x[layer.in_features]) for layer in shipped],
    }
    rows_out = []
    with torch.inference_mode():
        for n in [int(r) for r in args.rows.split(",")]:
            inputs = {w.size(1): torch.randn(n, 1, w.size(1)) for w, _ in weights}
            times: dict[str, list[float]] = {name: [] for name in kernels}
            for _ in range(args.repeats):
                for name, products in kernels.items():
                    times[name].append(step_microseconds(products, inputs))
            row = {"model": args.model, "rows": n}
            row |= {f"{name} us": round(statistics.median(t)) for name, t in times.items()}
            blas, ours = row["F.linear, output transposed (blas) us"], row["InferenceLinear (by rows) us"]
            row["InferenceLinear speed-up over blas"] = round(blas / ours, 2)
            row["cpu"] = f"{cpu_vendor()} {torch.backends.cpu.get_cpu_capability()}"
            rows_out.append(row)
            print(row, flush=True)
    record("cpu_linear_step_products", rows_out, command)


def end_to_end() -> None:
    raw = gzip.decompress((SHARED / "multi30k" / "test_2016_flickr.en.gz").read_bytes()).decode()
    lines = raw.split("\n")[: args.lines]
    models = {}
    choices = args.choices.split(",")
    for choice in choices:  # the choice is made when a model is loaded
        os.environ["NMT_CPU_LINEAR"] = choice
        models[choice] = load_model(args.model)
    rows_out = alternate_translations(models, lines, args.batch_sizes, args.rounds, reference=choices[-1])
    record("cpu_linear_end_to_end", rows_out, command)


if args.micro:
    micro()
else:
    end_to_end()
