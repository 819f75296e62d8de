"""Specs of the fold pass's fused convolutions, "conv2d+add" and "conv2d+add+relu": their value is the three
ops' (no gradient: the pass makes them after sg.grad). One layout where the product's rows are cropped
(patches at least twice the output channels, stride 1) and one where the product is written straight."""
from __future__ import annotations

import numpy as np

import staticgrad as sg
from tests.op_specs import inputs, normal, spec
from tests.specs.conv import ref_conv2d

_PADDED = {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1}
_STRIDED = {"stride": (2, 2), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1}
CASES = [("rows", (2, 3, 4, 4), (2, 3, 3, 3), (1, 2, 1, 1), _PADDED),
         ("straight", (1, 2, 5, 5), (3, 2, 3, 3), (3, 1, 1), _STRIDED)]

for _op in ("conv2d+add", "conv2d+add+relu"):
    for _tag, _xs, _ws, _bs, _attrs in CASES:
        def _build(x, w, b, op=_op, attrs=_attrs):
            return getattr(sg.ops, op)(x, w, b, **attrs)

        def _ref(x, w, b, op=_op, attrs=_attrs):
            y = ref_conv2d(x, w, **attrs) + b
            return np.maximum(y, 0) if op.endswith("relu") else y

        spec(_op, _build, inputs(normal(*_xs), normal(*_ws), normal(*_bs)), _ref, tag=_tag, grad=False,
             dynamic=False)      # (no input has a batch axis but x: a None bias size is refused)
