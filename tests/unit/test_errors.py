"""Library errors said to users as one plain phrase."""

from __future__ import annotations


def test_library_errors_are_said_without_python_internals():
    import io
    import pickle

    from nmt_cli.errors import reason

    assert reason(ValueError(f"Package not found at '{io.BytesIO()!r}'")) == "Package not found at the input"
    unsafe = pickle.UnpicklingError(
        "Weights only load failed. This file can still be loaded, to do so you have two options, do those steps "
        "only if you trust the source of the checkpoint.\n\t(1) In PyTorch 2.6, we changed the default value of "
        "the `weights_only` argument in `torch.load` from `False` to `True`. Re-running `torch.load` with "
        "`weights_only` set to `False` will likely succeed...\n WeightsUnpickler error: Unsupported global: "
        "GLOBAL os.system was not an allowed global by default."
    )
    said = reason(unsafe)
    assert "os.system" in said and "could run code" in said and "weights_only" not in said
    assert len(reason(RuntimeError("x" * 500))) <= 160 and reason(RuntimeError("")) == "RuntimeError"
