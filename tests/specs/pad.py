"""Specs of pad (numpy.pad is the reference) and pad_grad (the reference: pad's adjoint, column by column)."""
from __future__ import annotations

import numpy as np

import staticgrad as sg
from tests.op_specs import inputs, normal, spec


def _torch_widths(pad_width):
    """torch's F.pad order: the last axis's (before, after) first."""
    return [w for pair in reversed(pad_width) for w in pair]


def _numpy(pad_width, mode, constant_values):
    if mode == "constant":
        return lambda x: np.pad(x, pad_width, mode="constant", constant_values=constant_values)
    return lambda x: np.pad(x, pad_width, mode=mode)


CASES = [  # (tag, shape, pad_width, mode, constant_values, torch's mode and widths or None)
    ("constant-int-width", (3, 4), 1, "constant", 0, ("constant", [1, 1, 1, 1])),
    ("constant-pair-per-axis", (2, 3), ((1, 2), (0, 1)), "constant", 2.5, ("constant", [0, 1, 1, 2])),
    ("constant-values-per-axis", (2, 3), ((1, 1), (2, 1)), "constant", ((1.0, -2.0), (3.0, 0.5)), None),
    ("constant-one-pair", (4,), (2, 3), "constant", (-1.0, 1.0), None),
    ("edge", (3, 4), ((1, 2), (2, 1)), "edge", 0, None),
    ("edge-image", (1, 2, 3, 3), ((0, 0), (0, 0), (1, 2), (2, 0)), "edge", 0, ("replicate", [2, 0, 1, 2])),
    ("reflect-image", (2, 1, 3, 4), ((0, 0), (0, 0), (2, 1), (1, 3)), "reflect", 0, ("reflect", [1, 3, 2, 1])),
    ("reflect-3d", (2, 4, 3), ((1, 2), (0, 0), (2, 1)), "reflect", 0, None),
    ("reflect-wider-than-the-axis", (3,), 5, "reflect", 0, None),
    ("symmetric", (3, 4), ((2, 1), (1, 3)), "symmetric", 0, None),
    ("symmetric-wider-than-the-axis", (2,), (4, 3), "symmetric", 0, None),
    ("wrap-image", (1, 2, 3, 4), ((0, 0), (0, 0), (1, 2), (3, 1)), "wrap", 0, ("circular", [3, 1, 1, 2])),
    ("wrap-wider-than-the-axis", (2, 3), ((3, 0), (1, 4)), "wrap", 0, None),
]


def _adjoint(x_shape, pad_width, mode):
    """pad_grad's reference: <pad(e_i), g> for each basis input e_i."""
    def ref(g):
        out = np.zeros(x_shape)
        for i in range(out.size):
            e = np.zeros(x_shape)
            e.flat[i] = 1.0
            out.flat[i] = np.sum(np.pad(e, pad_width, mode=mode) * g)
        return out
    return ref


def _torch(twin, value):
    if twin is None:
        return None
    mode, widths = twin
    if mode == "constant":
        return lambda T, x: T.nn.functional.pad(x, widths, value=value)
    return lambda T, x: T.nn.functional.pad(x, widths, mode=mode)


for _tag, _shape, _width, _mode, _values, _twin in CASES:
    spec("pad", (lambda w, m, c: lambda x: sg.pad(x, w, m, c))(_width, _mode, _values), inputs(normal(*_shape)),
         _numpy(_width, _mode, _values), tag=_tag, torch=_torch(_twin, _values))

for _tag, _shape, _width, _mode in [("constant", (2, 3), ((1, 2), (0, 1)), "constant"),
                                    ("reflect-wider-than-the-axis", (3,), 5, "reflect"),
                                    ("symmetric", (3, 4), ((2, 1), (1, 3)), "symmetric"),
                                    ("wrap-wider-than-the-axis", (2, 3), ((3, 0), (1, 4)), "wrap"),
                                    ("edge", (2, 2, 3), ((0, 0), (1, 1), (2, 0)), "edge")]:
    _padded = np.pad(np.zeros(_shape), _width, mode=_mode).shape
    spec("pad_grad", (lambda w, m: lambda g: sg.ops.pad_grad(g, w, m))(_width, _mode), inputs(normal(*_padded)),
         _adjoint(_shape, _width, _mode), tag=_tag)
