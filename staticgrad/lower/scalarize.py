"""Scalar code for tiny plans: every element of every tensor becomes a Python float.

When a plan's tensors are a handful of numbers (the 20-parameter network, a few samples), numpy's fixed
cost per call dominates: a 2x3 matrix product costs as much as a 200x300 one. Once the shapes of a call
are known, a static graph can be unrolled into straight-line float arithmetic instead: matrix products
become sums of products, views (transpose, reshape, indexing, broadcasts) become pure renaming at
generation time and cost nothing at run time.

The generated ``run`` has the same signature and the same bits as the numpy plan's: sums add in numpy's
order, transcendental functions call numpy's own kernels; only a matrix product's last bit can differ from
BLAS's fused multiply-adds. Where Python's float semantics differ from numpy's (division by zero, overflow,
sqrt of a negative number raise instead of giving inf/nan), the scalar code raises and the caller reruns
the numpy plan, so results never silently differ.
"""
from __future__ import annotations

import builtins
import math
import operator
import re

import numpy as np

from . import fuse, scalar_math
from .codegen import comment, identifier

MAX_STATEMENTS = 4000          # beyond this, numpy's vector calls win anyway

_UNARY = {
    "neg": "(-{0})", "sqrt": "sqrt({0})", "abs": "abs({0})",
    "square": "({0} * {0})", "relu": "({0} if not {0} <= 0.0 else 0.0)", "stop_gradient": "{0}",
    "sign": "sign({0})",
}
_BINARY = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "maximum": "maximum({0}, {1})", "minimum": "minimum({0}, {1})",
    "less": "({0} < {1})", "less_equal": "({0} <= {1})", "greater": "({0} > {1})",
    "greater_equal": "({0} >= {1})", "equal": "({0} == {1})", "not_equal": "({0} != {1})",
    "logical_and": "({0} and {1})", "logical_or": "({0} or {1})",
}
_VIEWS = ("reshape", "transpose", "expand_dims", "squeeze", "broadcast_to", "getitem")
_ROWWISE = ("softmax", "log_softmax", "logsumexp")
# Transcendental functions run on numpy's own kernels, one call per node: which kernel numpy uses depends
# on the CPU (on AVX512 its float64 exp, log, pow and tanh are SIMD code whose last bits differ from libm's,
# the math module's, on up to a third of inputs; on AVX2 tanh does), so only numpy's call gives numpy's
# bits everywhere. Arithmetic, comparisons and sqrt (correctly rounded by IEEE 754) stay Python floats.
_NUMPY_FUNCTIONS = ("exp", "log", "log1p", "expm1", "sin", "cos", "tanh")
SUPPORTED = set(_UNARY) | set(_BINARY) | set(_VIEWS) | set(_ROWWISE) | set(_NUMPY_FUNCTIONS) | {
    "sigmoid", "softplus", "pow", "matmul", "sum", "mean", "where", "clip", "cast", "softmax_cross_entropy",
    "one_hot", "concatenate", "stack", "getitem_grad", "constant", "placeholder", "parameter"}
EACH = 6          # from this many elements on, one call for a node's elements costs less than one each (numpy 2.4)


def _numpy_one(ufunc):
    def one(value):
        return float(ufunc(value))      # (a Python float: the generated code's division must still raise)
    return one


def _numpy_each(ufunc):
    def each(values):
        return ufunc(values).tolist()
    return each


def _power_each(bases, exponent):
    # one exponent for every base (numpy's loop then reads it with a step of 0, and takes its shortcuts)
    return np.power(bases, exponent).tolist()


def _power_pairs(bases, exponents):
    return np.power(bases, exponents).tolist()


HELPERS = dict(scalar_math.FUNCTIONS, sqrt=math.sqrt, power_each=_power_each, power_pairs=_power_pairs,
               np=np, inf=math.inf, nan=math.nan)
