"""Run under torchrun by tests/test_distributed.py: train, then save this rank's parameters."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from nmt_cli.config import load_recipe
from nmt_cli.train.distributed import init_distributed, set_threads, shutdown
from nmt_cli.train.loop import Trainer


def main() -> None:
    recipe_path, out_dir, *overrides = sys.argv[1:]
    recipe = load_recipe(recipe_path, overrides)
    info = init_distributed(recipe.train)
    set_threads(recipe.train, info)
    trainer = Trainer(recipe, info, print if info.is_main else (lambda _m: None))
    trainer.prepare_run_dir(None)
    trainer.run()
    torch.save(trainer.model.state_dict(), Path(out_dir) / f"rank{info.rank}.pt")
    shutdown(info)


if __name__ == "__main__":
    main()
