"""``backend="numba"``: elementwise regions too long for a loop of their own, run by one compiled interpreter.

numba is optional (``pip install staticgrad[numba]``). A region becomes instructions (fuse.lower), not
source, and the interpreter below runs them: compiled once per process for the ops in use (a few
seconds, counted in that plan's ``fn.report()``), again only when a later plan brings an op it lacks,
and never for a plan's size. Compiling a region's own loop instead (``numba_regions``, for short ones:
``numba_plan`` chooses) takes time that grows faster than linearly with its length (minutes for a
1,000-op chain). ``helpers`` gives the names both kinds of compiled code use.
"""
from __future__ import annotations

import inspect
import math
import sys

import numpy as np

from . import fuse, numba_cache, numba_fma, scalar_math, vector_math

# Templates computed by vector_math's polynomials (about 1 ns an element in SIMD registers, against 7-15 ns
# for libm's call) where every input of a block is within the limit: (limit, expression).
VECTOR = {"sin({0})": (vector_math.SIN_COS_LIMIT, "sin_cos_kernel(r[a, e], False)"),
          "cos({0})": (vector_math.SIN_COS_LIMIT, "sin_cos_kernel(r[a, e], True)"),
          "tanh({0})": (sys.float_info.max, "tanh_kernel(r[a, e])")}
SCRATCH = 16384     # float64s in the scratch block (registers x block width): 128 KB stays in L2
MIN_WIDTH = 8       # elements per block however many registers: one dispatch per op serves several
SMALL = 4096        # elements: below this a numpy call costs more than the work it does
MIN_NODES = 8       # nodes a small region needs before one kernel call beats their numpy calls
_current = []       # the newest Interpreter: it knows every template any plan of this process brought
_helpers = {}


class NumbaUnavailable(ImportError):
    """backend="numba" was asked for, but numba is not installed."""


def require():
    try:
        import numba  # noqa: F401
    except ImportError:
        raise NumbaUnavailable("backend='numba' needs numba: pip install 'staticgrad[numba]' (or numba)") from None


def interpreter_source(templates) -> str:
    """``interpret(code, consts, packed, out, registers, width)``: runs fuse.Code instructions that use
    only ``templates`` (numbered by fuse.opcodes) over the elements in blocks of ``width``; register k of
    a block is row k of a scratch array."""
    lines = [
        "def interpret(code, consts, packed, out, registers, width):",
        "    r = np.empty((registers, width))",
        "    n = out.shape[1]",
        "    for start in range(0, n, width):",
        "        w = min(width, n - start)",
        "        for k in range(code.shape[0]):",
        "            o, rounding, d = code[k, 0], code[k, 1], code[k, 2]",
        "            a, b, c = code[k, 3], code[k, 4], code[k, 5]",
        f"            if o == {fuse.LOAD}:",
        "                if b:",
        "                    for e in range(w):",
        "                        r[d, e] = packed[a]",
        "                else:",
        "                    for e in range(w):",
        "                        r[d, e] = packed[a + start + e]",
        f"            elif o == {fuse.CONST}:",
        "                for e in range(w):",
        "                    r[d, e] = consts[a]",
        f"            elif o == {fuse.STORE}:",
        "                for e in range(w):",
        "                    out[d, start + e] = r[a, e]",
    ]
    # One loop per template, so the op is chosen once per block rather than once per element.
    for template, opcode in fuse.opcodes(templates).items():
        lines += [f"            elif o == {opcode}:"] + _loop(template)
    lines += [
        f"            if rounding == {fuse.AS_FLOAT32}:",
        "                for e in range(w):",
        "                    r[d, e] = np.float32(r[d, e])",
        f"            elif rounding == {fuse.AS_BOOL}:",
        "                for e in range(w):",
        "                    r[d, e] = 1.0 if r[d, e] != 0.0 else 0.0",
    ]
    return "\n".join(lines) + "\n"


def _loop(template) -> list:
    # (a comparison's True/False becomes 1.0/0.0; a float times 1.0 is itself, -0.0 and NaN included)
    expr = "1.0 * (" + template.format("r[a, e]", "r[b, e]", "r[c, e]") + ")"
    if template not in VECTOR:
        return ["                for e in range(w):", f"                    r[d, e] = {expr}"]
    # libm's scalar call only for a block holding an input the polynomial does not cover
    limit, fast = VECTOR[template]
    return ["                outside = 0", "                for e in range(w):",
            f"                    if not abs(r[a, e]) <= {limit!r}:", "                        outside += 1",
            "                if outside == 0:", "                    for e in range(w):",
            f"                        r[d, e] = {fast}", "                else:",
            "                    for e in range(w):", f"                        r[d, e] = {expr}"]


