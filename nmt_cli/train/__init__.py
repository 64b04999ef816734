"""Training: state, loop, schedules, checkpoints and averaging, distributed set-up."""
