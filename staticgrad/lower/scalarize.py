"""Scalar code for tiny plans: every element of every tensor becomes a Python float.

When a plan's tensors are a handful of numbers (the 20-parameter network, a few samples), numpy's fixed
cost per call dominates: a 2x3 matrix product costs as much as a 200x300 one. Once the shapes of a call
are known, a static graph can be unrolled into straight-line float arithmetic instead: matrix products
become sums of products, views (transpose, reshape, indexing, broadcasts) become pure renaming at
generation time and cost nothing at run time.

Each op says how (its OpDef): a per-element template, a rule of its own for the non-elementwise ones, or
a kernel that only rearranges elements, run here on arrays of symbolic atoms. The generated ``run`` has
the same signature and the same bits as the numpy plan's: sums add in numpy's order, numpy's ufuncs are
called by name (one call for a node's elements); only a matrix product's last bit can differ from
BLAS's fused multiply-adds. Where Python's float semantics differ from numpy's (division by zero,
overflow, sqrt of a negative number raise instead of giving inf/nan), the scalar code raises and the
caller reruns the numpy plan, so results never silently differ.
"""
from __future__ import annotations

import ast
import builtins
import functools
import math
import re

import numpy as np

from ..ops.registry import REARRANGES, REGISTRY, VIEW
from ..tensor import LEAVES
from . import scalar_math
from .codegen import comment, identifier
from .memory import permuted_values

MAX_STATEMENTS = 4000          # beyond this, numpy's vector calls win anyway
PER_CALL = 6     # scalar statements that cost about as much as one numpy call on a tiny array
EACH = 6          # from this many elements on, one call for a node's elements costs less than one each (numpy 2.4)

HELPERS = dict(scalar_math.FUNCTIONS, power_each=scalar_math.power_each, power_pairs=scalar_math.power_pairs,
               np=np, inf=math.inf, nan=math.nan)
HELPERS.update({f"dtype_{t.__name__}": np.dtype(t) for t in (np.float64, np.int64, np.int32, np.bool_)})


class Unsupported(Exception):
    """The plan uses something the scalar generator does not handle; the numpy plan is used instead."""


def lowerable(node, shapes, nodes) -> bool:
    """Whether the scalar path can compute ``node`` (its op's template, rule, or a rearranging kernel)."""
    if node.op in LEAVES:
        return True
    opdef = REGISTRY[node.op]
    return bool(opdef.scalar_rule or opdef.has(REARRANGES) or opdef.template(node, shapes, nodes))


def _kinds_ok(node, nodes) -> bool:
    """Integers and booleans only where Python computes as numpy does; floats only as float64."""
    kind = node.dtype.kind
    if (kind == "f" and node.dtype != np.float64) or kind not in "fiub":
        return False
    if node.op in LEAVES:
        return True
    inputs, result = REGISTRY[node.op].scalar_kinds
    if kind not in result:
        return False
    for k, j in enumerate(node.inputs):
        if nodes[j].dtype.kind not in inputs[min(k, len(inputs) - 1)]:
            return False
    return True


def eligible(graph, order, shapes) -> bool:
    """Whether ``graph`` should run as scalar code: ops it can compute, on kinds Python computes as numpy
    does, and fewer scalar statements than ``PER_CALL`` times the numpy calls they replace (decided from
    shapes alone, so every compile of the same graph makes the same choice)."""
    total, calls = 0, 0
    nodes = graph.nodes
    for i in order:
        node = nodes[i]
        if not (_kinds_ok(node, nodes) and lowerable(node, shapes, nodes)):
            return False
        if node.op in LEAVES or _renames(node):
            continue
        calls += 1
        opdef = REGISTRY[node.op]
        total += opdef.scalar_work(node, shapes) if opdef.scalar_work else math.prod(shapes[i])
        if total > MAX_STATEMENTS:
            return False
    return calls > 0 and total <= PER_CALL * calls


def _renames(node) -> bool:
    """A view that only rearranges elements: pure renaming in scalar code, no statement."""
    opdef = REGISTRY[node.op]
    return opdef.has(VIEW) and opdef.has(REARRANGES)


