"""OpDef.scratch: a kernel's temporaries are planned workspace slots, reused across calls and steps."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad.ops.registry import REGISTRY, apply, defop, same_spec

SEEN = []


def _kernel(x, scratch=None):
    # doubles x through a temporary, recording which buffer it was given
    tmp = scratch[0] if scratch is not None else np.empty(x.shape, x.dtype)
    SEEN.append(tmp if scratch is not None else None)
    np.multiply(x, 2.0, out=tmp)
    return tmp + 0.0


@pytest.fixture
def twice():
    name = "test_scratch_twice"
    defop(name, _kernel, same_spec, lambda g, out, x: (g * 2.0,),
          scratch=lambda node, shapes: [(shapes[node.id], node.dtype)], unsupported={"scalar": "a test op"})
    yield lambda x: apply(name, (x,))
    REGISTRY.pop(name, None)


def test_a_planned_kernel_gets_the_same_scratch_buffer_every_call(twice):
    x = sg.placeholder((None, 3), name="x")
    f = sg.compile(twice(twice(x) + 1.0), [x])
    SEEN.clear()
    np.testing.assert_allclose(f(np.ones((2, 3))), 6.0)
    first = list(SEEN)
    np.testing.assert_allclose(f(np.full((2, 3), 2.0)), 10.0)
    assert len(first) == 2 and all(a is not None for a in first)
    assert all(a is b for a, b in zip(first, SEEN[2:]))      # the same buffers, call after call
    memory = f.program.memory
    # the first temporary is free after its step: the add writes its result into it
    assert len(memory.slots) == 2 and len(memory.scratch) == 2
    assert "scratch=" in f.source


def test_without_a_plan_the_kernel_allocates(twice):
    x = sg.placeholder((2, 3), name="x")
    backend = sg.lower.Backend("numpy", memory_planning=False)
    f = sg.compile(twice(x), [x], backend=backend)
    SEEN.clear()
    np.testing.assert_allclose(f(np.ones((2, 3))), 2.0)
    assert SEEN == [None]
