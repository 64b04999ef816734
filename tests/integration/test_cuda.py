"""The CUDA paths: loss-scaled fp16, bf16, NCCL through torchrun, exact resume, RNG state, GPU memory fit, decoding.

Marked ``cuda``: skipped on machines without a GPU (CI), run with ``pytest -m cuda`` on one.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import kill_at_first_checkpoint, read_lines

from nmt_cli.config import load_recipe
from nmt_cli.decode.loading import load_model
from nmt_cli.decode.translator import Translator
from nmt_cli.train import checkpoint
from nmt_cli.train.distributed import init_distributed
from nmt_cli.train.loop import Trainer

pytestmark = pytest.mark.cuda


def _recipe(prepared, run: Path, *overrides: str):
    path = run.parent / f"{run.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(Path(prepared.run_dir.parent / "tiny.yaml").read_text())
    return path, load_recipe(
        path, [f"train.dir={run}", "train.device=cuda", "train.save_every=0", "train.log_every=1", *overrides]
    )


def _trainer(prepared, run: Path, *overrides: str) -> tuple[Trainer, list[str]]:
    _, recipe = _recipe(prepared, run, *overrides)
    messages: list[str] = []
    trainer = Trainer(recipe, init_distributed(recipe.train), messages.append)
    trainer.prepare_run_dir(None)
    return trainer, messages


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_fp16_overflow_skips_updates_without_advancing_step_or_schedule(prepared, tmp_path):
    trainer, _ = _trainer(prepared, tmp_path / "run", "train.precision=fp16", "train.max_steps=5")
    # Start from a loss scale that overflows fp16 for certain, as a too-high scale does early in training.
    trainer.updates.scaler = torch.amp.GradScaler("cuda", init_scale=2.0**40)
    state = trainer.run()
    assert state.step == 5 and state.skipped_updates >= 1
    assert trainer.updates.scheduler.last_epoch == 5
    assert state.epoch_batches_done == state.step + state.skipped_updates
    records = [r for r in _records(tmp_path / "run") if "loss" in r]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    assert all(math.isfinite(r["loss"]) for r in records)
    assert records[-1]["loss_scale"] < 2.0**40
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_bf16_trains_on_cuda(prepared, tmp_path):
    trainer, messages = _trainer(
        prepared, tmp_path / "run", "train.precision=bf16", "train.max_steps=30", "train.log_every=10"
    )
    trainer.run()
    losses = [r["loss"] for r in _records(tmp_path / "run") if "loss" in r]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert any("device cuda:0" in m and "precision bf16" in m for m in messages)


def test_one_gpu_through_torchrun_uses_nccl(prepared, tmp_path):
    path, _ = _recipe(prepared, tmp_path / "run")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "nmt_cli",
            "train",
            str(path),
            "--gpus",
            "1",
            "--set",
            f"train.dir={tmp_path / 'run'}",
            "--set",
            "train.max_steps=4",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "launching 1 processes through torchrun" in output
    assert "(nccl)" in output
    assert (tmp_path / "run" / "model.pt").is_file()


def _train_cmd(recipe_path: Path, run_dir: Path, steps: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "nmt_cli",
        "train",
        str(recipe_path),
        "--set",
        f"train.dir={run_dir}",
        "--set",
        f"train.max_steps={steps}",
        "--set",
        "train.save_every=10",
        "--set",
        "train.keep_last=0",
        "--set",
        "model.dropout=0.1",
        "--set",
        "train.device=cuda",
        "--set",
        "train.log_every=1",
    ]


def test_resume_after_sigkill_on_cuda(prepared, tmp_path):
    recipe_path, _ = _recipe(prepared, tmp_path / "r")
    killed = tmp_path / "killed"
    k = kill_at_first_checkpoint(_train_cmd(recipe_path, killed, 100_000), killed)
    subprocess.run(_train_cmd(recipe_path, killed, k + 10), check=True, capture_output=True, timeout=300)
    straight = tmp_path / "straight"
    subprocess.run(_train_cmd(recipe_path, straight, k + 10), check=True, capture_output=True, timeout=300)

    def after(run: Path) -> list[dict]:
        by_step = {r["step"]: r for r in _records(run) if "loss" in r}  # the resumed run re-logs from k + 1
        return [by_step[s] for s in range(k + 1, k + 11)]

    resumed, reference = after(killed), after(straight)
    # Same batches and learning rates exactly; losses to CUDA's non-deterministic reductions.
    assert [r["tgt_tokens"] for r in resumed] == [r["tgt_tokens"] for r in reference]
    assert [r["lr"] for r in resumed] == [r["lr"] for r in reference]
    assert [r["loss"] for r in resumed] == pytest.approx([r["loss"] for r in reference], rel=1e-3)


def test_cuda_rng_state_is_saved_and_restored(prepared, tmp_path):
    trainer, _ = _trainer(prepared, tmp_path / "run", "train.max_steps=3", "train.save_every=3")
    trainer.run()
    saved = checkpoint.load(checkpoint.step_checkpoints(tmp_path / "run")[-1])
    cuda_states = saved["rng"]["cuda"]
    assert len(cuda_states) == 1 and cuda_states[0].dtype == torch.uint8 and cuda_states[0].numel() > 0
    torch.cuda.manual_seed(12345)  # anything else
    resumed, _ = _trainer(prepared, tmp_path / "run", "train.max_steps=6", "train.save_every=3")
    assert torch.equal(torch.cuda.get_rng_state(), cuda_states[0])
    assert resumed.state.step == 3


def test_max_tokens_auto_probes_gpu_memory(prepared, tmp_path):
    trainer, messages = _trainer(prepared, tmp_path / "run", "train.max_tokens=auto", "train.max_steps=2")
    assert trainer.max_tokens >= 2048
    assert any("fit in GPU memory" in m for m in messages)
    state = trainer.run()
    assert state.step == 2 and state.max_tokens == trainer.max_tokens


def test_real_out_of_memory_splits_the_batch(prepared, tmp_path):
    """Cap the allocator below what one big batch needs: the update must split, not die."""
    trainer, messages = _trainer(
        prepared, tmp_path / "run", "train.max_tokens=60000", "model.d_model=256", "model.d_ff=2048", "model.dropout=0.0"
    )
    group = [max(trainer._epoch_batches(), key=len)]
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    expected = trainer.updates.run(group, 0)  # first update also creates Adam's state
    needed = torch.cuda.max_memory_allocated() - baseline
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_allocated() + 0.5 * needed) / total)
    try:
        got = trainer.updates.run(group, 1)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert trainer.updates.split >= 2, "the capped update did not run out of memory; raise the batch"
    assert any("accumulation steps" in m for m in messages)
    assert got["tokens"] == expected["tokens"] and math.isfinite(float(got["loss"]))


def test_decoding_on_cuda_equals_cpu(overfit, multi30k):
    run_dir, train_src, _ = overfit
    lines = train_src + read_lines(multi30k / "test_2016_flickr.en.gz", 200)
    outputs = {}
    for name, device, dtype, graphs in (
        ("cpu", "cpu", torch.float32, False),
        ("cuda", "cuda", torch.float32, True),
        ("cuda-eager", "cuda", torch.float32, False),
        ("cuda-bf16", "cuda", torch.bfloat16, True),
    ):
        loaded = load_model(run_dir, device, dtype)
        for beam in (4, 1):
            config = replace(loaded.recipe.decode, cuda_graphs=graphs, beam=beam)
            outputs[name, beam] = [hyps[0][0] for hyps in Translator(loaded, config, device).translate(lines)]
    for beam in (4, 1):
        assert outputs["cuda", beam] == outputs["cpu", beam]  # fp32, CUDA graphs: the same tokens on every sentence
        assert outputs["cuda-eager", beam] == outputs["cpu", beam]  # fp32, step by step
    outputs = {name: outputs[name, 4] for name in ("cpu", "cuda-bf16")}
    agreement = sum(a == b for a, b in zip(outputs["cuda-bf16"], outputs["cpu"])) / len(lines)
    print(f"\nbf16 on CUDA vs fp32 on CPU: {agreement:.1%} of {len(lines)} sentences identical")
    assert agreement > 0.5


def test_glossary_decoding_on_cuda_equals_cpu(overfit, tmp_path):
    """Constrained search (decode/constrained.py) on CUDA, with and without CUDA graphs, gives the CPU's outputs."""
    from nmt_cli.terms.glossary import read_glossary

    run_dir, train_src, _ = overfit
    glossary_file = tmp_path / "terms.tsv"
    glossary_file.write_text("man\tKerl\nwoman\tDame\n")
    glossary = read_glossary(glossary_file)
    outputs = {}
    for name, device, graphs in (("cpu", "cpu", False), ("cuda", "cuda", True), ("cuda-eager", "cuda", False)):
        loaded = load_model(run_dir, device, torch.float32)
        config = replace(loaded.recipe.decode, cuda_graphs=graphs, beam=4)
        translator = Translator(loaded, config, device, glossary=glossary)
        outputs[name] = [hyps[0] for hyps in translator.translate(train_src)]
    assert [t.text for t in outputs["cuda"]] == [t.text for t in outputs["cpu"]]
    assert [t.text for t in outputs["cuda-eager"]] == [t.text for t in outputs["cpu"]]
    assert all(t.missing_terms == () for t in outputs["cuda"])