_GENERATED = re.compile(r"^[sau]\d+(_\d+)?$")    # names the generated code uses for its own values


def generate(graph, order, params, inputs, shapes) -> tuple[str, set]:
    """(source of ``run`` computing ``graph`` on Python scalars, the numpy functions it calls); raises
    Unsupported when it cannot."""
    em = Emitter(graph.nodes, shapes, permuted_values(graph, order))
    val = {}
    # (a placeholder named abs or max must not hide the builtin the generated code calls)
    args, taken = [], set(HELPERS) | set(dir(builtins)) | {"run", "P"}
    for k, i in enumerate(inputs):
        name = identifier(graph.nodes[i].name, taken)
        if name is None or _GENERATED.match(name):
            name = f"a{k}"
        taken.add(name)
        args.append(name)
        em.lines.append(f"   {comment(graph.nodes[i])[1:]}")
        val[i] = em.unpack(name, shapes[i])
    for k, i in enumerate(params):
        em.lines.append(f"   {comment(graph.nodes[i])[1:]}")
        val[i] = em.unpack(f"P[{k}]._value", shapes[i])
    for i in order:
        if i not in val:
            val[i] = _node(em, graph.nodes[i], val)
    outs = [em.pack(val[o], graph.nodes[o].dtype) for o in graph.outputs]
    ups = [em.pack(val[e], graph.nodes[e].dtype) for _, e in graph.updates]
    body = "\n".join(em.lines)
    source = (f"def run({', '.join(args)}):\n{body}\n"
              f"    return [{', '.join(outs)}], [{', '.join(ups)}]\n")
    return source, em.used


def _node(em, node, val):
    if node.op == "constant":          # written into the lines that use it
        return em.atoms(node.value.shape, lambda k: _literal(node.value.reshape(-1)[k]))
    # Provenance as in the numpy plan: one comment per node, above the scalar lines it became.
    em.lines.append(f"   {comment(node)[1:]} (node {node.id})")
    start = len(em.lines)
    opdef, ins, shape = REGISTRY[node.op], [val[j] for j in node.inputs], em.shapes[node.id]
    if opdef.scalar_rule is not None:
        atoms = opdef.scalar_rule(em, node, ins, shape)
    elif opdef.has(REARRANGES):
        atoms = np.asarray(opdef.kernel(*ins, **node.attrs), dtype=object)
    else:
        template = opdef.template(node, em.shapes, em.nodes)
        if template is None:
            raise Unsupported(node.op)
        atoms = em.elementwise(template, ins, shape)
    if len(em.lines) == start:
        em.lines[-1] += ": renaming only, no code"
    return atoms


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


def _number(atom):
    """The value of a literal atom (see _literal); None for a name."""
    try:
        return float(atom.strip("()"))
    except ValueError:
        return None


def _float_literal(atom):
    # only a float literal: integer literals (int64 arithmetic) and bools keep their own rules
    value = _number(atom)
    return value if value is not None and ("." in atom or "e" in atom or "inf" in atom or "nan" in atom) else None


class Template:
    """A per-element template split for the scalar path: the calls of numpy ufuncs it makes, innermost
    first (each computed for all of a node's elements by one numpy call), and what remains per element.

    Operands are ``_a0``, ``_a1``, ... and the calls' results ``_c0``, ``_c1``, ... in both parts; a call
    written twice (sigmoid's exp(-|x|)) is made once.
    """

    def __init__(self, template):
        tree = ast.parse(re.sub(r"\{(\d+)\}", r"_a\1", template), mode="eval")
        self.calls, seen = [], {}

        class Hoist(ast.NodeTransformer):
            def visit_Call(inner, call):
                inner.generic_visit(call)
                if not (isinstance(call.func, ast.Name) and scalar_math.is_ufunc(call.func.id)):
                    return call
                text = ast.unparse(call)
                if text not in seen:
                    seen[text] = f"_c{len(self.calls)}"
                    self.calls.append((call.func.id, [ast.unparse(a) for a in call.args]))
                return ast.Name(id=seen[text], ctx=ast.Load())
        self.body = ast.unparse(Hoist().visit(tree))
        self.pure = not any(isinstance(n, ast.Call) for n in ast.walk(ast.parse(self.body, mode="eval")))


