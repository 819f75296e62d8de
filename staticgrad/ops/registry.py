"""The op registry: one :class:`OpDef` per op holds every fact about it.

Passes, autodiff, eager mode, the lowering wing, pictures, save/load and the study ask an op's OpDef
what they need (its kernel, shape rule, VJP, per-element template, cost, flags, hooks); none of them
keeps a list of op names. ``apply`` is the single door through which every op result is made, symbolic
or eager.
"""
from __future__ import annotations

import functools
import inspect
import math
import numbers
import operator
import warnings

import numpy as np

from ..tensor import ShapeError, Tensor, constant, format_shape, user_frame

# ------------------------------------------------------------------ flags: what an op is
ELEMENTWISE = 1 << 0    # output[i] depends only on inputs[i] (after broadcasting)
COMMUTATIVE = 1 << 1    # f(a, b) == f(b, a)
VIEW = 1 << 2           # the kernel may return a view of its first input (never write into it)
NONDIFF = 1 << 3        # no gradient flows through (comparisons, labels, shapes)
SHAPE_REF = 1 << 4      # inputs after the first are read only for their run-time shape
SHAPE_ONLY = 1 << 5     # every input is read only for its shape
SHAPE_OF_REF = 1 << 6   # the result has the run-time shape of its last input
OUT = 1 << 7            # the kernel takes ``out=``: a plan may hand it a workspace buffer
INPLACE = 1 << 8        # one pass over the elements: ``out`` may be one of its own operands
LAYOUT = 1 << 9         # one input whose elements are only moved (reshape, transpose, ...)
REARRANGES = 1 << 10    # the kernel only moves elements: it runs on arrays of anything (symbolic atoms too)
BROADCAST = 1 << 11     # the result may be a broadcast view (a step of 0 along some axis)
C_ORDER = 1 << 12       # a fresh C-ordered result whatever the layout of its operands
IDENTITY = 1 << 13      # returns its input unchanged at run time

# The ways a plan can run an op besides calling its numpy kernel: as Python scalar code (tiny float64
# plans) and inside a fused numba loop. An op either supports each or says in its OpDef why not.
BACKENDS = ("scalar", "numba")

REGISTRY: dict[str, OpDef] = {}

# Set by staticgrad.eager: called as hook(opdef, inputs, attrs) when any input is an eager tensor
# (one whose class says ``_eager = True``).
EAGER_HOOK = None


