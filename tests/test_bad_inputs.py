"""Every bad input the docs' table lists gets the error the table says, with a message naming what was
wrong. The table (docs/errors.md, "Bad inputs and the errors they get") and CASES must list the same cases
in the same order: test_the_docs_table_lists_every_case checks it."""
import builtins
import zipfile
from pathlib import Path

import numpy as np
import pytest

import staticgrad as sg
import staticgrad.tensor as sg_tensor
from staticgrad import eager

CASES = []          # (what, error, message regex, function)


def case(what, error, message):
    def register(fn):
        CASES.append((what, error, message, fn))
        return fn
    return register


def _x(shape=(None, 3), **kw):
    return sg.placeholder(shape, name="x", **kw)


def _step():
    x = _x()
    W = sg.parameter(np.ones((3, 2)), name="W")
    loss = sg.mean(x @ W)
    (gW,) = sg.grad(loss, [W])
    return sg.compile(loss, inputs=[x], updates=[(W, W - 0.1 * gW)]), W


# ------------------------------------------------------------------ building a graph
@case("adding shapes that do not broadcast", "ShapeError", r"add: .*\(2, 3\).*\(4,\).*at test_bad_inputs")
def _():
    sg.placeholder((2, 3)) + sg.placeholder((4,))


@case("matmul of unaligned shapes", "ShapeError", r"matmul: .*not aligned")
def _():
    sg.placeholder((2, 3)) @ sg.placeholder((4, 5))


@case("reshape to another number of elements", "ShapeError", r"reshape")
def _():
    sg.reshape(sg.placeholder((2, 3)), (4, 2))


@case("softmax over an axis the tensor lacks", "ShapeError", r"softmax: axis 5 is out of range")
def _():
    sg.softmax(sg.placeholder((2, 3)), axis=5)


@case("concatenating tensors whose other sizes differ", "ShapeError", r"concatenate")
def _():
    sg.concatenate([sg.placeholder((2, 3)), sg.placeholder((2, 4))], axis=0)


@case("an index out of range", "ShapeError", r"getitem: index \(5,\) does not fit shape \(3,\)")
def _():
    sg.placeholder((3,))[5]


@case("an op on a non-numeric value", "TypeError", r"the value .text.: expected a number or a numeric array, got "
      r"dtype <U4 \(at test_bad_inputs.py")
def _():
    sg.tanh("text")


@case("a name scope with a slash", "ValueError", r"name_scope: expected a non-empty name without '/'")
def _():
    with sg.name_scope("a/b"):
        pass


# ------------------------------------------------------------------ feeds
@case("a missing feed", "FeedError", r"expected 1 feeds \('x'\) in inputs order, got 0: missing feed for "
      r"placeholder 'x'")
def _():
    sg.compile(sg.sum(_x()))()


@case("a feed of the wrong shape", "FeedError", r"placeholder 'x': expected shape \(None, 3\) .*got shape \(2, 4\)")
def _():
    x = _x()
    sg.compile(sg.sum(x), inputs=[x])(np.ones((2, 4)))


@case("a feed of a dtype that cannot be cast", "FeedTypeError", r"placeholder 'x': expected dtype int64 .*float64")
def _():
    x = _x(dtype=np.int64)
    sg.compile(sg.sum(x), inputs=[x])(np.ones((2, 3)))


@case("a feed numpy cannot make a number of", "FeedTypeError", r"placeholder 'x': expected dtype float64 .*got dtype "
      r"object .*cannot cast object to float64")
def _():
    x = _x()
    sg.compile(sg.sum(x), inputs=[x])(object())


@case("an int64 label too large for an int32 placeholder", "FeedCastError", r"int64 value 4294967297 .*outside int32")
def _():
    x = _x((None,), dtype=np.int32)
    sg.compile(x * 1, inputs=[x])(np.array([2**32 + 1]))


@case("a uint64 value too large for int64", "FeedCastError", r"uint64 value 9223372036854775813")
def _():
    x = _x((None,), dtype=np.int64)
    sg.compile(x * 1, inputs=[x])(np.array([2**63 + 5], np.uint64))


@case("a float64 value that would be inf in float32", "FeedCastError", r"1e\+300 .*would become infinite")
def _():
    x = _x((None,), dtype=np.float32)
    sg.compile(x * 1, inputs=[x])(np.array([1e300]))


@case("a negative number into an unsigned placeholder", "FeedTypeError", r"cannot cast int64 to uint8")
def _():
    x = _x((None,), dtype=np.uint8)
    sg.compile(x * 1, inputs=[x])(np.array([-1]))


@case("a feed for something that is not an input", "FeedError", r"'y' is not an input placeholder of this function")
def _():
    x = _x()
    sg.compile(sg.sum(x), inputs=[x])({"x": np.ones((1, 3)), "y": 1.0})


