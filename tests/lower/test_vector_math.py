"""vector_math: the polynomial sin and cos the numba backend vectorizes stay within 1 ulp of numpy's, tanh 3."""
import math

import numpy as np
import pytest

from staticgrad.lower import vector_math as vm

RNG = np.random.default_rng(3)
SAMPLES = {
    "wide": RNG.uniform(-vm.SIN_COS_LIMIT, vm.SIN_COS_LIMIT, 3000),
    "near zero": np.sign(RNG.normal(size=3000)) * 10.0 ** RNG.uniform(-300, 0, 3000),
    "a few turns": RNG.uniform(-8, 8, 3000),
    # the floats nearest multiples of pi/2, where sin or cos is tiny and only a precise reduction keeps
    # its relative error small
    "multiples of pi/2": np.arange(-20000, 20001) * (np.pi / 2),
    "limits": np.array([0.0, -0.0, vm.SIN_COS_LIMIT, -vm.SIN_COS_LIMIT, np.pi / 4, -np.pi / 4, 5e-324]),
}
TANH_SAMPLES = dict(SAMPLES, saturating=RNG.uniform(-40, 40, 3000),
                    huge=np.array([21.9, 22.0, 22.1, 1e300, -1e300, -700.0]))


def ulps(got, want):
    got, want = np.asarray(got), np.asarray(want)
    tiny = np.abs(want) < np.finfo(float).tiny     # subnormal results: count in the smallest normal's ulp
    scale = np.spacing(np.where(tiny, np.finfo(float).tiny, np.abs(want)))
    return np.max(np.abs(got - want) / scale)


@pytest.mark.parametrize("sample", sorted(SAMPLES))
@pytest.mark.parametrize("function", ["sin", "cos"])
def test_sin_and_cos_are_within_1_ulp_of_numpy(function, sample):
    xs = SAMPLES[sample]
    got = np.array([vm.sin_cos_kernel(x, function == "cos") for x in xs.tolist()])
    want = getattr(np, function)(xs)
    assert ulps(got, want) <= 1
    # the reduction's rounding error is carried, and 1 - z/2 rounds once: numpy's (glibc's) bits on most
    # inputs, so a later cancellation (1 - cos(x) near 0) differs from numpy's result as little as it can
    if len(xs) >= 1000:
        assert np.mean(got != want) < 0.06


@pytest.mark.parametrize("sample", sorted(TANH_SAMPLES))
def test_tanh_is_within_3_ulp_of_numpy(sample):
    xs = TANH_SAMPLES[sample]
    got = [vm.tanh_kernel(x) for x in xs.tolist()]
    assert ulps(got, np.tanh(xs)) <= 3


def test_signs_of_zero_are_kept():
    assert math.copysign(1.0, vm.sin_cos_kernel(-0.0, False)) == -1.0
    assert math.copysign(1.0, vm.tanh_kernel(-0.0)) == -1.0
    assert vm.sin_cos_kernel(-0.0, True) == 1.0


def test_the_reduction_constants_add_up_to_pi_over_2():
    # the first two parts have 33 significant bits, so k times them is exact for |k| < 2**20
    for part in (vm.PIO2_1, vm.PIO2_2):
        mantissa = math.frexp(part)[0] * 2.0 ** 33
        assert mantissa == int(mantissa)
    assert abs((vm.PIO2_1 + vm.PIO2_2) - math.pi / 2) <= 1e-16
    assert vm.SIN_COS_LIMIT * 2 / math.pi < 2 ** 20
