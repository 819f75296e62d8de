"""The RNN case measured: each way of running the RNN at sequence lengths 10, 100 and 1,000, and an epoch of
batches of varying length, padded to one plan or planned per length (``staticgrad bench --study --rnn``).

Times are CPU seconds of this process (as in the rest of the study), wall-clock seconds beside the medians.
"""
from __future__ import annotations

import contextlib
import gc
import statistics

import numpy as np

from .modes import CLOCK, Clock
from .rnn import (
    BATCH,
    HIDDEN,
    INPUTS,
    TimedOut,
    eager_runner,
    pad,
    rnn_batch,
    rnn_loss,
    rnn_loss_masked,
    rnn_loss_unrolled,
    rnn_params,
    static_runner,
    time_limit,
    torch_runner,
)
from .torch import torch_threads, torch_wanted

UNROLL_TIMEOUT_S = 300.0
FULL = {"inputs": INPUTS, "hidden": HIDDEN, "batch": BATCH, "lengths": [10, 100, 1000],
        "epoch": {"batches": 64, "min_steps": 5, "max_steps": 200}}
QUICK = {"inputs": 4, "hidden": 5, "batch": 3, "lengths": [2, 6],
         "epoch": {"batches": 4, "min_steps": 1, "max_steps": 6}}
PEAK_HOW = {"scan": "tracemalloc peak of a call + the plan's workspace", "unrolled": "tracemalloc peak of a call + the "
            "plan's workspace", "eager": "tracemalloc peak of a call",
            "torch": "bytes of the tensors autograd saves for backward (torch allocates out of tracemalloc's sight)"}
LOSS = "0.5 * mean over steps and sequences of (h_t @ v - y_t)**2: every state feeds the loss"


