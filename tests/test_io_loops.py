"""Saving and loading compiled functions that hold every form of loop's gradient: a while_loop's (a tape
recorded as it runs, read by a reverse loop), cond's, a checkpointed scan's, fori_loop's, and loops in
loops. The loaded function gives the same bits; its file holds no object array, and edits are refused at
load or run."""
import zipfile

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import io as sgio
from staticgrad.io import LoadError
from tests.test_graphdoc import edit_each_node
from tests.test_io import _tamper


def _while_grad():
    x = sg.placeholder((3,), name="x", requires_grad=True)
    out = sg.while_loop(lambda s: s[1] < 4, lambda s: (sg.sin(s[0]) * 1.5 + sg.cos(x), s[1] + 1),
                        (x, sg.constant(0)))
    loss = sg.sum(out[0] * out[0])
    return [loss] + sg.grad(loss, [x]), [x], [(3,)]


def _cond_grad():
    x = sg.placeholder((3,), name="x", requires_grad=True)
    W = sg.parameter(np.linspace(-1.0, 1.0, 9).reshape(3, 3), name="W")
    out = sg.cond(sg.sum(x) > 0.0, lambda v: sg.tanh(v @ W), lambda v: v * sg.sum(W), x)
    loss = sg.sum(out * out)
    return [loss] + sg.grad(loss, [x, W]), [x], [(3,)]


def _checkpointed_scan_grad():
    X = sg.placeholder((7, 3), name="X", requires_grad=True)
    W = sg.parameter(np.linspace(-0.5, 0.5, 9).reshape(3, 3), name="W")
    h, hs = sg.scan(lambda h, x: (sg.tanh(h @ W + x), h * h), sg.constant(np.zeros(3)), xs=X, checkpoint=3)
    loss = sg.sum(h) + sg.sum(hs)
    return [loss] + sg.grad(loss, [X, W]), [X], [(7, 3)]


def _fori_grads():
    x = sg.placeholder((2,), name="x", requires_grad=True)
    n = sg.placeholder((), "int64", name="n")
    by_tensor = sg.fori_loop(0, n, lambda i, s: sg.sin(s) * 0.9 + x * sg.cast(i, "float64"), x)
    by_ints = sg.fori_loop(1, 4, lambda i, s: sg.cos(s) * x + sg.cast(i, "float64"), x)
    loss = sg.sum(by_tensor * by_ints)
    return [loss] + sg.grad(loss, [x]), [x, n], [(2,), 3]


def _nested_grads():
    """A while_loop and a cond inside a scan's body, a scan inside a while_loop's body: their gradients."""
    X = sg.placeholder((3, 2), name="X", requires_grad=True)
    w = sg.placeholder((2,), name="w", requires_grad=True)

    def step(c, x):
        d = sg.while_loop(lambda s: s[1] < 2, lambda s: (sg.sin(s[0]) + x * w, s[1] + 1), (c, sg.constant(0)))[0]
        e = sg.cond(sg.sum(x) > 0.0, lambda v: v * w, lambda v: sg.tanh(v), d)
        return e, d
    c, ds = sg.scan(step, sg.constant(np.ones(2)), xs=X)

    def body(s):
        inner, _ = sg.scan(lambda a, x: (a * 0.5 + x * s[0], None), w, xs=X)
        return inner, s[1] + 1
    v = sg.while_loop(lambda s: s[1] < 2, body, (w, sg.constant(0)))[0]
    loss = sg.sum(c * c) + sg.sum(ds) + sg.sum(v * v)
    return [loss] + sg.grad(loss, [X, w]), [X, w], [(3, 2), (2,)]


FORMS = {"while_loop": _while_grad, "cond": _cond_grad, "checkpointed scan": _checkpointed_scan_grad,
         "fori_loop": _fori_grads, "nested": _nested_grads}


def _feeds(shapes, rng):
    return [np.int64(s) if isinstance(s, int) else rng.uniform(-1.0, 1.0, s) for s in shapes]


