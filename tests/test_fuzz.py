"""Fuzzing: random graphs over every differentiable op (tests/fuzz.py builds them) must agree everywhere.

Each example is a graph of 1 to 30 op steps over broadcastable float64 placeholders, some with None dims
(fed a concrete size, sometimes 1 where the others have more). Checked on it:

1. values: compiled with optimize=True, with optimize=False, and eager mode (the same steps run
   define-by-run) agree on every value no later step reads and on the loss, a weighted sum of them;
2. gradients of the loss with respect to every float placeholder: the three modes agree, and match
   central differences of the compiled loss, element by element;
3. Hessian-vector products (the gradient of gradient . v): the three modes agree, and match central
   differences of the compiled gradient along v;
4. with torch installed, the eager tape replayed with torch calls gives the same loss, gradients and
   Hessian-vector products (skipped cleanly without torch).

Profiles (hypothesis settings): ``ci`` runs 300 graphs, derandomized (the same graphs every run), in
``make test-slow`` (which .ci/run runs); ``long`` runs 5,000 fresh random graphs, by hand:

    STATICGRAD_FUZZ=long .venv/bin/python -m pytest tests/test_fuzz.py -m slow

(about 10 minutes). A failure prints its recipe (the graph and feeds are a function of it: pass it to
fuzz.build, or add it as an @example). ``--hypothesis-show-statistics`` shows the share of graphs each
op is in, graph sizes, None dims and how often torch was compared. Shrinking is off, as in
tests/passes/test_properties.py (each example compiles four functions of up to a few hundred nodes, and a
shrink takes minutes); STATICGRAD_SHRINK=1 turns it on to get a minimal recipe.
"""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, given, note, settings
from hypothesis import strategies as st

import staticgrad as sg
from staticgrad import eager, testing
from staticgrad.ops.registry import NONDIFF, REGISTRY
from staticgrad.study.torch import Unsupported, torch_program, torch_threads
from tests import fuzz

try:
    import torch
except ImportError:
    torch = None

PHASES = tuple(Phase) if os.environ.get("STATICGRAD_SHRINK") else (Phase.explicit, Phase.reuse, Phase.generate)
_COMMON = dict(deadline=None, phases=PHASES, suppress_health_check=list(HealthCheck))
settings.register_profile("staticgrad-fuzz-ci", max_examples=300, derandomize=True, database=None, **_COMMON)
settings.register_profile("staticgrad-fuzz-long", max_examples=5000, **_COMMON)
PROFILE = os.environ.get("STATICGRAD_FUZZ", "ci")

# Tolerances, relative to the largest magnitude of the array compared (values are bounded by the domains,
# so that is at most a few hundred):
# - between modes and with torch: the same float64 formulas up to the order of a few sums and rewrites
#   (stable forms such as log1p(x) for log(1 + x)); rounding that grows by each step's condition number
#   through up to 30 steps of bounded inputs stays far below 1e-9.
MODES = 1e-9
# - against central differences with step 1e-6: truncation is ~1e-12 times the third derivative, rounding
#   ~1e-16 / 1e-6 = 1e-10 of the function's size; 1e-5 leaves that a wide margin while a wrong derivative
#   rule is off by a sizeable fraction (the same tolerance tests/test_ops.py uses per op).
EPS = 1e-6
DIFFERENCES = 1e-5


def assert_close(got, want, rtol, what):
    for k, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        assert a.shape == b.shape, f"{what} {k}: shape {a.shape} vs {b.shape}"
        scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale, err_msg=f"{what} {k}")


def _directions(g):
    rng = np.random.default_rng(len(g.feeds))
    return [rng.uniform(-1.0, 1.0, g.feeds[k].shape) for k in g.floats()]


def _dot(grads, directions):
    total = sg.sum(grads[0] * sg.constant(directions[0]))
    for gk, v in zip(grads[1:], directions[1:]):
        total = total + sg.sum(gk * sg.constant(v))
    return total


def static_outputs(g, directions):
    """(values, gradients, Hessian-vector products) as symbolic tensors."""
    wrt = [g.placeholders[k] for k in g.floats()]
    values = [g.static[s] for s in g.sinks] + [g.static[g.loss]]
    grads = sg.grad(g.static[g.loss], wrt)
    return values, grads, sg.grad(_dot(grads, directions), wrt)


def eager_results(g, directions):
    wrt = [g.eager_leaves[k] for k in g.floats()]
    values = [g.eager[s].value for s in g.sinks] + [g.eager[g.loss].value]
    grads = eager.grad(g.eager[g.loss], wrt, create_graph=True)
    hvp = eager.grad(_dot(grads, directions), wrt)
    return values, [x.value for x in grads], [x.value for x in hvp]


def split(flat, values, grads):
    n, m = len(values), len(grads)
    return list(flat[:n]), list(flat[n:n + m]), list(flat[n + m:])


