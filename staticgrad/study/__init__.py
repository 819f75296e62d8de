"""The static vs dynamic study: one model function, trained compiled and eagerly (and by PyTorch), side by side.

:func:`compare` runs the same ``model_fn`` on the same batches with the same plain SGD in each style, in one
process, and measures what a static graph buys and what it costs: graph build and compile time, time per
step, the batch count after which compiling has paid for itself (break-even), peak memory of intermediates
(tracemalloc), nodes executed per step, and a twin run that pairs every node of the two runs and names the
first whose values differ beyond a tolerance. :func:`format_table` prints it, :func:`save_json` writes it,
:func:`plot` draws cumulative time against batches (needs matplotlib, skipped without it).

The RNN case (:func:`run_rnn_study`, ``staticgrad bench --study --rnn``) runs one tanh RNN step as a static
scan, a graph unrolled per length, an eager loop and PyTorch's eager loop over 10, 100 and 1,000 steps, and an
epoch of varying lengths padded to one plan or planned per length.

This module is the measuring core and the one entry point; the rest lives beside it and is re-exported here:
modes (the timed styles), torch (the PyTorch column), report (tables, findings, JSON,
plot), workloads (the built-in workloads), rnn, rnn_measure and rnn_report (the RNN case: its model and
runners, its measurements, its tables). None of them imports this module.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

from .. import eager
from ..autodiff import grad as sg_grad
from ..compiler import compile as sg_compile
from ..graph import ancestors
from ..tensor import parameter, placeholder
from .modes import (  # noqa: F401
    CLOCK,
    LEAF_OPS,
    Clock,
    Mode,
    build_static,
    cumulative,
    eager_mode,
    eager_step,
    interleaved,
    static_mode,
)
from .report import findings, format_table, plot, save_json, summary_table  # noqa: F401
from .rnn import rnn_loss, rnn_loss_masked, rnn_loss_unrolled, rnn_params, rnn_step  # noqa: F401
from .rnn_measure import UNROLL_TIMEOUT_S, rnn_study  # noqa: F401
from .rnn_report import format_rnn, rnn_findings  # noqa: F401
from .torch import Unsupported, torch_mode, torch_program, torch_threads, torch_wanted  # noqa: F401
from .workloads import (  # noqa: F401
    SIGMOID_NET_BATCH,
    SIGMOID_NET_PARAMS,
    deep_chain,
    mlp_relu_softmax,
    mlp_tanh_logistic,
    sigmoid_net,
    workloads,
)


# ------------------------------------------------------------------ inputs
def _as_params(params):
    out = []
    for p in params:
        arr = np.array(p, copy=True)
        out.append(arr.astype(np.float64) if arr.dtype.kind not in "fc" else arr)
    return out


def _as_batches(batches):
    out = [tuple(np.asarray(a) for a in (b if isinstance(b, (tuple, list)) else (b,))) for b in batches]
    if not out:
        raise ValueError("compare: batches must hold at least one batch")
    if len({len(b) for b in out}) != 1:
        raise ValueError("compare: every batch must hold the same number of arrays")
    return out


# ------------------------------------------------------------------ the twin run
def _mismatch(a, b, tol):
    """(max |a - b|, differs beyond tol?) for two arrays that should hold the same values."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return math.inf, True
    if a.dtype.kind not in "fc" or b.dtype.kind not in "fc":
        same = np.array_equal(a, b)
        return (0.0 if same else math.inf), not same
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - b)
    both_nan = np.isnan(a) & np.isnan(b)
    diff = np.where(both_nan | (a == b), 0.0, diff)
    worst = float(np.max(diff)) if diff.size else 0.0
    if math.isnan(worst):
        return math.inf, True
    return worst, bool(np.any(diff > tol * (1.0 + np.abs(b))))