def repeats(steps, quick=False):
    """Timed calls per mode at a length: more where calls are short (their medians are noisier)."""
    return 3 if quick else max(7, min(41, 2000 // steps))


def _max_diff(outs, reference):
    return float(max(np.max(np.abs(np.subtract(a, b))) for a, b in zip(outs, reference)))


def _unrolled(params, feeds, timeout):
    """The unrolled graph's runner and its entry, or None and an entry saying the time limit ran out."""
    try:
        with Clock() as spent, time_limit(timeout):
            runner = static_runner(rnn_loss_unrolled, params, [a.shape for a in feeds])
            with Clock() as first:
                outs = runner.call(*feeds)
    except TimedOut:
        return None, None, {"timed_out": True, "timeout_s": timeout, "spent_s": spent.cpu, "spent_wall_s": spent.wall}
    return runner, outs, dict(runner.costs(), first_call_s=first.cpu, compile_wall_s=runner.compile.wall)


def _runners(steps, params, scan, feeds, torch, timeout):
    """Every runner of this length, their first outputs, and an entry each holding its one-off costs."""
    runners, outs, entries = {"scan": scan}, {}, {"scan": dict(scan.costs(), shared_compile=True)}
    unrolled, first, entry = _unrolled(params, feeds, timeout)
    entries["unrolled"] = entry
    if unrolled is not None:
        runners["unrolled"], outs["unrolled"] = unrolled, first
    runners["eager"], entries["eager"] = eager_runner(rnn_loss, params), {"build_s": 0.0, "compile_s": 0.0}
    if torch is not None:
        runners["torch"] = torch_runner(rnn_loss, params, feeds, torch)
        entries["torch"] = {"build_s": 0.0, "compile_s": 0.0, "translate_s": runners["torch"].translate.cpu}
    for name, runner in runners.items():
        if name not in outs:
            with Clock() as clock:
                outs[name] = runner.call(*feeds)
            entries[name]["first_call_s"] = clock.cpu
    return runners, outs, entries


def measure_length(steps, params, scan, rng, config, torch=None, timeout=UNROLL_TIMEOUT_S, quick=False):
    """Each way of running the RNN on one batch of ``steps`` steps: one-off costs, the median of timed calls
    (alternating the modes call by call, rotating who goes first), peak memory, and the largest difference of
    its loss and gradients from the static scan's."""
    feeds = rnn_batch(rng, steps, config["batch"], config["inputs"])
    runners, outs, entries = _runners(steps, params, scan, feeds, torch, timeout)
    names, times, walls = list(runners), {n: [] for n in runners}, {n: [] for n in runners}
    for k in range(repeats(steps, quick)):
        for name in names[k % len(names):] + names[:k % len(names)]:
            with Clock() as clock:
                runners[name].call(*feeds)
            times[name].append(clock.cpu)
            walls[name].append(clock.wall)
    for name, runner in runners.items():
        if not quick:       # (a collection takes a good part of a second once torch is loaded)
            gc.collect()
        entries[name].update(step_s=statistics.median(times[name]), step_times_s=times[name],
                             step_wall_s=statistics.median(walls[name]), peak_bytes=runner.peak(*feeds),
                             max_abs_diff=_max_diff(outs[name], outs["scan"]), peak_how=PEAK_HOW[name])
    for entry in entries.values():
        if "step_s" in entry:
            entry["step_over_scan"] = entry["step_s"] / entries["scan"]["step_s"]
            entry["peak_over_scan"] = entry["peak_bytes"] / entries["scan"]["peak_bytes"]
    return {"steps": steps, "loss": float(outs["scan"][0]), "repeats": repeats(steps, quick), "modes": entries}


def epoch_batches(rng, config):
    """The variable-length epoch: each batch's length drawn uniformly from min_steps..max_steps (all the
    sequences of a batch share it, as a loader that buckets sequences by length gives)."""
    e = config["epoch"]
    lengths = rng.integers(e["min_steps"], e["max_steps"] + 1, size=e["batches"])
    return [rnn_batch(rng, int(n), config["batch"], config["inputs"]) for n in lengths]


def _epoch_variant(feeds, make, key_of):
    """Loss and gradients of every batch in turn; ``make(feeds)`` builds a runner for each new ``key_of(feeds)``.
    The total counts building and compiling; ``planning_calls_s`` the calls that built a plan."""
    runners, one_off, calls, planning, outs = {}, 0.0, 0.0, 0.0, []
    with Clock() as total:
        for f in feeds:
            key = key_of(f)
            if key not in runners:
                runners[key] = make(f)
                one_off += sum(runners[key].costs().values())
            runner = runners[key]
            before = runner.fn.plans_built if runner.fn is not None else 0
            with Clock() as clock:
                outs.append(runner.call(*f))
            calls += clock.cpu
            if runner.fn is not None and runner.fn.plans_built > before:
                planning += clock.cpu
    compiled = [r.fn for r in runners.values() if r.fn is not None]
    return {"total_s": total.cpu, "total_wall_s": total.wall, "build_compile_s": one_off, "calls_s": calls,
            "planning_calls_s": planning, "compiles": len(compiled), "plans": sum(fn.plans_built for fn in compiled),
            "steps_run": int(sum(f[0].shape[0] for f in feeds))}, outs


def measure_epoch(params, rng, config, quick=False):
    """One epoch of loss and gradients (no update, so every variant sees the same parameters) four ways:
    padded to the longest batch with a mask (one plan), the static scan planned per length, a graph unrolled
    per length, eagerly."""
    batches = epoch_batches(rng, config)
    longest = max(b[0].shape[0] for b in batches)
    padded = [pad(b, longest) for b in batches]

    def free_time(shape):
        return (None,) + shape[1:]
    variants = {
        "padded": (padded, lambda f: static_runner(rnn_loss_masked, params, [free_time(a.shape) for a in f]),
                   lambda f: 0),
        "per_length": (batches, lambda f: static_runner(rnn_loss, params, [free_time(a.shape) for a in f]),
                       lambda f: 0),
        "unrolled": (batches, lambda f: static_runner(rnn_loss_unrolled, params, [a.shape for a in f]),
                     lambda f: f[0].shape[0]),
        "eager": (batches, lambda f: eager_runner(rnn_loss, params), lambda f: 0),
    }
    result, outs = {}, {}
    for name, (feeds, make, key_of) in variants.items():
        if not quick:
            gc.collect()
        result[name], outs[name] = _epoch_variant(feeds, make, key_of)
    for name, entry in result.items():
        entry["max_abs_diff"] = max(_max_diff(a, b) for a, b in zip(outs[name], outs["per_length"]))
        entry["total_over_per_length"] = entry["total_s"] / result["per_length"]["total_s"]
    lengths = [b[0].shape[0] for b in batches]
    return {**config["epoch"], "lengths": lengths, "distinct_lengths": len(set(lengths)), "padded_to": longest,
            "variants": result}


def rnn_study(quick=False, seed=0, torch=None, timeout=UNROLL_TIMEOUT_S, config=None):
    """The whole RNN case as a JSON-serializable dict: every length, then the epoch."""
    config = dict(config or (QUICK if quick else FULL))
    rng = np.random.default_rng(seed)
    params = rnn_params(rng, config["inputs"], config["hidden"])
    result = {"case": "rnn", "config": config, "loss": LOSS, "clock": CLOCK, "unroll_timeout_s": timeout}
    use_torch = torch_wanted(torch, result)
    module = None
    if use_torch:
        import torch as module
    with torch_threads(1) if use_torch else contextlib.nullcontext():
        free = [(None, config["batch"], config["inputs"]), (None, config["batch"])]
        scan = static_runner(rnn_loss, params, free)
        result["lengths"] = [measure_length(n, params, scan, rng, config, module, timeout, quick)
                             for n in config["lengths"]]
        result["epoch"] = measure_epoch(params, rng, config, quick)
    return result
