"""im2col's helpers: the clamp the fused convolutions end with."""
import numpy as np
import pytest

from staticgrad.ops import im2col


@pytest.mark.parametrize("shape", [(4, 8, 28, 28), (3, 5, 7), (257,), (2, 300)])
def test_clamp_below_has_the_bits_of_numpys_maximum_against_zero(shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape).astype(np.float32)
    flat = a.reshape(-1)
    flat[:4] = [-0.0, np.nan, -np.inf, np.inf]
    expected = np.maximum(a, 0)
    found = im2col.clamp_below(a)
    assert found is a
    np.testing.assert_array_equal(found.view(np.uint32), expected.view(np.uint32))


def test_clamp_rows_divide_the_size_where_they_can():
    assert im2col._row_length(64 * 8 * 28 * 28) == 8192
    assert im2col._row_length(257) == 257 and im2col._row_length(2 * 8209) is None
    assert im2col._row_length(255) is None and im2col._row_length(3 * 8192) == 8192
