"""The schedules that know the run's budget: warm-up, then down to zero exactly at its end."""

from __future__ import annotations

import math

import pytest

from nmt_cli.config import TrainConfig, load_recipe
from nmt_cli.errors import RecipeError
from nmt_cli.train.schedule import Budget, learning_rate

PEAK = 1e-3


def rates(schedule: str, steps: int, **settings) -> list[float]:
    """The learning rate of every update of a run bounded by ``steps`` updates."""
    config = TrainConfig(lr_schedule=schedule, lr=PEAK, max_steps=steps, **settings)
    rate, budget = learning_rate(config, 512), Budget.of(config)
    return [rate(update, budget.spent_at(update, 0.0)) for update in range(1, steps + 1)]


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_an_update_budget_warms_up_for_its_share_then_ends_at_zero(schedule):
    lr = rates(schedule, 1000, warmup_fraction=0.1)
    assert lr[0] == pytest.approx(PEAK * 0.0005 / 0.1)  # the budget's start: the first update's half of the ramp
    assert lr[99] == pytest.approx(PEAK * 0.0995 / 0.1)  # the warm-up's last update
    assert max(lr) == pytest.approx(PEAK, rel=1e-3) and lr.index(max(lr)) == 100
    assert 0 < lr[-1] < PEAK / 1000  # the budget's end: half an update's worth of the decay left
    assert all(a > b for a, b in zip(lr[100:], lr[101:]))  # down all the way after the warm-up
    assert all(a < b for a, b in zip(lr[:99], lr[1:100]))


def test_the_two_shapes_meet_halfway_and_differ_on_the_way():
    linear, cosine = rates("linear", 1000, warmup_fraction=0.1), rates("cosine", 1000, warmup_fraction=0.1)
    halfway = 100 + 450  # warm-up plus half of the decay
    assert linear[halfway] == pytest.approx(PEAK / 2, rel=2e-3) and cosine[halfway] == pytest.approx(PEAK / 2, rel=3e-3)
    quarter = 100 + 225
    assert linear[quarter] == pytest.approx(0.75 * PEAK, rel=3e-3)
    assert cosine[quarter] == pytest.approx(PEAK * (1 + math.cos(math.pi / 4)) / 2, rel=3e-3)


def test_a_warm_up_in_updates_when_no_share_is_given():
    lr = rates("linear", 200, warmup=20)
    assert lr[0] == pytest.approx(PEAK / 20)
    assert lr[19] == pytest.approx(PEAK * (1 - 19.5 / 200))  # the ramp's top meets the straight line to zero
    assert lr[-1] < PEAK / 100


def test_a_time_budget_is_spent_by_the_clock_and_the_first_limit_reached_counts():
    assert Budget(0, 600.0).spent_at(5, 300.0) == pytest.approx(0.5)
    assert Budget(0, 600.0).spent_at(5, 900.0) == 1.0
    assert Budget(100, 600.0).spent_at(80, 60.0) == pytest.approx(0.795)  # the updates run out first
    assert Budget(10_000, 600.0).spent_at(80, 540.0) == pytest.approx(0.9)  # the clock does
    config = TrainConfig(lr_schedule="linear", lr=PEAK, warmup_fraction=0.1, max_steps=0, max_time="10m")
    rate, budget = learning_rate(config, 512), Budget.of(config)
    assert rate(1, budget.spent_at(1, 0.0)) == 0.0  # the budget's start
    assert rate(300, budget.spent_at(300, 60.0)) == pytest.approx(PEAK)  # the warm-up's end, a minute in
    assert rate(3000, budget.spent_at(3000, 600.0)) == 0.0  # its end, however many updates that took


def test_budget_settings_that_cannot_work_are_refused(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("model: {}\n")
    cases = [
        (["train.lr_schedule=linear", "train.max_steps=0"], "train.lr_schedule: linear reaches zero at the budget's end"),
        (["train.warmup_fraction=0.1"], "train.warmup_fraction: is the warm-up of the linear and cosine schedules"),
        (["train.warmup_fraction=1", "train.lr_schedule=linear"], "train.warmup_fraction: 1"),
        (["train.average_stretch=0.2", "train.ema_decay=0.99", "train.max_steps=0"], "train.average_stretch"),
    ]
    for overrides, expected in cases:
        with pytest.raises(RecipeError, match=expected.replace("(", r"\(").replace(")", r"\)")):
            load_recipe(path, overrides)
    assert load_recipe(path, ["train.lr_schedule=cosine", "train.max_steps=0", "train.max_time=5m"]).train.max_seconds == 300
