"""``vector_math.fmuladd`` in numba-compiled code: LLVM's ``llvm.fmuladd``, which the CPU's fused
multiply-add computes where it has one (in a vectorized loop too), else a multiply and an add."""
from __future__ import annotations

from . import vector_math

_registered = []


def register():
    """Teach numba to compile calls of vector_math.fmuladd (once per process)."""
    if _registered:
        return
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic, overload

    @intrinsic
    def _fmuladd(typingctx, a, b, c):
        def codegen(context, builder, signature, args):
            double = ir.DoubleType()
            fn = builder.module.declare_intrinsic("llvm.fmuladd", [double], ir.FunctionType(double, [double] * 3))
            return builder.call(fn, args)
        return types.float64(types.float64, types.float64, types.float64), codegen

    @overload(vector_math.fmuladd)
    def _overload(a, b, c):
        return lambda a, b, c: _fmuladd(float(a), float(b), float(c))

    _registered.append(_overload)
