"""staticgrad.graphdoc: loop bodies saved as graphs nested in their nodes, loaded back and checked."""
import json
import shutil

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import graphdoc, optim
from staticgrad import io as sgio
from staticgrad.io import LoadError
from tests.test_io import _tamper
from tests.test_io_limits import _edits, _members


def _rnn_training(seed=0):
    """A tanh RNN over xs (steps, batch, 3) read out at every step, trained by Adam: (step, predict)."""
    rng = np.random.default_rng(seed)
    xs = sg.placeholder((None, None, 3), name="xs")
    target = sg.placeholder((None, 2), name="target")
    W = sg.parameter(0.5 * rng.standard_normal((3, 3)), name="W")
    U = sg.parameter(rng.standard_normal((3, 3)), name="U")
    V = sg.parameter(rng.standard_normal((3, 2)), name="V")

    def cell(h, x):
        h = sg.tanh(h @ W + x @ U)
        return h, h @ V

    h, ys = sg.scan(cell, xs[0] * 0.0, xs)
    loss = ((ys.mean(axis=0) - target) ** 2).mean() + 0.1 * (h ** 2).mean()
    opt = optim.Adam([W, U, V], lr=0.05)
    step = sg.compile([loss, ys], inputs=[xs, target], updates=opt.updates(loss))
    return step, sg.compile(ys, inputs=[xs])


def _rnn_batch(rng, steps=5, batch=4):
    return rng.standard_normal((steps, batch, 3)), rng.standard_normal((batch, 2))


def test_a_trained_rnn_saved_mid_training_loads_and_trains_identically(tmp_path, rng):
    step, predict = _rnn_training()
    step(*_rnn_batch(rng))                           # Adam's moments are not zero when it is saved
    loaded = sgio.load(sgio.save({"step": step, "predict": predict}, tmp_path / "rnn.npz"))
    for steps in (5, 3, 7):                          # the loop's length is taken from each feed
        X, T = _rnn_batch(rng, steps)
        ours, theirs = step(X, T), loaded["step"](X, T)
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(predict(X), loaded["predict"](X))
    assert ours[1].shape == (7, 4, 2)


def test_a_loaded_rnn_matches_the_loop_written_out_in_numpy(tmp_path, rng):
    _, predict = _rnn_training()
    loaded = sgio.load(sgio.save(predict, tmp_path / "p.npz"))
    W, U, V = ({p.name: p for p in loaded.parameters()}[k].value for k in "WUV")
    X, _ = _rnn_batch(rng)
    h, want = np.zeros((4, 3)), []
    for x in X:
        h = np.tanh(h @ W + x @ U)
        want.append(h @ V)
    np.testing.assert_allclose(loaded(X), np.stack(want), rtol=1e-12)


def _nested(reverse=False):
    """A scan whose body runs a scan of its own (over the inner axis of xs (T, S, 3)), differentiated."""
    xs = sg.placeholder((4, 3, 3), name="xs", requires_grad=True)
    w = sg.parameter(np.linspace(-0.5, 0.5, 9).reshape(3, 3), name="w")

    def inner(c, x):
        c = sg.tanh(c @ w + x)
        return c, c.sum()

    def outer(h, row):
        c, sums = sg.scan(inner, h, row, reverse=reverse)
        return c * 0.5 + h, sums

    h, sums = sg.scan(outer, sg.constant(np.zeros(3)), xs)
    loss = (h ** 2).sum() + sums.sum()
    gx, gw = sg.grad(loss, [xs, w])
    return sg.compile([loss, sums, gx, gw], inputs=[xs])


@pytest.mark.parametrize("reverse", [False, True])
def test_a_scan_inside_a_scan_and_its_gradient_load_and_give_the_same_results(tmp_path, rng, reverse):
    fn = _nested(reverse)
    graph = json.loads(_members(sgio.save(fn, tmp_path / "nested.npz"))["graph.json"])
    assert _depth(graph["function"]["nodes"]) == 2        # nested: a body inside a body
    loaded = sgio.load(tmp_path / "nested.npz")
    X = rng.standard_normal((4, 3, 3))
    for a, b in zip(fn(X), loaded(X)):
        np.testing.assert_array_equal(a, b)
    again = sgio.load(sgio.save(loaded, tmp_path / "again.npz"))     # a loaded function saves again
    for a, b in zip(fn(X), again(X)):
        np.testing.assert_array_equal(a, b)


def _depth(nodes):
    return max([1 + _depth(b["nodes"]) for n in nodes for b in n.get("bodies", {}).values()], default=0)


# ------------------------------------------------------------------ tampered bodies
def _rnn_file(tmp_path):
    """A plain RNN (its final state and the squares of its states), saved: its scan body reads h, x and w."""
    h0 = sg.placeholder((2, 3), name="h0")
    xs = sg.placeholder((4, 2, 3), name="xs")
    w = sg.parameter(0.5 * np.eye(3), name="w")
    h, hh = sg.scan(lambda h, x: (sg.tanh(h @ w + x), h * h), h0, xs)
    return sgio.save(sg.compile([h, hh], inputs=[h0, xs]), tmp_path / "rnn.npz")


