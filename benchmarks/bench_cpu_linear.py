"""Which kernel should run a linear layer at inference on the CPU, in fp32 (issue 12).

    python benchmarks/bench_cpu_linear.py [--rows 1,4,16,64,256] [--repeats 7] [--threads 2]
    python benchmarks/bench_cpu_linear.py --model MODEL [--lines 60] [--rounds 3] [--batch-sizes 1,16]

PyTorch runs ``F.linear`` in fp32 through its BLAS (MKL in the official x86 wheels). On processors
that MKL does not tune for (AMD here), products with few rows, as in a decoder step, run far below
what the processor can do; CTranslate2 on the same processor uses oneDNN for the same products
(``CT2_VERBOSE=1``: "SGEMM backend: DNNL"). PyTorch reaches oneDNN's inner product through
``torch.ops.mkldnn._linear_pointwise``. This times, for the weight shapes of a Transformer small
(d_model 256, 8k vocabulary) and base (512, 32k): ``F.linear`` (the weight in PyTorch's layout),
``F.linear`` with the weight stored transposed, and oneDNN; each cell is the median over
``--repeats`` rounds of the mean of a batch of calls, the three kernels alternating within a round.

With ``--model``, ``nmt``'s translation of the first ``--lines`` of Multi30k test 2016 is timed end
to end, beam 4 and greedy, with the kernels as shipped (``NMT_CPU_LINEAR=auto``) and with the BLAS
only (``blas``: the output weight stored transposed, as before), alternating round by round; it
prints sentences/s (median of the rounds) and whether the outputs agree.
"""

import argparse
import gzip
import os
import statistics
import sys
import time
from dataclasses import replace

import torch
import torch.nn.functional as F
from common import SHARED, record

from nmt_cli.decode.translator import Translator, load_model
from nmt_cli.model.cpu_inference import onednn_linear

parser = argparse.ArgumentParser()
parser.add_argument("--rows", default="1,4,16,64,256")
parser.add_argument("--repeats", type=int, default=7)
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--model")
parser.add_argument("--lines", type=int, default=60)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--batch-sizes", default="1,16")
args = parser.parse_args()
torch.set_num_threads(args.threads)
command = "python benchmarks/bench_cpu_linear.py " + " ".join(sys.argv[1:])


def end_to_end() -> None:
    raw = gzip.decompress((SHARED / "multi30k" / "test_2016_flickr.en.gz").read_bytes()).decode()
    lines = raw.split("\n")[: args.lines]
    models = {}
    for choice in ("auto", "blas"):  # the choice is made when a model is loaded
        os.environ["NMT_CPU_LINEAR"] = choice
        models[choice] = load_model(args.model)
    results: dict = {}
    for _ in range(args.rounds):
        for choice, loaded in models.items():
            for batch in (int(b) for b in args.batch_sizes.split(",")):
                for beam in (4, 1):
                    translator = Translator(loaded, replace(loaded.recipe.decode, beam=beam, batch_size=batch))
                    start = time.perf_counter()
                    out = [h[0][0] for h in translator.translate(lines)]
                    results.setdefault((choice, batch, beam), []).append((time.perf_counter() - start, out))
    rows_out = []
    for (choice, batch, beam), runs in results.items():
        blas = results[("blas", batch, beam)][0][1]
        same = sum(a == b for a, b in zip(runs[0][1], blas))
        rate = len(lines) / statistics.median(r[0] for r in runs)
        row = {"NMT_CPU_LINEAR": choice, "batch": batch, "beam": beam, "sent/s": round(rate, 2)}
        row["same output as blas"] = f"{same}/{len(lines)}"
        rows_out.append(row)
        print(row, flush=True)
    record("cpu_linear_end_to_end", rows_out, command)


if args.model:
    end_to_end()
    raise SystemExit(0)

SHAPES = {  # (out, in): what each is in a decoder layer
    "small": [(768, 256), (256, 256), (512, 256), (1024, 256), (256, 1024), (8000, 256)],
    "base": [(1536, 512), (512, 512), (1024, 512), (2048, 512), (512, 2048), (32000, 512)],
}


def microseconds(fn, x: torch.Tensor, budget_s: float = 0.02) -> float:
    """Mean time of one call, over as many calls as fit in about ``budget_s``."""
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < budget_s or calls < 3:
        fn(x)
        calls += 1
    return 1e6 * (time.perf_counter() - start) / calls


rows_out = []
with torch.inference_mode():
    for model, shapes in SHAPES.items():
        for out_features, in_features in shapes:
            weight, bias = torch.randn(out_features, in_features), torch.randn(out_features)
            transposed = weight.t().contiguous().t()
            kernels = {
                "F.linear": lambda x, w=weight, b=bias: F.linear(x, w, b),
                "F.linear, weight transposed": lambda x, w=transposed, b=bias: F.linear(x, w, b),
                "oneDNN": lambda x, w=weight, b=bias: onednn_linear(x, w, b),
            }
            for n in [int(r) for r in args.rows.split(",")]:
                x = torch.randn(n, 1, in_features)
                for fn in kernels.values():  # warm-up (oneDNN builds its primitive on the first call)
                    for _ in range(3):
                        fn(x)
                times: dict[str, list[float]] = {name: [] for name in kernels}
                for _ in range(args.repeats):
                    for name, fn in kernels.items():
                        times[name].append(microseconds(fn, x))
                row = {"model": model, "weight": f"{out_features}x{in_features}", "rows": n}
                row |= {f"{name} us": round(statistics.median(t), 1) for name, t in times.items()}
                row["oneDNN speed-up"] = round(row["F.linear us"] / row["oneDNN us"], 2)
                rows_out.append(row)
                print(row, flush=True)
record("cpu_linear_kernels", rows_out, command)