class OpDef:
    """Everything about one op.

    ``kernel(*values, **attrs)`` computes it with numpy; ``infer(inputs, **attrs) -> (shape, dtype)`` is its
    static rule; ``vjp(g, out, *inputs, **attrs)`` returns one gradient (or None) per input, written with
    staticgrad ops so that the backward graph is an ordinary graph. The other facts:

    - ``scalar``: one element of the result as a Python expression over the operands' elements ``{0}``,
      ``{1}``, ``{2}``, in the vocabulary of ``lower/scalar_math`` (its helpers, numpy's ufunc names such
      as ``exp``, and Python's ``abs``/``float``); or ``fn(node, shapes, nodes)`` giving that expression, or
      None, for a node of known sizes. The scalar path and the numba backend both compute from it.
    - ``scalar_rule(em, node, atoms, shape)``: how the scalar path computes a non-elementwise op from the
      symbolic elements of its inputs, writing statements through the emitter ``em``.
    - ``scalar_kinds``: (the dtype kinds each input may have in scalar code, the last repeating; the kinds
      its result may have): Python's ints and bools do not wrap or add as numpy's do.
    - ``scalar_work(node, shapes)``: the scalar statements it becomes, when not one per output element.
    - ``flops``: floating-point operations per output element, or ``fn(node, shapes)``.
    - ``specialize(node, shapes, nodes)``: the node rewritten once a plan knows every size.
    - ``fast_kernel(node, plan)``: a cheaper kernel a plan may call where it knows more, or None.
    - ``permutes(attrs)``: whether the result's axes may lie reordered in memory.
    - ``paired``: {other op: kernel returning both results}, for plans that need both of one input.
    - ``core_axes``: trailing axes that take no part in broadcasting (matmul's 2); None: the inputs do
      not broadcast against each other.
    - ``torch(torch, **attrs)``: the same op in PyTorch, a function of the inputs (the study's third column).
    - ``unsupported``: {backend: why} for the backends of ``BACKENDS`` that run it as its numpy kernel.
    - ``function``: the public function that builds it (``sg.<name>``), exported unless ``public`` is False.
    - ``bodies``: the attributes that hold subgraphs (a loop's or branch's ``loops.Body``): passes look
      inside them, pictures draw them. Such an op makes several values at once (dtype object), read
      through ``loop_output`` nodes, and its ``lowering`` says how a plan runs it: the sizes its bodies
      are fed (``feeds``), the sizes of its values (``out_shapes``; ``values``: their static shapes and
      dtypes, which its ``loop_output`` nodes state) and the kernel that runs the body programs
      (``runner``). Its ``infer`` checks its bodies against its inputs and attributes: that is how a
      loaded file's loop is checked before it can run. The lowering's ``wiring(node)``, where it has one,
      says for pictures and traces which input feeds which body input (a carry's start, a slice per
      step, a value read every step), which body outputs come back as carries, which become which of
      the node's values, and a title ("50 steps, reverse"): see ``staticgrad.explain.loopinfo``.
    - ``scratch(node, shapes)``: the temporary arrays its kernel needs besides its result, as a list of
      (shape, dtype) (a convolution's unfolded input), or None. A memory plan hands it buffers for them,
      reused call after call and by later steps, as ``scratch=(array, ...)``; without a plan the kernel
      is called without ``scratch`` and allocates its own.
    - ``takes_needs``: the VJP rule takes ``needs=`` (which inputs need a gradient), to build no more.
    - ``batch(attrs, shapes, stacked)``: the op over a stack of its inputs, as a loop pass hoisting it out
      of a loop makes it: given the inputs' shapes inside the loop and which of them gain a leading
      axis of steps, (the attrs of the one op computing every step at once, per input the number of
      size-1 axes to put after that leading axis), or None where the op cannot. Elementwise ops have it.
    - ``draws``: the op is a random draw that consumes one draw of the key at its input 0 per call;
      ``draws(key)`` is the key's value after that draw (numpy arrays and tensors alike). Its kernel is a
      pure function of the key's value and its attribute ``index``: compile numbers the draws of each key
      in build order (``index`` 0, 1, ...), so a call with D draws of a key reads D positions of its
      stream; eager mode runs each at once with index 0 and sets a key that is a parameter or an eager
      leaf to ``draws(key)``. None for every other op.
    - ``checks``: the op whose check this one is (a scan's, for the check of its xs' lengths the loops pass
      puts before the work it hoists out of the loop): a failure of its shape rule at a call's sizes is
      reported as that op's, at the line it was built on. None for every other op.
    """

    __slots__ = ("name", "kernel", "infer", "vjp", "flags", "doc", "scalar", "scalar_rule", "scalar_kinds",
                 "scalar_work", "flops", "specialize", "fast_kernel", "permutes", "paired", "core_axes", "torch",
                 "unsupported", "function", "public", "bodies", "lowering", "takes_needs", "batch", "scratch",
                 "draws", "checks")

    def __init__(self, name, kernel, infer, vjp=None, flags=0, doc=""):
        self.name, self.kernel, self.infer, self.vjp, self.flags, self.doc = name, kernel, infer, vjp, flags, doc
        self.scalar = self.scalar_rule = self.scalar_work = self.specialize = self.fast_kernel = None
        self.permutes = None
        self.torch = self.function = None
        self.scalar_kinds = (("f",), "f")
        self.flops = 1
        self.paired = {}
        self.core_axes = None
        self.unsupported = {}
        self.public = True
        self.bodies, self.lowering, self.takes_needs, self.batch = (), None, False, None
        self.scratch = self.draws = self.checks = None

    def has(self, flag) -> bool:
        return bool(self.flags & flag)

    def publish(self, fn):
        """Make ``fn`` the public function that builds this op (``sg.<name>``, ``sg.ops.<name>``)."""
        fn.__name__ = fn.__qualname__ = self.name
        if not fn.__doc__:
            fn.__doc__ = self.doc or f"numpy.{self.name}, elementwise."
        self.function = fn
        return fn

    def template(self, node=None, shapes=None, nodes=None):
        """The per-element expression of this op (for ``node`` at these sizes), or None."""
        if callable(self.scalar):
            return self.scalar(node, shapes, nodes) if node is not None else None
        return self.scalar

    def cost(self, node, shapes) -> int:
        """Floating-point operations of ``node`` at these sizes (matmul exact, the rest per element)."""
        if callable(self.flops):
            return self.flops(node, shapes)
        return math.prod(shapes[node.id]) * self.flops

    def __repr__(self):
        return f"<op {self.name}>"


def is_a(node, flag) -> bool:
    """Whether a tensor or IR node is made by an op with ``flag`` (a leaf is made by none)."""
    opdef = REGISTRY.get(node.op)        # (the passes ask this of every node: no further calls)
    return opdef is not None and opdef.flags & flag != 0


