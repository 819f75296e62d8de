"""staticgrad's version of each workload: build, grad, compile once, then call the compiled function."""
from __future__ import annotations

import functools

import numpy as np

import staticgrad as sg
from staticgrad.study.workloads import sigmoid_net_graph

from .workloads import (
    A_PARAM_NAMES,
    B_LR,
    B_PARAM_NAMES,
    CHAIN_SCALE,
    CNN_PARAM_NAMES,
    RNN_PARAM_NAMES,
    Prepared,
    Stopwatch,
    sgd_step_check,
)


def _build_a(data):
    net = sigmoid_net_graph([data[k] for k in A_PARAM_NAMES])
    return [net["x"], net["y"]], net["params"], net["loss"]


def _build_b(data):
    x = sg.placeholder((None, 784), dtype="float32", name="x")
    t = sg.placeholder((None,), dtype="int64", name="t")
    params = [sg.parameter(data[k].copy(), name=k) for k in B_PARAM_NAMES]
    W1, b1, W2, b2, W3, b3 = params
    a1 = sg.relu(x @ W1 + b1)
    a2 = sg.relu(a1 @ W2 + b2)
    loss = sg.softmax_cross_entropy(a2 @ W3 + b3, t)
    return [x, t], params, loss


def _build_chain(size, cycles):
    x = sg.placeholder((size,), name="x", requires_grad=True)
    h = x
    for _ in range(cycles):
        h = sg.tanh(sg.sin(h) * CHAIN_SCALE + x)
    return [x], [x], sg.sum(h)


def _build_rnn(params, data, checkpoint=None, loss_in_carry=False):
    """R1/R2: the step written once and run by sg.scan over X's first axis, h the carry.

    As the peers write it, every h is an output (ys) and the loss is taken of them all. With
    ``loss_in_carry`` the step adds its h's share of the loss to a second carry and outputs nothing: the
    same loss, but no (steps, batch, hidden) array of h's or of their gradients is needed, which is what
    leaves ``checkpoint`` the stored carries alone to save."""
    X = sg.placeholder((params["steps"], params["batch"], params["inputs"]), name="X")
    weights = [sg.parameter(data[k].copy(), name=k) for k in RNN_PARAM_NAMES]
    Wx, Wh, b = weights
    h0 = sg.constant(np.zeros((params["batch"], params["hidden"])), name="h0")
    if loss_in_carry:
        def step(carry, x):
            h, total = carry
            h = sg.tanh(x @ Wx + h @ Wh + b)
            return (h, total + sg.sum(h * h)), None
        (_, total), _ = sg.scan(step, (h0, sg.constant(0.0)), xs=X, checkpoint=checkpoint)
        count = params["steps"] * params["batch"] * params["hidden"]
        return [X], weights, total * (0.5 / count)

    def step(h, x):
        h = sg.tanh(x @ Wx + h @ Wh + b)
        return h, h
    _, hs = sg.scan(step, h0, xs=X, checkpoint=checkpoint)
    return [X], weights, 0.5 * sg.mean(hs * hs)


