"""Tensor: one node of the symbolic DAG.

This module is the bottom of the import ladder: it knows nothing of ops. The ops package attaches the
operator methods (``+``, ``@``, ``.sum`` ...) to :class:`Tensor` when it is imported.
"""
from __future__ import annotations

import gc
import itertools
import operator
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import numpy.typing as npt

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_PREFIX = _PACKAGE_DIR + os.sep
# The package's files that are user code all the same, written as a user would write theirs: provenance
# names their lines instead of looking past them (the demo's model, so its pictures and generated code
# point into it). Paths relative to the package; the one list the frame filters read.
USER_CODE = ("demo_model.py",)
_USER_FILES = frozenset(os.path.join(_PACKAGE_DIR, path) for path in USER_CODE)
_ids = itertools.count()

# The ops of leaves: values a call supplies (placeholders, parameters) and values baked into the graph.
VARIABLES = ("placeholder", "parameter")
LEAVES = VARIABLES + ("constant",)
# The attrs of every op that has none: one shared dict, never written to (a million nodes, one dict).
NO_ATTRS: dict = {}
# What a node is for: computing the outputs, their gradients (the adjoint graph), or only the updates.
ROLES = ("forward", "backward", "update")


class StaticgradError(ValueError):
    """Base class of staticgrad's value errors (bad shapes, bad feeds, bad graphs)."""


class ShapeError(StaticgradError):
    """A shape mismatch found while an expression is built."""


class FeedError(StaticgradError):
    """A compiled function was called with a missing, unknown or ill-shaped feed."""


class FeedTypeError(FeedError, TypeError):
    """A feed of a dtype the placeholder cannot take (a FeedError, and a TypeError as numpy would raise)."""


class FeedCastError(FeedError, OverflowError):
    """A feed whose cast to the placeholder's dtype would change a value (overflow, wrap-around)."""


class GradError(StaticgradError):
    """``sg.grad`` was asked for something it cannot give."""


class NumericsError(StaticgradError, FloatingPointError):
    """A node made a NaN or an infinity while numerics were checked (``check_numerics=True``), or numpy
    raised a floating-point error in it under ``np.errstate``."""


def origin(node, forward=None) -> str:
    """Where a node (a tensor or an IR node) stands, for errors: its role, and for a backward node the VJP
    that made it (``forward``: the forward node it is the adjoint of, when still known), then the user's line."""
    if node.role == "backward" and node.adjoint_of is not None:
        of = getattr(node.adjoint_of, "id", node.adjoint_of)      # (eager mode keeps the tensor itself)
        what = f"{node.rule} of node {of}" if node.rule in ("sum at fork", "seed") else f"VJP of {node.rule} node {of}"
        where = f" from {forward.source}" if forward is not None and forward.source else ""
        return f"backward, {what}{where}; built at {node.source}"
    return f"{node.role}, built at {node.source}"


class Context(threading.local):
    """What is in force while tensors are being created: role, name scopes, provenance. Each thread has its
    own (a thread building one graph must not see another's name scope)."""

    def __init__(self):
        self.role = "forward"
        self.scopes = ()
        self.adjoint_of = None   # the forward tensor whose VJP is being built
        self.rule = None         # the op name of that VJP rule
        self.forward_source = None   # the user's line of that forward tensor
        self.source = None       # the user's line, when already known (sg.grad's): no stack walk per tensor
        self.tracing = 0         # how many loop bodies are being traced (loops.body.trace)


CONTEXT = Context()


@contextmanager
def name_scope(name: str) -> Iterator[str]:
    """Group the tensors created inside under ``name`` (nested scopes join with '/')."""
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"name_scope: expected a non-empty name without '/', got {name!r}")
    saved = CONTEXT.scopes
    CONTEXT.scopes = saved + (name,)
    try:
        yield "/".join(CONTEXT.scopes)
    finally:
        CONTEXT.scopes = saved


class building:
    """Used by autodiff: tensors created inside carry this role and provenance (and ``source``, if given,
    as the user's line). (A class, not a generator: the sweep enters one per node, a million times for a
    million-node graph, and a generator's context manager costs several times more.)"""

    __slots__ = ("role", "adjoint_of", "rule", "source", "forward_source", "saved")

    def __init__(self, role=None, adjoint_of=None, rule=None, source=None, forward_source=None):
        self.role, self.adjoint_of, self.rule, self.source = role, adjoint_of, rule, source
        self.forward_source = forward_source

    def __enter__(self):
        ctx = CONTEXT
        self.saved = (ctx.role, ctx.adjoint_of, ctx.rule, ctx.source, ctx.forward_source)
        if self.role is not None:
            ctx.role = self.role
        if self.adjoint_of is not None:
            ctx.adjoint_of, ctx.rule, ctx.forward_source = self.adjoint_of, self.rule, self.forward_source
        if self.source is not None:
            ctx.source = self.source

    def __exit__(self, *exc):
        ctx = CONTEXT
        ctx.role, ctx.adjoint_of, ctx.rule, ctx.source, ctx.forward_source = self.saved


@contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector while a large graph is built or rewritten.

    Graphs are acyclic trees of small objects: the collector's full passes over them find nothing and,
    run again and again as millions of nodes are created, make large builds superlinear.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def library_file(filename: str) -> bool:
    """Whether ``filename`` is the package's own code, which provenance looks past (not a USER_CODE file)."""
    return filename.startswith(_PACKAGE_PREFIX) and filename not in _USER_FILES


def user_frame() -> str:
    """``file:line`` of the innermost caller outside the staticgrad package (where the user wrote it), or in
    one of its USER_CODE files."""
    if CONTEXT.source is not None:
        return CONTEXT.source
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_PACKAGE_PREFIX) or filename in _USER_FILES:
            key = (filename, frame.f_lineno)
            source = _SOURCES.get(key)
            if source is None:
                source = _SOURCES[key] = f"{os.path.basename(filename)}:{frame.f_lineno}"
            return source
        frame = frame.f_back
    return "<staticgrad>"


# One string per line of user code, shared by every tensor made there (a loop of a million ops: one string).
_SOURCES: dict = {}


def format_shape(shape) -> str:
    if shape is None:
        return "?"
    inner = ", ".join("None" if d is None else str(d) for d in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


class Tensor:
    """A symbolic value: the result of ``op`` applied to ``inputs`` with ``attrs``.

    ``shape`` is static: a tuple whose entries are ints or ``None`` for sizes known only at run time.
    Leaves are placeholders, parameters and constants; their ``inputs`` are empty.
    """

    __slots__ = ("id", "op", "inputs", "attrs", "shape", "dtype", "name", "_requires_grad",
                 "_value", "source", "role", "scope", "adjoint_of", "rule", "meta", "grad", "__weakref__")

    # numpy must hand ``ndarray + tensor`` to Tensor.__radd__ instead of looping over the tensor.
    __array_ufunc__ = None

    def __init__(self, op, inputs=(), attrs=None, shape=(), dtype=np.float64, name=None,
                 requires_grad=None, value=None, source=None):
        self.id = next(_ids)
        self.op = op
        self.inputs = tuple(inputs)
        self.attrs = attrs or NO_ATTRS
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.name = name
        if requires_grad is None:
            # (a loop, not any() over a generator: every op of a million-node build and sweep comes here)
            requires_grad = False
            for x in self.inputs:
                if x._requires_grad:
                    requires_grad = True
                    break
        self._requires_grad = bool(requires_grad)
        self._value = value
        self.source = source or user_frame()
        ctx = CONTEXT
        self.role = ctx.role
        self.scope = "/".join(ctx.scopes) if ctx.scopes else ""
        self.adjoint_of = ctx.adjoint_of
        self.rule = ctx.rule
        self.meta = None         # free-form annotations, e.g. the reverse sweep that made a gradient
        # A parameter used in eager ops (define-by-run) gets its gradient here from loss.backward(), as a torch
        # leaf does; optimizers' step() reads it. Symbolic use (sg.grad, sg.compile) never touches it.
        self.grad = None

    # ----------------------------------------------------------------- leaves
    @property
    def is_leaf(self) -> bool:
        return not self.inputs

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def value(self):
        """The numpy value of a parameter or constant (None for placeholders and op results)."""
        return self._value

    @value.setter
    def value(self, new):
        if self.op != "parameter":
            raise TypeError(f"only a parameter's value can be set, not a {self.op}'s ({self})")
        self._value = self.checked_value(new, f"parameter {self.name!r}")

    def checked_value(self, new, what):
        """``new`` as an owned array of this tensor's shape and dtype, or the error a user should see."""
        arr = np.asarray(new)
        if arr.shape != self.shape:
            raise ShapeError(f"{what}: expected a value of shape {format_shape(self.shape)}, "
                             f"got {format_shape(arr.shape)}")
        if not np.can_cast(arr.dtype, self.dtype, "same_kind"):
            raise TypeError(f"{what}: cannot cast {arr.dtype} to {self.dtype}")
        return np.array(arr, dtype=self.dtype, copy=True)

    def parameters(self) -> list:
        """The trainable parameters this tensor depends on, in the order they were made (``loss.parameters()``
        is what an optimizer of that loss trains; state made with ``requires_grad=False`` is left out)."""
        seen, found, stack = set(), [], [self]
        while stack:                    # iterative: a chain of a million ops must not recurse
            t = stack.pop()
            if t.id in seen:
                continue
            seen.add(t.id)
            if t.op == "parameter" and t._requires_grad:
                found.append(t)
            stack.extend(t.inputs)
        return sorted(found, key=lambda p: p.id)

    # ----------------------------------------------------------------- display
    def named(self, name: str) -> Tensor:
        """Give this tensor ``name`` and return it: ``loss = (...).named("loss")``. Errors, pictures (a gradient
        reads ``dloss/dW``), traces and the generated code's comments call it by that name."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"named: expected a non-empty string, got {name!r} (at {user_frame()})")
        self.name = name
        return self

    def label(self) -> str:
        """What tables, pictures and errors call it: its name, else ``op#id``."""
        return self.name or f"{self.op}#{self.id}"

    def __repr__(self):
        name = f" {self.name!r}" if self.name else ""
        return f"<Tensor {self.op}{name} shape={format_shape(self.shape)} dtype={self.dtype} at {self.source}>"

    def __bool__(self):
        raise TypeError("the truth value of a symbolic tensor is unknown until the graph runs; "
                        "use sg.where for data-dependent choices")

    def __len__(self):
        if not self.shape or self.shape[0] is None:
            raise TypeError(f"len() of a tensor of shape {format_shape(self.shape)}")
        return self.shape[0]

    __hash__ = object.__hash__

    def __iter__(self):
        raise TypeError("a symbolic tensor cannot be iterated; index it instead")


# What the ops take: a tensor, or a value numpy makes an array of (a Python number adopts the tensor's dtype).
TensorLike = Tensor | npt.ArrayLike


def placeholder(shape: Sequence[int | None], dtype: npt.DTypeLike = "float64", name: str | None = None,
                requires_grad: bool = False) -> Tensor:
    """A value fed at each call. ``None`` in ``shape`` means any size."""
    try:
        if any(isinstance(d, (bool, np.bool_)) for d in shape):
            raise TypeError         # numpy refuses True as a size too
        shape = tuple(None if d is None else operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"placeholder {name!r}: sizes must be integers or None, got {shape!r} "
                        f"(at {user_frame()})") from None
    if any(d is not None and d < 0 for d in shape):
        raise ShapeError(f"placeholder {name!r}: negative size in shape {format_shape(shape)} (at {user_frame()})")
    dtype = np.dtype(dtype)
    if dtype.kind not in "biufc":
        raise TypeError(f"placeholder {name!r}: expected a numeric dtype, got {dtype} (at {user_frame()})")
    if requires_grad and dtype.kind != "f":
        raise GradError(f"placeholder {name!r}: only real floating tensors can require grad, not {dtype} "
                        f"(at {user_frame()})")
    return Tensor("placeholder", shape=shape, dtype=dtype, name=name, requires_grad=requires_grad)


def parameter(value: npt.ArrayLike, name: str | None = None, dtype: npt.DTypeLike = None,
              requires_grad: bool = True) -> Tensor:
    """A trainable leaf: its value persists across calls and it requires grad. ``requires_grad=False``
    makes state that is not trained but may be updated (a batch norm's running mean, a random key):
    ``loss.parameters()`` and ``Module.parameters()`` leave it out, checkpoints keep it."""
    arr = np.array(value, dtype=dtype, copy=True)
    if arr.dtype.kind in "biu":
        arr = arr.astype(np.float64)
    if arr.dtype.kind != "f":
        # (complex too: the VJP rules are written for real values, they do not conjugate)
        raise TypeError(f"parameter {name!r}: expected a real floating value, got dtype {arr.dtype} "
                        f"(at {user_frame()})")
    return Tensor("parameter", shape=arr.shape, dtype=arr.dtype, name=name, requires_grad=bool(requires_grad),
                  value=arr)


def constant(value: npt.ArrayLike, name: str | None = None, dtype: npt.DTypeLike = None) -> Tensor:
    """A fixed value baked into the graph."""
    arr = np.array(value, dtype=dtype, copy=True)
    if arr.dtype.kind not in "biufc":
        what = f"constant {name!r}" if name else f"the value {value!r:.40}"
        raise TypeError(f"{what}: expected a number or a numeric array, got dtype {arr.dtype} (at {user_frame()})")
    arr.setflags(write=False)
    return Tensor("constant", shape=arr.shape, dtype=arr.dtype, name=name, requires_grad=False, value=arr)
