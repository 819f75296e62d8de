"""Define-by-run mode: staticgrad ops applied to eager tensors compute at once and record a tape.

Importing this module installs a hook in the op registry: ``apply`` hands any op with an eager input to
:func:`_run_op`, which checks shapes with the op's static rule (so errors read as in static mode), runs
the op's numpy kernel and records op, inputs and attrs on the result. ``backward`` walks that tape in
reverse topological order (a loop, no recursion) and calls the SAME VJP rules as ``sg.grad``, so eager
and static gradients are built from one definition, and ``create_graph=True`` makes gradients that are
themselves taped and can be differentiated again.

The same model function runs in both modes: called with placeholders and parameters it builds a graph,
called with eager tensors it computes values. A parameter is a leaf of both: an eager op reads its value as
it is now and ``backward`` leaves its gradient in its ``.grad``, so ``nn`` modules and optimizers built over
parameters run define-by-run as they are.
"""
from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np
import numpy.typing as npt

from .autodiff import Mode, reverse_sweep, stable_twin
from .graph import ancestors, reverse_order
from .ops import registry
from .ops.registry import REGISTRY
from .tensor import (
    CONTEXT,
    GradError,
    NumericsError,
    ShapeError,
    Tensor,
    _ids,
    building,
    format_shape,
    library_file,
    origin,
    user_frame,
)

__all__ = ["EagerTensor", "tensor", "zero_grad", "no_grad", "grad", "trace", "is_eager", "check_numerics",
           "value_of", "lift", "MixingError"]

LEAF_OP = "tensor"       # the op of eager leaves (eager.tensor(...))


class _State(threading.local):
    """Switches that hold while eager ops run (each thread has its own, as torch's grad mode)."""

    def __init__(self):
        self.grad_enabled = True     # off inside no_grad() and during a backward without create_graph
        self.trace = None            # a list collecting every eager op result, while trace() is active
        self.defer = False           # on while a VJP rule is recorded without running (see _needed_parts)
        self.check_numerics = False  # see check_numerics


STATE = _State()


class check_numerics:  # noqa: N801 (used as a function: eager.check_numerics(True))
    """Check every eager op's result from now on (``enabled=False``: stop): the first NaN or infinity
    raises ``sg.NumericsError`` naming the op, its role (forward, or backward with the VJP that made it)
    and the user's line. As a context manager (``with eager.check_numerics():``) it holds only inside."""

    def __init__(self, enabled=True):
        self.previous = STATE.check_numerics
        STATE.check_numerics = bool(enabled)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        STATE.check_numerics = self.previous


class EagerTensor(Tensor):
    """A tensor that holds its value. ``.grad`` is filled by ``backward`` (None before the first one).

    Being a :class:`Tensor`, it takes every operator, method and staticgrad function; the results are
    eager tensors too. Unlike a symbolic tensor it has a truth value, a length and a float value, so
    Python control flow may depend on data (the point of define-by-run).
    """

    __slots__ = ()
    _eager = True

    # ----------------------------------------------------------------- value
    @property
    def value(self):
        return self._value

    @value.setter
    def value(self, new):
        if self.inputs:
            raise TypeError(f"only a leaf eager tensor's value can be set, not the result of {self.op} "
                            f"(made at {self.source})")
        self._value = self.checked_value(new, f"eager tensor {self.label()!r}")

    def numpy(self):
        return self._value

    def item(self):
        return self._value.item()

    def __array__(self, dtype=None, copy=None):
        return self._value if dtype is None else self._value.astype(dtype)

    def __float__(self):
        return float(self._value)

    def __int__(self):
        return int(self._value)

    def __bool__(self):
        return bool(self._value)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d eager tensor")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        grad = ", requires_grad=True" if self._requires_grad else ""
        made = f", op={self.op!r}" if self.inputs else ""
        body = np.array2string(self._value, precision=6, threshold=20, separator=", ")
        return f"eager.tensor({body}{grad}{made})"

    # ----------------------------------------------------------------- gradients
    def backward(self, grad_output=None, create_graph=False):
        """Accumulate d(self)/d(leaf) into ``.grad`` of every leaf that requires grad.

        ``self`` must be a scalar unless ``grad_output`` (shaped like self) is given. With
        ``create_graph=True`` the gradients are taped eager tensors, so they can be differentiated again.
        """
        seed = _seed(self, grad_output, "backward")
        _sweep([self], [seed], create_graph, collect=None)

    def zero_grad(self):
        """Forget the accumulated gradient (``.grad`` becomes None)."""
        self.grad = None

    def detach(self):
        """The same value as a new leaf that does not require grad."""
        return _leaf(self._value, False, None, self.source)


