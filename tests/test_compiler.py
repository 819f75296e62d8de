"""sg.compile: the optimized graph (fn.graph), passes keeping results, roles, errors, fn.source, fn.report()."""
import ast
import sys

import networkx as nx
import numpy as np
import pytest

import staticgrad as sg


def here():
    """``test_compiler.py:N`` for the caller's line, to find in messages and generated code."""
    return f"test_compiler.py:{sys._getframe(1).f_lineno}"


def op_count(fn, op, role=None):
    """Nodes of fn.graph running ``op``, alone or as part of a fused op ("matmul+add")."""
    return sum(1 for _, d in fn.graph.nodes(data=True)
               if op in d["op"].split("+") and (role is None or d["role"] == role))


def build_mlp(rng, x_requires_grad=False, request_x=False, batch=None):
    """A 3-layer MLP classifier training step: loss, gradients of its 6 parameters (and maybe of x)."""
    x = sg.placeholder((batch, 4), name="x", requires_grad=x_requires_grad)
    t = sg.placeholder((batch,), dtype="int64", name="t")
    params = []
    for k, (m, n) in enumerate([(4, 5), (5, 6), (6, 3)], 1):
        params += [sg.parameter(rng.normal(size=(m, n)) / np.sqrt(m), name=f"W{k}"),
                   sg.parameter(rng.normal(size=n) * 0.1, name=f"b{k}")]
    h = x
    for k in range(3):
        h = h @ params[2 * k] + params[2 * k + 1]
        if k < 2:
            h = sg.tanh(h)
    loss = sg.softmax_cross_entropy(h, t)
    wrt = params + ([x] if request_x else [])
    return x, t, params, loss, sg.grad(loss, wrt)


def mlp_feeds(rng, n=8):
    return rng.normal(size=(n, 4)), rng.integers(0, 3, size=n)


# ------------------------------------------------------------------ the MLP training step
def test_mlp_step_has_exactly_8_matmuls(rng, compile_both):
    x, t, params, loss, grads = build_mlp(rng)
    _, fn = compile_both([loss] + grads, mlp_feeds(rng), inputs=[x, t])
    assert op_count(fn, "matmul") == 8
    assert op_count(fn, "matmul", "forward") == 3
    assert op_count(fn, "matmul", "backward") == 5


def test_mlp_step_with_input_gradient_has_9_matmuls(rng, compile_both):
    x, t, params, loss, grads = build_mlp(rng, x_requires_grad=True, request_x=True)
    _, fn = compile_both([loss] + grads, mlp_feeds(rng), inputs=[x, t])
    assert op_count(fn, "matmul") == 9


def test_input_requiring_grad_but_not_asked_for_costs_nothing(rng, compile_both):
    x, t, params, loss, grads = build_mlp(rng, x_requires_grad=True, request_x=False)
    _, fn = compile_both([loss] + grads, mlp_feeds(rng), inputs=[x, t])
    assert op_count(fn, "matmul") == 8


def test_mlp_step_with_updates_trains_and_matches_unoptimized(rng, compile_both):
    x, t, params, loss, grads = build_mlp(rng)
    updates = [(p, p - 0.5 * g) for p, g in zip(params, grads)]
    X = rng.normal(size=(32, 4))
    T = np.argmax(X[:, :3], axis=1)          # learnable labels
    grad_fn = sg.compile(grads, inputs=[x, t])
    before = [p.value.copy() for p in params]
    expected_grads = grad_fn(X, T)
    first, fn = compile_both(loss, (X, T), inputs=[x, t], updates=updates)
    assert op_count(fn, "matmul") == 8
    for p, old, g in zip(params, before, expected_grads):
        np.testing.assert_allclose(p.value, old - 0.5 * g, err_msg=p.name)
    losses = [float(fn(X, T)) for _ in range(60)]
    assert losses[-1] < 0.5 * float(first)


def test_nothing_is_computed_for_a_branch_without_requires_grad(rng, compile_both):
    # sin's VJP needs cos; with x not requiring grad, no cos may appear anywhere.
    for x_grad, cos_expected in [(False, 0), (True, 1)]:
        x = sg.placeholder((None, 3), name="x", requires_grad=x_grad)
        W = sg.parameter(rng.normal(size=(3, 2)), name="W")
        loss = sg.sum(sg.tanh(sg.sin(x * 2.0) @ W))
        wrt = [W, x] if x_grad else [W]
        _, fn = compile_both(sg.grad(loss, wrt), (rng.normal(size=(4, 3)),), inputs=[x])
        assert op_count(fn, "cos") == cos_expected
        assert op_count(fn, "matmul") == 2 + x_grad