HELPERS.update({f"dtype_{t.__name__}": np.dtype(t) for t in (np.float64, np.int64, np.int32, np.bool_)})
for _name in _NUMPY_FUNCTIONS:
    HELPERS[f"{_name}_one"] = _numpy_one(getattr(np, _name))
    HELPERS[f"{_name}_each"] = _numpy_each(getattr(np, _name))


class Unsupported(Exception):
    """The plan uses something the scalar generator does not handle; the numpy plan is used instead."""


_COMPARISONS = {"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"}
_LABEL_READERS = {"softmax_cross_entropy", "one_hot"}
PER_CALL = 6     # scalar statements that cost about as much as one numpy call on a tiny array


def eligible(graph, order, shapes, limit=MAX_STATEMENTS) -> bool:
    """Whether ``graph`` should run as scalar code: known ops, arithmetic in float64 only, and fewer
    scalar statements than ``PER_CALL`` times the numpy calls they replace (decided from shapes alone,
    so every compile of the same graph makes the same choice).

    Integers and booleans only flow where Python and numpy agree: integer labels into the loss or
    one-hot, booleans from comparisons into ``where`` or a cast to float (no integer overflow, no bool
    arithmetic, no ``and`` returning an operand).
    """
    total, calls = 0, 0
    nodes = graph.nodes
    for i in order:
        node = nodes[i]
        if node.op not in SUPPORTED:
            return False
        kind = node.dtype.kind
        if kind == "f" and node.dtype != np.float64:
            return False
        if kind in "iu" and node.op not in ("placeholder", "constant") and node.op not in _VIEWS:
            return False
        if kind == "b" and node.op not in _COMPARISONS and node.op not in ("placeholder", "constant") \
                and node.op not in _VIEWS:
            return False
        if kind not in "fiub":
            return False
        for j in node.inputs:
            ikind = nodes[j].dtype.kind
            if ikind in "iu" and node.op not in _LABEL_READERS and node.op not in _VIEWS:
                return False
            if ikind == "b" and node.op not in ("where", "cast") and node.op not in _VIEWS:
                return False
        if node.op not in _VIEWS and node.op not in ("placeholder", "parameter", "constant"):
            calls += 1
            total += math.prod(shapes[i]) * (math.prod(shapes[node.inputs[0]][-1:]) if node.op == "matmul" else 1)
        if total > limit:
            return False
    return calls > 0 and total <= PER_CALL * calls


_GENERATED = re.compile(r"^[sau]\d+(_\d+)?$")    # names the generated code uses for its own values


class _Emitter:
    def __init__(self):
        self.lines = []
        self.count = 0

    def assign(self, expr):
        self.count += 1
        name = f"s{self.count}"
        self.lines.append(f"    {name} = {expr}")
        return name

    def assign_many(self, expr, n):
        names = [f"s{self.count + k + 1}" for k in range(n)]
        self.count += n
        self.lines.append(f"    {', '.join(names)}, = {expr}")
        return names


def _literal(value):
    if isinstance(value, (bool, np.bool_)):
        return "True" if value else "False"
    if isinstance(value, (int, np.integer)):
        return repr(int(value))
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "(-inf)"
    return repr(value)


def _atoms(shape, fill):
    out = np.empty(shape, dtype=object)
    flat = out.reshape(-1)
    for k in range(flat.size):
        flat[k] = fill(k)
    return out