def _body(doc):
    return next(n for n in doc["function"]["nodes"] if n["op"] == "scan")["bodies"]["body"]


def _in_body(op, edit):
    def tamper(doc):
        edit(next(n for n in _body(doc)["nodes"] if n["op"] == op))
    return tamper


def _extra_body_input(doc):
    body = _body(doc)
    extra = dict(body["nodes"][0], id=999)
    body["nodes"].insert(0, extra)
    body["inputs"].append(999)


@pytest.mark.parametrize("edit, message", [
    (_extra_body_input, r"its body takes 4 values, the node gives it 3"),
    (lambda doc: _body(doc).__setitem__("n_args", -1), r"a body's n_args -1 is bad"),
    (lambda doc: _body(doc)["inputs"].pop(), r"a body's inputs must be its placeholders"),
    (lambda doc: _body(doc)["inputs"].reverse(), r"input 0 gives the body \(2, 3\) float64 where it takes \(3, 3\)"),
    (lambda doc: _body(doc)["outputs"].clear(), r"its body makes 0 values, fewer than its 1 carries"),
    (lambda doc: _body(doc)["outputs"].append(12345), r"a body's outputs must be ids of its nodes"),
    (_in_body("matmul", lambda n: n["inputs"].reverse()), r"the body of scan node \d+: node \d+ \(matmul\): its "
                                                          r"inputs and attributes do not fit the op"),
    (_in_body("matmul", lambda n: n.__setitem__("shape", [2, 2])), r"node \d+ \(matmul\): the file says shape"),
    (_in_body("add", lambda n: n["inputs"].__setitem__(1, 999)), r"the body of scan node \d+: node \d+ \(add\): "
                                                                 r"inputs must be ids of earlier nodes of its body"),
    (_in_body("add", lambda n: n["inputs"].__setitem__(1, 0)), r"inputs must be ids of earlier nodes of its body"),
    (_in_body("tanh", lambda n: n.__setitem__("op", "os.system")), r"unknown op 'os.system'"),
    (_in_body("placeholder", lambda n: n.__setitem__("ref", "x0")), r"placeholder node \d+ of a body: bad entry"),
    (_in_body("placeholder", lambda n: n.__setitem__("dtype", "object")), r"placeholder node \d+ of a body"),
    (lambda doc: _body(doc).__setitem__("name", "a\nb"), r"a body's name must be a printable one-line string"),
])
def test_a_tampered_body_is_refused_at_load(tmp_path, edit, message):
    sgio.load(_rnn_file(tmp_path))                   # as saved, it loads
    with pytest.raises(LoadError, match=message):
        sgio.load(_tamper(_rnn_file(tmp_path), edit))


def _scan_node(doc):
    return next(n for n in doc["function"]["nodes"] if n["op"] == "scan")


def _as_attribute(doc):
    node = _scan_node(doc)
    node["attrs"]["body"] = node.pop("bodies")["body"]


def _final_state(doc):
    return next(n for n in doc["function"]["nodes"] if n["op"] == "loop_output" and n["attrs"]["index"] == 0)


def _read_scan_directly(doc):
    nodes = doc["function"]["nodes"]
    nodes.append(dict(_final_state(doc), id=777, op="tanh", attrs={}))
    doc["function"]["outputs"] = [777]


@pytest.mark.parametrize("edit, message", [
    (_as_attribute, r"its 'body' is a body, stored under 'bodies'"),
    (lambda doc: _scan_node(doc).pop("bodies"), r"the op has bodies \['body'\], the file gives \[\]"),
    (lambda doc: _scan_node(doc)["bodies"].__setitem__("other", {}), r"the op has bodies \['body'\]"),
    (lambda doc: _scan_node(doc)["bodies"].__setitem__("body", [1, 2]), r"a body must be an object"),
    (lambda doc: doc["function"].__setitem__("outputs", [_scan_node(doc)["id"]]), r"bad outputs"),
    (_read_scan_directly, r"\(tanh\): reads a loop node itself, not one of its values"),
    (lambda doc: _final_state(doc)["attrs"].__setitem__("index", 1),
     r"\(loop_output\): .*value 1 of the loop is \(4, 2, 3\) float64, the node says \(2, 3\) float64"),
    (lambda doc: _final_state(doc)["attrs"].__setitem__("index", 2), r"index 2 of a loop node of 2 values"),
    (lambda doc: _final_state(doc)["attrs"].__setitem__("dtype", {"t": "dtype", "v": "float32"}),
     r"value 0 of the loop is \(2, 3\) float64, the node says \(2, 3\) float32"),
    (lambda doc: _final_state(doc).__setitem__("inputs", [doc["function"]["nodes"][0]["id"]]),
     r"\(loop_output\): .*reads the values of a loop node, not of a placeholder node"),
])
def test_a_tampered_loop_node_is_refused_at_load(tmp_path, edit, message):
    with pytest.raises(LoadError, match=message):
        sgio.load(_tamper(_rnn_file(tmp_path), edit))


