"""An exception or a KeyboardInterrupt at any line a call runs leaves every parameter with its old value or
every one with its new value, never a mix and never a workspace buffer, and the next call is right.

Each case runs one call under ``sys.settrace``, counting the lines it executes (the package's, numpy's
Python code and the generated executor's), then, for every n, a call that raises at its n-th line. A first
call (which builds the plan: some 10,000 lines) is interrupted at 200 lines spread evenly over it.
"""
import sys

import numpy as np
import pytest

import staticgrad as sg


def _model(kind):
    """(compiled step, its parameters, feeds) of a small model, built the same way each time."""
    x = sg.placeholder((None, 3), name="x")
    rows = 2 if kind == "scalar" else 40        # two rows: a Python-float plan; forty: a numpy one
    W = sg.parameter(np.linspace(-1, 1, 6).reshape(3, 2), name="W")
    b = sg.parameter(np.array([0.1, -0.2]), name="b")
    loss = sg.mean(sg.tanh(x @ W + b) ** 2)
    gW, gb = sg.grad(loss, [W, b])
    params = [W, b]
    if kind == "copy":          # updates that are not workspace buffers: the checked path
        seen = sg.parameter(np.zeros((rows, 3)), name="seen")
        updates = [(W, W - 0.5 * gW), (b, b - 0.5 * gb), (seen, x)]
        params.append(seen)
    else:
        updates = [(W, W - 0.5 * gW), (b, b - 0.5 * gb)]
    fn = sg.compile(loss, inputs=[x], updates=updates)
    feeds = np.random.default_rng(0).normal(size=(rows, 3))
    return fn, params, feeds


def _count_lines(call):
    count = [0]

    def tracer(frame, event, arg):
        if event == "line":
            count[0] += 1
        return tracer

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return count[0]


def _raise_at(n, error, call):
    seen = [0]

    def tracer(frame, event, arg):
        if event == "line":
            seen[0] += 1
            if seen[0] == n:
                raise error()
        return tracer

    sys.settrace(tracer)
    try:
        call()
    except BaseException as err:  # noqa: BLE001 (the injected error, or the ExecutionError explaining it)
        assert isinstance(err, error) or isinstance(err.__cause__, error), err
        return True
    finally:
        sys.settrace(None)
    return False


def _workspaces(fn):
    programs = [p for idle in fn._plans.values() for p in idle] + ([fn.program] if fn.program else [])
    return [v for p in programs for v in p.namespace.values() if isinstance(v, np.ndarray)]


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
@pytest.mark.parametrize("kind", ["numpy", "scalar", "copy"])
@pytest.mark.parametrize("first", [False, True], ids=["planned", "first-call"])
def test_a_call_raising_at_any_line_changes_all_parameters_or_none(kind, error, first):
    fn, params, x = _model(kind)
    twin, twin_params, _ = _model(kind)          # computes what each call should give
    if not first:
        fn(x)
        twin(x)
    counted = _model(kind)[0] if first else twin          # (a fresh function: its first call builds the plan)
    lines = _count_lines(lambda: counted(x))
    for p, q in zip(params, twin_params):
        q.value = p.value
    assert lines > 30
    for n in range(1, lines + 1, max(1, lines // 200) if first else 1):
        if first:
            fn, params, x = _model(kind)
        before = [p.value.copy() for p in params]
        for p, q in zip(params, twin_params):
            q.value = p.value
        twin(x)
        after = [q.value.copy() for q in twin_params]
        raised = _raise_at(n, error, lambda: fn(x))
        now = [p.value for p in params]
        states = [all(np.array_equal(a, b) for a, b in zip(now, s)) for s in (before, after)]
        assert any(states), f"line {n} of {lines}: a mix of old and new parameter values"
        assert raised or states[1]
        buffers = _workspaces(fn)
        assert not any(np.shares_memory(p, w) for p in now for w in buffers), f"line {n}: a workspace buffer"
        for p, q in zip(params, twin_params):            # the next call is right
            q.value = p.value
        np.testing.assert_array_equal(fn(x), twin(x))
        for p, q in zip(params, twin_params):
            np.testing.assert_array_equal(p.value, q.value)