def generate(graph, order, params, inputs, shapes) -> str:
    """Source of ``run`` computing ``graph`` on Python scalars; raises Unsupported when it cannot."""
    em = _Emitter()
    nodes = graph.nodes
    val = {}
    # (a placeholder named abs or max must not hide the builtin the generated code calls)
    args, taken = [], set(HELPERS) | set(dir(builtins)) | {"run", "P"}
    for k, i in enumerate(inputs):
        name = identifier(nodes[i].name, taken)
        if name is None or _GENERATED.match(name):
            name = f"a{k}"
        taken.add(name)
        args.append(name)
        em.lines.append(f"   {comment(nodes[i])[1:]}")
        val[i] = _unpack(em, name, shapes[i])
    for k, i in enumerate(params):
        em.lines.append(f"   {comment(nodes[i])[1:]}")
        val[i] = _unpack(em, f"P[{k}]._value", shapes[i])
    for i in order:
        node = nodes[i]
        if i in val:
            continue
        if node.op == "constant":          # written into the lines that use it
            val[i] = _node(em, node, (), shapes, nodes)
            continue
        # Provenance as in the numpy plan: one comment per node, above the scalar lines it became.
        em.lines.append(f"   {comment(node)[1:]} (node {i})")
        start = len(em.lines)
        val[i] = _node(em, node, [val[j] for j in node.inputs], shapes, nodes)
        if len(em.lines) == start:
            em.lines[-1] += ": renaming only, no code"
    outs = [_pack(em, val[o], nodes[o].dtype) for o in graph.outputs]
    ups = [_pack(em, val[e], nodes[e].dtype) for _, e in graph.updates]
    body = "\n".join(em.lines)
    return (f"def run({', '.join(args)}):\n{body}\n"
            f"    return [{', '.join(outs)}], [{', '.join(ups)}]\n")


def _unpack(em, source, shape):
    n = math.prod(shape)
    if n == 0:
        raise Unsupported("empty tensor")
    em.count += 1
    names = np.array([f"u{em.count}_{k}" for k in range(n)], dtype=object).reshape(shape)
    # tolist() gives Python floats, ints and bools: exactly the scalars the generated code computes on;
    # nested lists unpack into nested targets, without a reshape (shapes are the plan's: feeds are checked
    # against it, parameters against their own)
    em.lines.append(f"    {_nested(names)} = {source}.tolist()")
    return names


def _nested(atoms):
    """``atoms`` (names) as a nested list display: a target to unpack into, or a list to make an array of."""
    if isinstance(atoms, str):
        return atoms
    if atoms.ndim == 0:
        return str(atoms[()])
    return "[" + ", ".join(_nested(a) for a in atoms) + "]"


def _pack(em, atoms, dtype):
    # a dtype object bound once (a string would be parsed on every call)
    kind = f"dtype_{dtype.name}" if f"dtype_{dtype.name}" in HELPERS else f"np.dtype({dtype.name!r})"
    if atoms.ndim <= 1:
        return f"np.array({_nested(atoms)}, {kind})"
    return f"np.array([{', '.join(atoms.reshape(-1).tolist())}], {kind}).reshape({atoms.shape!r})"


# Python's float arithmetic is IEEE's, as numpy's: on two literals it is done once, when generating.
_ARITHMETIC = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv}


def _elementwise(em, template, operands, shape, fold=None):
    arrays = np.broadcast_arrays(*operands)
    out = np.empty(shape, dtype=object)
    flat = out.reshape(-1)
    for k, parts in enumerate(zip(*(a.reshape(-1) for a in arrays))):
        numbers = [_float_literal(p) for p in parts] if fold else [None]
        if None not in numbers and (fold is not operator.truediv or numbers[1] != 0.0):
            flat[k] = _literal(fold(*numbers))
        else:
            flat[k] = em.assign(template.format(*parts))
    return out


def _float_literal(atom):
    # only a float literal: integer literals (int64 arithmetic) and bools keep their own rules
    value = _number(atom)
    return value if value is not None and ("." in atom or "e" in atom or "inf" in atom or "nan" in atom) else None


