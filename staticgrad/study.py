"""The static vs dynamic study: one model function, trained compiled and eagerly (and by PyTorch), side by side.

:func:`compare` runs the same ``model_fn`` on the same batches with the same plain SGD in each style, in one
process, and measures what a static graph buys and what it costs: graph build and compile time, time per
step, the batch count after which compiling has paid for itself (break-even), peak memory of intermediates
(tracemalloc), nodes executed per step, and a twin run that pairs every node of the two runs and names the
first whose values differ beyond a tolerance. :func:`format_table` prints it, :func:`save_json` writes it,
:func:`plot` draws cumulative time against batches (needs matplotlib, skipped without it).
"""
from __future__ import annotations

import contextlib
import gc
import json
import math
import statistics
import time
import tracemalloc

import numpy as np

from . import eager, ops
from .autodiff import grad as sg_grad
from .compiler import compile as sg_compile
from .graph import ancestors
from .tensor import parameter, placeholder

LEAF_OPS = ("placeholder", "parameter", "constant", "tensor")


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


def _placeholder_shapes(batches):
    """Each input's shape, with None where batches disagree (a last, smaller batch)."""
    shapes = []
    for k, first in enumerate(batches[0]):
        dims = list(first.shape)
        for b in batches[1:]:
            if b[k].ndim != first.ndim:
                raise ValueError(f"compare: input {k} changes rank between batches")
            dims = [d if d == e else None for d, e in zip(dims, b[k].shape)]
        shapes.append(tuple(dims))
    return shapes