def helpers() -> dict:
    """The names interpreter code uses: numpy's ufuncs by name (numba compiles its own versions of them),
    and the templates' helpers (scalar_math) compiled by numba, once per process."""
    if not _helpers:
        import numba

        _helpers.update({name: f for name, f in vars(np).items() if isinstance(f, np.ufunc)})
        # numpy's division-by-zero semantics (inf/nan), not Python's exception.
        helper = numba.njit(error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True)
        _helpers.update({name: helper(fn) if inspect.isfunction(fn) else fn
                         for name, fn in scalar_math.FUNCTIONS.items()})
        # inlined into the interpreter's loops, which LLVM then vectorizes
        kernel = numba.njit(error_model="numpy", inline="always")
        _helpers.update(sin_cos_kernel=kernel(vector_math.sin_cos_kernel), tanh_kernel=kernel(vector_math.tanh_kernel))
        numba_fma.register()        # (a region's own loop runs tanh_fma_kernel)
        _helpers.update(tanh_fma_kernel=kernel(vector_math.tanh_fma_kernel))
        _helpers["np"] = np
    return _helpers


def _compile(templates):
    source = interpreter_source(templates)
    interpret = numba_cache.load(source, helpers)
    if interpret is None:
        import numba

        namespace = dict(helpers())
        exec(compile(source, "<staticgrad interpreter>", "exec"), namespace)
        interpret = numba.njit(namespace["interpret"], error_model="numpy", no_cfunc_wrapper=True)
    interpret(np.zeros((0, 6), np.int64), np.zeros(0), np.zeros(1), np.zeros((1, 1)), 1, 1)   # compile now
    return interpret


class Interpreter:
    """A compiled interpreter and the opcode of each template it knows."""

    def __init__(self, templates):
        self.templates = frozenset(templates)
        self.opcode = fuse.opcodes(self.templates)
        self.run = _compile(self.templates)


class Kernel:
    """A region's instructions, called like the region: inputs in region.inputs order, outputs as a tuple."""

    def __init__(self, code, interpret):
        self.code, self.interpret = code, interpret
        self.width = min(code.size, max(MIN_WIDTH, SCRATCH // max(code.registers, 1)))
        self.rows = [(k, shape, None if dtype == np.float64 else dtype)
                     for k, (shape, dtype) in enumerate(code.outputs)]

    def __call__(self, *inputs):
        code = self.code
        values = [np.ravel(inputs[k]) for k in code.args]
        if len(values) == 1 and values[0].dtype == np.float64 and values[0].flags.writeable:
            packed = values[0]          # no copy; a read-only array would be a new signature to compile
        else:
            packed = np.concatenate(values, dtype=np.float64) if values else code.consts
        out = np.empty((len(self.rows), code.size))
        self.interpret(code.instructions, code.consts, packed, out, code.registers, self.width)
        return tuple(out[k].reshape(shape) if dtype is None else out[k].reshape(shape).astype(dtype)
                     for k, shape, dtype in self.rows)


def interpreter(templates) -> Interpreter:
    """An interpreter that knows ``templates``: one compiled earlier for more of them, or a new one for
    these and every template seen before, so a process compiles again only when a plan brings a new one.

    Each template's loop costs compile time (about 0.1 s), so only the templates in use are compiled.
    """
    if _current and templates <= _current[0].templates:
        return _current[0]
    known = _current[0].templates if _current else frozenset()
    _current[:] = [Interpreter(known | templates)]
    return _current[0]


def worth_fusing(region, shapes, templates) -> bool:
    """Whether one interpreter call beats numpy's calls for ``region`` (whose nodes compute ``templates``).

    On small arrays a numpy call's fixed cost (about 1.3 µs) dominates: fuse, when the region has enough
    nodes to pay for the kernel call's own (about 8 µs: packing, numba's dispatch). On large ones numpy's
    vector loops beat the interpreter's (arithmetic: 1.3-1.6x faster from 5,000 to 1,000,000 numbers, in
    cache or not), so a region gains only from an op numpy runs one number at a time and the interpreter
    does not (float64 sin and cos are glibc's scalar calls in numpy, tanh too on some CPUs: VECTOR), and
    only with many more nodes than values crossing its border (packing the inputs into float64 and
    converting float32 outputs back costs a pass each).
    """
    size = math.prod(region.shape)
    if size <= SMALL:
        return len(region.nodes) >= MIN_NODES
    if not any(t in VECTOR for t in templates):
        return False
    crossing = sum(1 for j in region.inputs if math.prod(shapes[j]) > 1) + 2 * len(region.outputs)
    return len(region.nodes) >= 2 * crossing