def check_differences(g, values, grads, got_grads, got_hvp, directions):
    """Gradients element by element against central differences of the loss; Hessian-vector products
    against central differences of the gradient along the directions (both compiled without passes)."""
    floats = g.floats()
    loss_fn = sg.compile(values[-1], inputs=g.placeholders, optimize=False)
    for j, k in enumerate(floats):
        numeric = testing.numerical_grad(loss_fn, g.feeds, k, EPS)
        assert_close([got_grads[j]], [numeric], DIFFERENCES, f"gradient of x{k} vs central differences:")
    grad_fn = sg.compile(grads, inputs=g.placeholders, optimize=False)
    plus, minus = list(g.feeds), list(g.feeds)
    for k, v in zip(floats, directions):
        plus[k], minus[k] = g.feeds[k] + EPS * v, g.feeds[k] - EPS * v
    numeric = [(a - b) / (2 * EPS) for a, b in zip(grad_fn(*plus), grad_fn(*minus))]
    assert_close(got_hvp, numeric, DIFFERENCES, "Hessian-vector product vs central differences: x")


def torch_results(g, directions):
    """(loss, gradients, Hessian-vector products) of the eager tape replayed with torch calls."""
    floats = g.floats()
    data = [k for k in range(len(g.feeds)) if k not in floats]

    def model(*leaves):
        order = dict(zip(data + floats, leaves))
        return g.replay([order[k] for k in range(len(g.feeds))])[g.loss]
    program, constants, loss_slot = torch_program(model, [g.feeds[k] for k in floats],
                                                  [g.feeds[k] for k in data], torch)
    params = [torch.tensor(g.feeds[k], requires_grad=True) for k in floats]
    env = [torch.from_numpy(g.feeds[k]) for k in data] + params + constants
    for fn, refs in program:
        env.append(fn(*[env[i] for i in refs]))
    loss = env[loss_slot]

    def grads_of(y, create_graph):
        if not y.requires_grad:
            return [torch.zeros_like(p) for p in params]
        found = torch.autograd.grad(y, params, create_graph=create_graph, allow_unused=True)
        return [torch.zeros_like(p) if d is None else d for d, p in zip(found, params)]
    grads = grads_of(loss, True)
    z = sum((d * torch.from_numpy(v)).sum() for d, v in zip(grads, directions))
    hvp = grads_of(z, False)
    def as_np(tensors):
        # A ZeroTensor (torch's lazy zeros, which some gradients are) has no storage: numpy(force=True) of a
        # strided view of one, such as z[:, 0], reads whatever memory lies there (garbage, or a segfault)
        return [np.zeros(t.shape, np.float64) if t._is_zerotensor() else t.detach().numpy(force=True)
                for t in tensors]
    return as_np([loss]), as_np(grads), as_np(hvp)


def _events(g):
    """What --hypothesis-show-statistics tallies: graph sizes, how steps were fed, None dims, torch, and
    the share of graphs each op is in."""
    for op in sorted(set(g.ops)):
        event(f"op {op}")
    event(f"op steps: {len(g.ops) // 10 * 10}-{len(g.ops) // 10 * 10 + 9}")
    event(f"steps fed fresh leaves of their spec's shapes: {g.fresh}")
    event(f"placeholders with None dims: {sum(None in p.shape for p in g.placeholders)}")


@pytest.mark.slow
@settings(settings.get_profile(f"staticgrad-fuzz-{PROFILE}"))
@given(recipe=fuzz.recipes(st))
def test_random_graphs_agree_across_modes_differences_and_torch(recipe):
    g = fuzz.build(recipe)
    note(f"steps: {g.ops}; feeds: {[f.shape for f in g.feeds]}; static: {[p.shape for p in g.placeholders]}")
    _events(g)
    directions = _directions(g)
    values, grads, hvp = static_outputs(g, directions)
    want = eager_results(g, directions)
    for opt in (True, False):
        fn = sg.compile(values + grads + hvp, inputs=g.placeholders, optimize=opt)
        got = split(fn(*g.feeds), values, grads)
        for what, a, b in zip(("value", "gradient", "Hessian-vector product"), got, want):
            assert_close(a, b, MODES, f"optimize={opt} vs eager: {what}")
    check_differences(g, values, grads, want[1], want[2], directions)
    if torch is None:
        return
    try:
        with torch_threads(1):
            theirs = torch_results(g, directions)
    except Unsupported as err:         # getitem_grad has no torch twin; torch indexing takes no negative step
        event(f"torch: skipped ({str(err).split(' (')[0]})")
        return
    event("torch: compared")
    for what, a, b in zip(("loss", "gradient", "Hessian-vector product"), (want[0][-1:], *want[1:]), theirs):
        assert_close(a, b, MODES, f"eager vs torch: {what}")