def test_nothing_is_computed_for_a_branch_of_constants(rng, compile_both):
    W = sg.parameter(rng.normal(size=3), name="W")
    c = sg.constant(rng.normal(size=3), name="c")
    y = sg.sum(W * sg.sin(c))
    _, fn = compile_both(sg.grad(y, W))
    assert op_count(fn, "cos") == 0 and op_count(fn, "sin") == 0   # sin(c) folded, never differentiated


# ------------------------------------------------------------------ fn.graph
def test_graph_is_a_networkx_digraph_with_the_documented_attributes(rng):
    x, t, params, loss, grads = build_mlp(rng)
    fn = sg.compile([loss] + grads, inputs=[x, t], updates=[(p, p - 0.1 * g) for p, g in zip(params, grads)])
    assert isinstance(fn.graph, nx.DiGraph)
    assert nx.is_directed_acyclic_graph(fn.graph)
    for _, data in fn.graph.nodes(data=True):
        assert isinstance(data["op"], str)
        assert data["role"] in ("forward", "backward", "update")
        assert isinstance(data["shape"], tuple) and all(d is None or isinstance(d, int) for d in data["shape"])
        assert np.dtype(data["dtype"]) == data["dtype"]
    ops = {d["op"] for _, d in fn.graph.nodes(data=True)}
    assert {"placeholder", "parameter", "softmax_cross_entropy"} <= ops
    assert sum(d["op"] == "parameter" for _, d in fn.graph.nodes(data=True)) == 6
    assert sum(d["op"] == "placeholder" for _, d in fn.graph.nodes(data=True)) == 2
    shapes = {d["shape"] for _, d in fn.graph.nodes(data=True) if d["op"] == "parameter"}
    assert shapes == {(4, 5), (5,), (5, 6), (6,), (6, 3), (3,)}


def test_edges_go_from_inputs_to_consumers(rng):
    x = sg.placeholder((None, 3), name="x")
    W = sg.parameter(rng.normal(size=(3, 2)), name="W")
    fn = sg.compile(sg.tanh(x @ W), inputs=[x])
    g = fn.graph
    (mm,) = [n for n, d in g.nodes(data=True) if d["op"] == "matmul"]
    (th,) = [n for n, d in g.nodes(data=True) if d["op"] == "tanh"]
    preds = {g.nodes[p]["op"] for p in g.predecessors(mm)}
    assert preds == {"placeholder", "parameter"}
    assert list(g.predecessors(th)) == [mm]
    assert g.nodes[mm]["shape"] == (None, 2) and g.nodes[th]["dtype"] == np.float64


def test_roles_of_a_training_step(rng, compile_both):
    x, t, params, loss, grads = build_mlp(rng)
    _, fn = compile_both(loss, mlp_feeds(rng), inputs=[x, t], updates=[(p, p - 0.1 * g) for p, g in zip(params, grads)])
    g = fn.graph
    roles = nx.get_node_attributes(g, "role")
    assert op_count(fn, "matmul", "forward") == 3
    assert op_count(fn, "matmul", "backward") == 5
    assert op_count(fn, "softmax_cross_entropy", "forward") == 1
    assert op_count(fn, "sub", "update") == 6          # p - 0.1 * g, one per parameter
    assert all(roles[n] == "forward" for n, d in g.nodes(data=True) if d["op"] in ("placeholder", "parameter"))
    # forward nodes feed the outputs; nothing the outputs need is labelled update
    needed = set(fn.ir.outputs)
    for o in fn.ir.outputs:
        needed |= nx.ancestors(g, o)
    for n in needed:
        assert roles[n] != "update", g.nodes[n]
    for n, role in roles.items():
        if role == "forward":
            assert n in needed, g.nodes[n]


