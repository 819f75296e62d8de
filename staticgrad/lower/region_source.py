"""One elementwise region as the source of a function of its own: a loop over the elements, its ops inlined.

``backend="numba"`` compiles this source (``numba_regions``) for the regions of a loop's body, where the
interpreter's fixed cost per call (packing the inputs, numba's dispatch of six arguments: about 8 µs)
is more than the work of a step. The function takes the region's inputs as they are (any layout; an
input of fewer elements broadcasts, as numpy's would) and writes each output into an array it is given
(a workspace buffer, the row of a loop's stacked output). Inputs of one element come as Python floats.

Each op computes its template (``OpDef.scalar``) on float64 values, rounded after it as its node's dtype
asks (float32, or False/True as 0.0/1.0): the interpreter's arithmetic, so the results are its bits, but
for tanh, whose polynomial is evaluated in fused multiply-adds here (``vector_math.tanh_fma_kernel``:
within 3 ulp of numpy's too). sin and cos run vector_math's polynomials only on arguments within
SIN_COS_LIMIT, and if any element has another, the whole region is computed again with libm's calls (so
its outputs must not share memory with its inputs: ``rereads``).
"""
from __future__ import annotations

import math

import numpy as np

from . import fuse, vector_math

NAME = "region"
FLAT_BELOW = 16     # elements in a row: a region of shorter ones runs one flat loop over them all
# Templates run by a polynomial: (the call, the limit on its argument beyond which libm's call is needed,
# or None when the polynomial covers every number: tanh's gives +-1 for the infinities, nan is passed on).
POLYNOMIAL = {"tanh({0})": ("tanh_fma_kernel({0})", None),
              "sin({0})": ("sin_cos_kernel({0}, False)", vector_math.SIN_COS_LIMIT),
              "cos({0})": ("sin_cos_kernel({0}, True)", vector_math.SIN_COS_LIMIT)}


def rereads(templates) -> bool:
    """Whether a region of these templates may compute everything a second time (sin or cos)."""
    return any(POLYNOMIAL.get(t, (None, None))[1] is not None for t in templates)


def is_scalar(shape, region_shape) -> bool:
    """Whether an input of ``shape`` reaches the region as one Python float (a value of no axes may be a
    numpy scalar or an array of no axes, depending on the op that made it)."""
    return math.prod(shape) == 1 and (tuple(shape) != tuple(region_shape) or not shape)


def source(graph, region, shapes, over=None) -> str:
    """The function's source: ``region(a0, .., o0, ..)``, inputs in ``region.inputs`` order, then outputs
    in ``region.outputs`` order, but for those in ``over`` ({output id: input position}): written over
    that input, they have no argument of their own."""
    nodes, shape, over = graph.nodes, tuple(region.shape), over or {}
    args = [f"a{k}" for k in range(len(region.inputs))]
    targets = [f"a{over[o]}" if o in over else f"o{k}" for k, o in enumerate(region.outputs)]
    outs = [t for t in targets if t.startswith("o")]
    templates = [fuse.template(nodes, shapes, nodes[i]) for i in region.nodes]
    lines = [f"def {NAME}({', '.join(args + outs)}):"]
    full = [k for k, j in enumerate(region.inputs) if not is_scalar(shapes[j], shape)]
    arrays = {k: f"a{k}" for k in full}
    dims = len(shape)
    if dims >= 2 and shape[-1] < FLAT_BELOW and all(tuple(shapes[region.inputs[k]]) == shape for k in full):
        # No operand broadcasts, short rows: one loop over the elements in memory order (the outputs are
        # C-ordered arrays, so their flat views are themselves; an input of another layout is copied in
        # that order). Not for longer rows, whose loop nest vectorizes as well: each ravel() costs numba
        # a function of its own to compile (about 0.15 s a region, cold).
        arrays = {k: f"f{k}" for k in full}
        lines += [f"    f{k} = a{k}.ravel()" for k in full] + [f"    {t}f = {t}.ravel()" for t in outs]
        targets = [f"f{t[1:]}" if t.startswith("a") else f"{t}f" for t in targets]
        shape, dims = (math.prod(shape),), 1
    if dims:
        sizes = ", ".join(f"n{d}" for d in range(dims))
        lines.append(f"    {sizes}, = {targets[0]}.shape")
    twice = rereads(templates)
    if twice:
        lines.append("    bad = 0")
    parts = (graph, region, shapes, templates, arrays, targets, shape)
    lines += _loops(*parts, fast=True)
    if twice:
        lines.append("    if bad:")
        lines += ["    " + line for line in _loops(*parts, fast=False)]
    return "\n".join(lines) + "\n"


