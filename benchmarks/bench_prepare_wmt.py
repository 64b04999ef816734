"""WMT-size prepare: `nmt prepare` against fairseq's usual pipeline on the same 4.5M pairs.

    python benchmarks/bench_prepare_wmt.py --fairseq /path/to/fairseq-venv [--times 155] [--rounds 2]

The corpus is the Multi30k EN-DE training set written ``--times`` times into one gzip pair
(155 x 29,000 = 4,495,000 pairs, the size of WMT14 EN-DE); validation is Multi30k val. Both arms
learn a 37k joint BPE with the same SentencePiece options (sample of ``--sample`` sentences,
2 threads) and use 2 workers. The arms alternate, ``--rounds`` times.

- nmt: ``nmt prepare RECIPE --force`` (clean, learn the vocabulary, encode, binarise, bucket).
- fairseq: gunzip; ``SentencePieceTrainer.train``; SentencePiece encoding of train and valid
  (the Python API, batched, 2 threads: faster than the ``spm_encode`` tool fairseq's examples
  use); ``fairseq-preprocess --joined-dictionary --workers 2``.

Wall time is the sum of the stages; peak RSS the largest single process of any stage (GNU time).
Our own peak RSS is also taken on the 1x corpus, to show it does not grow with the corpus.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
from pathlib import Path

from common import SHARED, WORK, median, print_table, record, timed_run

RECIPE = """
data:
  src_lang: en
  tgt_lang: de
  root: {root}
  train: [train]
  valid: [val]
  output: {out}
  workers: 2
vocab:
  type: bpe
  size: 37000
  joint: true
  input_sentence_size: {sample}
  threads: 2
"""

# The same SentencePiece options as nmt_cli/data/vocab.py, so both arms learn the same model.
SPM_TRAIN = """
import sys, sentencepiece as spm
spm.SentencePieceTrainer.train(input=sys.argv[1].split(','), model_prefix=sys.argv[2], vocab_size=37000,
    model_type='bpe', character_coverage=1.0, input_sentence_size=int(sys.argv[3]), shuffle_input_sentence=True,
    num_threads=2, pad_id=0, unk_id=1, bos_id=2, eos_id=3, normalization_rule_name='identity',
    byte_fallback=True, max_sentence_length=65536, minloglevel=2)
"""

SPM_ENCODE = """
import sys, itertools, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
for source, target in zip(sys.argv[2::2], sys.argv[3::2]):
    with open(source, encoding='utf-8') as fin, open(target, 'w', encoding='utf-8') as fout:
        while batch := list(itertools.islice(fin, 100000)):
            pieces = sp.encode([line.rstrip('\\n') for line in batch], out_type=str, num_threads=2)
            fout.write(''.join(' '.join(p) + '\\n' for p in pieces))
"""


def make_corpus(times: int) -> Path:
    folder = WORK / f"prepare_wmt_{times}x"
    folder.mkdir(parents=True, exist_ok=True)
    for lang in ("en", "de"):
        target = folder / f"train.{lang}.gz"
        if not target.exists():
            raw = gzip.decompress((SHARED / "multi30k" / f"train.{lang}.gz").read_bytes())
            with gzip.open(target.with_suffix(".tmp"), "wb", compresslevel=1) as handle:
                for _ in range(times):
                    handle.write(raw)
            target.with_suffix(".tmp").replace(target)
        shutil.copy(SHARED / "multi30k" / f"val.{lang}.gz", folder / f"val.{lang}.gz")
    return folder


def run_nmt(root: Path, sample: int, tag: str) -> dict:
    recipe = WORK / f"prepare_wmt_{tag}.yaml"
    out = WORK / f"prepare_wmt_{tag}_nmt"
    recipe.write_text(RECIPE.format(root=root, out=out, sample=sample))
    seconds, peak, _ = timed_run([sys.executable, "-m", "nmt_cli", "prepare", str(recipe), "--force"])
    return {"seconds": seconds, "peak": peak, "stages": {"nmt prepare": seconds}}


def run_fairseq(root: Path, sample: int, venv: Path) -> dict:
    work = WORK / "prepare_wmt_fairseq"
    shutil.rmtree(work, ignore_errors=True)
    (work / "raw").mkdir(parents=True)
    (work / "enc").mkdir()
    python = str(venv / "bin" / "python")
    raw = {f"{split}.{lang}": work / "raw" / f"{split}.{lang}" for split in ("train", "val") for lang in ("en", "de")}
    unzip = " && ".join(f"gzip -dc {root / (name + '.gz')} > {path}" for name, path in raw.items())
    encode_args = [str(x) for name, path in raw.items() for x in (path, work / "enc" / name)]
    stages = {
        "gunzip": ["sh", "-c", unzip],
        "spm train": [python, "-c", SPM_TRAIN, f"{raw['train.en']},{raw['train.de']}", str(work / "spm"), str(sample)],
        "spm encode": [python, "-c", SPM_ENCODE, str(work / "spm.model"), *encode_args],
        "fairseq-preprocess": [
            str(venv / "bin" / "fairseq-preprocess"),
            "--source-lang",
            "en",
            "--target-lang",
            "de",
            "--trainpref",
            str(work / "enc" / "train"),
            "--validpref",
            str(work / "enc" / "val"),
            "--destdir",
            str(work / "bin"),
            "--joined-dictionary",
            "--workers",
            "2",
        ],
    }
    times, peaks = {}, []
    for name, cmd in stages.items():
        seconds, peak, _ = timed_run(cmd)
        times[name] = seconds
        peaks.append(peak)
    return {"seconds": sum(times.values()), "peak": max(peaks), "stages": times}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fairseq", type=Path, required=True, help="venv with fairseq (../shared/peers/install_fairseq.sh)")
    parser.add_argument("--times", type=int, default=155)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sample", type=int, default=1_000_000, help="SentencePiece input_sentence_size")
    args = parser.parse_args()

    small = run_nmt(make_corpus(1), args.sample, "1x")
    root = make_corpus(args.times)
    runs = {"nmt": [], "fairseq": []}
    for round_ in range(args.rounds):
        order = ("nmt", "fairseq") if round_ % 2 == 0 else ("fairseq", "nmt")
        for arm in order:
            if arm == "nmt":
                result = run_nmt(root, args.sample, f"{args.times}x")
            else:
                result = run_fairseq(root, args.sample, args.fairseq)
            print(arm, result, flush=True)
            runs[arm].append(result)

    pairs = 29_000 * args.times
    rows = []
    for arm, results in runs.items():
        stages = {name: median([r["stages"][name] for r in results]) for name in results[0]["stages"]}
        rows.append(
            {
                "pipeline": arm,
                "pairs": pairs,
                "seconds (median)": median([r["seconds"] for r in results]),
                "peak RSS MiB (median)": median([r["peak"] for r in results]),
                "stages": ", ".join(f"{k} {v:.0f} s" for k, v in stages.items()),
            }
        )
    rows.append(
        {
            "pipeline": "nmt, 1x corpus",
            "pairs": 29_000,
            "seconds (median)": small["seconds"],
            "peak RSS MiB (median)": small["peak"],
            "stages": "",
        }
    )
    print_table(f"WMT-size prepare ({pairs:,} pairs, 37k joint BPE, sample {args.sample:,})", rows)
    print(f"time nmt / fairseq: {rows[0]['seconds (median)'] / rows[1]['seconds (median)']:.2f}")
    print(f"peak RSS nmt {args.times}x / 1x: {rows[0]['peak RSS MiB (median)'] / small['peak']:.2f}")
    record("prepare_wmt", rows, "python benchmarks/bench_prepare_wmt.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
