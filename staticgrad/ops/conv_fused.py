"""conv2d with its bias add, and its ReLU, folded in: "conv2d+add" and "conv2d+add+relu" (op names keep what
they fused). Only the fold pass (passes/fold.py) makes them, in an optimized graph, from a conv2d whose one
reader adds a per-channel bias, and that add's one reader a relu: the result is the same array, bit for
bit, computed by one kernel. That kernel adds the bias while it crops the product's rows into the result
(im2col's row layout), and clamps in the same buffer: where the rows need cropping, the separate add's
pass over the output is saved; elsewhere the three ops' work, with two calls and their checks fewer.
No VJP: the pass runs after ``sg.grad``, on graphs that already hold their backward part.
"""
from __future__ import annotations

import numpy as np

from ..tensor import ShapeError, format_shape
from .conv import conv_scratch, torch_conv2d
from .conv_rules import conv2d_spec
from .im2col import conv2d_kernel
from .registry import C_ORDER, OUT, apply, coerce, defop


def bias_fits(bias_shape, out_shape) -> bool:
    """Whether ``bias_shape`` is one number per output channel of an (N, O, H, W) result, (O, 1, 1) or
    (1, O, 1, 1), so that adding it leaves the result's shape as it is."""
    o = out_shape[1]
    return o is not None and tuple(bias_shape) in ((o, 1, 1), (1, o, 1, 1))


def _spec(inputs, **attrs):
    if len(inputs) != 3:
        raise TypeError(f"takes 3 inputs (x, w, bias), got {len(inputs)}")
    shape, dtype = conv2d_spec(inputs[:2], **attrs)
    bias = inputs[2]
    if not bias_fits(bias.shape, shape) or bias.dtype != dtype:
        raise ShapeError(f"the bias must be ({shape[1]}, 1, 1) or (1, {shape[1]}, 1, 1) of dtype {dtype}, got "
                         f"{format_shape(bias.shape)} {bias.dtype}")
    return shape, dtype


def _kernel(relu):
    def kernel(x, w, b, stride, padding, dilation, groups, out=None, scratch=None):
        return conv2d_kernel(x, w, stride, padding, dilation, groups, out=out, scratch=scratch, bias=b, relu=relu)
    return kernel


def _flops(relu):
    def count(node, shapes):
        out = int(np.prod(shapes[node.id]))
        x, w = (shapes[i] for i in node.inputs[:2])
        return 2 * out * int(np.prod(w[1:])) + out * (1 + relu)
    return count


def _torch(relu):
    def make(T, **attrs):
        conv = torch_conv2d(T, **attrs)

        def run(x, w, b):
            y = conv(x, w) + b
            return T.relu(y) if relu else y
        return run
    return make


def _builder(name):
    def build(x, w, bias, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
        """The fused op over stored attributes (what the fold pass copies from the conv2d node)."""
        return apply(name, coerce(x, w, bias), {"stride": stride, "padding": padding, "dilation": dilation,
                                                "groups": groups})
    return build


for _relu in (False, True):
    _name = "conv2d+add+relu" if _relu else "conv2d+add"
    defop(_name, _kernel(_relu), _spec, None, OUT | C_ORDER, scratch=conv_scratch, flops=_flops(_relu),
          torch=_torch(_relu), public=False,
          unsupported={"scalar": "made by the fold pass from ops the scalar path runs one by one"},
          doc="conv2d(x, w) + bias" + (", then relu" if _relu else "") + ", in one kernel (the fold pass's)"
          ).publish(_builder(_name))
