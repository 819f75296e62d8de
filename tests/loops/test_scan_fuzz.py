"""Random scan bodies: a seed picks the carries, the xs, the ops between them, which values become the next
carries and the ys, the direction, whether the length is known and the checkpoint interval; each runs every
way of the harness."""
import numpy as np
import pytest

from .harness import check, check_hvp

OPS = {     # name: (arity, fn(m, *args, W, v)); every value is (2, 3)
    "sin": (1, lambda m, a, W, v: m.sin(a)),
    "tanh": (1, lambda m, a, W, v: m.tanh(a) * 1.5),
    "half": (1, lambda m, a, W, v: a * 0.5),
    "square": (1, lambda m, a, W, v: a * a * 0.3),
    "matmul": (1, lambda m, a, W, v: a @ W),
    "scale": (1, lambda m, a, W, v: a * v),
    "add": (2, lambda m, a, b, W, v: a + b),
    "sub": (2, lambda m, a, b, W, v: a - b),
    "mul": (2, lambda m, a, b, W, v: a * b),
    "colsum": (2, lambda m, a, b, W, v: m.sum(a, axis=0) * b * 0.5),
    "where": (2, lambda m, a, b, W, v: m.where(a > 0.0, a, b)),
    # scans in the body: over a's rows, their final carry or their ys
    "inner": (2, lambda m, a, b, W, v: m.scan(lambda d, row: (m.sin(d) * row + v, d), b[0], xs=a)[0] * b),
    "inner_ys": (1, lambda m, a, W, v: m.scan(lambda d, row: (d + row * v, d * row), a[1], xs=a, reverse=True)[1]),
}
NAMES = sorted(OPS)


def recipe(seed):
    """What the seed's body does, as plain data (so each namespace builds the same loop)."""
    rng = np.random.default_rng(seed)
    n_carry, n_xs = int(rng.integers(1, 4)), int(rng.integers(0, 3))
    pool, steps = n_carry + n_xs, []
    for _ in range(int(rng.integers(1, 7))):
        name = NAMES[int(rng.integers(len(NAMES)))]
        steps.append((name, [int(rng.integers(pool)) for _ in range(OPS[name][0])]))
        pool += 1
    carries = [int(rng.integers(pool)) for _ in range(n_carry)]
    ys = [int(rng.integers(pool)) for _ in range(int(rng.integers(0, 3)))]
    return {"n_carry": n_carry, "n_xs": n_xs, "ops": steps, "carries": carries, "ys": ys,
            "reverse": bool(rng.integers(2)), "unknown": bool(rng.integers(2)) and n_xs > 0,
            "length": int(rng.integers(0, 5)), "checkpoint": [None, None, 1, 2, 3][int(rng.integers(5))]}


def model_for(r):
    def model(m, W, v, *arrays):
        init, xs = tuple(arrays[:r["n_carry"]]), tuple(arrays[r["n_carry"]:])

        def step(carry, x):
            pool = list(carry) + list(x or ())
            for name, args in r["ops"]:
                pool.append(OPS[name][1](m, *(pool[a] for a in args), W, v))
            return tuple(pool[k] for k in r["carries"]), (tuple(pool[k] for k in r["ys"]) or None)
        if xs:
            return m.scan(step, init, xs=xs, reverse=r["reverse"], checkpoint=r["checkpoint"])
        return m.scan(step, init, length=r["length"], reverse=r["reverse"], checkpoint=r["checkpoint"])
    return model


def run_seed(seed):
    r = recipe(seed)
    rng = np.random.default_rng(1000 + seed)
    arrays = [rng.uniform(-1, 1, (3, 3)), rng.uniform(-1, 1, 3)]
    arrays += [rng.uniform(-1, 1, (2, 3)) for _ in range(r["n_carry"])]
    arrays += [rng.uniform(-1, 1, (r["length"], 2, 3)) for _ in range(r["n_xs"])]
    first_xs = 2 + r["n_carry"]
    unknown = tuple(range(first_xs, first_xs + r["n_xs"])) if r["unknown"] else ()
    # (weights fed, not constants: tests/loops/test_scan.py's CONSTANT_FOLD cases show what constants do)
    check(model_for(r), *arrays, unknown=unknown, fed_weights=True)
    if seed % 3 == 0:
        check_hvp(model_for(r), *arrays, unknown=unknown)


@pytest.mark.parametrize("seed", range(6))
def test_random_bodies(seed):
    run_seed(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6, 150))
def test_more_random_bodies(seed):
    run_seed(seed)