@case("the same placeholder fed twice", "FeedError", r"placeholder 'x' is fed twice")
def _():
    x = _x()
    sg.compile(sg.sum(x), inputs=[x])({x: np.ones((1, 3)), "x": np.ones((1, 3))})


@case("positional feeds to a function compiled with inputs=None", "FeedError", r"compiled with inputs=None")
def _():
    x, y = _x(), sg.placeholder((), name="y")
    sg.compile(sg.sum(x) + y)(np.ones((1, 3)), 1.0)


@case("an empty batch into a function with updates", "FeedError", r"placeholder 'x': an empty batch \(shape \(0, 3\)\)")
def _():
    _step()[0](np.zeros((0, 3)))


@case("a run-time size that breaks a shape rule", "ShapeError", r"matmul \(built at test_bad_inputs.py:\d+\): "
      r"shapes \(2, 3\) and \(4, 2\) are not aligned.*the sizes fed \('x' \(2, 3\), 'y' \(4, 2\)\)")
def _():
    x, y = _x((None, None)), sg.placeholder((None, 2), name="y")
    sg.compile(x @ y, inputs=[x, y])(np.ones((2, 3)), np.ones((4, 2)))


# ------------------------------------------------------------------ grad
@case("grad of a non-scalar without grad_output", "GradError", r"grad: .*scalar")
def _():
    x = _x((3,), requires_grad=True)
    sg.grad(x * 2, [x])


@case("grad with respect to a placeholder that does not require grad", "GradError", r"placeholder 'x' does not "
      r"require grad \(create it with requires_grad=True\)")
def _():
    x = _x((3,))
    sg.grad(sg.sum(x), [x])


@case("grad with respect to something that is not a tensor", "TypeError", r"grad: wrt must hold tensors, got list")
def _():
    sg.grad(sg.sum(_x((3,), requires_grad=True)), [[1.0]])


@case("grad of something that is not a tensor", "TypeError", r"grad: y must be a tensor, got float")
def _():
    sg.grad(1.0, [_x((3,), requires_grad=True)])


@case("grad_output of another shape than y", "GradError", r"grad_output of shape \(4,\) does not match y of "
      r"shape \(3,\)")
def _():
    x = _x((3,), requires_grad=True)
    sg.grad(x * 2, [x], grad_output=np.ones(4))


# ------------------------------------------------------------------ compile and updates
@case("an update of a non-parameter", "TypeError", r"compile: only parameters can be updated")
def _():
    x = _x((3,))
    sg.compile([], updates=[(x, x + 1)])


@case("a parameter updated twice", "ValueError", r"parameter 'W' is updated twice")
def _():
    W = sg.parameter(np.ones(2), name="W")
    sg.compile([], updates=[(W, W + 1), (W, W * 2)])


@case("an update of another shape (not broadcast)", "ShapeError", r"update of parameter 'W' has shape \(\), "
      r"expected \(2, 3\); an update is not broadcast")
def _():
    W = sg.parameter(np.ones((2, 3)), name="W")
    sg.compile([], updates=[(W, sg.sum(W))])


@case("an update whose size is wrong only at run time", "ExecutionError", r"update of parameter 'W': the new "
      r"value \(built at test_bad_inputs.py:\d+\) has shape \(4,\) with these feeds")
def _():
    x = _x((None,))
    W = sg.parameter(np.ones(3), name="W")
    sg.compile([], inputs=[x], updates=[(W, x * 2)])(np.ones(4))


@case("an update of a dtype that cannot be cast", "TypeError", r"update of parameter 'W' has dtype complex128")
def _():
    W = sg.parameter(np.ones(2), name="W")
    sg.compile([], updates=[(W, sg.placeholder((2,), dtype=np.complex128))])


@case("outputs that are not tensors", "TypeError", r"compile: outputs must be tensors, got int")
def _():
    sg.compile([1])


@case("inputs that are not placeholders", "TypeError", r"compile: inputs must be placeholders")
def _():
    sg.compile(sg.constant(1.0), inputs=[sg.parameter(1.0)])


@case("inputs missing a placeholder the outputs need", "StaticgradError",
      r"need placeholder\(s\) .y., which are not in")
def _():
    x, y = _x(), sg.placeholder((), name="y")
    sg.compile(sg.sum(x) + y, inputs=[x])


@case("passes given with optimize=False", "ValueError", r"would run no pass")
def _():
    sg.compile(sg.constant(1.0), optimize=False, passes=["cse"])


@case("an unknown backend", "ValueError", r"unknown backend 'gpu'")
def _():
    sg.compile(sg.constant(1.0), backend="gpu")


