"""Peak memory of one call of a prepared implementation (workloads R1 and R2 of issue 19).

Two measures, because no one of them sees every implementation:

``traced_peak_bytes``  tracemalloc's peak over one call: the most bytes allocated during the call and
    still alive at one moment. numpy reports its array buffers to tracemalloc, so for numpy-based code
    (the hand-written reference, staticgrad) this counts every temporary exactly, whatever malloc does
    with freed memory. torch, XLA and numba allocate behind its back: for them it is not recorded.
``rss_peak_bytes``  the rise of the process's resident memory during one call: the kernel's high-water
    mark (VmHWM, reset through /proc/self/clear_refs just before the call) minus the resident size just
    before it (after a collection and malloc_trim, so that freed memory was handed back and the call's
    allocations show as new pages). It sees every allocator, at page granularity; it misses memory the
    process had resident already and reuses (an allocator's own cache), so it is a lower bound. The
    median of three calls is kept. None where /proc/self/clear_refs cannot be written.

``reported_peak_bytes``  the implementation's own account, where it gives one: for jax, XLA's buffer
    assignment of the compiled program (its temporaries plus its outputs; the arguments are the inputs,
    which no other measure counts either). XLA's CPU runtime reuses memory it holds, so there the rise
    of resident memory shows almost nothing.

``held_bytes`` is what the implementation keeps from one call to the next and reuses (staticgrad's
workspace; 0 when it reports none); a call's own peak does not show it, so ``peak_bytes`` adds it to the
first available of tracemalloc's peak, the reported peak and the rise of resident memory
(``peak_source`` says which).
"""
from __future__ import annotations

import ctypes
import gc
import statistics
import tracemalloc


def peak(prepared) -> dict:
    """The memory measures of one call of ``prepared`` (a workloads.Prepared)."""
    rss = rss_peak(prepared.call)
    traced = traced_peak(prepared.call) if prepared.traced else None
    held = int(prepared.held()) if prepared.held is not None else 0
    reported = prepared.reported_peak
    base, source = next(((v, k) for v, k in ((traced, "tracemalloc"), (reported, "reported"), (rss, "rss"))
                         if v is not None), (None, None))
    return {"traced_peak_bytes": traced, "reported_peak_bytes": reported, "rss_peak_bytes": rss,
            "held_bytes": held, "peak_bytes": None if base is None else base + held, "peak_source": source}


def traced_peak(call) -> int:
    """Peak bytes allocated during one ``call()`` and alive at once, as tracemalloc sees them."""
    gc.collect()
    tracemalloc.start()
    try:
        call()
        return int(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


def rss_peak(call, repeats=3):
    """Median over ``repeats`` calls of the rise of resident memory during one ``call()``, or None."""
    rises = []
    for _ in range(repeats):
        gc.collect()
        _trim()
        before = _status_bytes("VmRSS")
        if before is None or not _reset_high_water_mark():
            return None
        call()
        rises.append(max(0, _status_bytes("VmHWM") - before))
    return int(statistics.median(rises))


def _status_bytes(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_high_water_mark() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _trim():
    """Hand freed heap memory back to the system (glibc), so that a call's allocations show as new pages."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
