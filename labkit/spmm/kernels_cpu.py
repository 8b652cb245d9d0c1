"""CPU SpMM kernels over Tiled-CSL words: Y (M x N) = W (M x K, Tiled-CSL) @ X (K x N).

Two kernels read the same words:

* ``"sparse"`` (gather-dot): each word is decoded once (two ANDs: the bf16 value is the high
  half reinterpreted as fp32; the column is the low bits) and used for all N columns. For
  N <= 4 the activations are read column-major so the vector loop runs over words with one
  AVX-512 gather per column; for N >= 8 they are read row-major so one word broadcasts into a
  vector over N. Work is proportional to the non-zeros.
* ``"dense_tile"`` (Flash-LLM's load-as-sparse, compute-as-dense): each tile is expanded into a
  small dense fp32 buffer, multiplied densely with the activation slice, and only the written
  entries are re-zeroed. Work is proportional to M*K*N, as on the GPU; on a CPU that only pays
  once N is large enough that the gather costs more than the wasted FMAs.

Both run parallel over blocks of tile rows (numba prange), walking tile columns outermost inside
a block so one (up to 8192-wide) activation slice stays in L1 across the block's tiles. N is rounded up
to a power of two (1..64) and passed as a numba literal, so each count is compiled (and cached
on disk) as a constant and inner loops unroll into vector code.
Accumulation is fp32; inputs may be bf16/fp16/fp32 and are widened to fp32 once per call.
"""

from __future__ import annotations

import numpy as np
import torch
from llvmlite import ir
from numba import literally, njit, prange, types
from numba.extending import intrinsic

from labkit.core.errors import bad_value, check_choice
from labkit.spmm.tiled_csl import TiledCSL

KERNELS = ("auto", "sparse", "dense_tile")
MAX_N = 64
_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
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
    16-lane vgatherdps instead of 8-lane vgatherqps for numba's 64-bit indices."""
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

@njit(fastmath=True, boundscheck=False, inline="always", cache=True)
def _row_dot1(wv, cmask, x):
    s = np.float32(0.0)
    for i in range(wv.shape[0]):
        w = wv[i]
        s += _u32_as_f32(w & _HI) * _ld(x, w & cmask)
    return s


@njit(fastmath=True, boundscheck=False, inline="always", cache=True)
def _row_dot2(wv, cmask, x0, x1):
    s0 = np.float32(0.0)
    s1 = np.float32(0.0)
    for i in range(wv.shape[0]):
        w = wv[i]
        v = _u32_as_f32(w & _HI)
        k = w & cmask
        s0 += v * _ld(x0, k)
        s1 += v * _ld(x1, k)
    return s0, s1


@njit(fastmath=True, boundscheck=False, inline="always", cache=True)
def _row_dot4(wv, cmask, x0, x1, x2, x3):
    s0 = np.float32(0.0)
    s1 = np.float32(0.0)
    s2 = np.float32(0.0)
    s3 = np.float32(0.0)
    for i in range(wv.shape[0]):
        w = wv[i]
        v = _u32_as_f32(w & _HI)
        k = w & cmask
        s0 += v * _ld(x0, k)
        s1 += v * _ld(x1, k)
        s2 += v * _ld(x2, k)
        s3 += v * _ld(x3, k)
    return s0, s1, s2, s3


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
                        acc[(g - g0) * tr + r] += _row_dot1(words[p:p + c], cmask, x[xo:])
                        p += c
        for i in range(min(m - g0 * tr, (g1 - g0) * tr)):
            y[g0 * tr + i, 0] = acc[i]


@njit(parallel=True, fastmath=True, boundscheck=False, cache=True)
def _sparse_n24(words, toff, row_nnz, tr, tc, cmask_, gc, xt, y, nb):
    """Gather-dot for 2 or 4 columns: one decode, one gather per column, column-major x."""
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
                    if c:
                        a = acc[(g - g0) * tr + r]
                        if nb == 4:
                            s0, s1, s2, s3 = _row_dot4(words[p:p + c], cmask, xt[0, xo:], xt[1, xo:],
                                                                   xt[2, xo:], xt[3, xo:])
                            a[0] += s0
                            a[1] += s1
                            a[2] += s2
                            a[3] += s3
                        else:
                            s0, s1 = _row_dot2(words[p:p + c], cmask, xt[0, xo:], xt[1, xo:])
                            a[0] += s0
                            a[1] += s1
                        p += c
        for i in range(min(m - g0 * tr, (g1 - g0) * tr)):
            for j in range(nb):
                y[g0 * tr + i, j] = acc[i, j]


@njit(fastmath=True, boundscheck=False, inline="always", cache=True)
def _row_dot8(wv, cmask, xg):
    """Eight columns at once: one decode per word, one 8-float activation row, eight FMAs that
    stay in one vector register (scalar accumulators, so nothing aliases memory)."""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = np.float32(0.0)
    for i in range(wv.shape[0]):
        w = wv[i]
        v = _u32_as_f32(w & _HI)
        r = xg[w & cmask]
        s0 += v * r[0]
        s1 += v * r[1]
        s2 += v * r[2]
        s3 += v * r[3]
        s4 += v * r[4]
        s5 += v * r[5]
        s6 += v * r[6]
        s7 += v * r[7]
    return s0, s1, s2, s3, s4, s5, s6, s7


@njit(parallel=True, fastmath=True, boundscheck=False, cache=True)
def _sparse_nn(words, toff, row_nnz, tr, tc, cmask_, gc, xg, y, nb):
    """Gather-free SpMM for nb >= 8 columns: x as (nb/8, K, 8) groups; each group's 8-float row
    is read contiguously per word and broadcast-multiplied by the decoded value."""
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
                        s0, s1, s2, s3, s4, s5, s6, s7 = _row_dot8(wv, cmask, xg[q, xo:])
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
    elif nb <= 4:
        _call_literal(_sparse_n24, args, nb)
    else:
        _call_literal(_sparse_nn, args, nb)


def bucket(n: int) -> int:
    """Return the compiled column count used for N columns (the next power of two, <= 64)."""
    return next(b for b in _BUCKETS if b >= n)


def choose_kernel(n: int) -> str:
    """Return the kernel "auto" uses for N activation columns."""
    return "dense_tile" if n >= AUTO_DENSE_TILE_FROM_N else "sparse"


def _as_activations(x, k: int) -> tuple[np.ndarray, bool]:
    """Return (x as float32 (K, N) numpy, whether x was 1-D), checking shape and dtype."""
    if isinstance(x, torch.Tensor):
        if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise bad_value("x.dtype", x.dtype, "torch.float32, torch.bfloat16 or torch.float16")
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
    return xn, vec


def spmm(w: TiledCSL, x, *, kernel: str = "auto", out: np.ndarray | None = None) -> np.ndarray:
    """Return W @ x as float32 numpy ((M,) for 1-D x, else (M, N)); W in Tiled-CSL (bf16 values).

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
    if (kind == "sparse" and nb <= 4) or nb == 1:
        xk = np.zeros((nb, k), np.float32)
        xk[:n] = xn.T
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
    elif out.shape != (m, nb) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise bad_value("out", f"{out.dtype}{out.shape}", f"a C-contiguous float32 array of shape {(m, nb)}")
    _run(kind, nb, w, xk, out)
    y = out[:, :n]
    return y[:, 0] if vec else y


def numba_threads() -> int:
    """Return how many threads the numba kernels run with."""
    import numba
    return int(numba.get_num_threads())