# ------------------------------------------------------------------ numerics
@case("a NaN made in the backward pass, with check_numerics", "NumericsError", r"div node \d+ made the first "
      r"infinity \(backward, VJP of sqrt node \d+ from test_bad_inputs.py:\d+")
def _():
    x = _x((3,), requires_grad=True)
    (g,) = sg.grad(sg.sum(sg.sqrt(x)), [x])
    sg.compile(g, inputs=[x], check_numerics=True)(np.zeros(3))


@case("a NaN fed, with check_numerics", "NumericsError", r"placeholder 'x' \(created at .*\) was fed a NaN")
def _():
    x = _x((3,))
    sg.compile(sg.sum(x), inputs=[x], check_numerics=True)(np.array([1.0, np.nan, 2.0]))


@case("an eager op making an infinity, with eager.check_numerics", "NumericsError", r"eager log made an infinity "
      r"\(output \(2,\)\) \(forward, built at test_bad_inputs.py")
def _():
    with eager.check_numerics():
        sg.log(eager.tensor(np.zeros(2)))


@case("a floating-point error under np.errstate(all='raise')", "NumericsError", r"log node \d+ \(forward, built "
      r"at .*\) failed at run time .*divide by zero")
def _():
    x = _x((3,))
    with np.errstate(all="raise"):
        sg.compile(sg.log(x), inputs=[x])(np.zeros(3))


# ------------------------------------------------------------------ mixing modes
@case("an eager tensor mixed with a placeholder", "TypeError", r"add: cannot mix eager tensors with the symbolic "
      r"placeholder 'x' \(at test_bad_inputs.py")
def _():
    eager.tensor(np.ones(3)) + _x((3,))


@case("an eager tensor given to compile", "TypeError", r"compile: output .* is an eager tensor")
def _():
    sg.compile(eager.tensor(np.ones(3)) * 2)


@case("backward() of a tensor that does not require grad", "GradError", r"backward: sum result \(made at "
      r"test_bad_inputs.py:\d+\) does not require grad")
def _():
    sg.sum(eager.tensor(np.ones(3))).backward()


# ------------------------------------------------------------------ files
def _saved(tmp_path):
    fn, _ = _step()
    path = tmp_path / "step.npz"
    sg.save(fn, path)
    return path


def _rewrite(path, member, change):
    """``path`` with one member's text changed by ``change``."""
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    members[member] = change(members[member].decode()).encode()
    with zipfile.ZipFile(path, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)


@case("a file that is not a staticgrad file", "LoadError", r"cannot load .*junk.npz.: the file is corrupt, truncated "
      r"or not a staticgrad file")
def _(tmp_path):
    path = tmp_path / "junk.npz"
    path.write_bytes(b"not a zip file")
    sg.load(path)


@case("a file with an unknown op", "LoadError", r"unknown op 'os.system'")
def _(tmp_path):
    path = _saved(tmp_path)
    _rewrite(path, "graph.json", lambda text: text.replace('"tanh"', '"os.system"').replace('"mean"', '"os.system"'))
    sg.load(path)


@case("a file with softmax over an axis its input lacks", "LoadError", r"softmax.*axis 5 is out of range")
def _(tmp_path):
    x = _x((2, 3))
    fn = sg.compile(sg.softmax(x, axis=1), inputs=[x])
    path = tmp_path / "softmax.npz"
    sg.save(fn, path)
    _rewrite(path, "graph.json", lambda text: text.replace('"axis": {"t": "tuple", "v": [1]}',
                                                           '"axis": {"t": "tuple", "v": [5]}'))
    sg.load(path)


@case("a file with an array over the size limit", "LoadLimitError", r"over the limit max_array_bytes=10")
def _(tmp_path):
    sg.load(_saved(tmp_path), max_array_bytes=10)


# ------------------------------------------------------------------ the checks
@pytest.mark.parametrize("what, error, message, fn", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_its_error(what, error, message, fn, tmp_path):
    kind = getattr(sg, error, None) or getattr(sg_tensor, error, None) or getattr(builtins, error)
    with pytest.raises(kind, match=message) as info:
        fn(tmp_path) if fn.__code__.co_argcount else fn()
    assert type(info.value).__name__ == error or error in {c.__name__ for c in type(info.value).__mro__}


def test_the_docs_table_lists_every_case():
    text = (Path(__file__).parents[1] / "docs" / "errors.md").read_text()
    section = text.split("## Bad inputs and the errors they get", 1)[1]
    table = next(block for block in section.split("\n\n") if block.startswith("| "))
    rows = [[cell.strip().strip("`") for cell in line.strip("|").split(" | ")] for line in table.splitlines()[2:]]
    assert [(r[0], r[1]) for r in rows] == [(c[0], c[1]) for c in CASES]
    assert len(rows) >= 40