def test_leaves_only_the_updates_read_are_update_nodes():
    x = sg.placeholder((None, 2), name="x")
    lr = sg.placeholder((), name="lr")
    W = sg.parameter(np.ones((2, 1)), name="W")
    V = sg.parameter(np.ones(3), name="V")          # decays each step; the loss never reads it
    loss = sg.sum(x @ W)
    (gW,) = sg.grad(loss, [W])
    fn = sg.compile(loss, inputs=[x, lr], updates=[(W, W - lr * gW), (V, V * 0.9)])
    roles = {d["name"]: d["role"] for _, d in fn.graph.nodes(data=True) if d["name"]}
    assert roles == {"x": "forward", "W": "forward", "lr": "update", "V": "update"}
    fn(np.ones((4, 2)), 0.5)
    np.testing.assert_array_equal(V.value, np.full(3, 0.9))


def test_forward_only_function_has_no_backward_or_update_nodes(rng):
    x, t, params, loss, grads = build_mlp(rng)
    fn = sg.compile(loss, inputs=[x, t])        # gradients exist but are not asked for
    assert set(nx.get_node_attributes(fn.graph, "role").values()) == {"forward"}
    assert op_count(fn, "matmul") == 3


def test_graph_holds_only_what_outputs_and_updates_need(rng, compile_both):
    x = sg.placeholder((None, 3), name="x")
    W = sg.parameter(rng.normal(size=(3, 3)), name="W")
    V = sg.parameter(rng.normal(size=(3, 3)), name="V")
    h = x @ W
    unused = sg.exp(h) @ V            # built on the same input, never asked for
    loss = sg.sum(sg.square(h))
    gW, gV = sg.grad(loss + sg.sum(unused), [W, V])
    gW_alone = sg.grad(loss, W)
    _, fn = compile_both([loss], (rng.normal(size=(2, 3)),), inputs=[x], updates=[(W, W - 0.1 * gW_alone)])
    g = fn.graph
    assert op_count(fn, "exp") == 0
    assert "V" not in {d.get("name") for _, d in g.nodes(data=True)}
    roots = set(fn.ir.outputs) | {e for _, e in fn.ir.updates} | {p for p, _ in fn.ir.updates} | set(fn.ir.inputs)
    needed = set(roots)
    for r in roots:
        needed |= nx.ancestors(g, r)
    assert set(g.nodes) == needed


def test_unused_parameter_and_gradient_pieces_are_dropped(rng, compile_both):
    # loss = sum(x @ W) + 0*sum(V): gradient of V is 0 and is not asked for; V must not appear.
    x = sg.placeholder((None, 3), name="x")
    W = sg.parameter(rng.normal(size=(3, 2)), name="W")
    V = sg.parameter(rng.normal(size=(5,)), name="V")
    loss = sg.sum(x @ W) + sg.sum(V * V)
    gW = sg.grad(loss, W)
    out, fn = compile_both(gW, (np.ones((4, 3)),), inputs=[x])
    names = {d.get("name") for _, d in fn.graph.nodes(data=True) if d["op"] == "parameter"}
    assert "V" not in names
    np.testing.assert_allclose(out, np.full((3, 2), 4.0))


# ------------------------------------------------------------------ constant folding
BROADCASTS = ("broadcast_to", "broadcast_like")    # views of a constant may stay (they cost nothing)


def assert_nothing_left_to_fold(fn):
    """No node but a broadcast view computes, at every call, something that depends on constants only."""
    g = fn.graph
    for n in nx.topological_sort(g):
        data = g.nodes[n]
        if data["op"] in ("constant", "placeholder", "parameter") or data["op"] in BROADCASTS:
            continue
        leaves = {g.nodes[a]["op"] for a in nx.ancestors(g, n) if g.in_degree(a) == 0}
        assert leaves & {"placeholder", "parameter"}, f"{data['op']} ({data['source']}) is computed at every " \
            f"call from constants only:\n{fn.source}"


def test_constant_subexpression_is_folded(compile_both):
    x = sg.placeholder((None, 3), name="x")
    c1, c2 = sg.constant(2.0, name="c1"), sg.constant(3.0, name="c2")
    y = (c1 * c2) + x
    out, fn = compile_both(y, (np.ones((2, 3)),), inputs=[x])
    np.testing.assert_array_equal(out, np.full((2, 3), 7.0))
    assert op_count(fn, "constant") == 1
    assert op_count(fn, "mul") == 0
    assert_nothing_left_to_fold(fn)
    slow = sg.compile(y, inputs=[x], optimize=False)
    assert op_count(slow, "constant") == 2 and op_count(slow, "mul") == 1