def defop(name, kernel, infer, vjp=None, flags=0, doc="", **facts) -> OpDef:
    """Register op ``name``; ``facts`` set the OpDef's other fields (see :class:`OpDef`).

    Derived unless given: no VJP means NONDIFF; an elementwise numpy ufunc takes ``out=`` and may run in
    place; views and shape-only ops cost no FLOPs; elementwise inputs broadcast with no core axes.
    """
    if name in REGISTRY:
        raise ValueError(f"op {name!r} is defined twice")
    if vjp is None:
        flags |= NONDIFF
    if flags & ELEMENTWISE and isinstance(kernel, np.ufunc) and kernel.signature is None:
        flags |= OUT | INPLACE
    opdef = OpDef(name, kernel, infer, vjp, flags, doc)
    if flags & (VIEW | SHAPE_ONLY):
        opdef.flops = 0
    if flags & ELEMENTWISE:
        opdef.core_axes = 0
        opdef.batch = elementwise_batch
    if flags & REARRANGES:
        opdef.scalar_kinds = (("biuf",), "biuf")
    if not flags & ELEMENTWISE:
        opdef.unsupported["numba"] = "not elementwise: the numba backend runs its numpy kernel between its loops"
    for key, value in facts.items():
        if key not in OpDef.__slots__ or key in ("name", "kernel", "infer", "vjp", "flags", "doc"):
            raise TypeError(f"defop({name!r}): unknown fact {key!r}")
        setattr(opdef, key, dict(opdef.unsupported, **value) if key == "unsupported" else value)
    REGISTRY[name] = opdef
    return opdef


def elementwise_batch(attrs, shapes, stacked):
    """Stacked inputs of lower rank than the result get size-1 axes after the steps axis, so every step's
    operands still broadcast as they did inside the loop; the others broadcast from the right as before."""
    rank = max(len(s) for s in shapes)
    return attrs, [rank - len(s) if st else 0 for s, st in zip(shapes, stacked)]


def shifted_axes(key):
    """The batch rule of an op whose ``key`` attribute lists axes: each moves one on (the steps axis is 0)."""
    def batch(attrs, shapes, stacked):
        return dict(attrs, **{key: tuple(a + 1 for a in attrs[key])}), [0]
    return batch


def apply(name, inputs, attrs=None, source=None) -> Tensor:
    """Make the tensor ``name(*inputs, **attrs)``, checking shapes now so errors point at the user's line."""
    opdef = REGISTRY[name]
    attrs = attrs or {}
    # (a plain Tensor has no _eager: looking it up would raise and catch an AttributeError per input)
    if EAGER_HOOK is not None and _any_eager(inputs):
        return EAGER_HOOK(opdef, inputs, attrs)
    source = source or user_frame()
    try:
        shape, dtype = opdef.infer(inputs, **attrs)
    except (ShapeError, TypeError) as err:
        # numpy's own dtype refusals (a text placeholder in arithmetic) too: name the op and the line.
        kind = ShapeError if isinstance(err, ShapeError) else TypeError
        raise kind(f"{name}: {err}{_named_inputs(inputs)} (at {source})") from None
    return Tensor(name, inputs, attrs, shape, dtype, source=source)


def _any_eager(inputs) -> bool:
    # (a loop, not any() over a generator: every op of a million-node build and sweep asks)
    for x in inputs:
        if type(x) is not Tensor and getattr(x, "_eager", False):
            return True
    return False


def _named_inputs(inputs) -> str:
    """For an error: the inputs by label, when the user named any (`` (inputs h, W)``), else nothing."""
    tensors = [x for x in inputs if isinstance(x, Tensor)]
    if not any(x.name for x in tensors):
        return ""
    return f" (inputs {', '.join(x.label() for x in tensors)})"


# ------------------------------------------------------------------ turning Python values into tensors
def _is_scalar(value) -> bool:
    return isinstance(value, (bool, numbers.Number)) and not isinstance(value, np.generic)


def as_tensor(value, like=None) -> Tensor:
    """A tensor for ``value``. Python scalars adopt ``like``'s dtype when that loses nothing (principle 6)."""
    if isinstance(value, Tensor):
        return value
    if EAGER_HOOK is not None and hasattr(value, "_eager"):
        return value
    if _is_scalar(value) and like is not None:
        kind = np.dtype(like).kind
        if kind in "fc" or (kind in "iu" and isinstance(value, numbers.Integral)):
            return constant(value, dtype=like)
        if isinstance(value, bool) and kind == "b":
            return constant(value, dtype=bool)
    if isinstance(value, float):
        return constant(value, dtype=np.float64)
    return constant(value)


def coerce(*values):
    """Tensors for ``values``; Python scalars adopt the dtype of the first tensor argument."""
    for v in values:            # (a loop, not all() over a generator: asked of every op of a big build)
        if not isinstance(v, Tensor):
            break
    else:
        return values           # (the common case: every op of a sweep, eager tensors included)
    like = next((v.dtype for v in values if isinstance(v, Tensor) or hasattr(v, "_eager")), None)
    return tuple(as_tensor(v, like) for v in values)


