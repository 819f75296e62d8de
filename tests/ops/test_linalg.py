"""ops/linalg.py: the kernel a plan calls for a matrix product."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad.lower import Backend

NUMPY = Backend("numpy", scalar=False)       # (tiny plans would otherwise run as Python scalar code)


def _kernels(fn):
    return {v for v in fn.program.namespace.values() if v is np.dot or v is np.matmul}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 2), (2, 2)), ((5, 3), (3, 3))])
def test_two_matrices_of_no_size_below_two_go_to_numpy_dot_with_matmuls_bits(shapes, dtype):
    rng = np.random.default_rng(4)
    a, b = (rng.normal(size=s).astype(dtype) for s in shapes)
    x, y = sg.placeholder(shapes[0], dtype=dtype), sg.placeholder(shapes[1], dtype=dtype)
    fn = sg.compile([x @ y, (x @ y) * 2.0], inputs=[x, y], backend=NUMPY)
    got = fn(a, b)
    assert _kernels(fn) == {np.dot}
    np.testing.assert_array_equal(got[0], np.matmul(a, b))
    np.testing.assert_array_equal(got[0], a @ b)
    np.testing.assert_array_equal(fn(a.T.copy().T, b)[0], np.matmul(a, b))      # (a Fortran-ordered operand)


@pytest.mark.parametrize("shapes", [((1, 4), (4, 5)), ((3, 4), (4, 1)), ((2, 3, 4), (4, 5)), ((4,), (4, 5))])
def test_a_vector_a_size_of_one_or_a_batch_stays_with_matmul(shapes):
    rng = np.random.default_rng(5)
    a, b = (rng.normal(size=s) for s in shapes)
    x, y = sg.placeholder(shapes[0]), sg.placeholder(shapes[1])
    fn = sg.compile([x @ y, (x @ y) * 2.0], inputs=[x, y], backend=NUMPY)
    np.testing.assert_array_equal(fn(a, b)[0], np.matmul(a, b))
    assert _kernels(fn) == {np.matmul}