def _peak_bytes(fn):
    """Peak bytes allocated (and traced by tracemalloc, which sees numpy's buffers) while ``fn`` runs."""
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return int(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


# Times are CPU seconds of this process (time.process_time), wall-clock seconds beside them: on a shared
# machine a long step is often preempted and waits for a core, which would inflate the slower style's
# wall-clock median far more than the faster one's. Kernels run on one thread (see the example), so CPU
# time is the work done.
CLOCK = "process_time"


class Clock:
    """Measures CPU and wall-clock seconds of a block: ``with Clock() as c: ...; c.cpu, c.wall``."""

    def __enter__(self):
        self._cpu, self._wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.cpu, self.wall = time.process_time() - self._cpu, time.perf_counter() - self._wall


class Mode:
    """One style under study: its one-off costs, its SGD ``step(batch) -> loss``, and ``measure()``,
    which returns what is not timing (nodes per step, peak memory) from extra, untimed steps."""

    def __init__(self, build, compile_, step, measure):
        self.build, self.compile, self.step, self.measure = build, compile_, step, measure
        self.times, self.wall_times, self.losses = [], [], []

    def summary(self):
        def spent(clock, kind):
            return getattr(clock, kind) if clock else 0.0
        out = {"build_s": spent(self.build, "cpu"), "compile_s": spent(self.compile, "cpu"),
               "step_s": statistics.median(self.times), "first_step_s": self.times[0], "step_times_s": self.times,
               "loss_first": self.losses[0], "loss_last": self.losses[-1], "clock": CLOCK,
               "wall": {"build_s": spent(self.build, "wall"), "compile_s": spent(self.compile, "wall"),
                        "step_s": statistics.median(self.wall_times)}}
        out.update(self.measure())
        out["nodes_executed"] = sum(out["nodes_by_role"].values())
        return out


def _interleaved(modes, batches):
    """Time every mode on every batch, alternating modes batch by batch (and rotating who goes first), so
    that load from other processes on a shared machine falls on all of them alike."""
    names = list(modes)
    for k, batch in enumerate(batches):
        for name in names[k % len(names):] + names[:k % len(names)]:
            mode = modes[name]
            with Clock() as clock:
                loss = mode.step(batch)
            mode.times.append(clock.cpu)
            mode.wall_times.append(clock.wall)
            mode.losses.append(float(loss))


# ------------------------------------------------------------------ the three styles
def build_static(model_fn, params, shapes, dtypes, lr):
    """Placeholders, parameters, the loss and SGD updates for ``model_fn``."""
    xs = [placeholder(s, dtype=d, name=f"in{k}") for k, (s, d) in enumerate(zip(shapes, dtypes))]
    ps = [parameter(p, name=f"p{k}") for k, p in enumerate(params)]
    loss = model_fn(*xs, *ps)
    grads = sg_grad(loss, ps)
    return xs, ps, loss, [(p, p - lr * g) for p, g in zip(ps, grads)]


def static_mode(model_fn, params, batches, lr) -> Mode:
    shapes, dtypes = _placeholder_shapes(batches), [a.dtype for a in batches[0]]
    with Clock() as build:
        xs, ps, loss, updates = build_static(model_fn, params, shapes, dtypes, lr)
    with Clock() as compiling:
        fn = sg_compile(loss, inputs=xs, updates=updates)

    def measure():
        roles = {}
        for node in fn.ir.nodes.values():
            if node.op not in LEAF_OPS:
                roles[node.role] = roles.get(node.role, 0) + 1
        return {"nodes_by_role": roles, "peak_bytes": _peak_bytes(lambda: fn(*batches[0]))}
    return Mode(build, compiling, lambda batch: fn(*batch), measure)


def eager_step(model_fn, ps, batch, lr):
    """One define-by-run SGD step: forward (taping), backward, then in-place numpy updates (as
    ``p -= lr * p.grad`` under torch.no_grad)."""
    loss = model_fn(*[eager.tensor(a, copy=False) for a in batch], *ps)
    loss.backward()
    for p in ps:
        p._value -= lr * p.grad
        p.grad = None
    return loss.item()


def eager_mode(model_fn, params, batches, lr) -> Mode:
    ps = [eager.tensor(p, requires_grad=True) for p in params]

    def measure():
        # The ops of one more step, traced (a trace keeps every result alive, so it is not timed).
        xs = [eager.tensor(a, copy=False) for a in batches[0]]
        with eager.trace() as forward:
            loss = model_fn(*xs, *ps)
        with eager.trace() as backward:
            loss.backward()
        eager.zero_grad(ps)
        # The updates are numpy (p - lr * g: two ops per parameter), as the compiled step computes them.
        roles = {"forward": len(forward), "backward": len(backward), "update": 2 * len(ps)}
        del loss, forward, backward
        return {"nodes_by_role": roles, "peak_bytes": _peak_bytes(lambda: eager_step(model_fn, ps, batches[0], 0.0))}
    return Mode(None, None, lambda batch: eager_step(model_fn, ps, batch, lr), measure)


class Unsupported(Exception):
    """An op the PyTorch replay has no translation for."""


def _torch_ops(torch):
    """staticgrad op name -> a torch function taking the same inputs and attrs."""
    F = torch.nn.functional

    def reduction(fn):
        return lambda x, axis, keepdims: fn(x, dim=axis, keepdim=keepdims) if axis else x

    def along(fn):
        def run(x, axis):
            if len(axis) != 1:
                raise Unsupported(f"{fn.__name__} over several axes")
            return fn(x, dim=axis[0])
        return run

    def expand_dims(x, axis):
        for a in axis:
            x = x.unsqueeze(a)
        return x

    def squeeze(x, axis):
        for a in sorted(axis, reverse=True):
            x = x.squeeze(a)
        return x

    table = {
        "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "neg": torch.neg,
        "pow": torch.pow, "matmul": torch.matmul, "exp": torch.exp, "log": torch.log, "log1p": torch.log1p,
        "expm1": torch.expm1, "sqrt": torch.sqrt, "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh,
        "sigmoid": torch.sigmoid, "relu": torch.relu, "abs": torch.abs, "square": torch.square,
        "softplus": F.softplus, "sign": torch.sign, "stop_gradient": lambda x: x.detach(),
        "maximum": torch.maximum, "minimum": torch.minimum, "where": torch.where,
        "clip": lambda x, lo, hi: torch.minimum(torch.maximum(x, lo), hi),
        "less": torch.lt, "less_equal": torch.le, "greater": torch.gt, "greater_equal": torch.ge,
        "equal": torch.eq, "not_equal": torch.ne, "logical_and": torch.logical_and,
        "logical_or": torch.logical_or, "cast": lambda x, dtype: x.to(dtype),
        "sum": reduction(torch.sum), "mean": reduction(torch.mean), "max": reduction(torch.amax),
        "min": reduction(torch.amin), "logsumexp": reduction(torch.logsumexp),
        "reshape": lambda x, shape: x.reshape(shape), "transpose": lambda x, axes: x.permute(axes),
        "getitem": lambda x, index: x[index], "concatenate": lambda *xs, axis: torch.cat(xs, dim=axis),
        "stack": lambda *xs, axis: torch.stack(xs, dim=axis), "softmax": along(torch.softmax),
        "log_softmax": along(torch.log_softmax),
        "softmax_cross_entropy": lambda z, t: F.cross_entropy(z.reshape(-1, z.shape[-1]), t.reshape(-1)),
        "broadcast_to": lambda x, shape: x.expand(shape), "expand_dims": expand_dims, "squeeze": squeeze,
    }

    def prepare(op, attrs):
        if op == "cast":
            return {"dtype": torch.from_numpy(np.zeros((), attrs["dtype"])).dtype}
        if op == "getitem":
            return {"index": tuple(torch.from_numpy(i) if isinstance(i, np.ndarray) else i
                                   for i in attrs["index"])}
        return attrs
    return table, prepare


def torch_program(model_fn, params, batch, torch):
    """Record one eager forward of ``model_fn`` and translate its tape op by op into torch calls.

    Returns (program, constants, loss slot): slots 0.. hold the batch arrays, then the parameters, then
    the constants, then one result per program step, which is what :func:`torch_mode` replays.
    """
    table, prepare = _torch_ops(torch)
    xs = [eager.tensor(a, copy=False) for a in batch]
    ps = [eager.tensor(p, requires_grad=True) for p in params]
    with eager.trace() as found:
        loss = model_fn(*xs, *ps)
    slot = {t.id: ("slot", k) for k, t in enumerate(xs + ps)}
    constants, steps = [], []
    for t in found:
        if t.op not in table:
            raise Unsupported(f"no torch translation for op {t.op!r} (made at {t.source})")
        refs = []
        for x in t.inputs:
            if x.id in slot:
                refs.append(slot[x.id])
            else:
                value = x._value if x._value is not None else eager._static_value(x, t.op)
                refs.append(("const", len(constants)))
                constants.append(torch.as_tensor(np.array(value)))
        slot[t.id] = ("step", len(steps))
        steps.append((t.op, refs, prepare(t.op, t.attrs)))
    first_const = len(xs) + len(ps)
    first_step = first_const + len(constants)

    def where(ref):
        kind, k = ref
        return {"slot": k, "const": first_const + k, "step": first_step + k}[kind]

    program = [(table[op], [where(r) for r in refs], attrs) for op, refs, attrs in steps]
    return program, constants, where(slot[loss.id])


def _autograd_nodes(loss):
    """Backward functions in torch's graph of ``loss`` (AccumulateGrad excluded), counted without recursion."""
    seen, stack, count = set(), [loss.grad_fn], 0
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if type(fn).__name__ != "AccumulateGrad":
            count += 1
        stack.extend(f for f, _ in fn.next_functions)
    return count


def torch_mode(model_fn, params, batches, lr) -> Mode:
    import torch
    with Clock() as translating:
        program, constants, loss_slot = torch_program(model_fn, params, batches[0], torch)
    ps = [torch.tensor(p, requires_grad=True) for p in params]

    def forward(batch):
        env = [torch.from_numpy(a) for a in batch] + ps + constants
        for fn, refs, attrs in program:
            env.append(fn(*[env[i] for i in refs], **attrs))
        return env[loss_slot]

    def step(batch):
        loss = forward(batch)
        loss.backward()
        with torch.no_grad():
            for p in ps:
                p -= lr * p.grad
                p.grad = None
        return loss.item()

    try:
        forward(batches[0])      # a translation that torch cannot run is found here, before any timing
    except Exception as err:
        raise Unsupported(f"the torch replay failed: {type(err).__name__}: {err}") from err

    def measure():
        loss = forward(batches[0])
        return {"nodes_by_role": {"forward": len(program), "backward": _autograd_nodes(loss), "update": 2 * len(ps)},
                "peak_bytes": None,      # torch allocates in C++, out of tracemalloc's sight
                "translate_s": translating.cpu, "threads": torch.get_num_threads(),
                "how": "one forward's eager tape replayed op by op with torch functions; torch autograd backward"}
    return Mode(None, None, step, measure)


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


def _cumulative(mode):
    return mode["build_s"] + mode["compile_s"] + np.cumsum(mode["step_times_s"])


def measured_crossing(static, other):
    """The first batch count at which static's measured cumulative time is no more than ``other``'s."""
    ahead = np.nonzero(_cumulative(static) <= _cumulative(other))[0]
    return int(ahead[0]) + 1 if ahead.size else None


def _torch_wanted(torch, result):
    if torch is False:
        return False
    try:
        import torch as _  # noqa: F401
    except ImportError:
        if torch:
            raise
        result["torch_skipped"] = "torch is not installed"
        return False
    return True


@contextlib.contextmanager
def _torch_threads(n):
    """Run torch on ``n`` threads, like the numpy kernels of the example: on a shared machine torch's
    worker threads spin against other processes and small ops slow down a hundredfold."""
    import torch
    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


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
    use_torch = _torch_wanted(torch, result)
    with _torch_threads(1) if use_torch else contextlib.nullcontext():
        if use_torch:
            try:
                modes["torch"] = torch_mode(model_fn, params, batches, lr)
            except Unsupported as err:
                result["torch_skipped"] = str(err)
        _interleaved(modes, batches)
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


# ------------------------------------------------------------------ output
def save_json(results, path):
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    return path


def _time(s):
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.0f} us"