def twin_run(model_fn, params, batch, tol=1e-9):
    """Run one forward and backward both ways and pair every node: the first one whose value (or
    gradient) differs beyond ``tol`` (relative to 1 + |static value|) is named with its op and source."""
    params, batch = _as_params(params), _as_batches([batch])[0]
    xs = [placeholder(a.shape, dtype=a.dtype, name=f"in{k}") for k, a in enumerate(batch)]
    ps = [parameter(p, name=f"p{k}") for k, p in enumerate(params)]
    loss = model_fn(*xs, *ps)
    s_nodes = [t for _, t in sorted(ancestors([loss]).items()) if t.inputs]

    exs = [eager.tensor(a, copy=False) for a in batch]
    eps = [eager.tensor(p, requires_grad=True) for p in params]
    with eager.trace():
        eloss = model_fn(*exs, *eps)
    e_nodes = [t for _, t in sorted(ancestors([eloss]).items()) if t.inputs]

    report = {"tolerance": tol, "forward_nodes": len(s_nodes), "gradients": 0, "structure": "same",
              "max_abs_diff_value": 0.0, "max_abs_diff_grad": 0.0, "first_mismatch": None}
    for k, (s, e) in enumerate(zip(s_nodes, e_nodes)):
        if s.op != e.op:
            report["structure"] = f"node {k}: static {s.op} at {s.source}, eager {e.op} at {e.source}"
            return report
    if len(s_nodes) != len(e_nodes):
        report["structure"] = f"static has {len(s_nodes)} nodes, eager {len(e_nodes)}"
        return report

    g_idx = [k for k, (s, e) in enumerate(zip(s_nodes, e_nodes))
             if s.requires_grad and e.requires_grad and s.dtype.kind in "fc"]
    s_grads = sg_grad(loss, [s_nodes[k] for k in g_idx] + ps)
    values = sg_compile(s_nodes + s_grads, inputs=xs)(*batch)
    s_values, s_grad_values = values[:len(s_nodes)], values[len(s_nodes):]
    e_grads = eager.grad(eloss, [e_nodes[k] for k in g_idx] + eps)
    report["gradients"] = len(e_grads)

    def check(kind, k, node, a, b):
        worst, bad = _mismatch(a, b, tol)
        key = "max_abs_diff_value" if kind == "value" else "max_abs_diff_grad"
        report[key] = max(report[key], worst)
        if bad and report["first_mismatch"] is None:
            what = node.name or node.op
            report["first_mismatch"] = {"kind": kind, "index": k, "op": node.op, "node": what,
                                        "source": node.source, "max_abs_diff": worst}

    for k, (s, e) in enumerate(zip(s_nodes, e_nodes)):
        e_value = e._value if e._value is not None else eager._static_value(e, e.op)
        check("value", k, s, e_value, s_values[k])
    # Gradients in the order the backward pass makes them: from the loss back, then the parameters.
    for k, s_g, e_g in reversed(list(zip(g_idx, s_grad_values, e_grads))):
        check("gradient", k, s_nodes[k], e_g.value, s_g)
    for j, (s_g, e_g) in enumerate(zip(s_grad_values[len(g_idx):], e_grads[len(g_idx):])):
        check("gradient", j, ps[j], e_g.value, s_g)
    return report


# ------------------------------------------------------------------ the comparison
def break_even(static, other):
    """Batches after which static (build + compile + n steps) costs no more than ``other`` (n steps),
    from the median step times; None when static is not faster per step."""
    overhead = static["build_s"] + static["compile_s"] - other["build_s"] - other["compile_s"]
    gain = other["step_s"] - static["step_s"]
    if gain <= 0:
        return None
    return max(1, math.ceil(overhead / gain))


def measured_crossing(static, other):
    """The first batch count at which static's measured cumulative time is no more than ``other``'s."""
    ahead = np.nonzero(cumulative(static) <= cumulative(other))[0]
    return int(ahead[0]) + 1 if ahead.size else None


