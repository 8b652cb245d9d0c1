"""Numba intrinsics the compiled kernels share.

:func:`prefetch` is ``llvm.prefetch`` on an array element: a hint (a read, kept in every cache
level, never a fault) that lets a loop start the memory reads it will need later while it works on
the ones it has, where the hardware prefetchers do not follow the pattern or fall behind. The
recsys kernels use it for random rows; the SpMM kernels for their word stream, which a gather loop
otherwise reads with too few misses in flight.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def item_pointer(context, builder, aryty, ary, inds):
    """Pointer to ary[inds]: no bounds check and no wraparound (loads and stores through it need indices
    in range; a prefetch may point anywhere)."""
    return cgutils.get_item_pointer2(context, builder, data=ary.data, shape=cgutils.unpack_tuple(builder, ary.shape),
                                     strides=cgutils.unpack_tuple(builder, ary.strides), layout=aryty.layout,
                                     inds=inds, wraparound=False, boundscheck=False)


def emit_prefetch(builder, ptr) -> None:
    """Emit ``llvm.prefetch`` of the address `ptr` (a read, kept in every cache level) into IR being built."""
    i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                        "llvm.prefetch.p0")
    builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])


@intrinsic
def prefetch(typingctx, arr, i):
    """Hint the CPU to bring arr[i] of a 1-d array into cache (any i: a prefetch never faults)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        emit_prefetch(builder, item_pointer(context, builder, sig.args[0], ary,
                                            [context.cast(builder, args[1], sig.args[1], types.intp)]))
        return context.get_dummy_value()
    return types.void(arr, i), codegen


@intrinsic
def prefetch2(typingctx, arr, i, j):
    """Hint the CPU to bring arr[i, j] of a 2-d array into cache."""
    if not (isinstance(arr, types.Array) and arr.ndim == 2 and isinstance(i, types.Integer)
            and isinstance(j, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        inds = [context.cast(builder, args[n], sig.args[n], types.intp) for n in (1, 2)]
        emit_prefetch(builder, item_pointer(context, builder, sig.args[0], ary, inds))
        return context.get_dummy_value()
    return types.void(arr, i, j), codegen


__all__ = ["emit_prefetch", "item_pointer", "prefetch", "prefetch2"]