def is_eager(x) -> bool:
    return isinstance(x, EagerTensor)


# ------------------------------------------------------------------ making eager tensors
def _new(op, inputs, attrs, value, requires_grad, source, name=None, spec=None):
    # Tensor.__init__ walks the stack for the source line and reads the context; this does only what
    # an eager result needs, which matters because eager mode pays it on every op of every step.
    t = EagerTensor.__new__(EagerTensor)
    t.id = next(_ids)
    t.op = op
    t.inputs = inputs
    t.attrs = attrs
    t.shape, t.dtype = spec or (value.shape, value.dtype)
    t.name = name
    t._requires_grad = requires_grad
    t._value = value
    t.source = source
    ctx = CONTEXT
    t.role = ctx.role
    t.scope = "/".join(ctx.scopes)
    t.adjoint_of = ctx.adjoint_of
    t.rule = ctx.rule
    t.meta = None
    t.grad = None
    return t


def _leaf(value, requires_grad, name, source):
    return _new(LEAF_OP, (), {}, value, requires_grad, source, name)


def tensor(value: npt.ArrayLike, requires_grad: bool = False, dtype: npt.DTypeLike = None, name: str | None = None,
           copy: bool = True) -> EagerTensor:
    """An eager leaf holding a copy of ``value`` (``copy=False`` shares a numpy array when it can, like
    torch.as_tensor). Only floating tensors can require grad."""
    if isinstance(value, Tensor):
        if value._value is None:
            raise TypeError(f"eager.tensor: {value!r} has no value (a symbolic tensor)")
        value = value._value
    if isinstance(value, float) and dtype is None:
        dtype = np.float64
    arr = np.array(value, dtype=dtype, copy=True) if copy else np.asarray(value, dtype=dtype)
    if arr.dtype.kind not in "biufc":
        raise TypeError(f"eager.tensor {name!r}: expected a numeric value, got dtype {arr.dtype}")
    if requires_grad and arr.dtype.kind != "f":
        raise GradError(f"eager.tensor {name!r}: only real floating tensors can require grad, not {arr.dtype}")
    return _leaf(arr, bool(requires_grad), name, user_frame())


def zero_grad(tensors):
    """Reset ``.grad`` of every tensor in ``tensors`` (an iterable) to None."""
    for t in tensors:
        t.grad = None


@contextmanager
def no_grad():
    """Ops inside record no tape and their results do not require grad (for updates and evaluation)."""
    saved = STATE.grad_enabled
    STATE.grad_enabled = False
    try:
        yield
    finally:
        STATE.grad_enabled = saved


@contextmanager
def trace():
    """Collect every eager op result made inside, in order, and keep every result's inputs.

    Used by the study to count the nodes a step executes and to pair eager nodes with static ones.
    """
    saved = STATE.trace
    STATE.trace = found = []
    try:
        yield found
    finally:
        STATE.trace = saved


# ------------------------------------------------------------------ the hook: one op, run now
class MixingError(TypeError):
    """An eager tensor met a symbolic one that has no value (a placeholder, or an expression over one).
    Tracing a loop's body meets it when the body reads an eager tensor: the loop then runs eagerly."""


def _mixing_error(opname, t):
    return MixingError(f"{opname}: cannot mix eager tensors with the symbolic {t.op} {t.label()!r} (at "
                       f"{user_frame()}); feed an eager tensor (eager.tensor(...)) where the graph has a placeholder")