def _bytes(n):
    if n is None:
        return "n/a"
    return f"{n / 1024:.1f} KB" if n < 1024 ** 2 else f"{n / 1024 ** 2:.1f} MB"


def format_table(result) -> str:
    """One workload's measurements as a terminal table."""
    modes = [m for m in ("static", "eager", "torch") if m in result]
    rows = [
        ("build + compile", lambda m: _time(m["build_s"] + m["compile_s"]) if m["build_s"] + m["compile_s"] else "-"),
        ("step (median)", lambda m: _time(m["step_s"])),
        ("step vs static", lambda m: f"{m.get('step_over_static', 1.0):.2f}x"),
        ("step wall-clock", lambda m: _time(m["wall"]["step_s"])),
        ("first step", lambda m: _time(m["first_step_s"])),
        ("peak memory", lambda m: _bytes(m["peak_bytes"])),
        ("nodes per step", lambda m: str(m["nodes_executed"])),
        ("  fwd/bwd/update", lambda m: "/".join(str(m["nodes_by_role"].get(r, 0))
                                                 for r in ("forward", "backward", "update"))),
        ("last loss", lambda m: f"{m['loss_last']:.6g}"),
    ]
    shapes = " ".join("x".join(map(str, s)) or "()" for s in result["batch_shapes"])
    lines = [f"{result['name']}: {result['parameters']} parameters, {result['batches']} batches of [{shapes}]; "
             f"CPU time unless marked wall-clock",
             f"{'':<18}" + "".join(f"{m:>12}" for m in modes)]
    for label, cell in rows:
        lines.append(f"{label:<18}" + "".join(f"{cell(result[m]):>12}" for m in modes))
    for mode in modes[1:]:
        entry = result[mode]
        n, seen = entry["break_even_batches"], entry["break_even_measured"]
        if n is None:
            lines.append(f"break-even vs {mode}: never ({mode} is at least as fast per step)")
        else:
            lines.append(f"break-even vs {mode}: static is ahead after {n} batches "
                         f"(measured over {result['batches']}: {seen if seen else 'not yet'})")
        lines.append(f"losses {mode} vs static: max |diff| {entry['losses_max_abs_diff']:.1e}")
    if "torch_skipped" in result:
        lines.append(f"torch: skipped ({result['torch_skipped']})")
    twin = result.get("twin")
    if twin:
        if twin["structure"] != "same":
            lines.append(f"twin run: the two runs built different graphs: {twin['structure']}")
        elif twin["first_mismatch"] is None:
            worst = max(twin["max_abs_diff_value"], twin["max_abs_diff_grad"])
            lines.append(f"twin run: {twin['forward_nodes']} node values and {twin['gradients']} gradients agree "
                         f"within {twin['tolerance']:g} (max |diff| {worst:.1e})")
        else:
            m = twin["first_mismatch"]
            lines.append(f"twin run: first difference beyond {twin['tolerance']:g}: the {m['kind']} of node "
                         f"{m['index']} ({m['node']}, made at {m['source']}), max |diff| {m['max_abs_diff']:.2e}")
    return "\n".join(lines)


