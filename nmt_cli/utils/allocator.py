"""How the process holds memory: freed memory kept by the C allocator for the next step, instead of handed back
to the kernel, and a bound on the compiled kernels PyTorch's CPU libraries keep.

A decoder step (and a training step) allocates the same large buffers every time: logits of a block of
rows (8-16 MB), feed-forward activations, log-probabilities. glibc's malloc serves blocks of more than
128 KiB with fresh ``mmap`` pages (raising that threshold only as such blocks are freed) and hands the
top of its heap back to the kernel once 128 KiB lie free there, so those buffers come back as new
pages every step: each page is faulted in and zeroed by the kernel before it is written, the largest single
cost outside the matrix products in a profile of a translation (docs/choices.md, "Memory"). PyTorch's
own advice for CPU inference is a caching allocator (jemalloc or TCMalloc through ``LD_PRELOAD``); these
two ``mallopt`` settings get the same effect from the allocator already in the process.

Only glibc has ``mallopt``; elsewhere (musl, macOS) nothing changes. A user's own ``MALLOC_*_``
environment settings win: glibc has read them at start-up, and we leave them be.
"""

from __future__ import annotations

import ctypes
import os

# mallopt's parameter numbers (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Blocks up to this size come from the heap (glibc's upper limit for the threshold on 64-bit systems:
# half of a thread arena's 64 MiB heap); larger ones still get their own mmap and go back when freed.
MMAP_THRESHOLD = 32 << 20
# Free memory at the top of a heap beyond this is handed back to the kernel: far above one step's
# buffers (tens of MiB at default batching), so a step's memory is reused, not re-faulted.
TRIM_THRESHOLD = 512 << 20
_USER_SETTINGS = (
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)


# Compiled matrix-product kernels kept per cache, one per operand shape met: oneDNN's primitive cache and ideep's
# (PyTorch's oneDNN layer, where the packed-weight products of inference/cpu_linear.py go). Their default,
# 1,024 each, holds a kernel for nearly every batch shape a run meets, and with it live memory malloc_trim cannot
# return. Decoding meets new shapes at every step and gains nothing from old kernels; training's updates reuse
# their shapes more and keep a larger cache. The measurements behind both numbers are in docs/choices.md.
KERNEL_CACHE_CAPACITY = 32
TRAINING_KERNEL_CACHE_CAPACITY = 128
_KERNEL_CACHE_SETTINGS = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")


def bound_kernel_caches(capacity: int = KERNEL_CACHE_CAPACITY) -> None:
    """Keep at most ``capacity`` compiled kernels in each cache, unless the user set a capacity. The libraries
    read the setting when they build their first kernel: call it before any CPU computation."""
    for name in _KERNEL_CACHE_SETTINGS:
        os.environ.setdefault(name, str(capacity))


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed blocks for reuse (see the module's text). True if it now does;
    False where there is no glibc, or the user set the allocator's thresholds themselves."""
    if not _glibc():
        return False
    if any(name in os.environ for name in _USER_SETTINGS):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # Trim first: setting either threshold turns off glibc's own adjustment of both.
    return bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def release_freed_memory() -> bool:
    """Hand the free memory inside the C heap back to the kernel (glibc's ``malloc_trim``). Training allocates
    blocks of a different size at every update (batches differ in shape), and the freed ones, too fragmented to
    serve the next update's, made the heap grow with the updates (docs/choices.md). Called now and then
    (``train/loop.py``), the growth starts over from what one update needs, and only the update after a
    release faults its pages in anew. False where there is no glibc."""
    if not _glibc():
        return False
    try:
        return bool(ctypes.CDLL(None).malloc_trim(0))
    except (OSError, AttributeError):
        return False


def _glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError, AttributeError):  # no such name here (not glibc), or no confstr (Windows)
        return False
