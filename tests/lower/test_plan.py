"""Execution plans: concrete shapes per call signature, memory planning into a reusable workspace, costs."""
import re

import numpy as np
import pytest

import staticgrad as sg
from staticgrad.function import READING
from staticgrad.graph import Graph, Node
from staticgrad.lower.costs import costs
from staticgrad.lower.memory import plan_memory
from staticgrad.lower.shapes import concrete_shapes, skip_identities, specialize
from staticgrad.ops.registry import ELEMENTWISE, REGISTRY, VIEW


def build_mlp(rng, batch=None, sizes=(4, 16, 16, 3)):
    x = sg.placeholder((batch, sizes[0]), name="x")
    t = sg.placeholder((batch,), dtype="int64", name="t")
    params, h = [], x
    for k, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        W = sg.parameter(rng.normal(size=(m, n)) / np.sqrt(m), name=f"W{k}")
        b = sg.parameter(rng.normal(size=n) * 0.1, name=f"b{k}")
        params += [W, b]
        h = h @ W + b
        if k < len(sizes) - 2:
            h = sg.tanh(h)
    loss = sg.softmax_cross_entropy(h, t)
    return x, t, params, loss, sg.grad(loss, params)


def mlp_feeds(rng, n):
    return rng.normal(size=(n, 4)), rng.integers(0, 3, size=n)


def plan_for(fn, feed_shapes):
    """The memory plan of ``fn``'s optimized graph for these feed shapes, made with lower's own functions."""
    ir = fn.ir
    order = list(ir.nodes)
    shapes = concrete_shapes(ir, order, feed_shapes)
    concrete = Graph(specialize(ir, order, shapes), ir.outputs, ir.updates, ir.inputs)
    return concrete, order, shapes, plan_memory(concrete, order, shapes)


def check_plan_is_safe(concrete, order, shapes, memory):
    """No slot holds two values that are live at once; nothing that escapes the call sits in a slot.

    A value is live from its step to the last step that reads it or any view of it; a result may take
    the slot of an operand that dies at that very step only if the op is elementwise (a ufunc).
    """
    nodes = concrete.nodes
    step_of = {i: s for s, i in enumerate(order)}
    base = {}
    for i in order:
        op = REGISTRY.get(nodes[i].op)
        base[i] = base[nodes[i].inputs[0]] if op is not None and op.has(VIEW) else i
    last = {}
    for s, i in enumerate(order):
        for j in nodes[i].inputs:
            last[base[j]] = max(last.get(base[j], -1), s)
    escaping = {base[i] for i in list(concrete.outputs) + [e for _, e in concrete.updates]}
    for i in escaping:
        assert i not in memory.slot, f"output node {nodes[i]} lives in workspace slot {memory.slot[i]}"
    by_slot = {}
    for i, k in memory.slot.items():
        by_slot.setdefault(k, []).append(i)
        assert memory.slots[k] == (tuple(shapes[i]), np.dtype(nodes[i].dtype)), f"slot {k} does not fit {nodes[i]}"
    for k, members in by_slot.items():
        members.sort(key=step_of.get)
        for a, b in zip(members, members[1:]):
            end, start = last.get(a, step_of[a]), step_of[b]
            assert end <= start, f"slot {k}: {nodes[b]} is written while {nodes[a]} is still read at step {end}"
            if end == start:
                assert REGISTRY[nodes[b].op].has(ELEMENTWISE), \
                    f"slot {k}: non-elementwise {nodes[b]} writes over its operand {nodes[a]}"


# ------------------------------------------------------------------ outputs never alias the workspace
def test_earlier_results_survive_later_calls(rng):
    x, t, params, loss, grads = build_mlp(rng)
    fn = sg.compile([loss, *grads], inputs=[x, t])
    first = fn(*mlp_feeds(rng, 8))
    kept = [a.copy() for a in first]
    fn(*mlp_feeds(rng, 8))
    fn(*mlp_feeds(rng, 8))
    for a, b in zip(first, kept):
        np.testing.assert_array_equal(a, b)


def test_outputs_that_are_views_of_intermediates_survive_later_calls(rng):
    x = sg.placeholder((3, 3), name="x")
    a = sg.exp(x)
    outs = [sg.tanh(a).T, (a * 2)[0], sg.sum(a * 3, axis=0), (a + 1).reshape((9,)), sg.tanh(a) * a,
            sg.max(a * a, axis=1, keepdims=True)]
    fn = sg.compile(outs, inputs=[x])
    first = fn(rng.normal(size=(3, 3)))
    kept = [o.copy() for o in first]
    fn(rng.normal(size=(3, 3)))
    for o, k in zip(first, kept):
        np.testing.assert_array_equal(o, k)
    check_plan_is_safe(*plan_for(fn, [(3, 3)]))


def test_outputs_do_not_share_memory_with_each_other(rng):
    x = sg.placeholder((4,), name="x")
    a = sg.exp(x) * 2
    outs = [a, a + 1, sg.sin(a), a * 3]
    fn = sg.compile(outs, inputs=[x])
    got = fn(rng.normal(size=4))
    for i in range(len(got)):
        for j in range(i + 1, len(got)):
            assert not np.shares_memory(got[i], got[j])


def test_updated_parameters_survive_later_calls(rng):
    x = sg.placeholder((2, 3), name="x")
    W = sg.parameter(np.ones((2, 3)), name="W")
    fn = sg.compile(sg.sum(W), inputs=[x], updates=[(W, sg.tanh(W * x) * 2)])
    fn(np.full((2, 3), 0.5))
    after_first = W.value
    kept = after_first.copy()
    fn(np.full((2, 3), -3.0))
    np.testing.assert_array_equal(after_first, kept)
    assert not np.shares_memory(W.value, after_first)