def summary_table(results, markdown=True) -> str:
    """One row per workload: the ratios a README wants."""
    head = ["workload", "static step", "eager step", "eager/static", "torch step", "torch/static",
            "build+compile", "break-even (batches)", "peak mem static/eager", "nodes static/eager/torch",
            "twin max |diff|"]
    rows = []
    for r in results:
        s, e, t = r["static"], r["eager"], r.get("torch")
        twin = r.get("twin") or {}
        diff = max(twin.get("max_abs_diff_value", 0.0), twin.get("max_abs_diff_grad", 0.0)) if twin else None
        rows.append([r["name"], _time(s["step_s"]), _time(e["step_s"]), f"{e['step_over_static']:.2f}x",
                     _time(t["step_s"]) if t else "-", f"{t['step_over_static']:.2f}x" if t else "-",
                     _time(s["build_s"] + s["compile_s"]),
                     str(e["break_even_batches"]) if e["break_even_batches"] else "never",
                     f"{_bytes(s['peak_bytes'])} / {_bytes(e['peak_bytes'])}",
                     f"{s['nodes_executed']} / {e['nodes_executed']} / {t['nodes_executed'] if t else '-'}",
                     "-" if diff is None else f"{diff:.1e}"])
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in [head] + rows)


def plot(results, path):
    """Cumulative time against batches, one panel per workload; None (and nothing written) without
    matplotlib, which is an optional extra."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    results = [results] if isinstance(results, dict) else list(results)
    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.4), squeeze=False)
    for ax, r in zip(axes[0], results):
        for mode in ("static", "eager", "torch"):
            if mode in r:
                cum = _cumulative(r[mode]) * 1e3
                ax.plot(np.arange(1, len(cum) + 1), cum, label=mode)
        ax.set_title(r["name"], fontsize=9)
        ax.set_xlabel("batches")
        ax.set_ylabel("cumulative time (ms)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# ------------------------------------------------------------------ the workloads of examples/static_vs_dynamic.py
def sigmoid_net(x, y, W, b1, U, d, v, b):
    """The 2-3-2-1 sigmoid network of the worked examples (20 parameters), mean squared error."""
    h = ops.sigmoid(x @ W.T + b1)
    g = ops.sigmoid(h @ U.T + d)
    return ops.mean((g @ v + b - y) ** 2)


SIGMOID_NET_PARAMS = [np.array([[.3, .6], [.4, .7], [.8, .1]]), np.array([.2, .5, .9]),
                      np.array([[.7, .2, .8], [.5, .4, .9]]), np.array([.2, .5]), np.array([.6, .8]),
                      np.array(.3)]
SIGMOID_NET_BATCH = (np.array([[3.0, 2.0], [0.5, 1.2]]), np.array([1.5, 0.9]))


def mlp_tanh_logistic(x, t, W1, b1, W2, b2, W3, b3):
    """The moons MLP: two tanh layers, binary cross-entropy on logits (softplus(z) - t z)."""
    h = ops.tanh(x @ W1 + b1)
    h = ops.tanh(h @ W2 + b2)
    z = ops.reshape(h @ W3 + b3, (-1,))
    return ops.mean(ops.softplus(z) - t * z)


def mlp_relu_softmax(x, t, *params):
    """A relu MLP of any depth with softmax cross-entropy on integer labels."""
    h = x
    for k in range(0, len(params) - 2, 2):
        h = ops.relu(h @ params[k] + params[k + 1])
    return ops.softmax_cross_entropy(h @ params[-2] + params[-1], t)


def deep_chain(x, y, *params):
    """Many small tanh layers: per-op overhead dominates, the case a compiler helps most."""
    h = x
    for k in range(0, len(params), 2):
        h = ops.tanh(h @ params[k] + params[k + 1])
    return ops.mean(ops.square(h - y))


def _layers(sizes, rng, scale=1.0):
    out = []
    for m, n in zip(sizes[:-1], sizes[1:]):
        out += [rng.normal(scale=scale * np.sqrt(1.0 / m), size=(m, n)), np.zeros(n)]
    return out


def workloads(quick=False, seed=0):
    """The four workloads of the study as dicts (name, model, params, batches, lr); ``quick`` makes
    them small enough for tests."""
    from .data import make_moons
    rng = np.random.default_rng(seed)
    n = 8 if quick else 1
    out = [{"name": "sigmoid 2-3-2-1 (20 params)", "model": sigmoid_net, "params": SIGMOID_NET_PARAMS,
            "batches": [SIGMOID_NET_BATCH] * (300 // n), "lr": 0.1}]

    X, y = make_moons(512, noise=0.15, seed=seed)
    idx = [rng.permutation(512)[:64] for _ in range(300 // n)]
    out.append({"name": "moons MLP 2-8-8-1", "model": mlp_tanh_logistic,
                "params": _layers([2, 8, 8, 1], rng), "batches": [(X[i], y[i]) for i in idx], "lr": 0.5})

    sizes = [784, 256, 256, 10] if not quick else [784, 32, 32, 10]
    data = [(rng.normal(size=(64, 784)), rng.integers(0, 10, 64)) for _ in range(40 // n * 2 if quick else 40)]
    out.append({"name": f"MLP {'-'.join(map(str, sizes))} (batch 64)", "model": mlp_relu_softmax,
                "params": _layers(sizes, rng, np.sqrt(2.0)), "batches": data, "lr": 0.01})

    depth, width = (50, 4) if not quick else (10, 4)
    chain = [(rng.normal(size=(16, width)), rng.normal(size=(16, width)) * 0.5) for _ in range(200 // n)]
    out.append({"name": f"deep narrow chain ({depth} x tanh({width}x{width}))", "model": deep_chain,
                "params": _layers([width] * (depth + 1), rng), "batches": chain, "lr": 0.05})
    return out


def findings(results) -> list:
    """Plain sentences on what the measurements show, for the terminal."""
    out = []
    small = [r for r in results if r["static"]["step_s"] < 2e-3 or r["static"]["nodes_executed"] > 300]
    for r in results:
        e, s = r["eager"], r["static"]
        line = (f"{r['name']}: eager takes {e['step_over_static']:.1f}x the compiled step "
                f"({_time(e['step_s'])} vs {_time(s['step_s'])}; about {_time(max(e['overhead_per_node_s'], 0))} "
                f"more per node)")
        if "torch" in r:
            line += f", PyTorch eager {r['torch']['step_over_static']:.1f}x"
        n = e["break_even_batches"]
        line += (f"; compiling ({_time(s['build_s'] + s['compile_s'])}) pays for itself after {n} batches"
                 if n else "; compiling never pays for itself here")
        out.append(line + ".")
    if small:
        out.append("Where steps are small or graphs long, time goes to dispatching ops one by one in Python, "
                   "which the compiled step does not do; where matmuls are big, kernels dominate and the styles "
                   "converge.")
    ratios = [r["eager"]["peak_bytes"] / r["static"]["peak_bytes"] for r in results if r["static"]["peak_bytes"]]
    if ratios:
        out.append(f"Peak memory of a step is {min(ratios):.1f}x to {max(ratios):.1f}x higher eagerly: the tape "
                   "keeps every intermediate until backward, while the compiled step frees each after its last use.")
    twins = [r["twin"] for r in results if r.get("twin")]
    clean = [t for t in twins if t["structure"] == "same" and t["first_mismatch"] is None]
    if twins and len(clean) == len(twins):
        out.append(f"Twin runs: every node value and gradient agrees within {twins[0]['tolerance']:g} "
                   f"(same kernels, same VJP rules); training losses agree step by step.")
    for r in results:
        t = r.get("twin") or {}
        if t.get("first_mismatch"):
            m = t["first_mismatch"]
            out.append(f"{r['name']}: twin run first differs at the {m['kind']} of {m['node']} ({m['source']}).")
    return out


def run_study(quick=False, seed=0, torch=None, json_path=None, plot_path=None, log=print):
    """The whole study: every workload compared, tables and findings logged, JSON and plot written."""
    results = []
    for w in workloads(quick, seed):
        r = compare(w["model"], w["params"], w["batches"], lr=w["lr"], name=w["name"], torch=torch)
        log(format_table(r))
        log("")
        results.append(r)
    log(summary_table(results))
    log("")
    for line in findings(results):
        log("- " + line)
    if json_path:
        log(f"measurements written to {save_json(results, json_path)}")
    if plot_path:
        made = plot(results, plot_path)
        log(f"cumulative time plot written to {made}" if made else
            "plot skipped: matplotlib is not installed (an optional extra)")
    return results


THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_CHILD = "STATICGRAD_STUDY_CHILD"


def run_from_args(args, relaunch=None) -> int:
    """``staticgrad bench --study``: the study with the bench options it shares (--quick, --out,
    --threads, --peers none to leave torch out) plus --plot.

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
    out = getattr(args, "out", None) or "static_vs_dynamic.json"
    if os.path.isdir(out):
        out = os.path.join(out, "static_vs_dynamic.json")
    peers = (getattr(args, "peers", None) or "").strip()
    run_study(quick=args.quick, torch=False if peers == "none" else None, json_path=out,
              plot_path=getattr(args, "plot", None), log=lambda msg: print(msg, flush=True))
    sys.stdout.flush()
    return 0
