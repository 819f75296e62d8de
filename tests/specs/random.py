"""Random draws (sg.ops.random_*): each value against numpy's own Philox stream at the key's position.

The key is fed (a placeholder: read, never moved on), so every test of a spec sees the same numbers. Its
seed stays below 2**24, so the float32 test's key survives the round trip through float32 (the build casts
it back: a key is float64). No gradients: a draw has none, and no torch twin makes numpy's numbers.
"""
import numpy as np

import staticgrad as sg
from tests.op_specs import inputs, normal, spec


def key_sample(rng):
    return np.array([rng.integers(0, 2 ** 24), rng.integers(0, 1000)], dtype=np.float64)


def stream(key, index=0):
    """numpy's generator for the draw ``index`` of ``key``: the seed's Philox stream at block position + index."""
    return np.random.Philox(key=int(key[0]), counter=[0, 0, int(key[1]) + index, 0])


def bernoulli_ref(key, shape, p, dtype):
    n = int(np.prod(shape))
    words = stream(key).random_raw((n + 1) // 2).view(np.uint32)[:n]
    return (words < np.uint32(np.floor(p * 2 ** 32))).reshape(shape).astype(dtype)


def _key(k):
    return sg.ops.cast(k, "float64")


spec("random_normal", lambda k: sg.ops.random_normal(_key(k), (3, 4)), inputs(key_sample),
     lambda k: np.random.Generator(stream(k)).standard_normal((3, 4)), grad=False, keeps_float=False)
spec("random_normal", lambda k, x: sg.ops.random_normal(_key(k), like=x), inputs(key_sample, normal(2, 3)),
     lambda k, x: np.random.Generator(stream(k)).standard_normal(x.shape), tag="like", grad=False,
     keeps_float=False)
spec("random_normal", lambda k: sg.ops.random_normal(_key(k), (5,), dtype="float32"), inputs(key_sample),
     lambda k: np.random.Generator(stream(k)).standard_normal(5, dtype=np.float32), tag="float32", grad=False,
     keeps_float=False)
spec("random_uniform", lambda k: sg.ops.random_uniform(_key(k), (2, 3)), inputs(key_sample),
     lambda k: np.random.Generator(stream(k)).random((2, 3)), grad=False, keeps_float=False)
spec("random_uniform", lambda k, x: sg.ops.random_uniform(_key(k), like=x, dtype="float32"),
     inputs(key_sample, normal(3, 2)), lambda k, x: np.random.Generator(stream(k)).random(x.shape, np.float32),
     tag="like-float32", grad=False, keeps_float=False)
spec("random_bernoulli", lambda k, x: sg.ops.random_bernoulli(_key(k), like=x, p=0.3),
     inputs(key_sample, normal(4, 5)), lambda k, x: bernoulli_ref(k, x.shape, 0.3, np.float64), grad=False,
     keeps_float=False)
spec("random_bernoulli", lambda k: sg.ops.random_bernoulli(_key(k), (7,), p=0.5, dtype=bool), inputs(key_sample),
     lambda k: bernoulli_ref(k, (7,), 0.5, bool), tag="bool-odd-size", grad=False, keeps_float=False)
spec("random_bernoulli", lambda k: sg.ops.random_bernoulli(_key(k), (2, 2), p=1.0, dtype="float32"),
     inputs(key_sample), lambda k: np.ones((2, 2), np.float32), tag="p=1", grad=False, keeps_float=False)
