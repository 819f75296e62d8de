"""The pass ledger (fn.report()) and custom pipelines given by name or by function."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import passes
from staticgrad.lower.costs import costs
from staticgrad.passes import DEFAULT, PASSES, PassStats

ROW_KEYS = {"pass", "nodes_before", "nodes_after", "seconds", "changed", "removed", "added", "fixed_point",
            "flops", "peak_bytes", "peak_bytes_unplanned"}


def mlp_step(rng):
    x = sg.placeholder((None, 4), name="x")
    t = sg.placeholder((None,), dtype="int64", name="t")
    W1 = sg.parameter(rng.normal(size=(4, 8)), name="W1")
    b1 = sg.parameter(np.zeros(8), name="b1")
    W2 = sg.parameter(rng.normal(size=(8, 3)), name="W2")
    b2 = sg.parameter(np.zeros(3), name="b2")
    loss = sg.softmax_cross_entropy(sg.tanh(x @ W1 + b1) @ W2 + b2, t)
    params = [W1, b1, W2, b2]
    return x, t, loss, sg.grad(loss, params)


def test_default_pipeline_is_a_list_of_known_names():
    assert isinstance(DEFAULT, list) and DEFAULT
    assert set(DEFAULT) <= set(PASSES)
    assert {"constant_fold", "prune", "simplify", "stabilize", "cse", "dce"} <= set(DEFAULT)


def test_one_row_per_pass_run_with_the_documented_keys(rng):
    x, t, loss, grads = mlp_step(rng)
    fn = sg.compile([loss, *grads], inputs=[x, t])
    rows = fn.report().rows
    assert [r["pass"] for r in rows] == DEFAULT
    for r in rows:
        assert ROW_KEYS <= set(r), ROW_KEYS - set(r)
        assert r["seconds"] >= 0
        assert isinstance(r["fixed_point"], bool)
        assert all(isinstance(n, int) and n > 0 for n in list(r["removed"].values()) + list(r["added"].values()))


def test_rows_chain_and_add_up(rng):
    x, t, loss, grads = mlp_step(rng)
    fn = sg.compile([loss, *grads], inputs=[x, t])
    rows = fn.report().rows
    for before, after in zip(rows, rows[1:]):
        assert before["nodes_after"] == after["nodes_before"]
    for r in rows:
        net = sum(r["added"].values()) - sum(r["removed"].values())
        assert r["nodes_after"] - r["nodes_before"] == net, r
        if not r["added"] and not r["removed"]:
            assert r["nodes_before"] == r["nodes_after"]
    assert rows[-1]["nodes_after"] == fn.graph.number_of_nodes() == fn.report().summary["nodes"]
    assert rows[-1]["nodes_after"] < rows[0]["nodes_before"]


def test_costs_in_the_last_row_are_those_of_the_compiled_graph(rng):
    x, t, loss, grads = mlp_step(rng)
    fn = sg.compile([loss, *grads], inputs=[x, t])
    last = fn.report().rows[-1]
    want = costs(fn.ir)
    assert (last["flops"], last["peak_bytes"], last["peak_bytes_unplanned"]) == \
        (want["flops"], want["peak_bytes"], want["peak_bytes_unplanned"])
    for r in fn.report().rows:
        assert r["flops"] > 0 and 0 < r["peak_bytes"] <= r["peak_bytes_unplanned"]


def test_cse_row_says_which_ops_went():
    a, b = sg.placeholder((3,), name="a"), sg.placeholder((3,), name="b")
    fn = sg.compile(a * b + a * b, inputs=[a, b])
    (cse_row,) = [r for r in fn.report().rows if r["pass"] == "cse" and r["removed"]]
    assert cse_row["removed"] == {"mul": 1} and cse_row["added"] == {}
    assert cse_row["changed"] == 1
    assert cse_row["flops"] < fn.report().rows[0]["flops"]


def test_summary_describes_the_latest_plan(rng):
    x, t, loss, grads = mlp_step(rng)
    fn = sg.compile([loss, *grads], inputs=[x, t])
    fn(rng.normal(size=(6, 4)), rng.integers(0, 3, size=6))
    summary = fn.report().summary
    assert {"plans", "peak_bytes", "peak_bytes_unplanned", "workspace_slots", "in_place"} <= set(summary)
    assert summary["plans"] == 1
    assert summary["peak_bytes"] < summary["peak_bytes_unplanned"]


def test_report_prints_as_a_table(rng):
    x, t, loss, grads = mlp_step(rng)
    fn = sg.compile([loss, *grads], inputs=[x, t])
    fn(rng.normal(size=(6, 4)), rng.integers(0, 3, size=6))
    report = fn.report()
    text = str(report)
    lines = text.splitlines()
    assert "pass" in lines[0] and "before" in lines[0] and "after" in lines[0] and "flops" in lines[0]
    body = lines[2:2 + len(report.rows)]
    for line, row in zip(body, report.rows):
        assert line.split()[0] == row["pass"]
        assert f"{row['nodes_before']}" in line.split() and f"{row['nodes_after']}" in line.split()
        assert f"{row['flops']:,}" in line
    assert "-1 mul" in text or "-1 " in text        # ops removed are spelled out
    assert f"peak_bytes: {report.summary['peak_bytes']}" in text
    assert repr(report) == text


def test_custom_pipeline_by_name():
    a, b = sg.placeholder((3,), name="a"), sg.placeholder((3,), name="b")
    fn = sg.compile(a * b + a * b - 0.0, inputs=[a, b], passes=["cse", "dce"])
    assert [r["pass"] for r in fn.report().rows] == ["cse", "dce"]
    ops = [op for _, op in fn.graph.nodes(data="op")]
    assert ops.count("mul") == 1 and ops.count("sub") == 1          # no simplify: - 0.0 stays
    np.testing.assert_allclose(fn(np.ones(3), np.full(3, 2.0)), np.full(3, 4.0))


def test_custom_pipeline_by_function():
    a, b = sg.placeholder((3,), name="a"), sg.placeholder((3,), name="b")
    by_fn = sg.compile(a * b + a * b - 0.0, inputs=[a, b], passes=[PASSES["simplify"], PASSES["cse"]])
    by_name = sg.compile(a * b + a * b - 0.0, inputs=[a, b], passes=["simplify", "cse"])
    assert [r["pass"] for r in by_fn.report().rows] == ["simplify", "cse"]
    assert by_fn.report().summary["ops"] == by_name.report().summary["ops"] == {"add": 1, "mul": 1,
                                                                                 "placeholder": 2}


def test_a_pass_written_by_the_user_gets_its_row():
    def double_every_constant(graph):
        """Multiply every constant by 2 (a user's pass: it does change results)."""
        n = 0

        def visit(new, node):
            nonlocal n
            if node.op == "constant":
                new.add(node.copy(value=node.value * 2))    # nodes are shared between graphs: add copies
                n += 1
            return node.id
        return graph.rebuild(visit), PassStats("double_constants", changed=n)

    x = sg.placeholder((2,), name="x")
    fn = sg.compile(x * 3.0, inputs=[x], passes=[double_every_constant, "dce"])
    rows = fn.report().rows
    assert rows[0]["pass"] == "double_constants" and rows[0]["changed"] == 1
    np.testing.assert_allclose(fn(np.ones(2)), [6.0, 6.0])
    # the unoptimized graph the function keeps is untouched by a pass that edits nodes in place
    np.testing.assert_allclose(sg.compile(x * 3.0, inputs=[x], optimize=False)(np.ones(2)), [3.0, 3.0])


def test_a_pass_that_returns_only_a_graph_is_named_after_its_function():
    def do_nothing(graph):
        return graph

    x = sg.placeholder((2,), name="x")
    fn = sg.compile(x + 1, inputs=[x], passes=[do_nothing])
    (row,) = fn.report().rows
    assert row["pass"] == "do_nothing"
    assert row["nodes_before"] == row["nodes_after"] and row["removed"] == row["added"] == {}


def test_empty_pipeline_and_unoptimized_have_no_rows():
    x = sg.placeholder((2,), name="x")
    assert sg.compile(x * 1, inputs=[x], passes=[]).report().rows == []
    assert sg.compile(x * 1, inputs=[x], optimize=False).report().rows == []
    ops = [op for _, op in sg.compile(x * 1, inputs=[x], passes=[]).graph.nodes(data="op")]
    assert ops.count("mul") == 1


def test_unknown_pass_name_is_a_clear_error():
    x = sg.placeholder((2,), name="x")
    with pytest.raises(ValueError, match="no_such_pass") as err:
        sg.compile(x + 1, inputs=[x], passes=["cse", "no_such_pass"])
    assert "cse" in str(err.value)      # lists the known passes


def test_resolve_maps_names_and_keeps_functions():
    def mine(graph):
        return graph

    assert passes.resolve(["cse", mine]) == [PASSES["cse"], mine]


def test_run_pipeline_returns_the_graph_and_rows():
    x = sg.placeholder((2,), name="x")
    from staticgrad.graph import Graph
    y = (x - 0.0) * 1
    graph = Graph.from_tensors([y], inputs=[x])
    new, rows = passes.run_pipeline(graph, ["simplify", "dce"])
    assert [r["pass"] for r in rows] == ["simplify", "dce"]
    assert new.outputs == [x.id]


def test_the_table_shows_peak_bytes_with_and_without_planning_before_any_call():
    # issue 3: fn.report() shows peak bytes with and without planning (the rows carry both from compile on)
    x = sg.placeholder((4, 3), name="x")
    W = sg.parameter(np.ones((3, 2)), name="W")
    loss = sg.sum(sg.tanh(x @ W))
    fn = sg.compile([loss, *sg.grad(loss, [W])], inputs=[x])
    report = fn.report()
    header, _, *body = str(report).splitlines()
    assert "peak B" in header and "unplanned" in header
    last = report.rows[-1]
    assert last["peak_bytes"] < last["peak_bytes_unplanned"]
    assert str(last["peak_bytes_unplanned"]) in body[len(report.rows) - 1].split()


def test_a_pass_that_changes_nothing_returns_its_input_and_its_row_says_so(rng):
    x, t, loss, grads = mlp_step(rng)
    fn = sg.compile([loss, *grads], inputs=[x, t])
    graph, rows = passes.run_pipeline(fn.ir, ["cse", "dce"])
    assert graph is fn.ir                      # (already optimized: no pass has anything left to do)
    for row in rows:
        assert row["changed"] == 0 and row["removed_ids"] == row["added_ids"] == row["replaced_ids"] == []


def test_graphs_over_keep_up_to_nodes_keep_no_copies_for_the_report(rng, monkeypatch):
    x, t, loss, grads = mlp_step(rng)
    small = sg.compile([loss, *grads], inputs=[x, t])
    monkeypatch.setattr(passes, "KEEP_UP_TO", 10)
    big = sg.compile([loss, *grads], inputs=[x, t])
    assert small.unoptimized is not None and big.unoptimized is None
    rows = big.report().rows
    assert [r["pass"] for r in rows] == DEFAULT and all(r["flops"] is None for r in rows)
    assert any(r["flops"] is not None for r in small.report().rows)
    with pytest.raises(ValueError, match="KEEP_UP_TO"):
        sg.diff_dot(big)
    X, T = rng.normal(size=(5, 4)), np.array([0, 1, 2, 1, 0])
    for a, b in zip(small(X, T), big(X, T)):
        np.testing.assert_array_equal(a, b)


def test_an_idempotent_pass_is_skipped_on_the_graph_it_left_and_run_again_once_it_changed(rng, monkeypatch):
    x, t, loss, grads = mlp_step(rng)
    from staticgrad.graph import Graph
    graph = Graph.from_tensors([loss, *grads], inputs=[x, t])
    calls = []

    def counted(g):
        calls.append(g)
        return passes.cse.run(g)
    monkeypatch.setattr(passes, "IDEMPOTENT", (counted, passes.dce.run))
    new, rows = passes.run_pipeline(graph, [counted, "stabilize", counted, "simplify", counted])
    # (the first CSE merged twins; stabilize left its graph alone, so the second was skipped; simplify
    # then rewrote x*1 and x+0 and the third ran)
    assert rows[0]["changed"] > 0 and rows[1]["changed"] == 0 and rows[3]["changed"] > 0
    assert len(calls) == 2 and calls[1] is not calls[0]
    assert rows[2]["changed"] == 0 and rows[2]["nodes_after"] == rows[2]["nodes_before"]
    again, _ = passes.run_pipeline(new, ["cse", "simplify", "dce"])
    assert again is new


def test_a_pass_of_ours_that_changed_nothing_is_skipped_until_the_graph_changes(rng, monkeypatch):
    x, t, loss, grads = mlp_step(rng)
    from staticgrad.graph import Graph
    graph, _ = passes.run_pipeline(Graph.from_tensors([loss, *grads], inputs=[x, t]), DEFAULT)
    calls = []

    def counted(g):
        calls.append(g)
        return passes.simplify.run(g)
    monkeypatch.setitem(passes.PASSES, "simplify", counted)
    monkeypatch.setattr(passes, "_OURS", frozenset(passes.PASSES.values()))
    # An optimized graph: simplify finds nothing; the second is skipped, the third follows a change.
    def grows(g):          # a user's pass: adds a node nothing reads (so DCE has work) and is never skipped
        from staticgrad.graph import Node
        new = Graph(dict(g.nodes), g.outputs, g.updates, g.inputs)
        new.add(Node("constant", (), {}, (), np.float64, value=np.float64(2.0)))
        return new
    _, rows = passes.run_pipeline(graph, ["simplify", "simplify", grows, grows, "simplify"])
    assert len(calls) == 2 and calls[0] is graph and calls[1] is not graph
    assert [r["changed"] for r in rows] == [0, 0, None, None, 0]
    assert rows[3]["nodes_after"] == rows[3]["nodes_before"] + 1
