"""``vector_math.fmuladd`` in numba-compiled code: LLVM's ``llvm.fmuladd``, which the CPU's fused
multiply-add computes where it has one (in a vectorized loop too), else a multiply and an add.

Taught through numba's low-level typing and lowering hooks, not ``overload``: an overload's
implementation is a function numba compiles on first use (about 0.03 s, cold), while this lowering
writes the one LLVM call straight into the caller."""
from __future__ import annotations

from . import vector_math

_registered = []


def register():
    """Teach numba to compile calls of vector_math.fmuladd (once per process)."""
    if _registered:
        return
    from llvmlite import ir
    from numba import types
    from numba.core.extending import lower_builtin, type_callable

    @type_callable(vector_math.fmuladd)
    def _type(context):
        def typer(a, b, c):
            if all(isinstance(x, (types.Float, types.Integer)) for x in (a, b, c)):
                return types.float64
        return typer

    @lower_builtin(vector_math.fmuladd, types.Number, types.Number, types.Number)
    def _lower(context, builder, signature, args):
        double = ir.DoubleType()
        fn = builder.module.declare_intrinsic("llvm.fmuladd", [double], ir.FunctionType(double, [double] * 3))
        return builder.call(fn, [context.cast(builder, v, t, types.float64) for v, t in zip(args, signature.args)])

    _registered.append(_lower)
