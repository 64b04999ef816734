"""Stop signals: held while something must not be left half-built, delivered as soon as it is done."""

from __future__ import annotations

import os
import signal

import pytest

from nmt_cli.utils.signals import Interrupted, signals_held, signals_unwind

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="no SIGTERM here")


def test_a_signal_sent_while_held_is_raised_on_leaving_not_inside():
    reached_end_of_block = False
    with signals_unwind(), pytest.raises(Interrupted) as stopped:
        with signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            reached_end_of_block = True  # not interrupted inside
    assert reached_end_of_block and stopped.value.exit_code == 143


def test_without_a_hold_the_signal_interrupts_at_once():
    with signals_unwind(), pytest.raises(Interrupted):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("not interrupted")