@functools.cache
def _split(template) -> Template:
    return Template(template)


_OPERAND = re.compile(r"\b_([ac])(\d+)\b")


def _fill(text, operands, results):
    return _OPERAND.sub(lambda m: (operands if m.group(1) == "a" else results)[int(m.group(2))], text)


class Emitter:
    """Statements of one scalar ``run``, and what the ops' scalar rules use to write them."""

    def __init__(self, nodes, shapes, permuted=frozenset()):
        self.nodes, self.shapes, self.permuted = nodes, shapes, permuted
        self.lines, self.count, self.used = [], 0, set()

    # ---------------------------------------------------------------- statements
    def assign(self, expr) -> str:
        self.count += 1
        name = f"s{self.count}"
        self.lines.append(f"    {name} = {expr}")
        return name

    def assign_many(self, expr, n) -> list:
        names = [f"s{self.count + k + 1}" for k in range(n)]
        self.count += n
        self.lines.append(f"    {', '.join(names)}, = {expr}")
        return names

    def one(self, function, arg) -> str:
        """An expression: numpy's ``function`` of the one expression ``arg``."""
        self.used.add(function)
        return f"{function}_one({arg})"

    def numpy(self, function, args) -> list:
        """Names of numpy's ``function`` of each expression in ``args``: one call for them all."""
        self.used.add(function)
        if len(args) < EACH:
            return [self.assign(f"{function}_one({a})") for a in args]
        return self.assign_many(f"{function}_each(({', '.join(args)},))", len(args))

    def numpy_columns(self, function, columns) -> list:
        """numpy's ``function`` of the element-wise argument ``columns`` (lists of expressions)."""
        if len(columns) == 1:
            return self.numpy(function, columns[0])
        self.used.add(function)
        if len(columns[0]) < EACH:
            return [self.assign(f"{function}_one({', '.join(row)})") for row in zip(*columns)]
        tuples = ", ".join(f"({', '.join(c)},)" for c in columns)
        return self.assign_many(f"{function}_each({tuples})", len(columns[0]))

    def check_label(self, label, classes):
        # Out-of-range labels make the numpy plan raise its clear error (the caller falls back to it).
        self.lines.append(f"    if not 0 <= {label} < {classes}: raise IndexError('label out of range')")

    @staticmethod
    def refuse(reason):
        raise Unsupported(reason)

    number = staticmethod(_number)

    # ---------------------------------------------------------------- arrays of atoms
    @staticmethod
    def atoms(shape, fill):
        out = np.empty(shape, dtype=object)
        flat = out.reshape(-1)
        for k in range(flat.size):
            flat[k] = fill(k)
        return out

    @staticmethod
    def flat(atoms, shape):
        return np.broadcast_to(atoms, shape).reshape(-1).tolist()

    @staticmethod
    def shaped(names, shape):
        return np.array(names, dtype=object).reshape(shape)

    def unpack(self, source, shape):
        n = math.prod(shape)
        if n == 0:
            raise Unsupported("empty tensor")
        self.count += 1
        names = np.array([f"u{self.count}_{k}" for k in range(n)], dtype=object).reshape(shape)
        # tolist() gives Python floats, ints and bools: exactly the scalars the generated code computes on;
        # nested lists unpack into nested targets, without a reshape (shapes are the plan's: feeds are checked
        # against it, parameters against their own)
        self.lines.append(f"    {_nested(names)} = {source}.tolist()")
        return names

    @staticmethod
    def pack(atoms, dtype):
        # a dtype object bound once (a string would be parsed on every call)
        kind = f"dtype_{dtype.name}" if f"dtype_{dtype.name}" in HELPERS else f"np.dtype({dtype.name!r})"
        if atoms.ndim <= 1:
            return f"np.array({_nested(atoms)}, {kind})"
        return f"np.array([{', '.join(atoms.reshape(-1).tolist())}], {kind}).reshape({atoms.shape!r})"

    # ---------------------------------------------------------------- elementwise and sums
    def elementwise(self, template, operands, shape):
        """``template`` of each element of the broadcast ``operands``: numpy's ufunc calls first, one per
        call site for all elements, then the rest per element (on float literals alone: now, once)."""
        split = _split(template)
        columns = [np.broadcast_to(a, shape).reshape(-1).tolist() for a in np.broadcast_arrays(*operands)]
        rows = list(zip(*columns)) if columns else [()] * math.prod(shape)
        results = [[] for _ in rows]
        for function, args in split.calls:
            values = [[_fill(a, row, done) for row, done in zip(rows, results)] for a in args]
            for done, value in zip(results, self.numpy_columns(function, values)):
                done.append(value)
        out = [self._element(split, row, done) for row, done in zip(rows, results)]
        return np.array(out, dtype=object).reshape(shape)

    def _element(self, split, row, done):
        expr = _fill(split.body, row, done)
        if split.pure:
            numbers = [_float_literal(p) for p in row]
            if row and None not in numbers:
                folded = _fold(expr)
                if folded is not None:
                    return folded
        if re.fullmatch(r"s\d+", expr):
            return expr          # (a call's result as it is)
        return self.assign(expr)

    def adder(self, shape, axes, of=None):
        """How numpy adds along ``axes`` of a C-ordered array of ``shape`` (the value of node ``of``):
        pairwise when they are the innermost axes (size-1 axes aside), one after another when they are the
        outer ones. A value laid out in another order than its axes (a transpose, or made from one) numpy
        adds in memory order: refused."""
        if of in self.permuted:
            raise Unsupported("a sum over a value laid out in another order than its axes")
        kept = [a for a in range(len(shape)) if a not in axes and shape[a] != 1]
        summed = [a for a in axes if shape[a] != 1]
        if not kept or min(summed, default=len(shape)) > max(kept):
            return _pairwise
        if max(summed) < min(kept):
            return _in_order
        raise Unsupported("a sum over axes between kept ones")


