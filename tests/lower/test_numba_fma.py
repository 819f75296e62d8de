"""numba_fma: vector_math.fmuladd compiled as LLVM's fmuladd; the tanh a region's own loop runs with it."""
import numpy as np
import pytest

from staticgrad.lower import vector_math as vm
from tests.lower.test_vector_math import TANH_SAMPLES, ulps

numba = pytest.importorskip("numba")
from staticgrad.lower.numba_backend import helpers  # noqa: E402  (after the skip: it needs numba)


@pytest.fixture(scope="module")
def compiled():
    kernel = helpers()["tanh_fma_kernel"]

    @numba.njit(error_model="numpy")
    def loop(xs, out):
        for k in range(xs.size):
            out[k] = kernel(xs[k])
    return loop


@pytest.mark.parametrize("sample", sorted(TANH_SAMPLES))
def test_tanh_in_fused_multiply_adds_is_within_3_ulp_of_numpy_compiled_or_not(compiled, sample):
    xs = TANH_SAMPLES[sample]
    out = np.empty_like(xs)
    compiled(xs, out)
    assert ulps(out, np.tanh(xs)) <= 3
    assert ulps([vm.tanh_fma_kernel(x) for x in xs.tolist()], np.tanh(xs)) <= 3
    np.testing.assert_array_equal(np.signbit(out), np.signbit(xs))


def test_fmuladd_compiles_to_one_rounding_where_the_cpu_fuses():
    fmuladd = numba.njit(lambda a, b, c: vm.fmuladd(a, b, c))
    a = 1.0 + 2.0 ** -30
    from llvmlite import binding
    fused = binding.get_host_cpu_features().get("fma", False)
    # a*a - (1 + 2**-29) is 2**-60, lost when a*a is rounded before the add
    assert fmuladd(a, a, -(1.0 + 2.0 ** -29)) == (2.0 ** -60 if fused else 0.0)
    assert vm.fmuladd(a, a, -(1.0 + 2.0 ** -29)) == 0.0
    assert fmuladd(2.0, 3.0, 1.0) == 7.0
