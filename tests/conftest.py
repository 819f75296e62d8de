"""Shared fixtures: a seeded random generator and a helper that checks optimize=True against optimize=False."""
import atexit
import os
import shutil
import tempfile
import uuid

import numpy as np
import pytest

import staticgrad as sg
from staticgrad.ops.registry import REGISTRY, defop, same_spec

# Interpreters the numba backend compiles are cached in a folder of this run, never in the user's.
os.environ["STATICGRAD_CACHE_DIR"] = _CACHE = tempfile.mkdtemp(prefix="staticgrad-tests-cache-")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def boom():
    """A throwaway op whose kernel raises at run time when any value exceeds 100."""
    name = f"test_boom_{uuid.uuid4().hex[:8]}"

    def kernel(x):
        if np.any(x > 100):
            raise ValueError("boom: value over 100")
        return x * 1.0

    defop(name, kernel, same_spec, vjp=lambda g, out, x: (g,))
    yield name                     # tests call apply(boom, ...) themselves, so the op's line is theirs
    REGISTRY.pop(name, None)


def _as_list(values, single):
    return [values] if single else list(values)


def _close(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.allclose(a, b, rtol=1e-10, atol=1e-12, equal_nan=True)


@pytest.fixture
def compile_both():
    """``compile_both(outputs, feeds, inputs=None, updates=None)``: compile with and without the passes,
    call both on the same feeds from the same parameter values, assert that outputs and updated parameter
    values agree, and return (outputs, optimized function). Parameters end as after one optimized call.

    ``feeds`` is a tuple of positional feeds or a dict.
    """
    def run(outputs, feeds=(), inputs=None, updates=None):
        fast = sg.compile(outputs, inputs=inputs, updates=updates, optimize=True)
        slow = sg.compile(outputs, inputs=inputs, updates=updates, optimize=False)
        pairs = list(updates.items()) if isinstance(updates, dict) else list(updates or [])
        params = [p for p, _ in pairs]
        before = [p.value.copy() for p in params]

        def call(fn):
            for p, v in zip(params, before):
                p.value = v
            out = fn(dict(feeds)) if isinstance(feeds, dict) else fn(*feeds)
            return out, [p.value.copy() for p in params]

        single = isinstance(outputs, sg.Tensor)
        slow_out, slow_params = call(slow)
        fast_out, fast_params = call(fast)
        for k, (a, b) in enumerate(zip(_as_list(fast_out, single), _as_list(slow_out, single))):
            assert _close(a, b), f"output {k}: optimize=True gives\n{a}\noptimize=False gives\n{b}"
        for p, a, b in zip(params, fast_params, slow_params):
            assert _close(a, b), f"update of {p.name}: optimize=True gives\n{a}\noptimize=False gives\n{b}"
        return fast_out, fast
    return run