def _fold(expr):
    """Python's float arithmetic is IEEE's, as numpy's: on literals it is done once, when generating."""
    try:
        value = eval(expr, {"__builtins__": {}, "inf": math.inf, "nan": math.nan})   # noqa: S307 (literals only)
    except (ArithmeticError, ValueError):
        return None
    return _literal(value) if isinstance(value, float) else None


def _nested(atoms):
    """``atoms`` (names) as a nested list display: a target to unpack into, or a list to make an array of."""
    if isinstance(atoms, str):
        return atoms
    if atoms.ndim == 0:
        return str(atoms[()])
    return "[" + ", ".join(_nested(a) for a in atoms) + "]"


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


class ScalarProgram:
    """A plan run as Python scalar code, falling back to the numpy plan where float semantics differ."""

    def __init__(self, source, used, params, fallback):
        namespace = dict(HELPERS, P=params)
        for name in used:
            ufunc = getattr(np, name)
            namespace[f"{name}_one"] = _numpy_one(ufunc)
            namespace[f"{name}_each"] = _numpy_each(ufunc)
        exec(compile(source, "<staticgrad scalar>", "exec"), namespace)
        scalar, numpy_run = namespace["run"], fallback.run

        def run(*feeds):
            try:
                return scalar(*feeds)
            except (ArithmeticError, ValueError, IndexError):
                return numpy_run(*feeds)     # numpy's inf/nan semantics, or its clear error

        self.run, self.source, self.fallback = run, source, fallback
        self.kind, self.stats = "scalar", {}
        self.memory, self.line_nodes, self.shapes = fallback.memory, fallback.line_nodes, fallback.shapes
        # When the fallback runs, its new parameter values may be its workspace buffers (see Function).
        self.handoff, self.namespace = fallback.handoff, fallback.namespace


def _numpy_one(ufunc):
    if ufunc.nin == 1:          # (no argument packing for the common case: these run on every call)
        def one(value):
            return float(ufunc(value))     # (a Python float: the generated code's division must still raise)
        return one
    return lambda *values: float(ufunc(*values))


def _numpy_each(ufunc):
    if ufunc.nin == 1:
        def each(column):
            return ufunc(column).tolist()
        return each
    return lambda *columns: ufunc(*columns).tolist()
