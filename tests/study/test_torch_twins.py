"""Every op's PyTorch twin (``OpDef.torch``, which the study's torch column replays) computes what its numpy
kernel computes, on every spec of tests/op_specs.py."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager
from staticgrad.ops import REGISTRY
from tests.op_specs import OP_SPECS

torch = pytest.importorskip("torch")


def test_every_op_has_a_torch_twin_or_says_why_not():
    missing = [name for name, op in REGISTRY.items() if op.torch is None and not op.unsupported.get("torch")]
    assert not missing, f"ops with neither a torch twin nor a reason in unsupported['torch']: {missing}"


def _value(x, op):
    return x._value if x._value is not None else eager._static_value(x, op)


def _torch(value):
    return torch.from_numpy(np.array(value, copy=True))


def _replay(build, inputs, label):
    """Each op ``build`` records, run again by its torch twin: the same values in the same dtype."""
    inputs = [eager.tensor(a) for a in inputs]
    with eager.trace() as found, np.errstate(all="ignore"):
        build(*inputs)
    for t in found:
        twin = REGISTRY[t.op].torch
        if twin is None:
            continue
        try:
            run = twin(torch, **t.attrs)
        except NotImplementedError:
            continue        # (a case the twin says it cannot take, such as softmax over several axes)
        got = run(*[_torch(_value(x, t.op)) for x in t.inputs]).numpy()
        np.testing.assert_allclose(got, t._value, rtol=1e-12, atol=1e-15, err_msg=f"{label}: {t.op}")
        assert got.dtype == np.asarray(t._value).dtype, f"{label}: {t.op} gives {got.dtype}"
    return found


@pytest.mark.parametrize("spec", OP_SPECS, ids=lambda s: s.id)
def test_each_recorded_op_replays_in_torch(spec):
    _replay(spec.build, spec.draw(), spec.id)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "logsumexp"])
def test_a_reduction_over_no_axes_replays_as_the_input(reduce):
    # torch reads dim=() as every axis; numpy, and so staticgrad, as none
    found = _replay(lambda x: getattr(sg, reduce)(x, axis=()), [np.arange(6.0).reshape(2, 3)], reduce)
    assert [t.op for t in found] == [reduce]