def _same(fn, other, feeds):
    for a, b in zip(fn(*feeds), other(*feeds)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("make", FORMS.values(), ids=FORMS.keys())
def test_a_loops_gradient_saves_and_loads_with_the_same_results(make, tmp_path, rng):
    outputs, inputs, shapes = make()
    fn = sg.compile(outputs, inputs=inputs)
    path = sgio.save(fn, tmp_path / "f.npz")
    loaded = sgio.load(path)
    for _ in range(2):
        _same(fn, loaded, _feeds(shapes, rng))
    _same(fn, sgio.load(sgio.save(loaded, tmp_path / "again.npz")), _feeds(shapes, rng))   # saved again
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            if name.endswith(".npy"):
                with zf.open(name) as fh:
                    assert np.load(fh, allow_pickle=False).dtype.kind in "biufc"


def test_the_repro_of_a_while_loops_gradient(tmp_path):
    x = sg.placeholder((3,), name="x", requires_grad=True)
    out = sg.while_loop(lambda s: s[1] < 4, lambda s: (s[0] * 1.5 + x, s[1] + 1), (x, sg.constant(0)))
    loss = sg.sum(out[0])
    (g,) = sg.grad(loss, [x])
    f = sg.compile([loss, g], inputs=[x])
    loaded = sgio.load(sgio.save(f, tmp_path / "f"))
    got = loaded(np.ones(3))
    assert got[0] == pytest.approx(39.5625) and got[1] == pytest.approx([13.1875] * 3)
    with pytest.raises(sg.StaticgradError, match="a while_loop's backward pass"):
        f.save_source(tmp_path / "f.py")        # (generated source still refuses a while_loop's gradient)


# ------------------------------------------------------------------ tampered tapes
def _file(tmp_path):
    outputs, inputs, _ = _while_grad()
    return sgio.save(sg.compile(outputs, inputs=inputs), tmp_path / "while.npz")


def _op(doc, op):
    return next(n for n in doc["function"]["nodes"] if n["op"] == op)


def _tape(doc):
    return next(n for n in doc["function"]["nodes"] if n["op"] == "loop_output" and n["dtype"] == "object")


def _read_tape(op):
    def edit(doc):
        nodes = doc["function"]["nodes"]
        nodes.append(dict(_tape(doc), id=777, op=op, inputs=[_tape(doc)["id"]], attrs={}, dtype="float64"))
        doc["function"]["outputs"] = [777]
    return edit


def _recording(doc):
    return next(n for n in doc["function"]["nodes"] if n["op"] == "while_loop" and n["attrs"]["record"] is not None)


def _entry_placeholder(doc):
    """The placeholder of the reverse loop's body that each entry of the tape feeds first."""
    node = _op(doc, "reverse_tape")
    body = node["bodies"]["body"]
    return next(n for n in body["nodes"] if n["id"] == body["inputs"][node["attrs"]["n_carry"]])


@pytest.mark.parametrize("edit, message", [
    (lambda doc: _entry_placeholder(doc).__setitem__("dtype", "int64"),
     r"\(reverse_tape\): the tape it reads does not fit it: ShapeError: value 0 of an entry is \(3,\) float64, "
     r"its body takes \(3,\) int64"),
    (_read_tape("tanh"), r"\(tanh\): reads the tape of a loop, which only a loop reads"),
    (lambda doc: doc["function"].__setitem__("outputs", [_tape(doc)["id"]]), r"bad outputs"),
    (lambda doc: _tape(doc).__setitem__("dtype", "float64"), r"the file says shape \(\) and dtype float64, its "
                                                            r"inputs give \(\) and object"),
    (lambda doc: _tape(doc)["attrs"].__setitem__("dtype", {"t": "dtype", "v": "float64"}),
     r"value 2 of the loop is \(\) object, the node says \(\) float64"),
    (lambda doc: _tape(doc)["attrs"].__setitem__("dtype", {"t": "dtype", "v": "object"}),
     r"dtype 'object' is not a numeric dtype"),
    (lambda doc: _tape(doc)["attrs"].__setitem__("index", 0), r"value 0 of the loop is \(3,\) float64, the node "
                                                              r"says \(\) float64"),
    (lambda doc: _op(doc, "reverse_tape")["attrs"].__setitem__("n_xs", 0), r"its body takes \d+ values"),
    (lambda doc: _op(doc, "reverse_tape")["attrs"].__setitem__("n_carry", 1), r"reads its state, then a tape"),
    (lambda doc: _op(doc, "reverse_tape")["inputs"].reverse(), r"reverse_tape"),
    (lambda doc: _recording(doc)["attrs"].__setitem__("record", 0), r"its bodies do not fit its inputs"),
])
def test_a_tampered_tape_is_refused_at_load(tmp_path, edit, message):
    sgio.load(_file(tmp_path))
    with pytest.raises(LoadError, match=message):
        sgio.load(_tamper(_file(tmp_path), edit))


def _everywhere(nodes, path=()):
    """The paths (node index, body attribute, ..., node index) of every node, in bodies too."""
    for k, node in enumerate(nodes):
        yield path + (k,)
        for attr, body in node.get("bodies", {}).items():
            yield from _everywhere(body["nodes"], path + (k, attr))


def test_every_edit_of_a_while_loops_gradient_is_refused_at_load_or_runs(tmp_path, rng):
    ops = {"while_loop", "reverse_tape", "loop_output", "mul", "sin", "add"}
    refused, ran = edit_each_node(_file(tmp_path), tmp_path, [rng.uniform(-1.0, 1.0, 3)], _everywhere, ops)
    assert refused > 20 and ran > 0
