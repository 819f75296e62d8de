"""region_source: a region's own loop computes each op the numba backend claims as numpy's kernel does,
whatever the layout of its operands (broadcast ones included)."""
import numpy as np
import pytest

from staticgrad.lower import fuse, region_source
from staticgrad.ops import REGISTRY
from tests.lower.test_backends import NUMBA_OPS, concrete, one_node_region, operands, specs_of


@pytest.mark.slow          # (one compile per op: seconds)
@pytest.mark.parametrize("op", NUMBA_OPS)
def test_a_regions_own_loop_computes_each_op_it_claims(op):
    pytest.importorskip("numba")
    from staticgrad.lower.numba_regions import RegionKernel
    ran = 0
    for spec in specs_of(op):
        arrays = spec.draw()
        _, graph, order, shapes = concrete(spec, arrays)
        node, region = one_node_region(graph, order, shapes, op, broadcast=True)
        if node is None:
            continue
        values = operands(graph, order, node, arrays)
        kernel = RegionKernel(graph, region, shapes)
        args = [float(np.asarray(values[j]).reshape(())) if how != "array" else values[j]
                for j, how in zip(region.inputs, kernel.passing)]
        got = np.empty(region.shape, node.dtype)
        with np.errstate(all="ignore"):
            kernel.run(*args, got)
            want = REGISTRY[op].kernel(*(values[j] for j in node.inputs), **node.attrs)
        tol = 1e-12 if node.dtype == np.float64 else 1e-6
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 1e-3, equal_nan=True, err_msg=spec.id)
        ran += 1
    assert ran, f"{op}: no spec of it can be a region's own loop"


def test_a_broadcast_operand_is_read_by_index_and_a_scalar_is_an_argument():
    import staticgrad as sg
    x, col = sg.placeholder((3, 4), name="x"), sg.placeholder((3, 1), name="col")
    fn = sg.compile(x * col + 0.5, inputs=[x, col])
    shapes = {i: n.shape for i, n in fn.ir.nodes.items()}
    (region,), _ = fuse.find_regions(fn.ir, list(fn.ir.nodes), shapes, broadcast=True)
    text = region_source.source(fn.ir, region, shapes)
    assert "[i0, 0]" in text and "for i1 in range(n1):" in text     # col's one column, each row's
    assert region_source.is_scalar((), (3, 4)) and region_source.is_scalar((), ())
    assert not region_source.is_scalar((1,), (1,)) and region_source.is_scalar((1, 1), (3, 4))
    # No operand broadcasts: one loop in memory order over short rows, the loop nest over long ones
    # (each ravel costs numba a compile of its own).
    for rows, flat in [(4, True), (region_source.FLAT_BELOW, False)]:
        y = sg.placeholder((3, rows), name="y")
        same = sg.compile(y * y + 0.5, inputs=[y])
        shapes = {i: n.shape for i, n in same.ir.nodes.items()}
        (region,), _ = fuse.find_regions(same.ir, list(same.ir.nodes), shapes, broadcast=True)
        text = region_source.source(same.ir, region, shapes)
        assert ("f0 = a0.ravel()" in text and "for i1" not in text) if flat else (
            "for i1 in range(n1):" in text and "ravel" not in text)