def _static_value(x, opname):
    """The value of a tensor that is not an eager one: a constant's, a parameter's as it is now, or that of an
    expression over them (run now, see _lift)."""
    if x._value is not None:
        return x._value
    if not x.inputs:
        raise _mixing_error(opname, x)
    return _lift([x], opname)[0]._value


def value_of(t, opname="eager"):
    """The numpy value of ``t``: an eager tensor's, a constant's or parameter's, or an expression over
    constants and parameters run now (``opname`` names the caller in the error a placeholder gets)."""
    if type(t) is EagerTensor:
        return _evaluate(t)._value
    return _static_value(t, opname)


def lift(t, opname="eager"):
    """What stands for the tensor ``t`` in eager mode: itself if eager, or a parameter (a leaf of both modes);
    a constant's value as an eager leaf; an expression over parameters and constants run now, taped."""
    if type(t) is EagerTensor or t.op == "parameter":
        return t
    if not t.inputs:
        return _leaf(_static_value(t, opname), False, t.name, t.source)
    return _lift([t], opname)[0]


def _lift(inputs, opname):
    """``inputs`` with every symbolic expression among them run now, taped, as if written eagerly.

    A parameter is a leaf of eager mode too (its value read as it is now, its gradient accumulated in its
    ``.grad``), so one module object runs in both modes. An expression over parameters and constants only
    (a weight penalty, a VJP rule's transpose of a weight) was built as graph because no eager tensor took
    part; it is replayed node by node in creation order (a topological order), without recursion, so the
    gradient reaches the parameters under it. A placeholder has no value here: that is the user's mistake.
    """
    lifted = list(inputs)
    for k, x in enumerate(inputs):
        if type(x) is EagerTensor or not x.inputs:
            continue
        done = {}
        for i, t in sorted(ancestors([x]).items()):
            if not t.inputs:
                if t._value is None:
                    raise _mixing_error(opname, t)
                done[i] = t
            else:
                done[i] = _run_op(REGISTRY[t.op], [done[y.id] for y in t.inputs], t.attrs)
        lifted[k] = done[x.id]
    return lifted


# Shape rules are pure functions of (op, input shapes and dtypes, attrs), and eager mode applies the same
# few signatures on every step, so each passing signature is checked once. A failing one is never stored,
# so errors are raised exactly as in static mode.
_CHECKED = {}
_FILES = {}


def _infer(opdef, inputs, attrs):
    """(shape, dtype) of the result, from the op's static rule."""
    try:
        key = (opdef.name, tuple([(x.shape, x.dtype) for x in inputs]), tuple(attrs.items()))
        spec = _CHECKED.get(key)
    except TypeError:            # an unhashable attr (an index array): check every time
        key, spec = None, None
    if spec is None:
        try:
            spec = opdef.infer(inputs, **attrs)
        except ShapeError as err:
            raise ShapeError(f"{opdef.name}: {err} (at {user_frame()})") from None
        if key is not None and len(_CHECKED) < 100_000:
            _CHECKED[key] = spec
    return spec


def _source():
    """What tensor.user_frame gives (the user's file:line), with the per-file test cached: eager mode
    pays this on every op of every step."""
    if CONTEXT.source is not None:
        return CONTEXT.source        # (a backward sweep's: the line that asked for it)
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        base = _FILES.get(filename)
        if base is None:
            base = _FILES[filename] = "" if library_file(filename) else os.path.basename(filename)
        if base:
            return f"{base}:{frame.f_lineno}"
        frame = frame.f_back
    return "<staticgrad>"


