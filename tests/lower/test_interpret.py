"""Huge plans as steps run by one loop: the same bits as the generated source, the same Program interface."""
import sys
import uuid

import numpy as np
import pytest

import staticgrad as sg
from staticgrad.lower import interpret
from staticgrad.lower.codegen import Program
from staticgrad.ops.registry import apply
from tests.test_function import _sgd


@pytest.fixture
def always(monkeypatch):
    """Every plan of more than 0 nodes is interpreted."""
    monkeypatch.setattr(interpret, "INTERPRET_ABOVE", 0)


def _pair(build, *feeds):
    """(source function, interpreted function), each ``build()`` (a compiled function) first called on
    ``feeds``; ``build`` may also return (outputs, inputs) to compile."""
    made = []
    for above in (10**9, 0):
        interpret.INTERPRET_ABOVE, saved = above, interpret.INTERPRET_ABOVE
        try:
            fn = build()
            fn = fn if isinstance(fn, sg.Function) else sg.compile(fn[0], inputs=fn[1])
            fn.backend = fn.backend.replace(scalar=False)
            fn(*feeds)
        finally:
            interpret.INTERPRET_ABOVE = saved
        made.append(fn)
    return made


def _chain(cycles=40, size=10):
    x = sg.placeholder((size,), name="x", requires_grad=True)
    c = sg.parameter(np.linspace(0.5, 0.9, size), name="c")
    h = x
    for _ in range(cycles):
        h = sg.tanh(h * c + sg.sin(h))
    loss = sg.sum(h)
    return [loss, h, x] + sg.grad(loss, [x, c]), [x]


def _same(a, b):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
        assert np.array_equal(np.signbit(u), np.signbit(v))


def test_a_chain_and_its_gradient_have_the_source_plans_bits():
    X = np.random.default_rng(0).uniform(-0.5, 0.5, 10)
    source, steps = _pair(_chain, X)
    assert type(source.program) is Program and type(steps.program) is interpret.StepProgram
    _same(source(X), steps(X))
    _same(source(X), steps(X))              # (a second call, over the same workspace)
    got = steps(X)
    assert got[2] is not X and np.array_equal(got[2], X)      # a returned feed is the caller's own copy
    assert steps.program.stats == source.program.stats and steps.program.stats


def test_registers_are_reused_once_their_values_are_dead():
    X = np.random.default_rng(1).uniform(-0.5, 0.5, 10)
    _, steps = _pair(lambda: _chain(cycles=200), X)
    program = steps.program
    assert len(program.steps) > 600
    assert len(program.constants) + 10 > program.count - len(program.constants)


def test_training_steps_hand_over_buffers_and_give_the_source_plans_parameters():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(4, 3))
    source, steps = _pair(lambda: _sgd(np.random.default_rng(3))[3], X)
    assert steps.program.handoff and steps.program.reload
    seen = set()
    for k in range(6):
        X = rng.normal(size=(5 if k % 2 else 4, 3))
        _same([source(X)], [steps(X)])
        for p, q in zip(source.parameters(), steps.parameters()):
            np.testing.assert_array_equal(p.value, q.value)
        seen.add(id(steps.parameters()[0].value))
    assert len(seen) <= 4                   # the old arrays take turns as the workspace, as in the source plan


def test_ops_computed_in_pairs_and_ops_with_attributes():
    def build():
        x = sg.placeholder((None, 5), name="x")
        t = sg.placeholder((None,), dtype="int64", name="t")
        W = sg.parameter(np.random.default_rng(4).standard_normal((5, 3)), name="W")
        loss = sg.softmax_cross_entropy(x @ W, t) + sg.max(x, axis=0).sum()
        return [loss, sg.grad(loss, W)], [x, t]
    X, T = np.random.default_rng(5).standard_normal((4, 5)), np.array([0, 2, 1, 1])
    source, steps = _pair(build, X, T)
    assert "one pass with" in source.source and "one pass with" in steps.source
    _same(source(X, T), steps(X, T))