def _build_cnn(params, data):
    """V1: NCHW images, torch's kernel layout, each bias broadcast over the batch and the pixels."""
    size, channels = params["size"], params["channels"]
    X = sg.placeholder((None, channels[0], size, size), dtype="float32", name="X")
    t = sg.placeholder((None,), dtype="int64", name="t")
    weights = [sg.parameter(data[k].copy(), name=k) for k in CNN_PARAM_NAMES]
    w1, b1, w2, b2, w3, b3 = weights
    a = sg.max_pool2d(sg.relu(sg.conv2d(X, w1, padding=1) + sg.reshape(b1, (1, -1, 1, 1))), 2)
    a = sg.max_pool2d(sg.relu(sg.conv2d(a, w2, padding=1) + sg.reshape(b2, (1, -1, 1, 1))), 2)
    flat = sg.reshape(a, (-1, channels[2] * (size // 4) ** 2))      # NCHW order, as torch's flatten
    return [X, t], weights, sg.softmax_cross_entropy(flat @ w3 + b3, t)


def prepare(workload, data, backend=None, checkpoint=None, loss_in_carry=False) -> Prepared:
    """Build, grad and compile ``workload``; ``backend`` (None: the default) is passed to sg.compile;
    ``checkpoint`` and ``loss_in_carry`` choose a variant of the RNN workloads (see _build_rnn)."""
    kind = workload.kind
    options = {} if backend is None else {"backend": backend}
    sw = Stopwatch()
    if kind == "mlp_small":
        inputs, wrt, loss = _build_a(data)
        feeds = (data["X"], data["y"])
    elif kind == "mlp_sgd":
        inputs, wrt, loss = _build_b(data)
        feeds = (data["X"], data["t"])
    elif kind == "chain":
        inputs, wrt, loss = _build_chain(workload.size, workload.cycles)
        feeds = (data["x"],)
    elif kind == "empty":
        x = sg.placeholder((workload.size,), name="x")
        inputs, wrt, loss = [x], [], x + 1.0
        feeds = (data["x"],)
    elif kind == "rnn":
        inputs, wrt, loss = _build_rnn(workload.params, data, checkpoint, loss_in_carry)
        feeds = (data["X"],)
    elif kind == "cnn":
        inputs, wrt, loss = _build_cnn(workload.params, data)
        feeds = (data["X"], data["t"])
    else:
        raise ValueError(f"unknown workload kind {kind!r}")
    sw.lap("build")
    grads = sg.grad(loss, wrt) if wrt else []
    sw.lap("grad")
    if kind == "mlp_sgd":
        fn = sg.compile(loss, inputs=inputs, updates=[(p, p - B_LR * g) for p, g in zip(wrt, grads)], **options)
    elif kind == "empty":
        fn = sg.compile(loss, inputs=inputs, **options)
    else:
        fn = sg.compile([loss] + grads, inputs=inputs, **options)
    sw.lap("compile")
    fn(*feeds)
    sw.lap("first_call")
    call = functools.partial(fn, *feeds)
    if kind == "mlp_sgd":
        def put(values):
            for p, v in zip(wrt, values):
                p.value = v

        def check():
            return sgd_step_check(data, call, lambda: [p.value for p in wrt], put)
    elif kind == "empty":
        def check():
            return [call()]
    else:
        def check():
            return list(call())
    return Prepared(impl_name(backend, checkpoint, loss_in_carry), call, check, sw, _notes(fn), traced=backend is None,
                    held=functools.partial(_workspace_bytes, fn))


def impl_name(backend=None, checkpoint=None, loss_in_carry=False):
    """The name in tables and JSON: staticgrad, staticgrad[numba], staticgrad[loss-in-carry,checkpoint=32]."""
    options = [backend] if backend else []
    options += ["loss-in-carry"] if loss_in_carry else []
    options += [f"checkpoint={checkpoint}"] if checkpoint else []
    return f"staticgrad[{','.join(options)}]" if options else "staticgrad"


def prepare_variant(**options):
    """prepare() for a variant of a workload (``workload.params["variants"]``: checkpoint, loss_in_carry)."""
    return functools.partial(prepare, **options)


def _workspace_bytes(fn):
    """Bytes the latest plan keeps allocated from call to call (its workspace slots and stacked buffers)."""
    memory = getattr(fn.program, "memory", None)
    return memory.workspace_bytes if memory is not None else 0


def prepare_numba(workload, data) -> Prepared:
    """The optional fused backend (issue 4); needs numba, so it runs in the peers environment."""
    return prepare(workload, data, backend="numba")


def unavailable(impl):
    """Why ``impl`` cannot run here (None when it can): the numba backend needs numba and sg.compile's
    ``backend`` option."""
    import inspect
    if impl != "staticgrad[numba]":
        return None
    if "backend" not in inspect.signature(sg.compile).parameters:
        return "sg.compile has no backend option yet"
    try:
        import numba  # noqa: F401
    except ImportError:
        return "numba is not installed"
    return None


def versions():
    import staticgrad
    return {"staticgrad": staticgrad.__version__}


def _notes(fn):
    """What the compiler did, for the JSON: node counts and the time of each pass."""
    notes = {"nodes": len(fn.ir.nodes)}
    try:
        notes["passes"] = [{"pass": r["pass"], "nodes_before": r["nodes_before"], "nodes_after": r["nodes_after"],
                            "seconds": r["seconds"]} for r in fn.report().rows]
    except (AttributeError, KeyError, TypeError):
        pass          # the report's layout is the lead's to change; the benchmark does not depend on it
    return notes