def _run_op(opdef, inputs, attrs):
    state = STATE
    for x in inputs:
        if type(x) is not EagerTensor and x.inputs:
            inputs = _lift(inputs, opdef.name)
            break
    if state.defer:
        # Recorded, not run: a result with no value yet, run by _evaluate only if it is needed.
        spec = _infer(opdef, inputs, attrs)
        requires_grad = state.grad_enabled and any(x._requires_grad for x in inputs)
        return _new(opdef.name, tuple(inputs), attrs, None, requires_grad, _source(), spec=spec)
    if opdef.draws is not None:
        return _run_draw(opdef, inputs, attrs)
    values = []
    for x in inputs:
        v = x._value
        if v is None:
            v = _static_value(x, opdef.name)
        values.append(v)
    dtype = _infer(opdef, inputs, attrs)[1]
    checking = state.check_numerics
    try:
        if checking:
            with np.errstate(all="ignore"):     # (the check below names the op; numpy's warning would not)
                out = opdef.kernel(*values, **attrs)
        else:
            out = opdef.kernel(*values, **attrs)
    except FloatingPointError as err:       # (under np.errstate(all="raise"))
        raise NumericsError(_failure(opdef.name, inputs, f"failed: {err}")) from err
    if type(out) is not np.ndarray:
        out = np.asarray(out)      # reductions give numpy scalars
    if out.dtype != dtype:
        out = out.astype(dtype)    # keep the dtype the static rule promises (principle 6)
    if checking and out.dtype.kind in "fc" and not np.isfinite(out).all():
        what = "a NaN" if np.isnan(out).any() else "an infinity"
        raise NumericsError(_failure(opdef.name, inputs, f"made {what} (output {format_shape(out.shape)})"))
    requires_grad = state.grad_enabled and any(x._requires_grad for x in inputs)
    tape = inputs if requires_grad or state.trace is not None else ()
    t = _new(opdef.name, tuple(tape), attrs, out, requires_grad, _source())
    if state.trace is not None:
        state.trace.append(t)
    return t


def _run_draw(opdef, inputs, attrs):
    """A random draw (``opdef.draws``), run at once as the first draw of its key (index 0). The key, input 0,
    may be a symbolic parameter (the default key, or a model's): the stream's state is its value, read
    here and then moved on, as a compiled call moves it on after the call. An eager leaf key moves on
    too; a computed key is only read."""
    key, state = inputs[0], STATE
    if key.op == "parameter" or type(key) is EagerTensor:
        value = key._value
    else:
        value = _static_value(key, opdef.name)
    values = [value] + [x._value if type(x) is EagerTensor else _static_value(x, opdef.name) for x in inputs[1:]]
    attrs = dict(attrs, index=0)
    dtype = _infer(opdef, inputs, attrs)[1]
    out = np.asarray(opdef.kernel(*values, **attrs), dtype=dtype)
    if key.op in ("parameter", LEAF_OP):
        key._value = opdef.draws(value)
    t = _new(opdef.name, tuple(inputs) if state.trace is not None else (), attrs, out, False, _source())
    if state.trace is not None:
        state.trace.append(t)
    return t


def _failure(op, inputs, what) -> str:
    """The message of an eager op's NumericsError: the op, its role and the user's line."""
    ctx = CONTEXT
    here = SimpleNamespace(role=ctx.role, adjoint_of=ctx.adjoint_of, rule=ctx.rule, source=_source())
    forward = SimpleNamespace(source=ctx.forward_source) if ctx.forward_source else None
    shapes = ", ".join(format_shape(x.shape) for x in inputs)
    return f"eager {op} {what} ({origin(here, forward)}) on inputs of shapes {shapes}"


registry.EAGER_HOOK = _run_op


# ------------------------------------------------------------------ reverse sweep over the tape
def _seed(y, grad_output, who, needs_grad=True):
    if not isinstance(y, EagerTensor):
        raise TypeError(f"{who}: expected an eager tensor, got {type(y).__name__}")
    if needs_grad and not y._requires_grad:
        raise GradError(f"{who}: {y.op} result (made at {y.source}) does not require grad: no input of it "
                        f"was made with requires_grad=True")
    if y.dtype.kind != "f":
        raise GradError(f"{who}: y has dtype {y.dtype}; only real floating outputs can be differentiated")
    if grad_output is None:
        if y.shape != ():
            raise GradError(f"{who}: y has shape {format_shape(y.shape)}; pass grad_output for a non-scalar "
                            f"y (a vector-Jacobian product) or reduce it first (at {user_frame()})")
        return _leaf(np.ones((), y.dtype), False, None, y.source)
    g = grad_output._value if isinstance(grad_output, Tensor) else grad_output
    g = np.asarray(g, dtype=y.dtype)
    try:
        g = np.broadcast_to(g, y.shape)
    except ValueError:
        raise GradError(f"{who}: grad_output of shape {format_shape(g.shape)} does not match y of shape "
                        f"{format_shape(y.shape)}") from None
    if isinstance(grad_output, EagerTensor) and grad_output._requires_grad and grad_output.shape == y.shape:
        return grad_output      # a taped incoming gradient: keep its tape for create_graph
    return _leaf(np.array(g, copy=True), False, None, y.source)   # never the caller's own array