def test_plans_keep_no_two_live_values_in_one_slot(rng):
    x, t, params, loss, grads = build_mlp(rng)
    fn = sg.compile([loss, *grads], inputs=[x, t])
    for n in (1, 7, 32):
        check_plan_is_safe(*plan_for(fn, [(n, 4), (n,)]))


def test_a_view_of_a_live_value_does_not_give_its_slot_away(rng):
    # b = a.T dies at c = b + 1, but a itself is still read afterwards: c must not be written over a
    x = sg.placeholder((3, 3), name="x")
    a = sg.exp(x)
    c = a.T + 1
    d = sg.sum(a * c.T)
    feed = rng.normal(size=(3, 3))
    fn = sg.compile(d, inputs=[x])
    np.testing.assert_allclose(fn(feed), sg.compile(d, inputs=[x], optimize=False)(feed), rtol=1e-14)
    check_plan_is_safe(*plan_for(fn, [(3, 3)]))


def test_in_place_over_an_operand_read_through_a_transposed_view(rng):
    x = sg.placeholder((3, 3), name="x")
    a = sg.exp(x)
    y = sg.sum(sg.tanh(a * a.T + a))
    feed = rng.normal(size=(3, 3))
    fn = sg.compile(y, inputs=[x])
    np.testing.assert_allclose(fn(feed), sg.compile(y, inputs=[x], optimize=False)(feed), rtol=1e-14)


# ------------------------------------------------------------------ reuse and in-place
def test_chain_of_elementwise_ops_runs_in_place(rng):
    x = sg.placeholder((100,), name="x")
    y = x
    for _ in range(8):
        y = sg.tanh(y * 1.5 + 0.1)
    y = sg.sum(y)
    fn = sg.compile(y, inputs=[x])
    feed = rng.normal(size=100)
    np.testing.assert_allclose(fn(feed), sg.compile(y, inputs=[x], optimize=False)(feed), rtol=1e-14)
    summary = fn.report().summary
    assert summary["workspace_slots"] == 1          # 24 elementwise results, one buffer
    assert summary["in_place"] >= 20
    assert summary["peak_bytes"] == 100 * 8 + 8      # the buffer, and the fresh 0-d sum returned
    assert summary["peak_bytes_unplanned"] == 24 * 100 * 8 + 8
    assert fn.program.memory.workspace_bytes == 100 * 8
    assert "out=" in fn.source or ", w" in fn.source


def test_planned_peak_is_below_unplanned_for_an_mlp(rng):
    x, t, params, loss, grads = build_mlp(rng)
    fn = sg.compile([loss, *grads], inputs=[x, t])
    fn(*mlp_feeds(rng, 64))
    summary = fn.report().summary
    assert 0 < summary["peak_bytes"] < summary["peak_bytes_unplanned"]
    assert summary["workspace_slots"] > 0