def _node(em, node, ins, shapes, nodes):
    op, attrs, shape = node.op, node.attrs, shapes[node.id]
    if op == "constant":
        return _atoms(node.value.shape, lambda k: _literal(node.value.reshape(-1)[k]))
    if op in _UNARY:
        return _elementwise(em, _UNARY[op], ins, shape)
    if op in _NUMPY_FUNCTIONS:
        return _shaped(_numpy_call(em, op, _flat(ins[0], shape)), shape)
    if op == "sigmoid":
        xs = _flat(ins[0], shape)
        es = _numpy_call(em, "exp", [f"(-abs({x}))" for x in xs])
        # then what sigmoid_kernel does with e = exp(-|x|): r = 1/(1 + e), r where x >= 0, else e*r
        return _elementwise(em, "(1.0 / (1.0 + {1}) if {0} >= 0 else {1} * (1.0 / (1.0 + {1})))",
                            [np.array(xs, dtype=object), np.array(es, dtype=object)],
                            shape)
    if op == "softplus":          # as softplus_kernel: log1p(exp(-|x|)) + maximum(x, 0)
        xs = _flat(ins[0], shape)
        logs = _numpy_call(em, "log1p", _numpy_call(em, "exp", [f"(-abs({x}))" for x in xs]))
        return _elementwise(em, "({1} + ({0} if {0} > 0.0 else 0.0))",
                            [np.array(xs, dtype=object), np.array(logs, dtype=object)], shape)
    if op == "pow":
        return _power(em, node, ins, shapes, nodes)
    if op in _ARITHMETIC:
        return _elementwise(em, _BINARY[op], ins, shape, fold=_ARITHMETIC[op])
    if op in _BINARY:
        return _elementwise(em, _BINARY[op], ins, shape)
    if op == "where":
        return _elementwise(em, "({1} if {0} else {2})", ins, shape)
    if op == "clip":
        return _elementwise(em, "minimum(maximum({0}, {1}), {2})", ins, shape)
    if op == "cast":
        kind = np.dtype(attrs["dtype"]).kind
        conv = {"f": "float", "i": "int", "u": "int", "b": "bool"}[kind]
        return _elementwise(em, conv + "({0})", ins, shape)
    if op == "reshape":
        return ins[0].reshape(attrs["shape"])
    if op == "transpose":
        return np.transpose(ins[0], attrs["axes"])
    if op == "expand_dims":
        return np.expand_dims(ins[0], attrs["axis"])
    if op == "squeeze":
        return np.squeeze(ins[0], axis=attrs["axis"])
    if op == "broadcast_to":
        return np.broadcast_to(ins[0], attrs["shape"])
    if op == "getitem":
        return np.asarray(ins[0][attrs["index"]], dtype=object)
    if op in ("concatenate", "stack"):
        fn = np.concatenate if op == "concatenate" else np.stack
        return fn([np.asarray(x, dtype=object) for x in ins], axis=attrs["axis"])
    if op == "matmul":
        return _matmul(em, ins[0], ins[1], shape)
    if op in ("sum", "mean"):
        return _reduce(em, op, ins[0], attrs["axis"], attrs["keepdims"])
    if op in _ROWWISE:
        return _rowwise(em, op, ins[0], attrs["axis"], attrs.get("keepdims", True), shape)
    if op == "softmax_cross_entropy":
        return _cross_entropy(em, ins[0], ins[1])
    if op == "one_hot":
        labels, ref = ins
        depth = ref.shape[-1]
        out = np.empty(labels.shape + (depth,), dtype=object)
        for idx in np.ndindex(labels.shape):
            _check_label(em, labels[idx], depth)
            for c in range(depth):
                out[idx + (c,)] = em.assign(f"(1.0 if {labels[idx]} == {c} else 0.0)")
        return out
    if op == "getitem_grad":
        out = np.full(attrs["shape"], "0.0", dtype=object)
        index = attrs["index"]
        target = np.empty(attrs["shape"], dtype=object)
        target.reshape(-1)[:] = np.arange(target.size)
        picked = np.asarray(target[index], dtype=object)
        for pos, g in zip(np.broadcast_to(picked, ins[0].shape).reshape(-1), ins[0].reshape(-1)):
            cell = np.unravel_index(pos, out.shape)
            out[cell] = g if out[cell] == "0.0" else em.assign(f"({out[cell]} + {g})")
        return out
    raise Unsupported(op)


_SHORTCUTS = {0.5: "sqrt({0})", 2.0: "({0} * {0})", -1.0: "(1.0 / {0})"}