def _loops(graph, region, shapes, templates, arrays, targets, shape, fast):
    """The loop nest over ``shape`` (none for a region of one number) and, inside it, the element's work."""
    lines, pad = [], "    "
    for d in range(len(shape)):
        lines.append(f"{pad}for i{d} in range(n{d}):")
        pad += "    "
    index = "[" + ", ".join(f"i{d}" for d in range(len(shape))) + "]" if shape else "[()]"
    work = _element(graph, region, shapes, templates, arrays, targets, shape, index, fast)
    return lines + [pad + line for line in work]


def _element(graph, region, shapes, templates, arrays, targets, shape, index, fast):
    """One element: load the inputs, compute each node, store the outputs."""
    nodes, region_shape = graph.nodes, tuple(region.shape)
    names, lines = {}, []
    for k, j in enumerate(region.inputs):
        if k not in arrays:
            names[j] = f"a{k}"
            continue
        names[j] = f"x{k}"
        at = index if tuple(shapes[j]) == region_shape else _input_index(shapes[j], shape, index)
        lines.append(f"x{k} = {_load(arrays[k], at, nodes[j].dtype)}")
    out_row = {i: k for k, i in enumerate(region.outputs)}
    for k, (i, template) in enumerate(zip(region.nodes, templates)):
        node = nodes[i]
        operands = [names[j] for j in node.inputs]
        names[i] = value = f"t{k}"
        lines += _compute(value, template, operands, fast)
        if node.dtype == np.float32:
            lines.append(f"{value} = float(np.float32({value}))")
        elif node.dtype == np.bool_:
            lines.append(f"{value} = 1.0 if {value} != 0.0 else 0.0")
        if i in out_row:
            lines.append(f"{targets[out_row[i]]}{index} = {_store(value, node.dtype)}")
    return lines


def _compute(value, template, operands, fast):
    polynomial = POLYNOMIAL.get(template) if fast else None
    if polynomial is None:
        # (a comparison's True/False becomes 1.0/0.0; a float times 1.0 is itself, -0.0 and nan included)
        return [f"{value} = 1.0 * ({template.format(*operands)})"]
    call, limit = polynomial
    x = operands[0]
    if limit is None:       # nan would become an index into POW2 in the polynomial: it is given 0.0
        return [f"{value} = {call.format(f'({x} if {x} == {x} else 0.0)')}",
                f"{value} = {value} if {x} == {x} else {x}"]
    return [f"ok = abs({x}) <= {limit!r}", f"{value} = {call.format(f'({x} if ok else 0.0)')}",
            "bad += 0 if ok else 1"]


def _input_index(shape, region_shape, index):
    """The index of an input broadcast to the region's shape: its axes align with the region's last ones,
    and an axis of one element is read at 0."""
    if tuple(shape) == tuple(region_shape):
        return index
    offset = len(region_shape) - len(shape)
    parts = [f"i{offset + d}" if size == region_shape[offset + d] else "0" for d, size in enumerate(shape)]
    return "[" + ", ".join(parts) + "]" if parts else "[()]"


def _load(array, index, dtype):
    if dtype == np.bool_:
        return f"1.0 if {array}{index} else 0.0"
    if dtype == np.float64:
        return f"{array}{index}"
    return f"float({array}{index})"


def _store(value, dtype):
    if dtype == np.bool_:
        return f"{value} != 0.0"
    if dtype == np.float32:
        return f"np.float32({value})"
    return value