def _needs_grad(x) -> bool:
    # (an eager tensor, or a parameter used eagerly: a leaf whose gradient lands in its .grad)
    return x._requires_grad and (type(x) is EagerTensor or x.op == "parameter")


def _as_eager(g):
    if isinstance(g, EagerTensor):
        return g
    return _leaf(np.asarray(_static_value(g, "backward")), False, None, g.source)


class _Eager(Mode):
    """backward()'s sweep over the tape: tensors that require grad need gradients; leaves accumulate
    theirs in ``.grad``, or, with ``collect`` (ids), the gradients of those tensors are gathered."""

    name = "backward"

    def __init__(self, collect, create_graph, seeds, back):
        self.collect, self.create_graph, self.back, self.found = collect, create_graph, back, {}
        # A seed that requires grad is the caller's own grad_output (kept for its tape): never take its array.
        self.taken = {id(s._value) for s in seeds if isinstance(s, EagerTensor) and s._requires_grad}

    def needs(self, x) -> bool:
        return _needs_grad(x)

    def vjp(self, opdef, g, node, needs):
        if all(needs):
            return opdef.vjp(g, node, *node.inputs, **node.attrs)
        return _needed_parts(opdef, g, node, needs)

    def reached(self, node, g, parts):
        if self.collect is not None:
            asked = self.back.get(node.id, node.id)       # the tensor asked for, if a twin stands in for it
            if asked in self.collect:
                self.found[asked] = g
        elif not node.inputs:
            _accumulate_leaf(node, g, self.create_graph, self.taken)


def _sweep(roots, seeds, create_graph, collect):
    """Push ``seeds`` back from ``roots`` through the tape (the sweep sg.grad runs). With ``collect`` (a set
    of ids) return those adjoints; without it, accumulate into the ``.grad`` of leaves that require grad."""
    saved = STATE.grad_enabled
    # Built-in VJP rules are package code: what they make belongs to the user's line that asked for it.
    with building(source=user_frame()):
        STATE.grad_enabled = True            # a stable twin's new tensors must be on the tape
        try:
            order, roots, back = _stable(roots, collect)
        finally:
            STATE.grad_enabled = saved
        STATE.grad_enabled = bool(create_graph)
        try:
            mode = _Eager(collect, create_graph, seeds, back)
            reverse_sweep(order, list(zip(roots, seeds)), mode)
            return mode.found
        finally:
            STATE.grad_enabled = saved


def _stable(roots, collect):
    """(the tape's sweep order, the roots, {twin id: id asked for}) for its numerically stable form, as
    sg.grad differentiates it: leaves stay, so gradients still land in their ``.grad``."""
    order = reverse_order(roots, _needs_grad)
    keep = [t for t in order if collect and t.id in collect]
    # in creation order, as sg.grad builds its twin: the twins' ids, and so the sweep, come out the same
    twin = stable_twin(sorted(order, key=lambda t: t.id), keep)
    if not twin:
        return order, roots, {}
    roots = [twin.get(r.id, r) for r in roots]
    return reverse_order(roots, _needs_grad), roots, {twin[t.id].id: t.id for t in keep}


def _needed_parts(opdef, g, node, needs):
    """The VJP rule's results for the inputs in ``needs`` only.

    A rule returns every input's gradient at once; run eagerly it would compute them all, such as the
    data gradient of a first layer's matmul or pow's log(base) for a constant exponent. So the rule is
    recorded without running (deferred results: op, inputs and shape, no value) and only the parts that
    are needed are run, which is what PyTorch's needs_input_grad does for its kernels.
    """
    STATE.defer = True
    try:
        parts = opdef.vjp(g, node, *node.inputs, **node.attrs)
    finally:
        STATE.defer = False
    return [_evaluate(p) if need and p is not None else None for p, need in zip(parts, needs)]