# ------------------------------------------------------------------ shape and dtype rules
def broadcast_shapes(*shapes):
    """numpy broadcasting over static shapes; ``None`` is a size known only at run time."""
    if len(shapes) == 2 and shapes[0] == shapes[1] and None not in shapes[0]:
        return tuple(shapes[0])     # (the common case, on every op of a big graph's build and sweep)
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(ndim):
        dims = [s[axis - ndim + len(s)] for s in shapes if axis - ndim + len(s) >= 0]
        known = {d for d in dims if d is not None and d != 1}
        if len(known) > 1:
            raise ShapeError("cannot broadcast shapes " + " and ".join(format_shape(s) for s in shapes))
        if known:
            out.append(known.pop())
        elif any(d is None for d in dims):
            out.append(None)
        else:
            out.append(1)
    return tuple(out)


@functools.cache
def kernel_dtype(kernel, dtypes, attrs_key=()):
    """The dtype numpy gives for ``kernel`` on these input dtypes (exact numpy promotion, cached)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.asarray(kernel(*(np.ones((), d) for d in dtypes), **dict(attrs_key))).dtype


def elementwise_spec(kernel):
    """Broadcast the inputs' shapes; take the dtype numpy's kernel gives."""
    n = kernel_arity(kernel)

    def infer(inputs):
        check_arity(inputs, n)
        shape = broadcast_shapes(*[x.shape for x in inputs])
        return shape, kernel_dtype(kernel, tuple([x.dtype for x in inputs]))
    return infer


def kernel_arity(kernel) -> int:
    """How many inputs a kernel takes: a ufunc's ``nin`` (its next positional argument is ``out``: one input
    too many would be written into), else its positional parameters without a default."""
    if isinstance(kernel, np.ufunc):
        return kernel.nin
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
               for p in inspect.signature(kernel).parameters.values())


def same_spec(inputs, **attrs):
    return inputs[0].shape, inputs[0].dtype


def integers(values, what):
    """``values`` as a tuple of ints. Like numpy, floats, strings and bools are not sizes or axes."""
    try:
        if any(isinstance(v, (bool, np.bool_)) for v in values):
            raise TypeError
        return tuple(operator.index(v) for v in values)
    except TypeError:
        raise TypeError(f"{what} must be integers, got {values!r}") from None


def normalize_axis(axis, ndim, op="reduce"):
    """``axis`` (None, int or tuple) as a sorted tuple of non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    axes = integers(tuple(axis) if isinstance(axis, (tuple, list)) else (axis,), "axis")
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ShapeError(f"axis {a} is out of range for a tensor of rank {ndim}")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {axis}")
    return tuple(sorted(out))


# ------------------------------------------------------------------ what shape rules check of attributes
# The public functions turn what the user wrote into one stored form; the shape rules refuse any other, so
# a node made other than through them (read from a file) is held to what building would have made.
def check_arity(inputs, n):
    if len(inputs) != n:
        raise TypeError(f"takes {n} input{'s' if n != 1 else ''}, got {len(inputs)}")


def stored_axes(axes, ndim):
    """``axes`` if it is what :func:`normalize_axis` gives: a sorted tuple of distinct axes of rank ``ndim``."""
    if not isinstance(axes, tuple) or normalize_axis(axes, ndim) != axes:
        raise ShapeError(f"axis {axes!r} is not a sorted tuple of distinct axes of a rank-{ndim} tensor")
    return axes


def stored_axis(axis, ndim):
    """``axis`` if it is one axis of a rank-``ndim`` tensor, counted from 0."""
    (axis,) = integers((axis,), "axis")
    if not 0 <= axis < ndim:
        raise ShapeError(f"axis {axis} is not an axis of a rank-{ndim} tensor")
    return axis


def stored_sizes(shape, what="shape", free=False):
    """``shape`` if it is a tuple of sizes (ints >= 0; with ``free``, one -1 is allowed: reshape's)."""
    if not isinstance(shape, tuple):
        raise TypeError(f"{what} must be a tuple, got {shape!r}")
    sizes = integers(shape, what)
    if any(d < 0 for d in sizes) and not (free and sizes.count(-1) == 1 and min(sizes) == -1):
        raise ShapeError(f"negative size in {what} {shape}")
    return shape


def stored_flag(value, what):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} must be True or False, got {value!r}")
    return bool(value)


def stored_dtype(dtype):
    if not isinstance(dtype, np.dtype) or dtype.kind not in "biufc" or dtype.fields is not None:
        raise TypeError(f"dtype must be a numeric numpy dtype, got {dtype!r}")
    return dtype