def test_folding_a_constant_chain_keeps_dtype_and_value(compile_both):
    x = sg.placeholder((2,), dtype="float32", name="x")
    c = sg.constant(np.array([0.5, 2.0], dtype=np.float32))
    y = x * sg.exp(sg.log(c) * 2.0) + sg.sum(c)
    out, fn = compile_both(y, (np.array([1.0, 1.0], dtype=np.float32),), inputs=[x])
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [0.25 + 2.5, 4.0 + 2.5], rtol=1e-6)
    assert op_count(fn, "exp") == 0 and op_count(fn, "log") == 0
    assert_nothing_left_to_fold(fn)


def test_folding_inside_the_backward_graph(rng, compile_both):
    # d/dW sum(W * (c1 * c2)) is the constant 6 in every entry: nothing is left to run but constants.
    W = sg.parameter(rng.normal(size=(2, 2)), name="W")
    y = sg.sum(W * (sg.constant(2.0) * sg.constant(3.0)))
    out, fn = compile_both(sg.grad(y, W))
    np.testing.assert_array_equal(out, np.full((2, 2), 6.0))
    assert_nothing_left_to_fold(fn)


# ------------------------------------------------------------------ optimize=True == optimize=False
def _zoo(rng):
    """(outputs, inputs, feeds) for a spread of graphs, each with its gradients."""
    cases = {}
    x = sg.placeholder((None, 4), name="x", requires_grad=True)
    X = rng.normal(size=(3, 4))
    W = sg.parameter(rng.normal(size=(4, 4)), name="W")

    y = sg.sum(sg.softmax(x @ W, axis=-1) * sg.log_softmax(x, axis=-1))
    cases["softmax"] = ([y] + sg.grad(y, [x, W]), [x], (X,))

    y = sg.sum(sg.concatenate([x, x * 2.0], axis=1) ** 2) + sg.sum(sg.stack([x, sg.exp(x)], axis=0)[1])
    cases["concat_stack"] = ([y] + sg.grad(y, [x]), [x], (X,))

    y = sg.sum(x[:, 1:3] * x[:, ::2]) + sg.sum(sg.reshape(x, (-1, 2)) @ sg.constant(np.ones((2, 1))))
    cases["slices_reshape"] = ([y] + sg.grad(y, [x]), [x], (X,))

    y = sg.sum(sg.where(x > 0, x * x, -x) + sg.clip(x, -0.5, 0.5) + sg.maximum(x, 0.1) - sg.minimum(x, W[0]))
    cases["select"] = ([y] + sg.grad(y, [x, W]), [x], (X,))

    y = sg.mean(sg.logsumexp(x, axis=1)) + sg.max(x) + sg.sum(sg.mean(x, axis=0, keepdims=True) ** 2)
    cases["reduce"] = ([y] + sg.grad(y, [x]), [x], (X,))

    y = sg.sum(sg.softplus(x) + sg.sqrt(sg.abs(x) + 1) + sg.log1p(sg.square(x)) + sg.expm1(x * 0.1)
               + sg.sigmoid(x) * sg.cos(x))
    cases["unary"] = ([y] + sg.grad(y, [x]), [x], (X,))

    # the same subexpression built twice, a zero multiplier, identities: fodder for CSE and simplify
    a = sg.tanh(x @ W)
    b = sg.tanh(x @ W)
    y = sg.sum(a * b + 0.0 * a + 1.0 * b - (b - b) + a / 1.0)
    cases["redundant"] = ([y, a, b] + sg.grad(y, [x, W]), [x], (X,))

    y = sg.sum(sg.log(sg.sigmoid(x)) + sg.log(1 - sg.sigmoid(x)) + sg.log(sg.softmax(x, axis=1)))
    cases["stabilizable"] = ([y] + sg.grad(y, [x]), [x], (X * 5,))

    gx = sg.grad(sg.sum(sg.sin(x) * x), x)
    y2 = sg.sum(gx * gx)
    cases["second_order"] = ([y2] + sg.grad(y2, [x]), [x], (X,))

    # views (transpose, reshape, slices) of values still needed later: nothing may write through them
    h = sg.exp(x * 0.5)
    s = h.T * 2.0
    r = sg.reshape(h, (-1,))
    part = h[:, 1:] + 1.0
    y = sg.sum(h) + sg.sum(s) + sg.sum(r * r) + sg.sum(part * h[:, :3])
    cases["views"] = ([y, s, r, part, h] + sg.grad(y, [x]), [x], (X,))

    t = sg.placeholder((None,), dtype="int64", name="t")
    y = sg.softmax_cross_entropy(x @ W, t)
    cases["cross_entropy"] = ([y] + sg.grad(y, [x, W]), [x, t], (X, np.array([0, 3, 1])))
    return cases