def _power(em, node, ins, shapes, nodes):
    """What numpy's power computes: where its loop reads one exponent for all elements, its shortcuts (a
    square root for 0.5, a*a for 2, 1/a for -1) as Python arithmetic, else numpy's own power."""
    shape = shapes[node.id]
    one = fuse.one_exponent(nodes, shapes, node)
    numbers = [_number(e) for e in np.asarray(ins[1]).reshape(-1)]
    plain = all(v is not None and v not in _SHORTCUTS for v in numbers)
    if one is None and not plain:
        raise Unsupported("an exponent broadcast along some axes only: numpy's loop order decides")
    bases = ", ".join(_flat(ins[0], shape))
    if not one:         # (an exponent without shortcuts gives pow's bits however numpy's loop reads it)
        exponents = ", ".join(_flat(ins[1], shape))
        return _shaped(em.assign_many(f"power_pairs(({bases},), ({exponents},))", math.prod(shape)), shape)
    if numbers[0] in _SHORTCUTS:
        return _elementwise(em, _SHORTCUTS[numbers[0]], ins[:1], shape)
    exponent = np.asarray(ins[1]).reshape(-1)[0]
    # a fed exponent: numpy's power, given one number, takes its shortcuts itself
    return _shaped(em.assign_many(f"power_each(({bases},), {exponent})", math.prod(shape)), shape)


def _flat(atoms, shape):
    return np.broadcast_to(atoms, shape).reshape(-1).tolist()


def _numpy_call(em, function, args):
    """Names of ``function`` (numpy's kernel) of each expression in ``args``: one call for them all."""
    if len(args) < EACH:
        return [em.assign(f"{function}_one({a})") for a in args]
    return em.assign_many(f"{function}_each(({', '.join(args)},))", len(args))


def _shaped(names, shape):
    return np.array(names, dtype=object).reshape(shape)


def _number(atom):
    """The value of a literal atom (see _literal); None for a name."""
    try:
        return float(atom.strip("()"))
    except ValueError:
        return None


def _matmul(em, a, b, shape):
    a2 = a.reshape((1,) + a.shape) if a.ndim == 1 else a
    b2 = b.reshape(b.shape + (1,)) if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b2 = np.broadcast_to(b2, batch + b2.shape[-2:])
    out = np.empty(batch + (a2.shape[-2], b2.shape[-1]), dtype=object)
    for idx in np.ndindex(out.shape):
        *bi, i, j = idx
        bi = tuple(bi)
        terms = [f"{a2[bi + (i, k)]} * {b2[bi + (k, j)]}" for k in range(a2.shape[-1])]
        # from 0.0, as BLAS accumulates: products that are all -0.0 sum to +0.0 (BLAS's fused multiply-adds
        # still make the last bits differ from these sums at times; the first call checks them to 1e-9)
        out[idx] = em.assign("0.0 + " + " + ".join(terms) if terms else "0.0")
    return out.reshape(shape)


def _pairwise(terms):
    """numpy's pairwise summation of ``terms`` (expressions) as one expression, in numpy's order of
    additions: runs of fewer than 8 in order, up to 128 in 8 interleaved partial sums, more in halves."""
    n = len(terms)
    if n < 8:
        return "(" + " + ".join(terms) + ")"
    if n <= 128:
        full = n - n % 8
        r = ["(" + " + ".join(terms[j:full:8]) + ")" for j in range(8)]
        head = f"((({r[0]} + {r[1]}) + ({r[2]} + {r[3]})) + (({r[4]} + {r[5]}) + ({r[6]} + {r[7]})))"
        return "(" + " + ".join([head] + list(terms[full:])) + ")"
    half = n // 2
    half -= half % 8
    return f"({_pairwise(terms[:half])} + {_pairwise(terms[half:])})"


def _in_order(terms):
    return "(" + " + ".join(terms) + ")"


