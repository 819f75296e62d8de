"""Every registered op runs in every way a plan can run it, or its OpDef says why not.

The ways: the numpy plan (its kernel, always), Python scalar code (tiny float64 plans) and a fused numba
loop. For the last two the op's own lowering is run directly on each of its specs (tests/op_specs.py),
bypassing the cost models that decide when a plan takes that road, and compared with the numpy plan.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import staticgrad as sg
from staticgrad.lower import Backend, build_program, fuse, scalarize
from staticgrad.lower.shapes import at_sizes, concrete_shapes
from staticgrad.ops import BACKENDS, ELEMENTWISE, REARRANGES, REGISTRY
from tests.op_specs import OP_SPECS

OPS = sorted(REGISTRY)


def specs_of(op):
    return [s for s in OP_SPECS if s.op == op]


def claims(opdef, backend) -> bool:
    """Whether the op says it is computed by ``backend`` itself (else ``unsupported`` says why not)."""
    if backend == "scalar":
        return bool(opdef.scalar_rule or opdef.has(REARRANGES) or opdef.scalar is not None)
    return opdef.has(ELEMENTWISE) and opdef.scalar is not None


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_op_is_lowered_or_says_why_not(op, backend):
    opdef = REGISTRY[op]
    reason = opdef.unsupported.get(backend)
    assert claims(opdef, backend) != bool(reason), (
        f"{op}: lowered by the {backend} path and declared unsupported" if reason else
        f"{op}: neither lowered by the {backend} path nor declared unsupported in its OpDef (unsupported=...)")


def concrete(spec, arrays):
    """The graph a plan runs for ``spec`` on ``arrays`` (its node for the op last but the outputs)."""
    phs = [sg.placeholder(a.shape, dtype=a.dtype, name=f"in{k}") for k, a in enumerate(arrays)]
    fn = sg.compile(spec.build(*phs), inputs=phs, optimize=False)
    ir = fn.ir
    shapes = concrete_shapes(ir, list(ir.nodes), [a.shape for a in arrays])
    graph, order = at_sizes(ir, list(ir.nodes), shapes)
    return fn, graph, order, shapes


def numpy_results(graph, arrays):
    program = build_program(graph, [a.shape for a in arrays], Backend(scalar=False, memory_planning=False))
    with np.errstate(all="ignore"):
        return program.run(*arrays)[0]


@pytest.mark.parametrize("op", [op for op in OPS if claims(REGISTRY[op], "scalar")])
def test_the_scalar_path_computes_each_op_it_claims(op):
    ran = 0
    for spec in specs_of(op):
        arrays = spec.draw()
        fn, graph, order, shapes = concrete(spec, arrays)
        if not all(scalarize._kinds_ok(graph.nodes[i], graph.nodes) for i in order):
            continue        # (float32 or integer data: not Python floats)
        if not any(graph.nodes[i].op == op for i in order):
            continue        # (rewritten away at these sizes)
        want = numpy_results(fn.ir, arrays)
        try:
            source, used = scalarize.generate(graph, order, graph.parameter_ids(), graph.inputs, shapes)
        except scalarize.Unsupported:
            continue        # (a case the op's rule refuses, such as a sum over an axis between kept ones)
        fallback = build_program(fn.ir, [a.shape for a in arrays], Backend(scalar=False))
        program = scalarize.ScalarProgram(source, used, [], fallback)
        got = program.run(*arrays)[0]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-15, err_msg=f"{spec.id}\n{source}")
        ran += 1
    assert ran, f"{op}: no spec of it runs as scalar code"


def one_node_region(graph, order, shapes, op, broadcast=False):
    """A region of the op's node alone, when a loop can compute it (``broadcast``: one that indexes each
    axis, so that operands numpy broadcasts may differ in shape)."""
    node = next((graph.nodes[i] for i in reversed(order) if graph.nodes[i].op == op), None)
    if node is None or not fuse._fusible(node, shapes, graph.nodes, broadcast=broadcast):
        return None, None
    region = fuse.Region(shapes[node.id])
    region.nodes = [node.id]
    fuse._connect(graph, [region])
    return node, region


def operands(graph, order, node, arrays):
    """The values of the plan's nodes up to ``node`` (its operands among them), computed by their kernels."""
    values = dict(zip(graph.inputs, arrays))
    values.update({i: n.value for i, n in graph.nodes.items() if n.op == "constant"})
    for i in order[:order.index(node.id)]:
        n = graph.nodes[i]
        if i not in values:
            values[i] = np.asarray(REGISTRY[n.op].kernel(*(values[j] for j in n.inputs), **n.attrs))
    return values


NUMBA_OPS = [op for op in OPS if claims(REGISTRY[op], "numba")]


@pytest.fixture(scope="module")
def machine():
    """One interpreter for every template the specs bring (compiling one per op would take minutes)."""
    pytest.importorskip("numba")
    from staticgrad.lower.numba_backend import interpreter
    templates = set()
    for spec in (s for s in OP_SPECS if s.op in NUMBA_OPS):
        _, graph, order, shapes = concrete(spec, spec.draw())
        templates.update(fuse.template(graph.nodes, shapes, graph.nodes[i]) for i in order)
    return interpreter(frozenset(templates - {None}))


@pytest.mark.slow
@pytest.mark.parametrize("op", NUMBA_OPS)
def test_the_numba_loop_computes_each_op_it_claims(op, machine):
    from staticgrad.lower.numba_backend import Kernel
    ran = 0
    for spec in specs_of(op):
        arrays = spec.draw()
        fn, graph, order, shapes = concrete(spec, arrays)
        node, region = one_node_region(graph, order, shapes, op)
        if node is None:
            continue        # (operands broadcast against each other: no flat index serves all)
        values = operands(graph, order, node, arrays)
        kernel = Kernel(fuse.lower(graph, region, shapes, machine.opcode), machine.run)
        (got,) = kernel(*(values[j] for j in region.inputs))
        with np.errstate(all="ignore"):
            want = REGISTRY[op].kernel(*(values[j] for j in node.inputs), **node.attrs)
        tol = 1e-12 if node.dtype == np.float64 else 1e-6
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 1e-3, err_msg=spec.id)
        ran += 1
    assert ran, f"{op}: no spec of it can be one fused loop"


@pytest.mark.parametrize("spec", [s for s in OP_SPECS if math.prod(np.shape(s.draw()[0])) > 0][::7],
                         ids=lambda s: s.id)
def test_numpy_plans_of_every_backend_agree(spec):
    arrays = spec.draw()
    phs = [sg.placeholder(a.shape, dtype=a.dtype, name=f"in{k}") for k, a in enumerate(arrays)]
    y = spec.build(*phs)
    with np.errstate(all="ignore"):
        want = np.asarray(spec.reference(*arrays))
        for backend in (Backend(), Backend(scalar=False), Backend(memory_planning=False)):
            np.testing.assert_allclose(sg.compile(y, inputs=phs, backend=backend)(*arrays), want, rtol=1e-9,
                                       atol=1e-12, err_msg=repr(backend))