def _evaluate(root):
    """Give a deferred result, and the deferred results it depends on, their values."""
    if type(root) is not EagerTensor or root._value is not None:
        return root
    found, stack = {}, [root]
    while stack:
        t = stack.pop()
        if t.id in found:
            continue
        found[t.id] = t
        stack.extend(x for x in t.inputs if type(x) is EagerTensor and x._value is None and x.id not in found)
    state = STATE
    for i in sorted(found):            # creation order is a topological order
        t = found[i]
        values = [x._value if x._value is not None and type(x) is EagerTensor else _static_value(x, t.op)
                  for x in t.inputs]
        out = REGISTRY[t.op].kernel(*values, **t.attrs)
        if type(out) is not np.ndarray:
            out = np.asarray(out)
        if out.dtype != t.dtype:
            out = out.astype(t.dtype)
        t._value, t.shape = out, out.shape
        if not (t._requires_grad or state.trace is not None):
            t.inputs = ()              # no tape needed: let the inputs go, as _run_op does
        if state.trace is not None:
            state.trace.append(t)
    return root


def _accumulate_leaf(leaf, g, create_graph, taken):
    if create_graph or isinstance(leaf.grad, EagerTensor):
        g = _as_eager(g)
        if g.shape != leaf.shape:
            g = _as_eager(registry.apply("broadcast_to", (g,), {"shape": leaf.shape}))
        if leaf.grad is None:
            leaf.grad = g
        else:
            old = leaf.grad if isinstance(leaf.grad, EagerTensor) else _leaf(leaf.grad, False, None, leaf.source)
            leaf.grad = old + g
        return
    value = g._value if g._value is not None else _static_value(g, "backward")
    if leaf.grad is not None:
        leaf.grad += value
    elif (type(value) is np.ndarray and value.base is None and value.flags.writeable and id(value) not in taken
          and value.shape == leaf.shape and value.dtype == leaf.dtype):
        # A fresh buffer made by this sweep (VJP results are computed from the adjoints, never forward
        # values, and a seed is a copy or in ``taken``): take it instead of copying, as PyTorch's AccumulateGrad does.
        # ``taken`` stops two leaves (x + y passes one adjoint to both) from sharing one array.
        taken.add(id(value))
        leaf.grad = value
    else:
        # A copy: a read-only broadcast view, a constant, or a buffer already given to another leaf.
        leaf.grad = np.array(np.broadcast_to(value, leaf.shape), dtype=leaf.dtype, copy=True)


def grad(y, wrt, grad_output=None, create_graph=False):
    """Gradients of the eager ``y`` with respect to each tensor in ``wrt`` (leaves or intermediates),
    without touching ``.grad``: the eager twin of ``sg.grad``. A list in gives a list out. Tensors that
    ``y`` does not depend on get zeros."""
    single = isinstance(wrt, Tensor)
    wrt = [wrt] if single else list(wrt)
    for w in wrt:
        if not (isinstance(w, EagerTensor) or (isinstance(w, Tensor) and w.op == "parameter")):
            raise TypeError(f"eager.grad: wrt must hold eager tensors or parameters, got {type(w).__name__}")
        if not w._requires_grad:
            raise GradError(f"eager.grad: {w.op} tensor made at {w.source} does not require grad, so it has no "
                            f"gradient")
    seed = _seed(y, grad_output, "eager.grad", needs_grad=False)
    # A y that no tensor requiring grad reaches depends on none of wrt: zeros, as sg.grad gives
    found = _sweep([y], [seed], create_graph, collect={w.id for w in wrt}) if y._requires_grad else {}
    out = []
    for w in wrt:
        g = found.get(w.id)
        out.append(_leaf(np.zeros(w.shape, w.dtype), False, None, w.source) if g is None else _as_eager(g))
    return out[0] if single else out
