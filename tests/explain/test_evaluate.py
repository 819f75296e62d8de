"""The interpreter: loops run through their op's runner, bodies recorded iteration by iteration."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad.explain.evaluate import Iterations, evaluate
from staticgrad.explain.trace import feeds_by_id
from tests.explain.rnn_case import numpy_rnn, rnn
from tests.explain.test_loopdot import nested


def test_loops_evaluate_to_what_the_compiled_function_returns():
    case = rnn()
    fn, x = case["fn"], case["x"]
    for graph in (fn.ir, fn.unoptimized):
        values = evaluate(graph, feeds_by_id(fn, x))
        for i, expected in zip(graph.outputs, fn(x)):
            np.testing.assert_allclose(values[i], expected, rtol=1e-12)
        scans = [i for i, n in graph.nodes.items() if n.op == "scan"]
        assert all(isinstance(values[i], tuple) for i in scans)
    hs, _, loss = numpy_rnn(x, *[w.value for w in case["weights"]])
    values = evaluate(fn.ir, feeds_by_id(fn, x))
    assert values[fn.ir.outputs[0]] == pytest.approx(loss, rel=1e-12)
    assert evaluate(fn.ir, {})[fn.ir.outputs[0]] is None        # X not fed: nothing downstream either


def test_records_keep_the_first_and_last_iterations():
    case = rnn(T=10)
    fn, x = case["fn"], case["x"]
    hs, _, _ = numpy_rnn(x, *[w.value for w in case["weights"]])
    records = {}
    evaluate(fn.ir, feeds_by_id(fn, x), records=records, keep=2)
    forward = next(i for i, n in fn.ir.nodes.items() if n.op == "scan" and not n.attrs["reverse"])
    record = records[forward]["body"]
    assert isinstance(record, Iterations) and record.count == 10
    assert [k for k, _, _ in record.shown] == [0, 1, 8, 9]
    out = record.graph.outputs[0]
    for k, value in record.values(out):
        np.testing.assert_allclose(value, hs[k], rtol=1e-12)
    carry = record.graph.inputs[0]       # the carry each iteration starts from: h_{t-1}
    for k, value in record.values(carry):
        np.testing.assert_allclose(value, hs[k - 1] if k else 0.0, rtol=1e-12)
    with pytest.raises(KeyError, match="not in this body"):
        record.values(-1)
    nothing = {}
    evaluate(fn.ir, feeds_by_id(fn, x), records=nothing, keep=0)
    assert nothing[forward]["body"].count == 10 and nothing[forward]["body"].shown == []


def test_loops_in_loops_record_per_outer_iteration():
    A, w, loss = nested()
    fn = sg.compile(loss, inputs=[A])
    a = np.arange(12.0).reshape(3, 4) / 10
    records = {}
    values = evaluate(fn.ir, feeds_by_id(fn, a), records=records, keep=5)
    assert values[fn.ir.outputs[0]] == pytest.approx(float(fn(a)), rel=1e-12)
    (outer,) = records
    record = records[outer]["body"]
    assert record.count == 3 and len(record.shown) == 3
    for k, _, inner in record.shown:
        (inside,) = inner.values()
        cells = inside["body"]
        c, expected = 0.0, []
        for v in a[k]:
            c = np.tanh(c * 0.5 + v)
            expected.append(c)
        assert cells.count == 4
        np.testing.assert_allclose([v for _, v in cells.values(cells.graph.outputs[0])], expected, rtol=1e-12)