def _nested_file(tmp_path):
    """A scan whose body runs a scan (forward only), saved: loop nodes inside a body."""
    xs = sg.placeholder((3, 2, 3), name="xs")
    w = sg.parameter(0.5 * np.eye(3), name="w")

    def outer(h, row):
        c, cs = sg.scan(lambda c, x: (sg.tanh(c @ w + x), c.sum()), h, row)
        return c + h, cs
    h, sums = sg.scan(outer, sg.constant(np.ones(3)), xs)
    return sgio.save(sg.compile([h, sums], inputs=[xs]), tmp_path / "nested.npz")


def _inside_bodies(nodes, path=()):
    """The paths (node index, body attribute, ..., node index) of every node inside a body."""
    for k, node in enumerate(nodes):
        for attr, body in node.get("bodies", {}).items():
            for j in range(len(body["nodes"])):
                yield path + (k, attr, j)
            yield from _inside_bodies(body["nodes"], path + (k, attr))


def _at(doc, path):
    nodes = doc["function"]["nodes"]
    for k, attr in zip(path[::2], path[1::2]):
        nodes = nodes[k]["bodies"][attr]["nodes"]
    return nodes[path[-1]]


def edit_each_node(path, tmp_path, feeds, wheres, ops=None):
    """Load ``path`` once per edit of each node at ``wheres`` (of ``ops``, if given) and call what loads on
    ``feeds``; any exception other than a LoadError fails the caller. Returns (refused, ran)."""
    doc = json.loads(_members(path)["graph.json"])
    refused = ran = 0
    for where in wheres(doc["function"]["nodes"]):
        if ops is not None and _at(doc, where)["op"] not in ops:
            continue
        for edit in _edits(_at(doc, where)):
            def tampered(doc, where=where, edit=edit):
                edit(_at(doc, where))
            try:
                fn = sgio.load(_tamper(shutil.copy(path, tmp_path / "copy.npz"), tampered))
            except LoadError:
                refused += 1
                continue
            with np.errstate(all="ignore"):
                fn(*feeds)                           # any exception here fails the test
            ran += 1
    return refused, ran


def test_a_loop_output_stating_no_shape_or_dtype_takes_its_loop_value(tmp_path, rng):
    # (as a pass makes them)
    def bare(doc):
        for node in doc["function"]["nodes"]:
            if node["op"] == "loop_output":
                del node["attrs"]["shape"], node["attrs"]["dtype"]
    fn = sgio.load(_rnn_file(tmp_path))
    loaded = sgio.load(_tamper(_rnn_file(tmp_path), bare))
    feeds = rng.standard_normal((2, 3)), rng.standard_normal((4, 2, 3))
    for a, b in zip(fn(*feeds), loaded(*feeds)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("make, feeds, ops", [
    (_rnn_file, [(2, 3), (4, 2, 3)], None),
    (_nested_file, [(3, 2, 3)], {"scan"}),
], ids=["rnn body", "scan in a body"])
def test_every_edit_of_a_node_inside_a_body_is_refused_at_load_or_runs(tmp_path, rng, make, feeds, ops):
    feeds = [rng.standard_normal(shape) for shape in feeds]
    refused, ran = edit_each_node(make(tmp_path), tmp_path, feeds, _inside_bodies, ops)
    assert refused > 10 and ran > 0                  # (reversing the inputs of h @ w + x is an add still)


def _deep(levels):
    """A function of x whose scan bodies are nested ``levels`` deep (each level a scan of length 1 adding
    1 to what the level inside it gives): 2 x + levels."""
    x = sg.placeholder((2,), name="x")

    def nest(v, k):
        if k == 0:
            return v * 2.0
        carry, _ = sg.scan(lambda c, _: (nest(c, k - 1) + 1.0, None), v, length=1)
        return carry
    return sg.compile(nest(x, levels), inputs=[x])


def test_bodies_nested_past_the_limit_are_refused_at_save_and_at_load(tmp_path, monkeypatch):
    deep = _deep(graphdoc.MAX_DEPTH + 1)
    with pytest.raises(ValueError, match=r"nested more than 32 bodies deep"):
        sgio.save(deep, tmp_path / "deep.npz")
    monkeypatch.setattr(graphdoc, "MAX_DEPTH", graphdoc.MAX_DEPTH + 1)
    path = sgio.save(deep, tmp_path / "deep.npz")     # a file another writer might make
    monkeypatch.undo()
    with pytest.raises(LoadError, match=r"bodies nested more than 32 deep"):
        sgio.load(path)


def test_bodies_nested_to_the_limit_load(tmp_path):
    loaded = sgio.load(sgio.save(_deep(3), tmp_path / "three.npz"))
    np.testing.assert_array_equal(loaded(np.array([1.0, -2.0])), [5.0, -1.0])


def test_a_body_of_another_type_is_refused_at_save(tmp_path):
    fn = sgio.load(_rnn_file(tmp_path))
    node = next(n for n in fn.ir.nodes.values() if n.op == "scan")
    node.attrs = dict(node.attrs, body=1)
    with pytest.raises(TypeError, match=r"save: the body of scan node \d+ is a int, not a Body"):
        sgio.save(fn, tmp_path / "bad.npz")