ZOO_NAMES = ["softmax", "concat_stack", "slices_reshape", "select", "reduce", "unary", "redundant",
             "stabilizable", "second_order", "views", "cross_entropy"]


@pytest.mark.filterwarnings("error::DeprecationWarning")
@pytest.mark.parametrize("name", ZOO_NAMES)
def test_optimize_does_not_change_results(name, rng, compile_both):
    outputs, inputs, feeds = _zoo(rng)[name]
    out, fn = compile_both(outputs, feeds, inputs=inputs)
    assert all(np.all(np.isfinite(o)) for o in out)


def test_optimized_graph_is_no_bigger(rng):
    for name, (outputs, inputs, _) in _zoo(rng).items():
        fast = sg.compile(outputs, inputs=inputs)
        slow = sg.compile(outputs, inputs=inputs, optimize=False)
        assert fast.graph.number_of_nodes() <= slow.graph.number_of_nodes(), name


# ------------------------------------------------------------------ batch size and shapes
def test_batch_size_can_change_between_calls(rng, compile_both):
    x = sg.placeholder((None, 3), name="x")
    W = sg.parameter(rng.normal(size=(3, 2)), name="W")
    b = sg.parameter(rng.normal(size=2), name="b")
    y = sg.mean(sg.tanh(x @ W + b))
    gW, gb = sg.grad(y, [W, b])
    fn = sg.compile([y, gW, gb], inputs=[x])
    for n in (1, 5, 2, 5, 1, 17):          # repeated sizes reuse what the first call of that size built
        X = rng.normal(size=(n, 3))
        H = np.tanh(X @ W.value + b.value)
        S = (1 - H ** 2) / (2 * n)
        y_v, gW_v, gb_v = fn(X)
        np.testing.assert_allclose(y_v, H.mean())
        np.testing.assert_allclose(gW_v, X.T @ S)
        np.testing.assert_allclose(gb_v, S.sum(axis=0))
        compile_both([y, gW, gb], (X,), inputs=[x])


def test_static_shapes_are_inferred_while_building():
    x = sg.placeholder((None, 3), name="x")
    W = sg.parameter(np.ones((3, 5)), name="W")
    assert (x @ W).shape == (None, 5)
    assert (x @ W + np.ones(5)).shape == (None, 5)
    assert sg.sum(x @ W, axis=0).shape == (5,)
    assert sg.sum(x, axis=1, keepdims=True).shape == (None, 1)
    assert sg.mean(x).shape == ()
    assert (x @ W).T.shape == (5, None)
    assert sg.concatenate([x, x], axis=1).shape == (None, 6)
    assert x[:, 1:].shape == (None, 2)


# ------------------------------------------------------------------ build-time errors
def test_matmul_shape_error_names_op_shapes_and_line():
    x = sg.placeholder((None, 3), name="x")
    W = sg.parameter(np.ones((4, 2)), name="W")
    with pytest.raises(sg.ShapeError) as info:
        line = here(); x @ W  # noqa: E702
    msg = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "matmul" in msg and "(None, 3)" in msg and "(4, 2)" in msg and line in msg


def test_broadcast_shape_error_names_op_shapes_and_line():
    x = sg.placeholder((None, 3), name="x")
    b = sg.parameter(np.ones(4), name="b")
    with pytest.raises(sg.ShapeError) as info:
        line = here(); sg.add(x, b)  # noqa: E702
    msg = str(info.value)
    assert "add" in msg and "(None, 3)" in msg and "(4,)" in msg and line in msg


def test_shape_error_inside_a_helper_points_at_the_helper_line():
    def layer(h, W):
        return sg.relu(h @ W), here()
    x = sg.placeholder((None, 3), name="x")
    with pytest.raises(sg.ShapeError) as info:
        layer(x, sg.parameter(np.ones((2, 2))))
    line = f"test_compiler.py:{layer.__code__.co_firstlineno + 1}"
    assert line in str(info.value)


