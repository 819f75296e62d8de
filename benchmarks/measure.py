"""The measuring protocol, shared by the main process (staticgrad) and the peer processes.

Every implementation is first checked against the hand-written numpy reference on the same data; only
then is it timed, in interleaved rounds with that reference in the same process, so that whatever the
machine is doing at the time (it is shared and noisy) weighs on both. Each round runs one
implementation for enough calls to last about ``target_s``, then the other (the order alternates
between rounds); the figure reported is the median over rounds of the time per call.
"""
from __future__ import annotations

import gc
import os
import statistics
import time

from . import memory, reference
from .workloads import outputs_close

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def estimate(fn, min_s=0.005, max_calls=1 << 20) -> float:
    """Seconds per call of ``fn``, from as many calls as it takes to fill ``min_s``."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_s or n >= max_calls:
            return dt / n
        n *= 4 if dt < min_s / 10 else 2


def _summary(samples, calls):
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return {"median_s": statistics.median(ordered), "q1_s": q[0], "q3_s": q[2], "min_s": ordered[0],
            "rounds": len(ordered), "calls_per_round": calls, "samples_s": samples}


def time_interleaved(fns: dict, rounds: int, target_s: float, budget_s: float | None = None,
                     clock: str = "cpu") -> dict:
    """{name: timing summary} for the callables in ``fns``, timed in alternating rounds.

    Both clocks are read around every round. ``clock`` says which one the summary's median comes from
    (the other is under "other_clock"): "cpu" is the process's CPU time, right for single-threaded
    runs on a shared machine, where wall time mostly measures the other tenants; "wall" is
    perf_counter, needed when an implementation uses several threads. ``budget_s`` caps the total
    time: slow workloads get fewer rounds (never fewer than 3).
    """
    names = list(fns)
    per_call = {n: estimate(fns[n], min_s=min(target_s, 0.005)) for n in names}
    calls = {n: max(1, int(target_s / max(per_call[n], 1e-9))) for n in names}
    round_s = sum(calls[n] * per_call[n] for n in names)
    if budget_s is not None:
        rounds = max(3, min(rounds, int(budget_s / max(round_s, 1e-9))))
    other = "wall" if clock == "cpu" else "cpu"
    samples = {n: {"cpu": [], "wall": []} for n in names}
    cpu, wall = time.process_time, time.perf_counter
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            fn, k = fns[n], calls[n]
            # As timeit does: a collection landing in one implementation's round would be noise.
            enabled = gc.isenabled()
            gc.disable()
            try:
                c0, w0 = cpu(), wall()
                for _ in range(k):
                    fn()
                w1, c1 = wall(), cpu()
            finally:
                if enabled:
                    gc.enable()
            samples[n]["cpu"].append((c1 - c0) / k)
            samples[n]["wall"].append((w1 - w0) / k)
    out = {}
    for n in names:
        out[n] = {"clock": clock, **_summary(samples[n][clock], calls[n]),
                  "other_clock": {"clock": other, **_summary(samples[n][other], calls[n])}}
    return out


def measure(workload, data, prepare, rounds, target_s, budget_s=None, phase=None, clock="cpu") -> dict:
    """Prepare one implementation, check it against the numpy reference, then time both interleaved.

    Returns a result dict: impl, status ("ok" or "mismatch"), costs, notes, max_rel_err, and when ok
    the timing summary of the implementation, ``numpy`` (the reference's, same process) and ``ratio``.
    """
    phase = phase or (lambda name: None)
    phase("prepare")
    impl = prepare(workload, data)
    ref = reference.prepare(workload, data)
    phase("check")
    ok, err = outputs_close(impl.check(), ref.check(), workload.rtol)
    other = "wall" if clock == "cpu" else "cpu"
    sw = impl.stopwatch
    result = {"impl": impl.impl, "status": "ok" if ok else "mismatch", "costs": sw.costs(clock) if sw else {},
              "costs_other_clock": {"clock": other, **(sw.costs(other) if sw else {})},
              "notes": impl.notes, "max_rel_err": err, "rtol": workload.rtol}
    if not ok:
        return result
    if workload.params.get("memory"):
        phase("memory")
        result["memory"] = memory.peak(impl)
        result["numpy_memory"] = memory.peak(ref)
    phase("time")
    stats = time_interleaved({"numpy": ref.call, impl.impl: impl.call}, rounds, target_s, budget_s, clock)
    result.update(stats[impl.impl])
    result["numpy"] = stats["numpy"]
    result["ratio"] = stats[impl.impl]["median_s"] / stats["numpy"]["median_s"]
    result["other_clock_ratio"] = (stats[impl.impl]["other_clock"]["median_s"] /
                                   stats["numpy"]["other_clock"]["median_s"])
    result["paired_ratio"] = paired_ratio(stats[impl.impl]["samples_s"], stats["numpy"]["samples_s"])
    return result


def paired_ratio(samples, reference_samples) -> dict:
    """Median and quartiles of the per-round ratios: each round's time over the reference's round next to
    it. What drifts over minutes on a shared machine weighs on both rounds of a pair, so this spread shows
    how much of a ratio is noise."""
    ratios = sorted(a / b for a, b in zip(samples, reference_samples))
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else ratios * 3
    return {"median": statistics.median(ratios), "q1": q[0], "q3": q[2]}


# ------------------------------------------------------------------ which BLAS runs
def blas_info() -> dict:
    """The BLAS libraries loaded in this process and the kernel (core type) each selected at run time.

    threadpoolctl is used where it is installed (the peers environment); otherwise the OpenBLAS
    libraries are found in /proc/self/maps and asked directly, as threadpoolctl itself does.
    """
    info = {"env": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") + THREAD_VARS}}
    try:
        from threadpoolctl import threadpool_info
        info["libraries"] = [{k: v for k, v in lib.items()} for lib in threadpool_info()]
        info["source"] = "threadpoolctl"
    except ImportError:
        info["libraries"] = _openblas_by_ctypes()
        info["source"] = "ctypes"
    return info


def _openblas_by_ctypes() -> list:
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line.rsplit("/", 1)[-1].lower()})
    except OSError:
        return []
    found = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        entry = {"internal_api": "openblas", "filepath": path}
        for prefix in ("", "scipy_"):
            for suffix in ("", "64_", "_64"):
                corename = getattr(lib, f"{prefix}openblas_get_corename{suffix}", None)
                if corename is None:
                    continue
                corename.restype = ctypes.c_char_p
                entry["architecture"] = corename().decode()
                config = getattr(lib, f"{prefix}openblas_get_config{suffix}")
                config.restype = ctypes.c_char_p
                entry["config"] = config().decode()
                entry["num_threads"] = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}")()
        found.append(entry)
    return found
