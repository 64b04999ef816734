#!/usr/bin/env bash
# The whole GPU measurement of docs/benchmarks.md ("On a GPU"), one stage per call (each fits a 10-minute slot):
#   benchmarks/run_gpu.sh tests  LOGDIR   pytest -m cuda, plus the HF-peer mapping tests
#   benchmarks/run_gpu.sh train  LOGDIR   training throughput, base and big, nmt vs the HF MarianMT loop
#   benchmarks/run_gpu.sh decode LOGDIR   train a base-size Multi30k model for 150 s, then decode vs HF generate
#   benchmarks/run_gpu.sh profile LOGDIR  torch.profiler top kernels: training (base, big) and decoding, nmt and HF
#   benchmarks/run_gpu.sh packed LOGDIR   training throughput with train.packed off and on (padding-free batches)
# DECODE_TRAIN_SECONDS (default 150) sets how long the decode and profile stages train their model;
# DECODE_ARGS replaces the decode stage's "--lines 500 --bs1-lines 40" (e.g. add --eager-too).
#   benchmarks/run_gpu.sh wave   LOGDIR   one call of about 9 minutes: a profile of big-model updates (where the time
#                                       goes), training MFU base and big with train.compile and train.packed off
#                                       and on against the HF loop, and decoding against generate with this code
#                                       and, where OLD_CODE names a checkout of an earlier nmt, with that code on
#                                       the same model (trained by it)
# Reads the corpora from $NMT_TEST_DATA (default ../shared/data: Multi30k, newstest2014); needs `pip install -e .`
# done or PYTHONPATH at the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=$1 logs=${2:-benchmarks/work/gpu_logs}
shared=${NMT_TEST_DATA:-../shared/data}
mkdir -p "$logs"
export PYTHONUNBUFFERED=1
python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))" | tee "$logs/device.txt"
case $stage in
  tests)
    # No `|| true`: a failing GPU test fails the stage (pipefail passes pytest's code through tee).
    python3 -m pytest -m cuda -v -s tests/integration/test_cuda.py 2>&1 | tee "$logs/cuda_tests.log"
    python3 -m pytest -q tests/unit/test_hf_peer.py 2>&1 | tee -a "$logs/cuda_tests.log" ;;
  train)
    python3 benchmarks/bench_gpu.py train --models base,big --max-tokens 12288 --steps 30 \
      --warmup 10 --rounds 3 2>&1 | tee "$logs/train.log" ;;
  train-auto)
    python3 benchmarks/bench_gpu.py train --models base,big --max-tokens auto --steps 30 --warmup 8 --rounds 2 \
      2>&1 | tee "$logs/train_auto.log" ;;
  packed)  # train.packed: padding-free batches (the variable-length flash kernel) against padded ones, eager
    python3 benchmarks/bench_gpu.py train --models base,big --max-tokens 12288 --packed off,on --steps 30 --warmup 10 \
      --rounds 3 2>&1 | tee "$logs/packed.log" ;;
  compile)  # slow: dynamic batch shapes recompile (3+ minutes for base on the H100)
    python3 benchmarks/bench_gpu.py train --models big --compile off,on --steps 30 --warmup 8 --rounds 2 --no-peer \
      2>&1 | tee "$logs/compile.log" ;;
  decode|profile)
    data=benchmarks/work/gpu_m30k run=benchmarks/work/gpu_base_m30k
    base=(--set data.root=$shared/multi30k --set data.output=$data --set train.dir=$run --set model.layers=6
          --set model.d_model=512 --set model.n_heads=8 --set model.d_ff=2048 --set train.precision=bf16
          --set train.max_time=${DECODE_TRAIN_SECONDS:-150}s --set train.validate_every=0 --set train.lr=7e-4 --set train.warmup=1000
          --set train.max_tokens=12000 --set train.save_every=250 --set train.keep_last=5 --set train.average_last=5)
    if [ "$stage" = profile ]; then
      python3 benchmarks/bench_gpu.py profile --models big,base --max-tokens 12288 2>&1 | tee "$logs/profile_train.log"
    fi
    python3 -m nmt_cli prepare recipes/multi30k_ende.yaml --set data.root=$shared/multi30k --set data.output=$data \
      2>&1 | tee "$logs/decode_prepare.log"
    python3 -m nmt_cli train recipes/multi30k_ende.yaml "${base[@]}" 2>&1 | tail -n 30 | tee "$logs/decode_train.log"
    if [ "$stage" = profile ]; then
      python3 benchmarks/bench_gpu.py profile --models '' --model $run --beam 4 --batch-size 64 --lines 256 \
        2>&1 | tee "$logs/profile_decode.log"
    else
      python3 benchmarks/bench_gpu.py decode --model $run --dtype bf16 ${DECODE_ARGS:---lines 500 --bs1-lines 40} \
        2>&1 | tee "$logs/decode.log"
    fi ;;
  wave)
    # Each part under its own time limit, so that one that overruns leaves the others their figures.
    timeout 110 python3 benchmarks/bench_gpu.py profile --models big --max-tokens 12288 --updates 2 --no-peer \
      2>&1 | tee "$logs/profile_big.log" || echo "profile: exit $?"
    timeout 300 python3 benchmarks/bench_gpu.py train --models base,big --max-tokens 12288 --compile off,on \
      --packed off,on --steps 12 --warmup 3 --rounds 2 2>&1 | tee "$logs/train.log" || echo "train: exit $?"
    data=$PWD/benchmarks/work/gpu_m30k run=$PWD/benchmarks/work/gpu_base_m30k old=${OLD_CODE:-.}
    base=(--set data.root=$shared/multi30k --set data.output=$data --set train.dir=$run --set train.precision=bf16
          --set train.max_time=${DECODE_TRAIN_SECONDS:-35}s --set train.validate_every=0 --set train.lr=7e-4
          --set train.warmup=1000 --set train.max_tokens=12000 --set train.save_every=100 --set train.keep_last=3
          --set train.average_last=3)
    # The model comes from the older code where there is one: the newer reads older checkpoints, not the reverse.
    (cd "$old" && PYTHONPATH=$PWD python3 -m nmt_cli prepare recipes/multi30k_ende.yaml --set data.root=$shared/multi30k \
      --set data.output=$data > "$logs/decode_prepare.log" 2>&1 &&
      PYTHONPATH=$PWD timeout 90 python3 -m nmt_cli train recipes/multi30k_ende.yaml "${base[@]}" 2>&1 | tail -n 5) \
      || echo "decode model: exit $?"
    decode=(decode --model $run --dtype bf16 --sets multi30k --lines 400 --bs1-lines 30 --batch-sizes 1,64,0 --beams 4)
    timeout 75 python3 benchmarks/bench_gpu.py "${decode[@]}" 2>&1 | tee "$logs/decode_now.log" || echo "decode: exit $?"
    if [ "$old" != . ]; then
      (cd "$old" && PYTHONPATH=$PWD timeout 75 python3 benchmarks/bench_gpu.py "${decode[@]}") 2>&1 \
        | tee "$logs/decode_old.log" || echo "decode (old code): exit $?"
    fi ;;
  *) echo "stage: tests, train, train-auto, packed, compile, decode, profile or wave" >&2; exit 2 ;;
esac