def compare(model_fn, params, batches, lr=0.01, tol=1e-9, name="model", torch=None, twin=True):
    """Train ``model_fn`` with plain SGD on ``batches`` compiled, eagerly and (when torch is installed,
    or ``torch=True``) in PyTorch, from the same starting ``params``; return a JSON-serializable dict.

    ``model_fn(*batch, *params)`` returns a scalar loss; ``params`` are numpy arrays; ``batches`` is a
    list of tuples of numpy arrays. ``torch=False`` leaves PyTorch out.
    """
    params, batches = _as_params(params), _as_batches(batches)
    result = {"name": name, "parameters": int(sum(p.size for p in params)), "batches": len(batches),
              "batch_shapes": [list(a.shape) for a in batches[0]], "lr": lr}
    modes = {"static": static_mode(model_fn, params, batches, lr), "eager": eager_mode(model_fn, params, batches, lr)}
    use_torch = torch_wanted(torch, result)
    with torch_threads(1) if use_torch else contextlib.nullcontext():
        if use_torch:
            try:
                modes["torch"] = torch_mode(model_fn, params, batches, lr)
            except Unsupported as err:
                result["torch_skipped"] = str(err)
        interleaved(modes, batches)
        for name, mode in modes.items():
            result[name] = mode.summary()
    static = result["static"]
    for name, mode in modes.items():
        if name == "static":
            continue
        entry = result[name]
        entry["step_over_static"] = entry["step_s"] / static["step_s"]
        entry["losses_max_abs_diff"] = float(np.max(np.abs(np.subtract(mode.losses, modes["static"].losses))))
        # What each extra executed node costs over the compiled step: the price of dispatching at run time.
        entry["overhead_per_node_s"] = (entry["step_s"] - static["step_s"]) / max(entry["nodes_executed"], 1)
        entry["break_even_batches"] = break_even(static, entry)
        entry["break_even_measured"] = measured_crossing(static, entry)
    result["break_even_batches"] = result["eager"]["break_even_batches"]
    if twin:
        result["twin"] = twin_run(model_fn, params, batches[0], tol)
    return result


def run_study(quick=False, seed=0, torch=None, json_path=None, plot_path=None, log=print):
    """The whole study: every workload compared, tables and findings logged, JSON and plot written."""
    results = []
    # ``workloads`` is looked up in this module, so a caller (or a test) can narrow it with
    # ``study.workloads = ...`` without knowing which module defines it.
    for w in workloads(quick, seed):
        r = compare(w["model"], w["params"], w["batches"], lr=w["lr"], name=w["name"], torch=torch)
        log(format_table(r))
        log("")
        results.append(r)
    _conclude(summary_table(results), findings(results), results, json_path, log)
    if plot_path:
        made = plot(results, plot_path)
        log(f"cumulative time plot written to {made}" if made else
            "plot skipped: matplotlib is not installed (an optional extra)")
    return results


def run_rnn_study(quick=False, seed=0, torch=None, json_path=None, timeout=UNROLL_TIMEOUT_S, log=print):
    """The RNN case: measured, its tables and findings logged, its JSON written."""
    result = rnn_study(quick=quick, seed=seed, torch=torch, timeout=timeout)
    _conclude(format_rnn(result), rnn_findings(result), result, json_path, log)
    return result


def _conclude(table, lines, results, json_path, log):
    """Log a table and findings, then write the measurements as JSON (when asked to)."""
    log(table)
    log("")
    for line in lines:
        log("- " + line)
    if json_path:
        log(f"measurements written to {save_json(results, json_path)}")


THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_CHILD = "STATICGRAD_STUDY_CHILD"


def run_from_args(args, relaunch=None) -> int:
    """``staticgrad bench --study``: the study with the bench options it shares (--quick, --out,
    --threads, --peers none to leave torch out) plus --plot; with --rnn the RNN case instead (and
    --unroll-timeout).

    BLAS thread counts are read when numpy loads, which has happened in this process already, so the
    command (``relaunch``) runs again with them set, unless this is that run.
    """
    import os
    import subprocess
    import sys
    threads = getattr(args, "threads", 1)
    if relaunch is not None and threads and os.environ.get(_CHILD) != "1":
        env = dict(os.environ, **{v: str(threads) for v in THREAD_VARS}, **{_CHILD: "1"})
        return subprocess.call(relaunch, env=env)
    rnn = getattr(args, "rnn", False)
    default = "static_vs_dynamic_rnn.json" if rnn else "static_vs_dynamic.json"
    out = getattr(args, "out", None) or default
    if os.path.isdir(out):
        out = os.path.join(out, default)
    torch = False if (getattr(args, "peers", None) or "").strip() == "none" else None

    def log(msg):
        print(msg, flush=True)
    if rnn:
        timeout = getattr(args, "unroll_timeout", None) or UNROLL_TIMEOUT_S
        run_rnn_study(quick=args.quick, torch=torch, json_path=out, timeout=timeout, log=log)
    else:
        run_study(quick=args.quick, torch=torch, json_path=out, plot_path=getattr(args, "plot", None), log=log)
    sys.stdout.flush()
    return 0