# ------------------------------------------------------------------ the generator itself (quick)
def test_every_differentiable_op_is_fuzzed_or_listed_with_a_reason():
    # A new op is fuzzed once it has a usable spec in tests/op_specs.py; one that cannot be must be named
    # in fuzz.NOT_FUZZED with the reason. NONDIFF ops have no gradient to check.
    missing = [op for op in fuzz.differentiable_ops() if op not in fuzz.fuzzed_ops() and op not in fuzz.NOT_FUZZED]
    assert not missing, "differentiable ops neither fuzzed nor in tests/fuzz.py's NOT_FUZZED: " + "; ".join(
        f"{op} ({', '.join(fuzz.why_not(op))})" for op in missing)
    stale = [op for op in fuzz.NOT_FUZZED if op in fuzz.fuzzed_ops() or REGISTRY[op].has(NONDIFF)]
    assert not stale, f"NOT_FUZZED lists ops that are fuzzed or have no gradient: {stale}"
    assert set(fuzz.fuzzed_ops()) <= set(fuzz.differentiable_ops())


def _random_recipe(rng, steps):
    return {"base": tuple(int(d) for d in rng.integers(1, 4, size=3)),
            "leaves": [(int(rng.integers(0, 3)), tuple(int(a) for a in rng.integers(0, 4, size=3)))
                       for _ in range(3)],
            "steps": [(int(rng.integers(0, 10_000)), int(rng.integers(0, 50)),
                       tuple(int(p) for p in rng.integers(0, 40, size=3)), int(rng.integers(0, 12)))
                      for _ in range(steps)],
            "seed": int(rng.integers(0, 2 ** 32))}


def test_the_generator_reaches_every_fuzzed_op_mostly_on_earlier_values():
    # 25 graphs of 30 steps reach every op, nearly all of them also fed from earlier results (not only
    # from fresh leaves of their spec's own shapes), and values are mapped into domains along the way.
    rng = np.random.default_rng(3)
    seen, chained, mapped, steps = set(), set(), 0, 0
    for _ in range(25):
        g = fuzz.build(_random_recipe(rng, fuzz.MAX_STEPS))
        seen |= set(g.ops)
        chained |= {op for op, (_, slots, _) in zip(g.ops, g.program) if set(slots) & set(g.made)}
        mapped += g.mapped
        steps += len(g.ops)
    ops = set(fuzz.fuzzed_ops())
    assert ops <= seen, f"never in a graph: {sorted(ops - seen)}"
    assert len(ops - chained) <= 0.1 * len(ops), f"never fed an earlier result: {sorted(ops - chained)}"
    assert steps > 0.9 * 25 * fuzz.MAX_STEPS and mapped > 50   # nearly every step finds arguments


def test_domains_come_from_the_specs_samplers():
    def domain(spec_id, k=0):
        (spec,) = [s for s in fuzz.OP_SPECS if s.id == spec_id]
        return fuzz._variant(spec)[0].domains[k]
    (lo, hi), = domain("log")
    assert 0.3 <= lo < 0.4 and 2.9 < hi <= 3.0
    (neg, pos) = domain("div-same", 1)                  # nonzero(gap=0.5): either side of the pole
    assert neg[1] <= -0.5 and pos[0] >= 0.5
    assert len(domain("max-2d-axis=0-keepdims=False")) == 1     # distinct's clusters are one interval
    assert fuzz._variant([s for s in fuzz.OP_SPECS if s.id == "sigmoid-tails"][0])[0] is None


def test_values_outside_a_domain_are_mapped_onto_it_by_shrinking_only():
    rng = np.random.default_rng(0)
    inside = np.array([0.5, 1.0, 2.0])
    assert fuzz._affine(inside, ((0.3, 3.0),), 0, rng) is None
    x = np.array([-4.0, 0.0, 6.0])
    for k in (0, 1):
        scale, shift = fuzz._affine(x, ((-1.5, -0.5), (0.5, 1.5)), k, rng)
        lo, hi = ((-1.5, -0.5), (0.5, 1.5))[k]
        assert scale <= 1 and lo < (x * scale + shift).min() and (x * scale + shift).max() < hi
    # one element outside is moved, not shrunk, to a random place: not the centre (0 for a symmetric domain)
    landed = [5.0 + fuzz._affine(np.array([5.0]), ((-1.0, 1.0),), 0, rng)[1] for _ in range(20)]
    assert all(-0.9 <= v <= 0.9 for v in landed) and np.std(landed) > 0.3


def test_a_step_is_not_taken_where_its_derivative_does_not_exist():
    # Found by the long profile: zeros the pool made exactly (x - x, log_softmax over one element, a
    # scatter's untouched elements) fed both inputs of hypot (gradient NaN at the origin, in torch too) or
    # arctan2 (torch's gradient 0 there, but its second derivative NaN in torch): no derivative to check.
    value = np.array([[0.5, -0.7, 0.9], [0.2, -0.3, 0.4]])
    for op in ("hypot", "arctan2"):
        (same,) = [v for v in fuzz.variants()[op] if v.spec.id == f"{op}-same"]
        for zero, taken in ((False, True), (True, False)):
            g = fuzz.Fuzzed()
            slot = fuzz._add_leaf(g, fuzz._leaf(value.shape, np.where(zero, value * [[1, 0, 1]], value)))
            done = fuzz._attempt(g, same, [slot, slot], 0, np.random.default_rng(0))
            assert (done is not None) == taken, (op, zero)