@pytest.mark.parametrize("build, op", [
    (lambda x: sg.concatenate([x, sg.constant(np.ones((2, 4)))], axis=0), "concatenate"),
    (lambda x: sg.reshape(sg.constant(np.ones((2, 3))), (4,)), "reshape"),
    (lambda x: sg.sum(x, axis=2), "sum"),
    (lambda x: sg.maximum(x, sg.constant(np.ones((2, 2)))), "maximum"),
], ids=["concatenate", "reshape", "axis", "maximum"])
def test_other_shape_errors_name_the_op_and_the_line(build, op):
    x = sg.placeholder((None, 3), name="x")
    with pytest.raises(sg.ShapeError) as info:
        build(x)
    assert op in str(info.value) and "test_compiler.py:" in str(info.value)


def test_update_of_the_wrong_shape_is_a_build_error():
    W = sg.parameter(np.ones((2, 3)), name="W")
    with pytest.raises(sg.ShapeError, match="W"):
        sg.compile([], updates=[(W, sg.sum(W, axis=1))])


def test_only_parameters_can_be_updated():
    x = sg.placeholder((3,), name="x")
    with pytest.raises(TypeError):
        sg.compile([], updates=[(x, x + 1)])
    with pytest.raises(TypeError):
        sg.compile([], updates=[(sg.constant(np.ones(3)), x)])


def test_a_parameter_updated_twice_is_an_error():
    W = sg.parameter(np.ones(3), name="W")
    with pytest.raises(ValueError, match="W"):
        sg.compile([], updates=[(W, W + 1), (W, W + 2)])


def test_outputs_needing_a_placeholder_missing_from_inputs_is_an_error():
    x = sg.placeholder((3,), name="x")
    y = sg.placeholder((3,), name="y")
    with pytest.raises(ValueError, match="'y'"):
        sg.compile(x + y, inputs=[x])


# ------------------------------------------------------------------ fn.source
def _run_def(source):
    tree = ast.parse(source)
    (run,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"]
    return run


def test_source_is_straight_line_code_that_mentions_user_lines(rng):
    x = sg.placeholder((None, 3), name="x")
    W = sg.parameter(rng.normal(size=(3, 2)), name="W")
    h = sg.tanh(x @ W); line_h = here()  # noqa: E702
    loss = sg.sum(h * h); line_loss = here()  # noqa: E702
    gW = sg.grad(loss, W); line_grad = here()  # noqa: E702
    fn = sg.compile([loss, gW], inputs=[x])
    src = fn.source
    run = _run_def(src)
    for stmt in ast.walk(run):
        assert not isinstance(stmt, (ast.For, ast.While, ast.If, ast.With, ast.Try, ast.IfExp,
                                     ast.ListComp, ast.GeneratorExp, ast.Lambda)), ast.dump(stmt)
    for line in (line_h, line_loss, line_grad):
        assert line in src, (line, src)
    assert "matmul" in src and "tanh" in src


def test_source_drops_intermediates_after_their_last_use(rng):
    x = sg.placeholder((None, 3), name="x")
    h = x
    for _ in range(6):
        h = sg.sin(h) * 1.5 + x
    fn = sg.compile(sg.sum(h), inputs=[x])
    run = _run_def(fn.source)
    returned = {n.id for stmt in run.body if isinstance(stmt, ast.Return) for n in ast.walk(stmt)
                if isinstance(n, ast.Name)}
    stmts = run.body
    for k, stmt in enumerate(stmts):
        if not (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)):
            continue
        for target in stmt.targets:
            if not isinstance(target, ast.Name) or target.id in returned:
                continue
            later = stmts[k + 1:]
            dropped = any(
                (isinstance(s, ast.Delete) and any(isinstance(t, ast.Name) and t.id == target.id for t in s.targets))
                or (isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == target.id
                                                      for t in s.targets))
                for s in later)
            assert dropped, f"{target.id} is never dropped or reused:\n{fn.source}"


def test_source_can_be_executed_as_written(rng):
    x = sg.placeholder((None, 2), name="x")
    W = sg.parameter(rng.normal(size=(2, 2)), name="W")
    fn = sg.compile(sg.sum(sg.exp(x @ W)), inputs=[x])
    compile(fn.source, "<fn.source>", "exec")       # valid Python
    X = rng.normal(size=(3, 2))
    np.testing.assert_allclose(fn(X), np.exp(X @ W.value).sum())


