"""The flat decoder step against the layers' modules, end to end, in one process (issue 12).

    python benchmarks/bench_decoder_step.py MODEL [--lines 100] [--rounds 5] [--batch-sizes 1,16]

``nmt`` steps the decoder of a model with absolute positions, in eval mode, through one flat
function (``nmt_cli/model/decoder_step.py``) instead of the layers' ``nn.Module`` calls. This times
``nmt``'s translation of the first ``--lines`` of Multi30k test 2016, beam 4 and greedy, both ways:
``flat`` (as shipped) and ``modules`` (the same loaded model with the flat step turned off), the two
alternating round by round in one process, so that both see the same machine. It prints sentences/s
(median of the rounds) and how many outputs equal the modules' ones.
"""

import argparse
import gzip
import sys

import torch
from common import SHARED, alternate_translations, record

from nmt_cli.decode.translator import load_model

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--lines", type=int, default=100)
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--batch-sizes", default="1,16")
parser.add_argument("--threads", type=int, default=2)
args = parser.parse_args()
torch.set_num_threads(args.threads)
command = "python benchmarks/bench_decoder_step.py " + " ".join(sys.argv[1:])

raw = gzip.decompress((SHARED / "multi30k" / "test_2016_flickr.en.gz").read_bytes()).decode()
lines = raw.split("\n")[: args.lines]
flat, modules = load_model(args.model), load_model(args.model)
modules.model.flat_decoder_step = lambda: None  # type: ignore[method-assign]  # every step through the modules
rows = alternate_translations({"flat": flat, "modules": modules}, lines, args.batch_sizes, args.rounds, "modules")
record("decoder_step_end_to_end", rows, command)
