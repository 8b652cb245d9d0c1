"""CPU SpMM kernels over Tiled-CSL words: Y (M x N) = W (M x K, Tiled-CSL) @ X (K x N).

Two kernels read the same words:

* ``"sparse"``: each word is decoded once (two ANDs: the bf16 value is the high half
  reinterpreted as fp32; the column is the low bits) and used for all N columns. At N = 1 the
  vector loop runs over words with one 32-bit-index gather of activations per vector of words
  (16 lanes with AVX-512), in chunks of :data:`PF_CHUNK` words, prefetching the word stream
  :data:`PF_AHEAD` words ahead; for
  N >= 2 the activations are laid out in groups of 8 columns, (N/8, K, 8), so one word
  multiplies one contiguous 8-float row (no gather at all; N = 2..7 pad the group with zeros,
  which costs no extra memory traffic), with the same prefetch ahead in the word stream (at
  N = 8 on a 2-core Xeon VM: 29 -> 20 ms). Work is proportional to the non-zeros.
* ``"dense_tile"`` (Flash-LLM's load-as-sparse, compute-as-dense): each tile is expanded into a
  small dense fp32 buffer, multiplied densely with the activation slice, and only the written
  entries are re-zeroed. Work is proportional to M*K*N, as on the GPU; on a CPU that only pays
  once N is large enough that the gather costs more than the wasted FMAs.

Both run parallel over blocks of tile rows (numba prange), walking tile columns outermost inside
a block so one (up to 8192-wide) activation slice stays in L1 across the block's tiles. N is
rounded up to 1, 8, 16, 32 or 64 and passed as a numba literal, so each count is compiled (and
cached on disk) as a constant.
Accumulation is fp32; inputs may be bf16/fp16/fp32 and are widened to fp32 once per call.
"""

from __future__ import annotations

import numpy as np
import torch
from llvmlite import ir
from numba import literally, njit, prange, types
from numba.extending import intrinsic

from labkit.core.errors import bad_value, check_choice, check_range
from labkit.core.intrinsics import emit_prefetch, prefetch
from labkit.spmm.tiled_csl import TiledCSL

KERNELS = ("auto", "sparse", "dense_tile")
MAX_N = 64
_BUCKETS = (1, 8, 16, 32, 64)
#: Row tiles per parallel work item (8 rows each): 64 rows share one activation slice in L1.
BLOCK_TILES = 8
#: "auto" switches to the dense-tile kernel from this N on (set from `labkit bench spmm` runs on
#: the 2-core lab machine, where the sparse kernel won at every N measured; see BENCHMARKS.md).
AUTO_DENSE_TILE_FROM_N = MAX_N + 1