def _summation(shape, axes):
    """How numpy adds along ``axes`` of a C-ordered array of ``shape``: pairwise when they are the
    innermost axes (size-1 axes aside), one after another when they are the outer ones."""
    kept = [a for a in range(len(shape)) if a not in axes and shape[a] != 1]
    summed = [a for a in axes if shape[a] != 1]
    if not kept or min(summed, default=len(shape)) > max(kept):
        return _pairwise
    if max(summed) < min(kept):
        return _in_order
    raise Unsupported("a sum over axes between kept ones")


def _reduce(em, op, x, axes, keepdims):
    # From 0.0, as numpy's reduction starts (so -0.0 terms sum to +0.0), in numpy's order of additions.
    add = _summation(x.shape, axes)
    moved = np.moveaxis(x, axes, range(x.ndim - len(axes), x.ndim))
    kept = moved.shape[:x.ndim - len(axes)]
    n = math.prod(moved.shape[len(kept):])
    rows = moved.reshape(kept + (n,))
    out = np.empty(kept, dtype=object)
    for idx in np.ndindex(kept):
        total = f"0.0 + {add(list(rows[idx]))}" if n else "0.0"
        out[idx] = em.assign(f"({total}) / {float(n)!r}" if op == "mean" else total)
    if keepdims:
        out = np.expand_dims(out, axes)
    return out


def _rowwise(em, op, x, axes, keepdims, shape):
    (axis,) = axes if len(axes) == 1 else (None,)
    if axis is None:
        raise Unsupported(f"{op} over several axes")
    add = _summation(x.shape, (axis,))
    moved = np.moveaxis(x, axis, -1)
    out = np.empty(moved.shape if op != "logsumexp" else moved.shape[:-1], dtype=object)
    for idx in np.ndindex(moved.shape[:-1]):
        row = moved[idx]
        m = em.assign(f"max({', '.join(row)})") if len(row) > 1 else row[0]
        if op != "softmax":          # numpy's logsumexp makes an infinite max 0; its softmax does not
            m = em.assign(f"({m} if {m} - {m} == 0.0 else 0.0)")
        exps = _numpy_call(em, "exp", [f"{v} - {m}" for v in row])
        total = em.assign(f"0.0 + {add(exps)}")
        if op == "softmax":
            out[idx] = [em.assign(f"{e} / {total}") for e in exps]
            continue
        lse = em.assign(f"log_one({total}) + {m}")
        out[idx] = [em.assign(f"{v} - {lse}") for v in row] if op == "log_softmax" else lse
    if op == "logsumexp":
        return np.expand_dims(out, axis) if keepdims else out.reshape(shape)
    return np.moveaxis(out, -1, axis)


def _check_label(em, label, classes):
    # Out-of-range labels make the numpy plan raise its clear error (the caller falls back to it).
    em.lines.append(f"    if not 0 <= {label} < {classes}: raise IndexError('label out of range')")


def _cross_entropy(em, logits, labels):
    # The numpy kernel sums each row of exp(z - m) and then the rows' losses with np.add.reduce: the
    # same order of additions here gives the same bits.
    rows = logits.reshape(-1, logits.shape[-1])
    labels = labels.reshape(-1)
    add_row = _summation(rows.shape, (1,))
    totals, maxima, picked = [], [], []
    for row, label in zip(rows, labels):
        _check_label(em, label, len(row))
        m = em.assign(f"max({', '.join(row)})") if len(row) > 1 else row[0]
        m = em.assign(f"({m} if {m} - {m} == 0.0 else 0.0)")     # an infinite max must not make nan
        exps = _numpy_call(em, "exp", [f"{v} - {m}" for v in row])
        totals.append(em.assign(f"0.0 + {add_row(exps)}"))
        maxima.append(m)
        picked.append(em.assign(f"({', '.join(row)},)[{label}]"))
    logs = _numpy_call(em, "log", totals)
    terms = [em.assign(f"{log} + {m} - {p}") for log, m, p in zip(logs, maxima, picked)]
    add = _summation((len(terms),), (0,))
    return np.array(em.assign(f"(0.0 + {add(terms)}) / {float(len(terms))!r}"), dtype=object)