# ------------------------------------------------------------------ fn.report()
def test_report_rows_describe_each_pass(rng):
    x, t, params, loss, grads = build_mlp(rng)
    fn = sg.compile([loss] + grads, inputs=[x, t])
    unopt = sg.compile([loss] + grads, inputs=[x, t], optimize=False)
    rows = fn.report().rows
    assert len(rows) >= 3
    for row in rows:
        assert {"pass", "nodes_before", "nodes_after", "seconds"} <= set(row)
        assert isinstance(row["pass"], str)
        assert isinstance(row["nodes_before"], int) and isinstance(row["nodes_after"], int)
        assert row["seconds"] >= 0
    names = [r["pass"] for r in rows]
    for required in ("constant_fold", "prune", "dce"):
        assert required in names
    assert rows[0]["nodes_before"] == unopt.graph.number_of_nodes()
    for a, b in zip(rows, rows[1:]):
        assert b["nodes_before"] == a["nodes_after"]
    assert rows[-1]["nodes_after"] == fn.graph.number_of_nodes()
    assert "constant_fold" in str(fn.report())


def test_unoptimized_report_has_no_pass_rows():
    x = sg.placeholder((3,), name="x")
    fn = sg.compile(sg.sum(x * 2.0), inputs=[x], optimize=False)
    assert list(fn.report().rows) == []


# ------------------------------------------------------------------ deep graphs
@pytest.mark.slow
def test_chain_of_20000_ops_without_recursion_error():
    limit = sys.getrecursionlimit()
    x = sg.parameter(np.array([0.5, -0.3]), name="x")
    c = sg.parameter(1.0001, name="c")       # a parameter, so the backward chain is not folded away
    d = sg.constant(0.5)
    h = x
    for _ in range(10000):
        h = h * c
        h = h - d
    y = sg.sum(h)
    gx = sg.grad(y, x)
    fn = sg.compile([y, gx])
    y_v, gx_v = fn()
    assert sys.getrecursionlimit() == limit     # nobody raised the limit to get through
    assert 20000 > limit
    expected_h = np.array([0.5, -0.3])
    for _ in range(10000):
        expected_h = expected_h * 1.0001 - 0.5
    np.testing.assert_allclose(y_v, expected_h.sum(), rtol=1e-9)
    np.testing.assert_allclose(gx_v, np.full(2, 1.0001 ** 10000), rtol=1e-9)
    assert op_count(fn, "mul") >= 10000


# ------------------------------------------------------------------ passes leave the original alone
def _snapshot(graph):
    return {i: (n.op, tuple(n.inputs), n.shape, n.role, None if n.value is None else np.array(n.value).tolist())
            for i, n in graph.nodes.items()}


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_optimizing_leaves_the_unoptimized_graph_intact(name, rng):
    outputs, inputs, feeds = _zoo(rng)[name]
    reference = sg.compile(outputs, inputs=inputs, optimize=False)
    fn = sg.compile(outputs, inputs=inputs)
    assert _snapshot(fn.unoptimized) == _snapshot(reference.ir)
    # and the user's tensors still describe the same computation: compiling again gives the same graph
    again = sg.compile(outputs, inputs=inputs)
    assert [n.op for n in again.ir.nodes.values()] == [n.op for n in fn.ir.nodes.values()]


def test_the_zero_gradient_of_an_unused_wrt_is_a_function_of_it():
    # y does not depend on x: d y/d x is zeros of x's shape, and the function computing it takes x, as
    # it must when x has unknown dims (then only x's feed gives the shape)
    for shape in ((3,), (None,)):
        x = sg.placeholder(shape, requires_grad=True, name="x")
        W = sg.parameter(np.ones(3), name="W")
        y = sg.sum(W * W)
        (gx,) = sg.grad(y, [x])
        for optimize in (True, False):
            fn = sg.compile([y, gx], optimize=optimize)
            loss, g = fn({x: np.ones(3)})
            np.testing.assert_array_equal(g, np.zeros(3))
            assert {d["role"] for _, d in fn.graph.nodes(data=True) if d["op"] == "placeholder"} == {"forward"}
            with pytest.raises(sg.FeedError, match="'x'"):
                fn({})
