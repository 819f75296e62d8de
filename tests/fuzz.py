"""Random graphs over every differentiable op of the registry, for tests/test_fuzz.py.

Which ops: every op of ``REGISTRY`` whose flags do not say NONDIFF. Its argument recipes are its specs in
tests/op_specs.py (how to call it, and from which values its inputs are drawn), so a new op with a spec is
fuzzed with no change here. A differentiable op none of whose specs the fuzzer can use is named in
:data:`NOT_FUZZED` with the reason (tests/test_fuzz.py fails for a new op that is in neither).

How a graph is made from a recipe (which hypothesis draws): a few placeholders over one broadcastable base
shape (some axes of size 1, some None, fed the base size or 1 at run time), then up to 30 steps, each one
op variant applied to earlier values. Every step is built twice in lockstep, symbolically (placeholders, so
static shape rules with None dims are exercised) and eagerly (concrete values), and recorded as a closure
over slots so it can be replayed (for torch). An input is taken from the pool of earlier values when the
variant's build accepts it (statically and at run time); data inputs (bools, integers) are fresh
placeholders shaped like a pool value; when nothing fits, fresh leaves of the spec's own shapes.

Safe values: each float input of a variant has a domain, the intervals its spec samples from (found by
drawing the sampler many times: ``nonzero`` gives two intervals either side of the kink or pole, ``log``'s
uniform(0.3, 3) one). A pool value whose elements are not all inside it (with a 5% margin) is first mapped
affinely, ``x * s + c``, onto one interval, shrinking only (``s <= 1``), with constants computed from its
eager value. So every op runs where its spec says it is accurate, magnitudes stay small, and a perturbation
of 1e-6 (finite differences) stays inside the domain. A step whose own first or second derivative is not
finite at its inputs (hypot at exact zeros the pool made) is not taken: there is no derivative to check.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field

import numpy as np

import staticgrad as sg
from staticgrad import eager
from staticgrad.ops.registry import NONDIFF, REGISTRY
from tests.op_specs import OP_SPECS

MAX_STEPS = 30
MAX_SIZE = 48            # elements of any value: finite differences cost two calls per input element
MARGIN = 0.05            # of a domain interval's width, kept clear at each end
ATTEMPTS = 8             # tries to feed a variant from the pool before fresh leaves
DRAWS = 400              # sampler draws that reveal a spec's domain
STEP, KINK = 1e-6, 1e-3  # a step's own derivatives vs central differences: far looser than the test's check

# Differentiable ops the fuzzer does not drive, and why. Empty while every such op has a usable spec.
NOT_FUZZED: dict[str, str] = {
    "cond": "its predicate picks the branch: random inputs would test one branch at random; its specs "
            "feed each branch's predicate",
    "while_loop": "checked to first order only (its backward pass runs over a tape: no second derivative)",
    "reverse_tape": "a while_loop's backward pass: comes only with one",
}


# ------------------------------------------------------------------ op variants and their domains
@dataclass(frozen=True)
class Variant:
    spec: object
    kinds: tuple         # per input: its numpy dtype
    domains: tuple       # per input: float -> ((lo, hi), ...) intervals; data -> the values it takes
    shapes: tuple        # per input: the spec's own shape (for fresh leaves)


def _intervals(values):
    """The intervals ``values`` fill (from their 1st to 99th percentile, leaving a normal's tails out): one,
    or two either side of a gap that is >= 10% of the range, twice any other gap and has >= 10% of the
    values on each side (nonzero's gap about a kink or a pole; not distinct's evenly spaced clusters)."""
    u = np.unique(values)
    gaps = np.diff(u)
    parts = [u]
    if len(gaps) >= 2:
        j = int(np.argmax(gaps))
        big, second = gaps[j], np.partition(gaps, -2)[-2]
        if big >= 0.1 * (u[-1] - u[0]) and big >= 2 * second and min(j + 1, len(u) - j - 1) >= 0.1 * len(u):
            parts = [u[:j + 1], u[j + 1:]]
    return tuple((float(np.quantile(p, 0.01)), float(np.quantile(p, 0.99))) for p in parts)


def _variant(spec):
    """A Variant for a spec the fuzzer can use, else (None, why not)."""
    if not spec.grad:
        return None, "its spec checks no gradient"
    if spec.order < 2:
        return None, "its spec is checked to first order only (extreme values)"
    if spec.tol:
        return None, "its spec computes in lower precision"
    rng = np.random.default_rng(0)
    draws = [[np.asarray(a) for a in spec.sample(rng)] for _ in range(DRAWS)]
    kinds, domains = [], []
    for k, first in enumerate(draws[0]):
        pooled = np.concatenate([d[k].reshape(-1) for d in draws])
        kinds.append(first.dtype)
        if first.dtype.kind == "f":
            if np.array_equal(first, draws[1][k]):
                return None, "its spec feeds fixed values"
            domains.append(_intervals(pooled))
        else:
            domains.append(np.unique(pooled))
    return Variant(spec, tuple(kinds), tuple(domains), tuple(d.shape for d in draws[0])), ""


@functools.cache
def variants() -> dict:
    """{op: [Variant, ...]} for every differentiable op with a usable spec."""
    found = {}
    for spec in OP_SPECS:
        v, _ = _variant(spec)
        if v is not None and not REGISTRY[spec.op].has(NONDIFF):
            found.setdefault(spec.op, []).append(v)
    return found


def why_not(op) -> list:
    """Why each spec of ``op`` cannot drive the fuzzer (for the message when an op is neither fuzzed nor listed)."""
    return [f"{spec.id}: {_variant(spec)[1]}" for spec in OP_SPECS if spec.op == op] or ["no spec in tests/op_specs.py"]


def differentiable_ops() -> list:
    return sorted(name for name, opdef in REGISTRY.items() if not opdef.has(NONDIFF))


def fuzzed_ops() -> list:
    return sorted(variants())


# ------------------------------------------------------------------ the graph
@dataclass
class Fuzzed:
    """A built graph: symbolic and eager twins, the feeds, and the program that replays it."""
    placeholders: list = field(default_factory=list)
    eager_leaves: list = field(default_factory=list)
    feeds: list = field(default_factory=list)
    static: list = field(default_factory=list)      # per slot: the symbolic tensor
    eager: list = field(default_factory=list)       # per slot: the eager tensor
    leaf_slots: list = field(default_factory=list)
    program: list = field(default_factory=list)     # (fn, input slots, result slot), in order
    made: list = field(default_factory=list)        # slots of op results
    ops: list = field(default_factory=list)         # the op of each step
    loss: int = -1                                   # slot of the scalar loss
    sinks: list = field(default_factory=list)       # slots the loss reads (the values compared)
    fresh: int = 0                                   # steps fed (in part) fresh leaves of their spec's shapes
    mapped: int = 0                                  # inputs mapped into their op's domain

    def floats(self):
        return [k for k, f in enumerate(self.feeds) if f.dtype.kind == "f"]

    def replay(self, leaves):
        """The program run on ``leaves`` (one tensor per placeholder, static or eager): every slot's tensor."""
        env = dict(zip(self.leaf_slots, leaves))
        for fn, slots, out in self.program:
            env[out] = fn(*[env[s] for s in slots])
        return env


def _leaf(static_shape, feed):
    """(placeholder, eager tensor, feed) for one leaf; floats require grad, data (bools, integers) do not."""
    feed = np.asarray(feed)
    grad = feed.dtype.kind == "f"
    ph = sg.placeholder(static_shape, dtype=feed.dtype, requires_grad=grad)
    return ph, eager.tensor(feed, requires_grad=grad), feed


def _add_leaf(g, leaf):
    ph, et, feed = leaf
    ph.name = f"x{len(g.placeholders)}"
    g.placeholders.append(ph)
    g.eager_leaves.append(et)
    g.feeds.append(feed)
    g.leaf_slots.append(len(g.static))
    g.static.append(ph)
    g.eager.append(et)
    return len(g.static) - 1


def _leaves(g, base, leaves, rng):
    """Placeholders over ``base``: each a suffix of it, every axis full size, 1, None fed full, or None fed 1.
    The first is all of it with its first axis None (a batch axis), so every graph has an unknown size."""
    for n, (rank_cut, axes) in enumerate(leaves):
        if n == 0:
            rank_cut, axes = 0, (axes[0] % 2 + 2,) + axes[1:]
        dims = base[min(rank_cut, len(base)):]
        static, runtime = [], []
        for d, how in zip(dims, axes + (0,) * len(dims)):
            static.append(None if how >= 2 else (1 if how == 1 else d))
            runtime.append(1 if how in (1, 3) else d)
        _add_leaf(g, _leaf(tuple(static), rng.uniform(-1.5, 1.5, tuple(runtime))))


def _affine(value, intervals, k, rng):
    """(scale, shift) taking ``value`` into one of ``intervals`` (by ``k``), at a random place in it (not its
    centre: a single element would land on 0 in a symmetric domain, where functions such as log1p and
    arctanh are nearly the identity and their results nearly tie in a maximum), or None if it is inside."""
    inner = [(lo + MARGIN * (hi - lo), hi - MARGIN * (hi - lo)) for lo, hi in intervals]
    inside = np.zeros(value.shape, bool)
    for lo, hi in inner:
        inside |= (value >= lo) & (value <= hi)
    if inside.all():
        return None
    lo, hi = inner[k % len(inner)]
    m, big = float(value.min()), float(value.max())
    scale = min(1.0, (hi - lo) / (big - m)) if big > m else 1.0
    room = max(0.0, (hi - lo) - scale * (big - m))          # (0 when shrunk to fit, up to rounding)
    return scale, lo + rng.uniform(0.0, room) - scale * m


def _closure(build, maps):
    def fn(*xs):
        return build(*[x if m is None else x * m[0] + m[1] for x, m in zip(xs, maps)])
    fn.mapped = sum(m is not None for m in maps)
    return fn


def _float_slots(g):
    """Slots of float values, most recent first (so steps tend to build on each other: deep graphs)."""
    return [s for s in reversed(range(len(g.static))) if g.eager[s].dtype.kind == "f"]


def _data_leaf(g, variant, k, like, cut, rng):
    """A fresh bool or integer leaf shaped like slot ``like`` (all of it, or without its last/first axis)."""
    static, runtime = g.static[like].shape, g.eager[like].shape
    if cut == 1 and static:
        static, runtime = static[:-1], runtime[:-1]
    elif cut == 2 and static:
        static, runtime = static[1:], runtime[1:]
    values = rng.choice(variant.domains[k], size=runtime).astype(variant.kinds[k])
    return _leaf(static, values)


def _arguments(g, variant, picks, attempt, rng):
    """Per input: a slot, or a new leaf (placeholder, eager, feed). Attempts before ATTEMPTS take pool
    values; then the first input from the pool and fresh leaves of the spec's shapes; then all fresh."""
    floats = _float_slots(g)
    fresh = variant.spec.sample(rng)
    args = []
    for k, kind in enumerate(variant.kinds):
        pick = picks[k % len(picks)]
        if attempt > ATTEMPTS or (attempt == ATTEMPTS and k > 0):
            args.append(_leaf(variant.shapes[k], fresh[k]))
        elif kind.kind == "f":
            args.append(floats[(pick + attempt * (k + 1)) % len(floats)])
        else:
            like = floats[(pick + attempt) % len(floats)]
            args.append(_data_leaf(g, variant, k, like, attempt % 3, rng))
    return args


def _tensors(g, arg):
    return (g.static[arg], g.eager[arg]) if isinstance(arg, int) else (arg[0], arg[1])


def _derivatives(fn, xs, shift, v):
    """(sum of fn's result, its gradient, its Hessian along v) at the float inputs ``xs + shift * v``."""
    leaves = [eager.tensor(x + shift * v[k], requires_grad=True) if k in v else x for k, x in enumerate(xs)]
    floats = [leaves[k] for k in v]
    total = sg.sum(fn(*leaves))
    firsts = eager.grad(total, floats, create_graph=True)
    seconds = eager.grad(sum(sg.sum(d * dv) for d, dv in zip(firsts, v.values())), floats)
    return total.value, [d.value for d in firsts], [d.value for d in seconds]


def _differentiable_here(fn, pairs):
    """Whether the step has first and second derivatives at its inputs: finite (numpy errors raise), and
    matching central differences along a random direction, loosely (a kink is off by a large factor).

    Domains keep inputs off the kinks and poles that a spec's sampler avoids, but not off those it meets
    with probability 0 and the pool makes exactly: zeros (x - x, log_softmax over one element, a scatter's
    untouched elements) into both inputs of hypot or arctan2, which have no derivative at the origin
    (hypot's gradient is NaN there, in torch too; arctan2's is torch's 0, but its second is NaN in torch)."""
    xs = [np.asarray(e.value) if e.dtype.kind == "f" else e for _, e in pairs]
    rng = np.random.default_rng(0)        # not the recipe's: a step taken keeps the graph it had
    v = {k: rng.uniform(-1.0, 1.0, x.shape) for k, x in enumerate(xs) if x.dtype.kind == "f"}
    if not v:
        return True
    _, firsts, seconds = _derivatives(fn, xs, 0.0, v)
    (up, g_up, _), (down, g_down, _) = _derivatives(fn, xs, STEP, v), _derivatives(fn, xs, -STEP, v)
    slope = sum(float(np.sum(d * dv)) for d, dv in zip(firsts, v.values()))
    checks = [(slope, (up - down) / (2 * STEP))] + [
        (h, (a - b) / (2 * STEP)) for h, a, b in zip(seconds, g_up, g_down)]
    return all(np.all(np.isfinite(d)) for d in firsts + seconds) and all(
        np.allclose(got, want, rtol=KINK, atol=KINK * max(1.0, float(np.max(np.abs(want), initial=0.0))))
        for got, want in checks)


def _attempt(g, variant, args, k, rng):
    """(fn, static result, eager result) if the variant builds on these arguments both ways and is
    differentiable there, else None."""
    pairs = [_tensors(g, a) for a in args]
    maps = [_affine(e.value, dom, k, rng) if kind.kind == "f" else None
            for (_, e), kind, dom in zip(pairs, variant.kinds, variant.domains)]
    fn = _closure(variant.spec.build, maps)
    try:
        with warnings.catch_warnings(), np.errstate(all="raise"):
            warnings.simplefilter("error")
            static = fn(*[s for s, _ in pairs])
            value = fn(*[e for _, e in pairs])
            if not _differentiable_here(fn, pairs):
                return None
    except (sg.StaticgradError, TypeError, ValueError, IndexError, ArithmeticError, RuntimeWarning):
        return None
    if value.dtype != np.float64 or value.value.size > MAX_SIZE or not np.all(np.isfinite(value.value)):
        return None
    known = [(s, e) for s, e in zip(static.shape, value.shape) if s is not None]
    assert static.ndim == value.ndim and all(s == e for s, e in known), (
        f"{variant.spec.id}: static shape {static.shape} but the eager result has shape {value.shape}")
    return fn, static, value


def _step(g, op, variant_index, picks, k, rng):
    """Apply one variant of ``op``; False if no arguments fit (rare: the last attempt uses the spec's own)."""
    options = variants()[op]
    variant = options[variant_index % len(options)]
    for attempt in range(ATTEMPTS + 2):
        args = _arguments(g, variant, picks, attempt, rng)
        done = _attempt(g, variant, args, k, rng)
        if done is None:
            continue
        fn, static, value = done
        g.fresh += attempt >= ATTEMPTS
        g.mapped += fn.mapped
        slots = [a if isinstance(a, int) else _add_leaf(g, a) for a in args]
        g.program.append((fn, slots, len(g.static)))
        g.made.append(len(g.static))
        g.ops.append(op)
        g.static.append(static)
        g.eager.append(value)
        return True
    return False


def _loss(g, rng):
    """A scalar reading every value no later step reads (so every step reaches it), each summed with fixed
    weights in 0.5..1.5 of its run-time shape: a sum alone could not see elements put in the wrong place."""
    read = {s for _, slots, _ in g.program for s in slots}
    sinks = [s for s in g.made if s not in read] or _float_slots(g)
    weights = [rng.uniform(0.5, 1.5, g.eager[s].shape) for s in sinks]

    def loss(*xs):
        total = sg.sum(xs[0] * sg.constant(weights[0]))
        for x, w in zip(xs[1:], weights[1:]):
            total = total + sg.sum(x * sg.constant(w))
        return total
    g.loss = len(g.static)
    g.program.append((loss, sinks, g.loss))
    g.static.append(loss(*[g.static[s] for s in sinks]))
    g.eager.append(loss(*[g.eager[s] for s in sinks]))
    g.sinks = sinks


def build(recipe) -> Fuzzed:
    """The graph of a recipe (see :func:`recipes`); the same recipe always gives the same graph and feeds."""
    rng = np.random.default_rng(recipe["seed"])
    g = Fuzzed()
    _leaves(g, recipe["base"], recipe["leaves"], rng)
    ops = fuzzed_ops()
    for op_index, variant_index, picks, k in recipe["steps"]:
        _step(g, ops[op_index % len(ops)], variant_index, picks, k, rng)
    _loss(g, rng)
    return g


def recipes(st):
    """The hypothesis strategy of recipes (``st`` is hypothesis.strategies, imported by the test only)."""
    leaf = st.tuples(st.integers(0, 2), st.tuples(*[st.sampled_from([0, 0, 1, 2, 3])] * 3))
    step = st.tuples(st.integers(0, 10_000), st.integers(0, 50),
                     st.tuples(*[st.integers(0, 40)] * 3), st.integers(0, 11))
    return st.fixed_dictionaries({
        "base": st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple),
        "leaves": st.lists(leaf, min_size=1, max_size=4),
        # hypothesis favours the first choices (and small integers): from the longest graph down, so that
        # long graphs are common and short ones still drawn
        "steps": st.sampled_from(range(MAX_STEPS, 0, -1)).flatmap(lambda n: st.lists(step, min_size=n, max_size=n)),
        "seed": st.integers(0, 2 ** 32 - 1),
    })