@intrinsic
def _u32_as_f32(typingctx, v):
    """Reinterpret a uint32's bits as float32 (a bit-cast, no conversion)."""
    sig = types.float32(types.uint32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return sig, codegen


@intrinsic
def _ld(typingctx, arr, idx):
    """Load arr[idx] (contiguous float32, 0 <= idx < 2**31) with a 32-bit index: LLVM then emits
    vgatherdps (32-bit indices: twice the lanes per instruction of the vgatherqps numba's 64-bit
    indices give)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"
            and arr.dtype == types.float32 and isinstance(idx, types.Integer)):
        return None
    sig = types.float32(arr, idx)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i = args[1]
        if i.type.width != 32:  # callers pass a masked 16-bit location: truncation is exact
            i = builder.trunc(i, ir.IntType(32))
        return builder.load(builder.gep(ary.data, [i], inbounds=True))
    return sig, codegen


_HI = np.uint32(0xFFFF0000)


# The row loops index a slice of the word stream from 0 and the activations with an unsigned
# column: numba then emits no negative-index wraparound, so LLVM sees a contiguous word load and
# a 32-bit-index gather. (Indexing words[p + i] with a signed p made it *gather the words*.)

#: The N = 1 loop reads its words in chunks of PF_CHUNK and, before each chunk, prefetches the
#: cache lines PF_AHEAD words ahead (one per 16 words). Without the hint the gathers fill the
#: core's window and too few word-stream misses are in flight: on a 2-core AVX-512 Xeon VM the
#: kernel read 12 GB/s of words where torch's dense bf16 GEMV read 28 (36864x9216 at 80% sparsity:
#: 22.7 ms); with the hint 12.8-13.0 ms (PF_AHEAD 512: 13.5-14.5, 2048: 13.4-13.7).
#: A chunk of 128 words lets LLVM's 64-word loop (four 16-lane gathers into four accumulators) run;
#: a 32-word chunk only ran its 8-lane loop, one accumulator whose sum carried from chunk to chunk.
#: On a 2-core Zen4 EPYC VM (slow gathers: the kernel is gather-bound there, 1.0-1.3 cycles per
#: non-zero on one core at the 2.6 GHz TSC rate, from cache or from memory alike) 128 took 22.9 ms
#: median against 26.7 for 32 (25 interleaved rounds; 256: 23.5).
PF_CHUNK = 128
PF_AHEAD = 1024


@njit(fastmath=True, boundscheck=False, inline="always", cache=True)
def _row_dot1(words, p, e, cmask, x):
    """Sum of value * x[col] over words[p:e]."""
    s = np.float32(0.0)
    while p < e:
        q = min(e, p + PF_CHUNK)
        for j in range(0, PF_CHUNK, 16):
            prefetch(words, p + PF_AHEAD + j)  # past the end too, as in _row_dot8: a hint never faults
        wv = words[p:q]
        for i in range(wv.shape[0]):
            w = wv[i]
            s += _u32_as_f32(w & _HI) * _ld(x, w & cmask)
        p = q
    return s


_F32 = ir.FloatType()
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_V8 = ir.VectorType(_F32, 8)
_FAST = ("fast",)


@intrinsic
def _row_dot8(typingctx, wv, cmask, xg, xo):
    """Return 8 sums over the words of `wv`: value * xg[xo + col, 0:8] (xg C-contiguous (K, 8)).

    Written in LLVM IR because numba's vectoriser turns the natural loop into eight gathers:
    here each word is decoded once, its 8-float activation row is one contiguous vector load,
    four vector accumulators hide the FMA latency, and each step of 4 words prefetches the word
    :data:`PF_AHEAD` words on (past the end of `wv` too: a prefetch never faults).
    """
    if not (isinstance(wv, types.Array) and wv.dtype == types.uint32 and wv.ndim == 1 and wv.layout == "C"
            and isinstance(xg, types.Array) and xg.dtype == types.float32 and xg.ndim == 2 and xg.layout == "C"):
        return None
    sig = types.UniTuple(types.float32, 8)(wv, cmask, xg, xo)

    def codegen(context, builder, signature, args):
        wa = context.make_array(signature.args[0])(context, builder, args[0])
        xa = context.make_array(signature.args[2])(context, builder, args[2])
        n = builder.extract_value(wa.shape, 0)
        mask = args[1]
        mask = builder.trunc(mask, _I32) if mask.type.width > 32 else builder.zext(mask, _I32) if mask.type.width < 32 else mask
        base = builder.gep(xa.data, [builder.mul(args[3], ir.Constant(_I64, 8))])
        zero = ir.Constant(_V8, [0.0] * 8)
        undef = ir.Constant(_V8, ir.Undefined)
        splat_mask = ir.Constant(ir.VectorType(_I32, 8), [0] * 8)
        n4 = builder.and_(n, ir.Constant(_I64, ~3))
        entry = builder.basic_block
        loop = builder.append_basic_block("rd8.loop4")
        tailh = builder.append_basic_block("rd8.tailh")
        tail = builder.append_basic_block("rd8.tail")
        done = builder.append_basic_block("rd8.done")

        def term(i):
            w = builder.load(builder.gep(wa.data, [i]))
            val = builder.bitcast(builder.and_(w, ir.Constant(_I32, 0xFFFF0000)), _F32)
            col = builder.zext(builder.and_(w, mask), _I64)
            p = builder.gep(base, [builder.mul(col, ir.Constant(_I64, 8))])
            xv = builder.load(builder.bitcast(p, _V8.as_pointer()), align=4)
            sp = builder.shuffle_vector(builder.insert_element(undef, val, ir.Constant(_I32, 0)), undef, splat_mask)
            return builder.fmul(sp, xv, flags=_FAST)

        builder.cbranch(builder.icmp_signed(">", n4, ir.Constant(_I64, 0)), loop, tailh)
        builder.position_at_end(loop)
        i = builder.phi(_I64)
        accs = [builder.phi(_V8) for _ in range(4)]
        i.add_incoming(ir.Constant(_I64, 0), entry)
        for a in accs:
            a.add_incoming(zero, entry)
        emit_prefetch(builder, builder.gep(wa.data, [builder.add(i, ir.Constant(_I64, PF_AHEAD))]))
        new = [builder.fadd(accs[u], term(builder.add(i, ir.Constant(_I64, u))), flags=_FAST) for u in range(4)]
        i2 = builder.add(i, ir.Constant(_I64, 4))
        i.add_incoming(i2, loop)
        for a, b in zip(accs, new):
            a.add_incoming(b, loop)
        builder.cbranch(builder.icmp_signed("<", i2, n4), loop, tailh)
        builder.position_at_end(tailh)
        merged = []
        for u in range(4):
            ph = builder.phi(_V8)
            ph.add_incoming(zero, entry)
            ph.add_incoming(new[u], loop)
            merged.append(ph)
        acc0 = builder.fadd(builder.fadd(merged[0], merged[1], flags=_FAST), builder.fadd(merged[2], merged[3], flags=_FAST), flags=_FAST)
        builder.cbranch(builder.icmp_signed("<", n4, n), tail, done)
        builder.position_at_end(tail)
        j = builder.phi(_I64)
        ta = builder.phi(_V8)
        j.add_incoming(n4, tailh)
        ta.add_incoming(acc0, tailh)
        tn = builder.fadd(ta, term(j), flags=_FAST)
        j2 = builder.add(j, ir.Constant(_I64, 1))
        j.add_incoming(j2, tail)
        ta.add_incoming(tn, tail)
        builder.cbranch(builder.icmp_signed("<", j2, n), tail, done)
        builder.position_at_end(done)
        res = builder.phi(_V8)
        res.add_incoming(acc0, tailh)
        res.add_incoming(tn, tail)
        vals = [builder.extract_element(res, ir.Constant(_I32, u)) for u in range(8)]
        return context.make_tuple(builder, signature.return_type, vals)
    return sig, codegen


@njit(parallel=True, fastmath=True, boundscheck=False, cache=True)
def _sparse_n1(words, toff, row_nnz, tr, tc, cmask_, gc, xt, y):
    """Gather-dot for one activation column (decode: one AND for the value, one for the column)."""
    gr = row_nnz.shape[0] // gc
    cmask = np.uint32(cmask_)
    x = xt[0]
    nblk = (gr + BLOCK_TILES - 1) // BLOCK_TILES
    m = y.shape[0]
    for b in prange(nblk):
        g0 = b * BLOCK_TILES
        g1 = min(gr, g0 + BLOCK_TILES)
        acc = np.zeros((g1 - g0) * tr, np.float32)
        for t in range(gc):
            xo = t * tc
            for g in range(g0, g1):
                tile = g * gc + t
                p = toff[tile]
                for r in range(tr):
                    c = np.int64(row_nnz[tile, r])
                    if c:
                        acc[(g - g0) * tr + r] += _row_dot1(words, p, p + c, cmask, x[xo:])
                        p += c
        for i in range(min(m - g0 * tr, (g1 - g0) * tr)):
            y[g0 * tr + i, 0] = acc[i]


@njit(parallel=True, fastmath=True, boundscheck=False, cache=True)
def _sparse_nn(words, toff, row_nnz, tr, tc, cmask_, gc, xg, y, nb):
    """Gather-free SpMM for N >= 2 (nb = 8, 16, 32, 64): x as (nb/8, K, 8) column groups; each
    word is decoded once per group and its group's 8-float activation row read as one vector."""
    literally(nb)
    gr = row_nnz.shape[0] // gc
    cmask = np.uint32(cmask_)
    nblk = (gr + BLOCK_TILES - 1) // BLOCK_TILES
    m = y.shape[0]
    for b in prange(nblk):
        g0 = b * BLOCK_TILES
        g1 = min(gr, g0 + BLOCK_TILES)
        acc = np.zeros(((g1 - g0) * tr, nb), np.float32)
        for t in range(gc):
            xo = t * tc
            for g in range(g0, g1):
                tile = g * gc + t
                p = toff[tile]
                for r in range(tr):
                    c = np.int64(row_nnz[tile, r])
                    if c == 0:
                        continue
                    a = acc[(g - g0) * tr + r]
                    wv = words[p:p + c]
                    for q in range(nb // 8):
                        s0, s1, s2, s3, s4, s5, s6, s7 = _row_dot8(wv, cmask, xg[q], xo)
                        a[8 * q] += s0
                        a[8 * q + 1] += s1
                        a[8 * q + 2] += s2
                        a[8 * q + 3] += s3
                        a[8 * q + 4] += s4
                        a[8 * q + 5] += s5
                        a[8 * q + 6] += s6
                        a[8 * q + 7] += s7
                    p += c
        for i in range(min(m - g0 * tr, (g1 - g0) * tr)):
            for j in range(nb):
                y[g0 * tr + i, j] = acc[i, j]


@njit(parallel=True, fastmath=True, boundscheck=False, cache=True)
def _dense_tile(words, toff, row_nnz, tr, tc, cmask_, gc, xr, y, nb):
    """Load as sparse, compute as dense: expand each tile, dense micro-GEMM, re-zero what was written."""
    literally(nb)
    gr = row_nnz.shape[0] // gc
    m = y.shape[0]
    kdim = xr.shape[1] if nb == 1 else xr.shape[0]  # nb == 1 takes x as (1, K), else (K, nb)
    nblk = (gr + BLOCK_TILES - 1) // BLOCK_TILES
    for b in prange(nblk):
        g0 = b * BLOCK_TILES
        g1 = min(gr, g0 + BLOCK_TILES)
        acc = np.zeros(((g1 - g0) * tr, nb), np.float32)
        buf = np.zeros(tr * (cmask_ + 1), np.float32)  # the "shared memory" tile, zero between uses
        a = np.zeros(nb, np.float32)
        for t in range(gc):
            xo = t * tc
            width = min(tc, kdim - xo)
            for g in range(g0, g1):
                tile = g * gc + t
                p0, p1 = toff[tile], toff[tile + 1]
                if p0 == p1:
                    continue
                wv = words[p0:p1]
                for i in range(wv.shape[0]):      # load as sparse: expand the tile
                    w = wv[i]
                    buf[w & np.uint32(0xFFFF)] += _u32_as_f32(w & _HI)
                for r in range(tr):               # compute as dense: every FMA, zeros too
                    brow = buf[r * (cmask_ + 1):r * (cmask_ + 1) + width]
                    row = (g - g0) * tr + r
                    if nb == 1:
                        xs = xr[0, xo:xo + width]
                        s = np.float32(0.0)
                        for k in range(width):
                            s += brow[k] * xs[k]
                        acc[row, 0] += s
                    else:
                        xs2 = xr[xo:xo + width]
                        for j in range(nb):
                            a[j] = 0.0
                        for k in range(width):
                            v = brow[k]
                            xrow = xs2[k]
                            for j in range(nb):
                                a[j] += v * xrow[j]
                        for j in range(nb):
                            acc[row, j] += a[j]
                for i in range(wv.shape[0]):      # re-zero only what was written
                    buf[wv[i] & np.uint32(0xFFFF)] = 0.0
        for i in range(min(m - g0 * tr, (g1 - g0) * tr)):
            for j in range(nb):
                y[g0 * tr + i, j] = acc[i, j]


_ENTRY: dict = {}


def _call_literal(kernel, args: tuple, nb: int) -> None:
    """Run `kernel(*args, nb)` with nb compiled as a literal, skipping numba's per-call re-typing.

    A literal argument makes the dispatcher re-type every call (tens of ms); after the first
    call (which compiles or loads from the disk cache) the specialisation's entry point is
    called directly. The argument types are fixed by `spmm`, so one entry per (kernel, nb).
    """
    ep = _ENTRY.get((kernel, nb))
    if ep is not None:
        ep(*args, nb)
        return
    kernel(*args, nb)
    want = f"Literal[int]({nb})"
    for sig, cres in kernel.overloads.items():
        if str(sig[-1]) == want:
            _ENTRY[(kernel, nb)] = cres.entry_point
            break


def _run(kind: str, nb: int, w: TiledCSL, xk: np.ndarray, out: np.ndarray) -> None:
    args = (w.words, w.tile_offsets, w.row_nnz, w.tile[0], w.tile[1], (1 << w.col_bits) - 1, w.grid[1], xk, out)
    if kind == "dense_tile":
        _call_literal(_dense_tile, args, nb)
    elif nb == 1:
        _sparse_n1(*args)
    else:
        _call_literal(_sparse_nn, args, nb)


def bucket(n: int) -> int:
    """Return the compiled column count used for N columns: 1, or 8/16/32/64 (8-float groups)."""
    check_range("n", n, 1, MAX_N, integer=True)
    return next(b for b in _BUCKETS if b >= n)


def choose_kernel(n: int) -> str:
    """Return the kernel "auto" uses for N activation columns."""
    return "dense_tile" if n >= AUTO_DENSE_TILE_FROM_N else "sparse"


def _as_activations(x, k: int) -> tuple[np.ndarray, bool]:
    """Return (x as float32 (K, N) numpy, whether x was 1-D), checking shape, dtype and values.

    Activations must be finite (after the cast to float32): the sparse kernels skip the weight's
    zeros (and multiply padding words by column 0), so a NaN or inf activation would not give the
    NaN a dense product gives (0 * inf); refusing it keeps every kernel equal to the dense one.
    """
    if isinstance(x, torch.Tensor):
        if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise bad_value("x.dtype", x.dtype, "torch.float32, torch.bfloat16 or torch.float16")
        if x.device.type != "cpu":
            raise bad_value("x.device", str(x.device), "a CPU tensor (these are the CPU kernels)")
        xn = x.detach().float().numpy() if x.dtype != torch.float32 else x.detach().numpy()
    elif isinstance(x, np.ndarray):
        if x.dtype not in (np.float32, np.float16, np.float64):
            raise bad_value("x.dtype", x.dtype, "float32, float16 or float64 (numpy) or a torch tensor")
        xn = x.astype(np.float32, copy=False)
    else:
        raise bad_value("x", type(x).__name__, "a torch.Tensor or numpy array of shape (K,) or (K, N)")
    vec = xn.ndim == 1
    if vec:
        xn = xn[:, None]
    if xn.ndim != 2 or xn.shape[0] != k or not (1 <= xn.shape[1] <= MAX_N):
        raise bad_value("x.shape", tuple(x.shape), f"({k},) or ({k}, N) with 1 <= N <= {MAX_N}")
    finite = np.isfinite(xn)
    if not finite.all():
        at = tuple(int(i) for i in np.argwhere(~finite)[0])
        at = at[:1] if vec else at
        raise bad_value(f"x[{', '.join(map(str, at))}]", float(xn[at if not vec else (at[0], 0)]),
                        "finite activations within float32 range (no NaN or inf)")
    return xn, vec


def spmm(w: TiledCSL, x, *, kernel: str = "auto", out: np.ndarray | None = None) -> np.ndarray:
    """Return W @ x as float32 numpy ((M,) for 1-D x, else (M, N)); W in Tiled-CSL (bf16 values).

    `x` is a CPU torch tensor (fp32/bf16/fp16) or numpy array (fp32/fp16/fp64) of shape (K,) or
    (K, N), 1 <= N <= 64, with finite values (a NaN or inf activation is refused: see
    `_as_activations`). NaN and inf *weights* are values like any other: the result is what a
    dense product of the same weights gives (NaN or inf in their rows).
    `out`, if given, must be a float32 C-contiguous (M, bucket(N)) array; every element is written.
    """
    if not isinstance(w, TiledCSL):
        raise bad_value("w", type(w).__name__, "a TiledCSL (labkit.spmm.tiled_csl.encode)")
    check_choice("kernel", kernel, KERNELS)
    if w.dtype != "bf16":
        raise bad_value("w.dtype", w.dtype, "'bf16' on the CPU (fp16 words need a conversion the CPU "
                        "kernel does not do; the GPU kernel takes fp16)")
    m, k = w.shape
    xn, vec = _as_activations(x, k)
    n = xn.shape[1]
    nb = bucket(n)
    kind = choose_kernel(n) if kernel == "auto" else kernel
    if nb == 1:
        xk = np.ascontiguousarray(xn.T)
    elif kind == "sparse":
        xk = np.zeros((nb // 8, k, 8), np.float32)   # column groups of 8, each (K, 8) contiguous
        for q in range(-(-n // 8)):
            part = xn[:, 8 * q:8 * q + 8]
            xk[q, :, :part.shape[1]] = part
    else:
        xk = np.zeros((k, nb), np.float32)
        xk[:, :n] = xn
    if out is None:
        out = np.empty((m, nb), np.float32)
    elif not isinstance(out, np.ndarray):
        raise bad_value("out", type(out).__name__, f"None or a C-contiguous float32 numpy array of shape {(m, nb)}")
    elif out.shape != (m, nb) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise bad_value("out", f"{out.dtype}{out.shape}", f"a C-contiguous float32 array of shape {(m, nb)}")
    _run(kind, nb, w, xk, out)
    y = out[:, :n]
    return y[:, 0] if vec else y


def numba_threads() -> int:
    """Return how many threads the numba kernels run with."""
    import numba
    return int(numba.get_num_threads())
