"""The op registry and the public op functions. Importing this attaches operators to Tensor.

Every name exported here that is an op comes from its registration (``REGISTRY[name].function``), so a
new op needs nothing but its ``defop``: ``sg.ops.<name>`` and, unless it says ``public=False``,
``sg.<name>`` follow.
"""
from . import (  # noqa: F401  (they register)
    broadcast,
    conv,
    conv_fused,
    conv_patches,
    elementary,
    elementwise,
    index,
    linalg,
    methods,
    nn,
    pad,
    pool,
    powers,
    random,
    reduce,
    shape,
)
from .registry import (
    BACKENDS,
    BROADCAST,
    C_ORDER,
    COMMUTATIVE,
    ELEMENTWISE,
    IDENTITY,
    INPLACE,
    LAYOUT,
    NONDIFF,
    OUT,
    REARRANGES,
    REGISTRY,
    SHAPE_OF_REF,
    SHAPE_ONLY,
    SHAPE_REF,
    VIEW,
    OpDef,
    apply,
    as_tensor,
    coerce,
    defop,
)

methods.attach()

__all__ = ["BACKENDS", "BROADCAST", "C_ORDER", "COMMUTATIVE", "ELEMENTWISE", "IDENTITY", "INPLACE", "LAYOUT",
           "NONDIFF", "OUT", "REARRANGES", "REGISTRY", "SHAPE_OF_REF", "SHAPE_ONLY", "SHAPE_REF", "VIEW", "OpDef",
           "apply", "as_tensor", "coerce", "defop", "power"]
OPS = {name: opdef.function for name, opdef in REGISTRY.items()}
globals().update(OPS)
power = powers.power         # numpy's other name for pow
conv1d = conv.conv1d         # (conv2d over an added axis: a function, not an op)
global_avg_pool2d = pool.global_avg_pool2d     # a mean over H and W: no op of its own
__all__ += sorted(OPS) + ["conv1d", "global_avg_pool2d"]