def test_the_source_is_a_summary_then_its_first_lines_and_line_nodes_point_into_it():
    X = np.random.default_rng(5).uniform(-0.5, 0.5, 10)
    source, steps = _pair(lambda: _chain(cycles=200), X)
    text = steps.source
    assert text.startswith(f"# {len(steps.program.steps):,} steps run by staticgrad.lower.interpret")
    lines = text.splitlines()
    assert lines[2] == "def run(x):" and lines[-1].startswith("    # ... (the listing stops")
    assert len(lines) < interpret.LISTED + 10
    assert lines[3:20] == source.program.source.splitlines()[1:18]
    for line, node_id in steps.program.line_nodes.items():
        assert steps.program.line_nodes[line] == node_id and f"{steps.ir.nodes[node_id].op}" in lines[line - 1]


def test_a_failing_step_names_its_op_and_the_users_line(always, boom):
    x = sg.placeholder((None,), name="x")
    z = apply(boom, (sg.exp(x) * 2.0,)); line = f"test_interpret.py:{sys._getframe().f_lineno}"  # noqa: E702
    fn = sg.compile(sg.sum(z), inputs=[x])
    assert fn(np.array([1.0, 2.0])) == pytest.approx(2 * (np.e + np.e**2))
    assert type(fn.program) is interpret.StepProgram
    with pytest.raises(sg.ExecutionError) as info:
        fn(np.array([1.0, 10.0]))
    assert boom in str(info.value) and line in str(info.value) and "boom" in str(info.value)


def test_relinked_runs_over_its_own_workspace():
    X = np.random.default_rng(6).uniform(-0.5, 0.5, 10)
    _, steps = _pair(_chain, X)
    program = steps.program
    want = program.run(X)
    namespace = dict(program.namespace)
    fresh = {name: np.full_like(value, np.nan) for name, value in namespace.items()
             if isinstance(value, np.ndarray) and name[0] in "wr" and value.flags.writeable}
    assert fresh
    namespace.update(fresh)
    other = program.relinked(namespace)
    before = {name: program.namespace[name].copy() for name in fresh}
    _same(other.run(X)[0], [np.copy(v) for v in want[0]])
    for name in fresh:
        np.testing.assert_array_equal(program.namespace[name], before[name])   # the original's untouched
    assert any(not np.isnan(value).all() for value in fresh.values())          # the copy's written


def test_run_takes_exactly_its_feeds(always):
    x = sg.placeholder((3,), name="x")
    fn = sg.compile(x * 2.0 + 1.0, inputs=[x])
    fn.backend = fn.backend.replace(scalar=False)
    fn(np.ones(3))
    with pytest.raises(TypeError, match="takes 1 positional"):
        fn.program.run()


def test_an_error_before_the_first_step_names_no_node(always):
    x = sg.placeholder((3,), name="x")
    fn = sg.compile(x * 2.0 + 1.0, inputs=[x])
    fn.backend = fn.backend.replace(scalar=False)
    fn(np.ones(3))

    def tracer(frame, event, arg):
        if event == "line" and frame.f_code is interpret._LOOP:
            raise RuntimeError("stop")       # at the loop's first line: no step has begun
        return tracer
    sys.settrace(tracer)
    try:
        with pytest.raises(sg.ExecutionError, match="compiled function failed: RuntimeError: stop"):
            fn(np.ones(3))
    finally:
        sys.settrace(None)
    np.testing.assert_array_equal(fn(np.ones(3)), np.full(3, 3.0))


# ------------------------------------------------------------------ a kernel failing inside a loop's body
@pytest.fixture
def boom_back():
    """An op that passes its input on and whose VJP is itself: its kernel raises on a value over 100, so a
    large cotangent makes it fail in the backward pass only."""
    from staticgrad.ops.registry import REGISTRY, defop, same_spec
    name = f"test_boom_back_{uuid.uuid4().hex[:8]}"

    def kernel(x):
        if np.any(x > 100):
            raise ValueError("boom: value over 100")
        return x * 1.0
    defop(name, kernel, same_spec, vjp=lambda g, out, x: (apply(name, (g,)),))
    yield name
    REGISTRY.pop(name, None)