def test_packed_batches_on_cuda_give_the_padded_loss_and_gradients_in_bf16():
    """``train.packed`` on a GPU runs the variable-length flash-attention kernel, not the padded computation the
    CPU tests compare: the same loss and gradients within bf16's tolerance."""
    from conftest import PACKING_LENGTHS, padded_pairs

    from nmt_cli.config import ModelConfig
    from nmt_cli.model.transformer import build_model

    torch.manual_seed(0)
    model = build_model(ModelConfig(layers=2, d_model=64, n_heads=4, d_ff=128, dropout=0.0), 60, 60, 0)
    model = model.cuda().train()
    batch = tuple(t.cuda() if isinstance(t, torch.Tensor) else t for t in padded_pairs(PACKING_LENGTHS, 1))

    def run(packed: bool) -> tuple:
        model.zero_grad(set_to_none=True)
        model.packed = packed
        src, tgt_in, tgt_out, target_tokens, source_tokens = batch
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(src, tgt_in, tgt_out, 0.1, target_tokens, None, 0.0, None, source_tokens)[0]
        loss.backward()
        return loss.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    loss, grads = run(False)
    p_loss, p_grads = run(True)
    torch.testing.assert_close(p_loss, loss, rtol=2e-2, atol=1e-2)
    total = torch.stack([g.norm() for g in grads.values()]).norm()
    gap = torch.stack([(p_grads[k] - g).norm() for k, g in grads.items()]).norm()
    assert gap < 0.05 * total, (gap, total)