def test_alternating_batch_sizes_reuse_their_plans(rng):
    x, t, params, loss, grads = build_mlp(rng)
    fn = sg.compile([loss, *grads], inputs=[x, t])
    slow = sg.compile([loss, *grads], inputs=[x, t], optimize=False)
    for n in (8, 3, 8, 3, 8, 3):
        X, T = mlp_feeds(rng, n)
        for a, b in zip(fn(X, T), slow(X, T)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    assert fn.report().summary["plans"] == 2
    assert fn.report().summary["plan_shapes"] == [(3, 4), (3,)]


def test_plans_are_per_shape_signature_not_per_call(rng):
    x = sg.placeholder((None, 2), name="x")
    y = sg.placeholder((None,), name="y")
    fn = sg.compile(sg.sum(sg.exp(x)) + sg.sum(y), inputs=[x, y])
    fn(np.ones((2, 2)), np.ones(5))
    fn(np.ones((2, 2)), np.ones(6))
    fn(np.ones((2, 2)), np.ones(5))
    assert fn.report().summary["plans"] == 2


def test_many_batch_sizes_stay_correct(rng):
    x = sg.placeholder((None, 3), name="x")
    y = sg.sum(sg.tanh(x * 2 + 1), axis=0)
    fn = sg.compile(y, inputs=[x])
    for n in list(range(1, 40)) + [1, 5, 2]:
        X = rng.normal(size=(n, 3))
        np.testing.assert_allclose(fn(X), np.tanh(X * 2 + 1).sum(axis=0), rtol=1e-13)
    assert fn.report().summary["plans"] <= sg.Function.MAX_PLANS


def test_training_steps_equal_unoptimized(rng):
    x, t, params, loss, grads = build_mlp(rng)
    updates = [(p, p - 0.5 * g) for p, g in zip(params, grads)]
    fast = sg.compile(loss, inputs=[x, t], updates=updates)
    slow = sg.compile(loss, inputs=[x, t], updates=updates, optimize=False)
    start = [p.value.copy() for p in params]
    batches = [mlp_feeds(rng, n) for n in (8, 5, 8, 1)]

    def train(fn):
        for p, v in zip(params, start):
            p.value = v.copy()
        losses = [fn(X, T) for X, T in batches]
        return losses, [p.value.copy() for p in params]

    fast_losses, fast_params = train(fast)
    slow_losses, slow_params = train(slow)
    np.testing.assert_allclose(fast_losses, slow_losses, rtol=1e-12)
    for a, b in zip(fast_params, slow_params):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


def test_float32_and_int_values_get_slots_of_their_own_dtype(rng):
    x = sg.placeholder((4,), dtype="float32", name="x")
    i = sg.placeholder((4,), dtype="int64", name="i")
    a = sg.exp(x) * 2
    b = (i * 3 + 1) * 2
    y = sg.sum(a * 2 + 1) + sg.sum(b + 1)
    fn = sg.compile(y, inputs=[x, i])
    feeds = (rng.normal(size=4).astype(np.float32), np.arange(4))
    assert fn(*feeds).dtype == sg.compile(y, inputs=[x, i], optimize=False)(*feeds).dtype
    np.testing.assert_allclose(fn(*feeds), sg.compile(y, inputs=[x, i], optimize=False)(*feeds), rtol=1e-6)
    check_plan_is_safe(*plan_for(fn, [(4,), (4,)]))


# ------------------------------------------------------------------ plan.py directly
def test_concrete_shapes_follow_the_feed(rng):
    x, t, params, loss, grads = build_mlp(rng)
    fn = sg.compile([loss, *grads], inputs=[x, t])
    order = list(fn.ir.nodes)
    shapes = concrete_shapes(fn.ir, order, [(5, 4), (5,)])
    assert all(None not in s for s in shapes.values())
    assert shapes[fn.ir.outputs[0]] == ()
    assert [shapes[o] for o in fn.ir.outputs[1:]] == [p.shape for p in params]
    matmuls = [shapes[i] for i in order if fn.ir.nodes[i].op == "matmul"]
    assert (5, 16) in matmuls


def test_concrete_shapes_reject_a_wrong_size(rng):
    x, t, params, loss, grads = build_mlp(rng)
    fn = sg.compile([loss, *grads], inputs=[x, t])
    with pytest.raises(sg.FeedError, match="x"):
        concrete_shapes(fn.ir, list(fn.ir.nodes), [(5, 3), (5,)])


def test_sizes_that_disagree_only_at_run_time_name_the_op(rng):
    a = sg.placeholder((None, 3), name="a")
    b = sg.placeholder((None, 3), name="b")
    fn = sg.compile(a + b, inputs=[a, b])
    with pytest.raises((sg.ShapeError, sg.ExecutionError), match="add"):
        fn(np.ones((2, 3)), np.ones((4, 3)))


def test_plan_without_memory_planning_uses_no_workspace(rng):
    x, t, params, loss, grads = build_mlp(rng)
    fn = sg.compile([loss, *grads], inputs=[x, t])
    concrete, order, shapes, planned = plan_for(fn, [(16, 4), (16,)])
    plain = plan_memory(concrete, order, shapes, enable=False)
    assert plain.slot == {} and plain.slots == []
    assert plain.peak_unplanned == planned.peak_unplanned
    assert plain.peak_planned < plain.peak_unplanned       # freeing after last use alone already helps
    assert planned.peak_planned < planned.peak_unplanned


def test_costs_count_matmul_flops_exactly():
    x = sg.placeholder((5, 4), name="x")
    W = sg.parameter(np.ones((4, 3)), name="W")
    fn = sg.compile(x @ W, inputs=[x], passes=[])
    c = costs(fn.ir)
    assert c["flops"] == 2 * 5 * 4 * 3
    assert c["peak_bytes_unplanned"] == 5 * 3 * 8


@pytest.mark.parametrize("reduce", [sg.sum, sg.mean, sg.max, sg.min, sg.argmax, sg.argmin])
def test_costs_count_a_reduction_as_one_flop_per_element_read(reduce):
    x = sg.placeholder((5, 4), name="x")
    assert costs(sg.compile(reduce(x, axis=1), inputs=[x], passes=[]).ir)["flops"] == 5 * 4


def test_costs_take_unknown_sizes_as_one():
    x = sg.placeholder((None, 4), name="x")
    W = sg.parameter(np.ones((4, 3)), name="W")
    fn = sg.compile(sg.tanh(x @ W), inputs=[x], passes=[])
    c = costs(fn.ir)
    assert c["flops"] == 2 * 4 * 3 + 6 * 3     # matmul of one row, then tanh weighted 6 per element
    assert c["peak_bytes"] <= c["peak_bytes_unplanned"] == 2 * 3 * 8


# ------------------------------------------------------------------ tiny plans run as Python scalar code
def scalar_and_numpy_results(outputs, inputs, feeds, force=False):
    """Outputs of the numpy plan and of the scalar code generated for the same plan, on ``feeds``.

    Built here directly, the comparison does not depend on the executor's choice; graphs the scalar
    generator refuses (integer or boolean arithmetic) compare numpy with itself, unless ``force`` asks
    for the scalar code wherever it can be generated (tiny graphs the cost model leaves to numpy).
    """
    from staticgrad.lower import scalarize
    from staticgrad.lower.codegen import generate

    fn = sg.compile(outputs, inputs=inputs)
    concrete, order, shapes, memory = plan_for(fn, [np.shape(f) for f in feeds])
    params = [i for i in order if concrete.nodes[i].op == "parameter"]
    numpy_plan = generate(concrete, order, params, concrete.inputs, memory)
    numpy_plan.shapes = shapes
    with np.errstate(all="ignore"):
        want = numpy_plan.run(*feeds)[0]
    if not (force or scalarize.eligible(concrete, order, shapes)):
        return want, want        # integer/bool arithmetic never runs as Python scalars
    source, used = scalarize.generate(concrete, order, params, concrete.inputs, shapes)
    scalar_plan = scalarize.ScalarProgram(source, used, [concrete.nodes[i].tensor for i in params], numpy_plan)
    with np.errstate(all="ignore"):
        return want, scalar_plan.run(*feeds)[0]


def _bool_sum(a, b):
    return ((a > 0) + (b > 0)) * 1.5          # numpy: True + True is True (logical or), not 2


def _int_wrap(a, b):
    i = sg.ops.cast(a, "int64")
    return sg.ops.cast(i * 4, "float64")      # int64 arithmetic wraps around in numpy


def _logical_and(a, b):
    return sg.ops.cast(sg.ops.logical_and(a, b), "float64") * 1.0


def _mlp_like(a, b):
    return sg.sum(sg.tanh(a[:, None] * b + 1.0) ** 2) + sg.logsumexp(a * b)


SCALAR_CASES = {
    "mlp-like": (_mlp_like, [np.array([0.5, -1.0]), np.array([2.0, 3.0])]),
    "bool + bool": (_bool_sum, [np.array([1.0, 1.0]), np.array([1.0, -1.0])]),
    "int64 wraps": (_int_wrap, [np.array([2.0 ** 62, 1.0]), np.array([0.0, 0.0])]),
    "logical_and of floats": (_logical_and, [np.array([3.0, 1.0]), np.array([2.0, 0.0])]),
}


@pytest.mark.parametrize("case", SCALAR_CASES, ids=str)
def test_scalar_code_computes_what_numpy_computes(case):
    build, feeds = SCALAR_CASES[case]
    a, b = sg.placeholder((2,), name="a"), sg.placeholder((2,), name="b")
    want, got = scalar_and_numpy_results(build(a, b), [a, b], feeds)
    for x, y in zip(want, got):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_allclose(y, x, rtol=1e-12)


def test_scalar_cross_entropy_of_infinite_logits_is_that_of_numpy():
    z = sg.placeholder((1, 2), name="z")
    t = sg.placeholder((1,), dtype="int64", name="t")
    want, got = scalar_and_numpy_results(sg.softmax_cross_entropy(z, t), [z, t],
                                         [np.array([[np.inf, 0.0]]), np.array([1])])
    np.testing.assert_array_equal(got[0], want[0])        # inf, not nan


@pytest.mark.parametrize("shape", [(20, 3), (2, 20)])
def test_scalar_cross_entropy_adds_in_numpy_order(shape):
    # numpy sums each row's exponentials, then the rows' losses, pairwise; in order, the last bit of the
    # loss differs on about a third of these feeds
    z = sg.placeholder(shape, name="z")
    t = sg.placeholder(shape[:1], dtype="int64", name="t")
    rng = np.random.default_rng(1)
    for _ in range(40):
        feeds = [rng.normal(size=shape) * 3, rng.integers(0, shape[1], size=shape[0])]
        want, got = forced_scalar_results(sg.softmax_cross_entropy(z, t), [z, t], feeds)
        assert _bits_equal(got, want), (got, want)


def test_scalar_integer_power_is_exact():
    i = sg.placeholder((2,), dtype="int64", name="i")
    want, got = scalar_and_numpy_results(i ** 39, [i], [np.array([3, 1])])
    np.testing.assert_array_equal(got[0], want[0])
    assert want[0][0] == 3 ** 39


def test_the_compiled_function_keeps_numpy_semantics_on_later_calls():
    # the first call decides between scalar and numpy code; a later call must not change the semantics
    a, b = sg.placeholder((2,), name="a"), sg.placeholder((2,), name="b")
    y = _bool_sum(a, b)
    fn = sg.compile(y, inputs=[a, b])
    slow = sg.compile(y, inputs=[a, b], optimize=False)
    fn(np.array([1.0, -1.0]), np.array([-1.0, -1.0]))
    np.testing.assert_array_equal(fn(np.ones(2), np.ones(2)), slow(np.ones(2), np.ones(2)))


def test_tiny_float_graphs_run_as_scalar_code():
    # the 20-parameter network of docs/worked_examples.md example 3: a plan of a few numbers per tensor
    x = sg.placeholder((None, 2), name="x")
    W = sg.parameter(np.array([[.3, .6], [.4, .7], [.8, .1]]), name="W")
    h = sg.sigmoid(x @ W.T)
    loss = sg.mean(sg.square(sg.sum(h, axis=1) - 1.0))
    fn = sg.compile([loss, sg.grad(loss, [W])[0]], inputs=[x])
    X = np.array([[3.0, 2.0], [0.5, 1.2]])
    got = fn(X)
    assert fn.report().summary["program"] == "scalar"
    want = sg.compile([loss, sg.grad(loss, [W])[0]], inputs=[x], optimize=False)
    want.backend = want.backend.replace(scalar=False)
    for a, b in zip(got, want(X)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    code = [line for line in fn.source.splitlines() if not line.lstrip().startswith("#")]
    assert "np.array" in fn.source and not any("matmul" in line for line in code)
    # provenance, as the numpy plan's comments give it: the user's line, and each adjoint's VJP rule
    comments = [line.strip() for line in fn.source.splitlines() if line.lstrip().startswith("#")]
    here = f"test_plan.py:{h.source.rsplit(':', 1)[1]}"
    assert any(c.startswith("# matmul @ ") and here in c for c in comments)
    assert any("[backward: VJP of sigmoid node" in c for c in comments)
    assert fn.source.startswith(READING + "def run(x):")        # (after the note that it is for reading)
    # arithmetic on two numbers known when generating (the mean's 1/n) is done then, not on every call
    assert not any(re.search(r"= \(-?[0-9.]+ [-+*/] -?[0-9.]+\)$", line) for line in code), code
    # arrays unpack into nested names and are made without a reshape where they have one axis
    assert "[[u1_0, u1_1], [u1_2, u1_3]] = x.tolist()" in fn.source and "reshape(-1)" not in fn.source


@pytest.mark.parametrize("numbers", [(1.0, 3.0), (-0.0, 0.0), (np.inf, -np.inf), (1e308, 10.0), (2.0, 0.0),
                                     (np.nan, 1.0)])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_scalar_code_folds_arithmetic_on_two_known_numbers_as_numpy_computes_it(op, numbers):
    # signed zeros, inf - inf, overflow; a division by zero is left to run (it raises, and the numpy plan
    # gives numpy's inf)
    from staticgrad.lower import scalarize
    em = scalarize.Emitter({}, {})
    atoms = [np.array(scalarize._literal(v), dtype=object) for v in numbers]
    (atom,) = em.elementwise(REGISTRY[op].scalar, atoms, (1,))
    ufunc = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[op]
    with np.errstate(all="ignore"):
        want = ufunc(np.float64(numbers[0]), np.float64(numbers[1]))
    if op == "div" and numbers[1] == 0.0:
        assert em.lines and atom.startswith("s")
        return
    assert not em.lines
    assert _bits_equal(np.float64(eval(atom, dict(scalarize.HELPERS))), want)


def test_multi_pass_kernels_never_write_over_their_own_operand():
    # where(c, x, y) with out= writes y first: its buffer must not be x's even when x dies right there
    x = sg.placeholder((64, 8), name="x")
    W = sg.parameter(np.linspace(-1, 1, 64).reshape(8, 8), name="W")
    h = sg.relu(sg.tanh(x @ W) - 0.1)
    loss = sg.sum(sg.square(h))
    (gW,) = sg.grad(loss, [W])
    X = np.linspace(-2, 2, 512).reshape(64, 8)
    got = sg.compile(gW, inputs=[x])(X)
    want = sg.compile(gW, inputs=[x], optimize=False)
    want.backend = want.backend.replace(memory_planning=False)
    np.testing.assert_allclose(got, want(X), rtol=1e-12)


def test_identities_cost_no_call_and_a_returned_one_stays():
    a = Node("placeholder", (), shape=(3,))
    b = Node("stop_gradient", [a.id], shape=(3,))
    c = Node("mul", [b.id, b.id], shape=(3,))
    d = Node("stop_gradient", [c.id], shape=(3,))
    graph = Graph({n.id: n for n in (a, b, c, d)}, outputs=[d.id], inputs=[a.id])
    new, order = skip_identities(graph, [a.id, b.id, c.id, d.id])
    assert order == [a.id, c.id, d.id] and new.nodes[c.id].inputs == [a.id, a.id]
    assert graph.nodes[c.id].inputs == [b.id, b.id]          # the graph it was given is left as it was


def test_a_gradient_that_needs_no_reduction_at_these_sizes_passes_without_a_call(rng):
    # With an unknown size, the gradient of `tanh(x) * 2 + x` is reduced back to x's shape by a rule
    # decided per plan: at the fed size nothing was broadcast, and the plan makes no call for it.
    x = sg.placeholder((None,), name="x", requires_grad=True)
    y = sg.sum(sg.tanh(x) * 2.0 + x)
    g, = sg.grad(y, [x])
    fn = sg.compile([y, g], inputs=[x])
    fn.backend = fn.backend.replace(scalar=False)     # the numpy plan (a tiny one would run as Python float code)
    assert any(n.op == "sum_like" for n in fn.ir.nodes.values())
    X = rng.normal(size=5)
    loss, grad = fn(X)
    np.testing.assert_allclose(grad, 2.0 * (1 - np.tanh(X) ** 2) + 1.0, rtol=1e-14)
    np.testing.assert_allclose(loss, np.sum(np.tanh(X) * 2.0 + X), rtol=1e-14)
    assert "stop_gradient" not in fn.source


def forced_scalar_results(outputs, inputs, feeds):
    """(numpy plan's, scalar code's) first output on ``feeds``, the scalar code generated even where the
    cost model would keep numpy (where Python raises, the executor reruns the numpy plan: so does this)."""
    want, got = scalar_and_numpy_results(outputs, inputs, feeds, force=True)
    return want[0], got[0]


def _bits_equal(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return x.shape == y.shape and np.array_equal(x, y, equal_nan=True) and np.array_equal(
        np.signbit(x[x == 0]), np.signbit(y[y == 0]))


EDGE = np.array([-0.0, 0.0, -np.inf, np.inf, np.nan, 4.0, -1.5, 2.0])
SCALAR_EDGES = {
    "relu": lambda x: sg.relu(x),
    "maximum with 0": lambda x: sg.maximum(x, 0.0),
    "0 maximum": lambda x: sg.maximum(0.0, x),
    "minimum with 0": lambda x: sg.minimum(x, 0.0),
    "clip": lambda x: sg.clip(x, 0.0, 2.0),
    "x ** 0.5": lambda x: x ** 0.5,
    "sign": lambda x: sg.ops.sign(x),
    "softmax": lambda x: sg.softmax(sg.reshape(x, (2, 4))),
    "log_softmax": lambda x: sg.log_softmax(sg.reshape(x, (2, 4))),
    "logsumexp": lambda x: sg.logsumexp(sg.reshape(x, (2, 4)), axis=1),
    "sum of zeros": lambda x: sg.sum(x[:2] * 1.0),
}


@pytest.mark.parametrize("case", SCALAR_EDGES, ids=str)
def test_scalar_code_keeps_numpy_semantics_at_signed_zeros_infinities_and_nan(case):
    # the scalar code is checked against numpy on the first call only: later feeds must agree too
    x = sg.placeholder((8,), name="x")
    want, got = forced_scalar_results(SCALAR_EDGES[case](x), [x], [EDGE])
    assert _bits_equal(got, want), (got, want)


def test_scalar_gradient_of_abs_at_negative_zero_is_positive_zero():
    # the VJP of abs is g * sign(x), and numpy.sign(-0.0) is +0.0
    x = sg.placeholder((8,), name="x", requires_grad=True)
    want, got = forced_scalar_results(sg.grad(sg.sum(sg.abs(x)), [x])[0], [x], [EDGE])
    assert _bits_equal(got, want) and not np.signbit(got[0]), (got, want)


@pytest.mark.parametrize("exponent", ["one fed number", "fed array", "constant array"])
def test_scalar_power_takes_numpys_square_root_only_for_one_exponent(exponent):
    # numpy's power loop takes sqrt for an exponent of 0.5 only where it reads one exponent for all
    # elements: sqrt(-0.0) is -0.0 and sqrt(-inf) nan, where pow (an array of exponents) gives 0.0 and inf
    x = sg.placeholder((8,), name="x")
    y = sg.placeholder(() if exponent == "one fed number" else (8,), name="y")
    e = sg.constant(np.full(8, 0.5)) if exponent == "constant array" else y
    Y = np.array(0.5) if exponent == "one fed number" else np.full(8, 0.5)
    # (where a base is negative, or sqrt(-inf) raises, numpy's plan runs: one edge per feed)
    for X in ([-0.0, 0.0, np.inf, np.nan, 4.0, 2.0, 9.0, 0.5], [-np.inf, 0.0, np.inf, 1.0, 4.0, 2.0, 9.0, 0.5]):
        want, got = forced_scalar_results(x ** e - y * 0.0, [x, y], [np.array(X), Y])
        assert _bits_equal(got, want), (got, want)


@pytest.mark.parametrize("base, exponent", [((), (1,)), ((1,), (1, 1)), ((1, 1), (1, 1)), ((1, 1), (1,))])
def test_scalar_power_of_one_element_reads_the_exponent_as_numpys_loop_does(base, exponent):
    # one element: numpy takes sqrt for 0.5 (sqrt(-0.0) is -0.0) where its loop steps the exponent by 0,
    # pow (0.0) where it steps by the exponent's size, for operands of the output's shape or a 0-d base
    x, y = sg.placeholder(base, name="x"), sg.placeholder(exponent, name="y")
    want, got = forced_scalar_results(x ** y, [x, y], [np.full(base, -0.0), np.full(exponent, 0.5)])
    assert _bits_equal(got, want), (got, want)


TRANSCENDENTAL = {"exp": sg.exp, "log": lambda x: sg.log(sg.abs(x)), "log1p": lambda x: sg.log1p(sg.abs(x)),
                  "expm1": sg.expm1, "sin": sg.sin, "cos": sg.cos, "tanh": sg.tanh, "sigmoid": sg.sigmoid,
                  "softplus": sg.softplus, "pow 1.7": lambda x: sg.abs(x) ** 1.7}


@pytest.mark.parametrize("size", [1, 3, 12])
@pytest.mark.parametrize("function", sorted(TRANSCENDENTAL))
def test_scalar_transcendental_functions_have_numpys_bits(function, size):
    # numpy's kernels are SIMD code on some CPUs: on AVX512 its exp, log, pow and tanh differ from libm's
    # (the math module's) in the last bit on up to a third of inputs, on AVX2 its tanh does
    x = sg.placeholder((size,), name="x")
    rng = np.random.default_rng(8)
    for scale in (1e-3, 1.0, 5.0, 300.0) * 10:
        X = rng.normal(size=size) * scale
        want, got = forced_scalar_results(TRANSCENDENTAL[function](x * 1.0), [x], [X])
        assert _bits_equal(got, want), (X, got, want)


@pytest.mark.parametrize("exponent", ["one fed number", "fed array"])
def test_scalar_power_of_any_exponent_has_numpys_bits(exponent):
    x = sg.placeholder((8,), name="x")
    y = sg.placeholder(() if exponent == "one fed number" else (8,), name="y")
    rng = np.random.default_rng(9)
    for _ in range(30):
        X = np.abs(rng.normal(size=8)) * 10.0 ** rng.uniform(-3, 3, size=8)
        Y = rng.uniform(-4, 4, size=() if exponent == "one fed number" else 8)
        want, got = forced_scalar_results(x ** y, [x, y], [X, Y])
        assert _bits_equal(got, want), (X, Y, got, want)


def test_scalar_code_of_an_exponent_broadcast_along_some_axes_has_numpys_bits():
    # numpy's loop order decides whether it reads such an exponent once per row; without a shortcut
    # exponent (0.5, 2, -1) that changes nothing, and the plan runs as scalar code
    x = sg.placeholder((2, 3), name="x")
    rng = np.random.default_rng(12)
    for _ in range(20):
        X = rng.normal(size=(2, 3)) * 3
        want, got = forced_scalar_results(sg.abs(x) ** sg.constant(np.array([1.7, 2.3, -0.4])), [x], [X])
        assert _bits_equal(got, want), (X, got, want)


def test_scalar_cross_entropy_of_one_class():
    z = sg.placeholder((3, 1), name="z")
    t = sg.placeholder((3,), dtype="int64", name="t")
    want, got = forced_scalar_results(sg.softmax_cross_entropy(z, t), [z, t],
                                      [np.array([[1.0], [np.inf], [-3.0]]), np.array([0, 0, 0])])
    assert _bits_equal(got, want), (got, want)


def test_a_graph_of_one_small_op_runs_as_scalar_code():
    x = sg.placeholder((3,), name="x")
    fn = sg.compile(x * 2.0, inputs=[x])
    np.testing.assert_array_equal(fn(np.array([1.0, -0.5, 3.0])), [2.0, -1.0, 6.0])
    assert fn.report().summary["program"] == "scalar"


def test_scalar_code_has_one_comment_per_node_indented_as_its_code():
    x, W = sg.placeholder((2,), name="x"), sg.parameter(np.ones(2), name="W")
    fn = sg.compile(sg.sum(sg.tanh(x) * W), inputs=[x])
    fn(np.ones(2))
    assert fn.report().summary["program"] == "scalar"
    lines = fn.program.source.splitlines()[1:]
    comments = [line.split(" @ ")[0] for line in lines if line.lstrip().startswith("#")]
    assert comments == ["    # placeholder x", "    # parameter W", "    # tanh", "    # mul", "    # sum"]
    assert all(line.startswith("    ") for line in lines)


def test_placeholders_of_one_name_are_distinct_arguments_of_the_scalar_code():
    a, b = sg.placeholder((2,), name="x"), sg.placeholder((2,), name="x")
    fn = sg.compile(a * 2.0 - b, inputs=[a, b])
    np.testing.assert_array_equal(fn(np.array([1.0, 2.0]), np.array([0.5, 8.0])), [1.5, -4.0])
    assert fn.report().summary["program"] == "scalar"


def test_placeholders_named_like_python_builtins_keep_the_scalar_code():
    # the generated code calls abs and max: an argument of that name must not hide them
    a = sg.placeholder((2,), name="abs")
    m = sg.placeholder((2, 3), name="max")
    t = sg.placeholder((2,), dtype="int64", name="int")
    fn = sg.compile([sg.sigmoid(a) * 2.0, sg.softmax_cross_entropy(m, t)], inputs=[a, m, t])
    fn(np.array([0.3, -1.0]), np.ones((2, 3)), np.array([0, 2]))
    assert fn.report().summary["program"] == "scalar"


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
def test_scalar_row_sums_of_softmax_add_in_numpy_order(op):
    # numpy sums the row's exp(x - max) pairwise (12 numbers: 8 partial sums); in order, the last bit
    # differs for some rows
    x = sg.placeholder((12,), name="x")
    rng = np.random.default_rng(5)
    for _ in range(30):
        want, got = forced_scalar_results(getattr(sg, op)(x * 1.0), [x], [rng.normal(size=12) * 3])
        assert _bits_equal(got, want), (got, want)


@pytest.mark.parametrize("shape, axis", [((12,), None), ((3, 10), 1), ((10, 3), 0), ((10, 1), 0),
                                         ((2, 3, 9), (1, 2)), ((9, 2, 3), (0, 1)), ((150,), None),
                                         ((8,), None), ((2, 8), 1), ((7,), None)])
def test_scalar_sums_add_in_numpy_order(shape, axis):
    # pairwise along the innermost axes, one after another along the outer ones: with cancellation
    # ([1, 1e16, -1e16, ...]) another order gives another number, not another last bit. 8 numbers are the
    # first that numpy adds pairwise ((a + b) + (c + d)) + ...; 7 it adds in order
    x = sg.placeholder(shape, name="x")
    rng = np.random.default_rng(7)
    for _ in range(20):
        X = rng.normal(size=shape) * 10.0 ** rng.integers(-3, 17, size=shape)
        want, got = forced_scalar_results(sg.sum(x * 1.5, axis=axis), [x], [X])
        assert _bits_equal(got, want)


def test_an_elementwise_result_of_a_transposed_operand_keeps_numpy_layout():
    # exp(x.T) is laid out like x.T by numpy (order "K"); written into a C-ordered workspace buffer, the
    # sum after it would add its numbers in another order and differ in the last bit
    x = sg.placeholder((9, 13), name="x")
    y = sg.sum(sg.exp(x.T) * 1.5)
    rng = np.random.default_rng(3)
    for _ in range(10):
        X = rng.normal(size=(9, 13)) * 3
        planned, plain = sg.compile(y, inputs=[x]), sg.compile(y, inputs=[x])
        planned.backend = planned.backend.replace(scalar=False)
        plain.backend = plain.backend.replace(scalar=False, memory_planning=False)
        assert planned(X) == plain(X)


def _updates_only_step():
    """A step that returns nothing: the forward values are needed only for the shapes of gradients."""
    x, z = sg.placeholder((None, 2), name="x"), sg.placeholder((None, 3), name="z")
    W = sg.parameter(np.array([[0.5], [-1.5]]), name="W")
    (gW,) = sg.grad(sg.mean((x @ W) * z), [W])
    return x, z, W, sg.compile([], inputs=[x, z], updates=[(W, W - 0.1 * gW)])


@pytest.mark.parametrize("scalar", [False, True], ids=["numpy plan", "scalar plan"])
def test_a_value_read_only_for_its_shape_is_not_computed(rng, scalar):
    # mean's gradient is broadcast to the shape of (x @ W) * z, and mul's is summed back to x @ W's: at
    # known sizes neither product is needed; only the backward matmul x.T @ g is left
    x, z, W, fn = _updates_only_step()
    fn.backend = fn.backend.replace(scalar=scalar)
    X, Z = rng.normal(size=(4, 2)), rng.normal(size=(4, 3))
    fn(X, Z)
    assert fn.source.count("# matmul") == 1 and "# matmul [backward" in fn.source
    assert fn.source.count("# mul [update]") == 1          # 0.1 * gW; not (x @ W) * z
    assert "sum_like" not in fn.source
    np.testing.assert_allclose(W.value, np.array([[0.5], [-1.5]]) - 0.1 * X.T @ Z.sum(1, keepdims=True) / 12,
                               rtol=1e-14)


@pytest.mark.parametrize("x_shape, g_shape", [((None, 1), (None, 3)), ((None,), (4, None)), ((None, 1), (5, None, 3))],
                         ids=["size-1 axis", "leading axis", "both"])
def test_sum_like_at_known_sizes_is_the_same_sum(rng, x_shape, g_shape):
    from staticgrad.ops.broadcast import _sum_like_kernel
    x = sg.placeholder(x_shape, name="x", requires_grad=True)
    z = sg.placeholder(g_shape, name="z")
    (gx,) = sg.grad(sg.sum(sg.sin(x * z)), [x])
    assert gx.op == "sum_like"
    fn = sg.compile(gx, inputs=[x, z])
    fn.backend = fn.backend.replace(scalar=False)
    X = rng.normal(size=tuple(7 if d is None else d for d in x_shape))
    Z = rng.normal(size=tuple(7 if d is None else d for d in g_shape))
    want = _sum_like_kernel(np.cos(X * Z) * Z, X)
    got = fn(X, Z)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    # one np.sum is the kernel's own call; two (leading and size-1 axes) stay sum_like
    assert ("sum_like" in fn.source) == (len(g_shape) > len(x_shape) and 1 in x_shape)


def test_a_broadcast_to_the_size_already_there_makes_no_call(rng):
    # a grad_output of run-time size is broadcast_like y; at the size y has it passes as is
    v = sg.placeholder((None, 3), requires_grad=True, name="v")
    go = sg.placeholder((None, 3), name="go")
    fn = sg.compile(sg.grad(sg.tanh(v), v, grad_output=go), inputs=[v, go])
    fn.backend = fn.backend.replace(scalar=False)
    V, G = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    np.testing.assert_array_equal(fn(V, G), G * (1 - np.tanh(V) ** 2))
    assert "broadcast" not in fn.source
    np.testing.assert_array_equal(fn(V, G[:1]), G[:1] * (1 - np.tanh(V) ** 2))


@pytest.mark.parametrize("power", [2.0, -1.0, 0.5, 3.0])
@pytest.mark.parametrize("fed", [False, True], ids=["constant", "fed number"])
def test_scalar_power_rounds_like_numpys_one_exponent_shortcuts(power, fed):
    # numpy's loop, given one exponent, computes x*x for 2, 1/x for -1 and sqrt for 0.5, which round
    # differently from pow on about one number in a thousand; the scalar code must too
    x = sg.placeholder((8,), name="x")
    y = sg.placeholder((), name="y")
    e = y if fed else power
    rng = np.random.default_rng(int(power * 10) + 20 + fed)
    for _ in range(60):
        X = np.abs(rng.normal(size=8)) * 10.0 ** rng.uniform(-5, 5, size=8)
        want, got = forced_scalar_results(x ** e - y * 0.0, [x, y], [X, np.array(power)])
        assert _bits_equal(got, want), (power, X, got, want)


LAYOUT_CASES = {
    "advanced index": (lambda x: sg.sum(x[:, np.array([1, 1, 2, 0])] * 1.7), (9, 13), np.ascontiguousarray),
    "stack of transposes": (lambda x: sg.sum(sg.stack([sg.exp(x.T), sg.exp(x.T)], -1) * 3.0), (9, 13),
                            np.ascontiguousarray),
    "Fortran-ordered feed": (lambda x: sg.sum(sg.exp(x) * 1.5), (9, 13), np.asfortranarray),
}


@pytest.mark.parametrize("case", LAYOUT_CASES, ids=str)
def test_planned_sums_add_in_the_order_unplanned_ones_do(case):
    # numpy lays a fresh result out like its operand; a C-ordered out= buffer in its place made a later
    # sum add in another order (1-2 ulp on most feeds)
    build, shape, layout = LAYOUT_CASES[case]
    x = sg.placeholder(shape, name="x")
    planned, plain = sg.compile(build(x), inputs=[x]), sg.compile(build(x), inputs=[x])
    planned.backend = planned.backend.replace(scalar=False)
    plain.backend = plain.backend.replace(scalar=False, memory_planning=False)
    rng = np.random.default_rng(5)
    for _ in range(40):
        X = layout(rng.normal(size=shape))
        assert planned(X) == plain(X)


def test_a_matrix_product_with_a_broadcast_operand_has_the_bits_of_a_fresh_one():
    # grad(sum(1 - x @ W)) multiplies x.T by a folded broadcast of -1: numpy skips BLAS for a step of 0
    x = sg.placeholder((None, 4), name="x")
    W = sg.parameter(np.ones((4, 1)), name="W")
    (g,) = sg.grad(sg.sum(1.0 - x @ W), [W])
    fast, slow = sg.compile(g, inputs=[x]), sg.compile(g, inputs=[x], optimize=False)
    fast.backend = fast.backend.replace(scalar=False)
    slow.backend = slow.backend.replace(scalar=False)
    rng = np.random.default_rng(6)
    for _ in range(20):
        X = rng.normal(size=(40, 4))
        np.testing.assert_array_equal(fast(X), slow(X))


def test_scalar_code_leaves_sums_over_transposed_values_to_numpy():
    # numpy adds a transposed view in memory order; scalar code would add it in the order of its axes
    x = sg.placeholder((3, 3), name="x")
    y = sg.sum(x.T) + sg.sum(sg.clip(x.T, -1.0, 1.0))
    fn = sg.compile(y, inputs=[x])
    rng = np.random.default_rng(0)
    for _ in range(300):
        v = rng.normal(size=(3, 3)) * 3
        assert fn(v) == np.sum(v.T) + np.sum(np.clip(v.T, -1.0, 1.0))
    assert fn.program.kind == "numpy"