def _names_the_body_node(monkeypatch, fn, good, bad, op, line):
    """``fn`` runs on ``good`` and fails on ``bad`` naming ``op`` (a node only a loop body holds) and the
    user's ``line``, as generated source and as steps (huge plans, bodies too)."""
    for above, kind in ((10**9, Program), (0, interpret.StepProgram)):
        monkeypatch.setattr(interpret, "INTERPRET_ABOVE", above)
        fn.backend = fn.backend.replace(scalar=False)           # (forgets the plans built)
        fn(*good)
        assert type(fn.program) is kind
        with pytest.raises(sg.ExecutionError, match=rf"{op} node \d+ \(.*{line}\) failed at run time .*value "
                                                    r"over 100") as info:
            fn(*bad)
        assert isinstance(info.value.__cause__, ValueError)


def _line(back=0):
    return f"test_interpret.py:{sys._getframe(1).f_lineno - back}"


def test_a_failing_kernel_in_a_scan_body_with_and_without_checkpoints(monkeypatch, boom):
    X = sg.placeholder((None, 2), name="X")

    def step(c, x):
        return apply(boom, (c + x,)), None
    line = _line(1)
    for checkpoint in (None, 2):
        c, _ = sg.scan(step, sg.constant(np.ones(2)), xs=X, checkpoint=checkpoint)
        fn = sg.compile(c, inputs=[X])
        _names_the_body_node(monkeypatch, fn, [np.ones((3, 2))], [np.full((3, 2), 50.0)], boom, line)


def test_a_failing_kernel_in_a_while_loop_body_and_condition(monkeypatch, boom):
    x = sg.placeholder((2,), name="x")
    out = sg.while_loop(lambda s: sg.sum(s) < 100.0, lambda s: apply(boom, (s * 3.0,)), x); line = _line()  # noqa: E702
    _names_the_body_node(monkeypatch, sg.compile(out, inputs=[x]), [np.ones(2)], [np.full(2, 40.0)], boom, line)
    out = sg.while_loop(lambda s: sg.sum(apply(boom, (s,))) < 150.0, lambda s: s + 10.0, x); line = _line()  # noqa: E702
    _names_the_body_node(monkeypatch, sg.compile(out, inputs=[x]), [np.ones(2)], [np.full(2, 120.0)], boom, line)


def test_a_failing_kernel_in_a_cond_branch(monkeypatch, boom):
    x = sg.placeholder((2,), name="x")
    p = sg.placeholder((), "bool", name="p")
    out = sg.cond(p, lambda v: v * 2.0, lambda v: apply(boom, (v + 1.0,)), x); line = _line()  # noqa: E702
    fn = sg.compile(out, inputs=[p, x])
    _names_the_body_node(monkeypatch, fn, [True, np.full(2, 500.0)], [False, np.full(2, 500.0)], boom, line)


def test_a_failing_kernel_in_a_nested_body(monkeypatch, boom):
    X = sg.placeholder((3, 4, 2), name="X")

    def outer(c, block):
        d, _ = sg.scan(lambda d, row: (apply(boom, (d + row,)), None), c, xs=block); line.append(_line())  # noqa: E702
        return d * 0.5, None
    line = []
    c, _ = sg.scan(outer, sg.constant(np.zeros(2)), xs=X)
    fn = sg.compile(c, inputs=[X])
    _names_the_body_node(monkeypatch, fn, [np.ones((3, 4, 2))], [np.full((3, 4, 2), 30.0)], boom, line[0])


def test_a_failing_kernel_in_the_reverse_loops_of_gradients(monkeypatch, boom_back):
    """The VJP's node is named, with the forward node it is the adjoint of when the reverse body holds it."""
    x = sg.placeholder((2,), name="x", requires_grad=True)
    X = sg.placeholder((3, 2), name="X")
    w = sg.placeholder((), name="w")
    c, _ = sg.scan(lambda c, r: (apply(boom_back, (c * 0.5 + r,)), None), x, xs=X)
    s = sg.while_loop(lambda s: s[1] < 3, lambda s: (apply(boom_back, (s[0] * 0.5,)), s[1] + 1), (x, sg.constant(0)))
    for loss in (sg.sum(c) * w, sg.sum(s[0]) * w):
        fn = sg.compile(sg.grad(loss, [x]), inputs=[x, X, w])
        _names_the_body_node(monkeypatch, fn, [np.ones(2), np.ones((3, 2)), 1.0],
                             [np.ones(2), np.ones((3, 2)), 1000.0], boom_back, rf"backward, VJP of {boom_back} node "
                             r"\d+(; | from test_interpret.py:\d+; )built at test_interpret.py:\d+")
