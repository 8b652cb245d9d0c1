"""Numba kernels for packed tables: one pooled lookup per group, and a fused backward + optimizer update.

The update never builds a sparse gradient tensor: threads own disjoint runs of tables (so no two
threads touch the same row) and apply the output gradient to each row in place, which is what
FBGEMM's fused backward does. SGD is linear, so it applies each id's gradient as it comes; the
Adagrad variants first sum the gradient of each distinct row of a table (their state must see one
g per row per step). Rows may live in a hot-row cache (``slot[r] >= 0``) or in the slow tier
(``weights[r]``).

Every kernel walks a table's ids in order and prefetches the row :data:`PREFETCH` ids ahead:
rows are random reads over hundreds of MiB, and without the hint each one is a cache (and often
TLB) miss the core waits for; with it, several misses are in flight at once. The update also
prefetches its output-gradient entries :data:`PREFETCH` samples ahead: a table's slice of sample
b's gradient row is one line per sample, a whole gradient row (``width`` floats) apart, which the
hardware prefetchers do not follow (at 500 fields, dim 16, batch 2048 the SGD update took 52 ms
without the hint and 42 ms with it on a 2-core Zen1 VM). Kernels index the
2-d arrays (``w[r, d]``) and never take a row view (``w[r]``) in a loop: a numba view bumps the
array's shared reference count, an atomic that the threads would bounce between cores per id.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from labkit.core.intrinsics import item_pointer, prefetch2

SGD, ADAGRAD, ROWWISE_ADAGRAD, GRAD = 0, 1, 2, 3
#: Samples per tile. Kernels walk tile by tile, and within a tile table by table, instead of every
#: table per sample. Long tiles pay: a table's hot (Zipf) rows are reused across the tile while in
#: cache, and the prefetch stream restarts less often. On a 2-core Zen1 VM at 500 fields x 100k
#: rows (3.2 GB of tables) the SGD stage took 55 ms per 2048-sample batch with 256-sample tiles,
#: 49 with 512 and 40 with 2048; at batch 8192, 158 ms with 2048 and 139 with 8192. At 100 fields
#: (640 MB) tiles of 256 to 8192 came within noise of each other.
TILE = 8192
#: How many ids ahead a kernel prefetches the row it will read (measured best of 4..32 here).
PREFETCH = 16
OPTIMIZERS = {"sgd": SGD, "adagrad": ADAGRAD, "rowwise_adagrad": ROWWISE_ADAGRAD}


def _is_f32_matrix(a) -> bool:
    return isinstance(a, types.Array) and a.ndim == 2 and a.dtype == types.float32


@intrinsic
def _stream16(typingctx, dst, i, j, src, k, k0):
    """dst[i, j:j+16] = src[k, k0:k0+16] as one non-temporal 64-byte store: the line goes to memory
    without being read into the cache first (a plain store of a missing line reads it, then writes
    it back). dst[i, j] must sit on a 64-byte boundary; src may sit anywhere."""
    ints = (i, j, k, k0)
    if not (_is_f32_matrix(dst) and _is_f32_matrix(src) and all(isinstance(t, types.Integer) for t in ints)):
        return None

    def codegen(context, builder, sig, args):
        dty, _, _, sty, _, _ = sig.args
        d = context.make_array(dty)(context, builder, args[0])
        s = context.make_array(sty)(context, builder, args[3])
        i_, j_, k_, k0_ = (context.cast(builder, args[n], sig.args[n], types.intp) for n in (1, 2, 4, 5))
        vec = ir.VectorType(ir.FloatType(), 16)
        v = builder.load(builder.bitcast(item_pointer(context, builder, sty, s, [k_, k0_]), vec.as_pointer()), align=4)
        st = builder.store(v, builder.bitcast(item_pointer(context, builder, dty, d, [i_, j_]), vec.as_pointer()),
                           align=64)
        st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()
    return types.void(dst, i, j, src, k, k0), codegen


@intrinsic
def _store_fence(typingctx):
    """Order this thread's non-temporal stores before anything it does next (they are weakly ordered)."""
    def codegen(context, builder, sig, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()
    return types.void(), codegen


@njit(inline="always")
def _prefetch(arr, i):
    """Hint the CPU to bring row `i` of the 2-d array `arr` into cache."""
    prefetch2(arr, i, 0)


@njit(inline="always")
def _prefetch_row(weights, slot, cache_w, use_cache, r):
    if use_cache and slot[r] >= 0:
        _prefetch(cache_w, slot[r])
    else:
        _prefetch(weights, r)


# Row loops. The row width reaches them as a literal for the common widths (8, 16, 32, 64): with
# a run-time width the compiler emits a generic loop (it cannot tell the rows apart from the
# output, nor how many vector lanes a row fills): at dim 16 that made the lookup + update kernels
# of a 100-field, 2048-sample step take 8.8 ms here against 3.7 ms over a literal 16, one 64-byte
# vector per row.
@njit(inline="always")
def _scaled_copy(dst, i, j0, src, k, k0, n, scale, add):
    """dst[i, j0:j0+n] (=, or += when `add`) scale * src[k, k0:k0+n]; indexes, never slices (see module doc)."""
    if add:
        for d in range(n):
            dst[i, j0 + d] += scale * src[k, k0 + d]
    else:
        for d in range(n):
            dst[i, j0 + d] = scale * src[k, k0 + d]


@njit(inline="always")
def _row_op(dst, i, j0, src, k, k0, dim, scale, add):
    """:func:`_scaled_copy` of `dim` entries, the width passed on as a literal where it is a common one."""
    if dim == 16:
        _scaled_copy(dst, i, j0, src, k, k0, 16, scale, add)
    elif dim == 8:
        _scaled_copy(dst, i, j0, src, k, k0, 8, scale, add)
    elif dim == 32:
        _scaled_copy(dst, i, j0, src, k, k0, 32, scale, add)
    elif dim == 64:
        _scaled_copy(dst, i, j0, src, k, k0, 64, scale, add)
    else:
        _scaled_copy(dst, i, j0, src, k, k0, dim, scale, add)


@njit(inline="always")
def _zero_row(out, b, c0, dim):
    for d in range(dim):
        out[b, c0 + d] = 0.0


@njit(parallel=True, nogil=True, cache=True)
def pooled_lookup(weights, dim, slot, cache_w, use_cache, feature, row_off, offsets, values, batch,
                  single, mean, out, col0, hits, lookups, n_chunks, stream=False):
    """Write the pooled rows of each table of a group into out[:, col0 + k*D : col0 + (k+1)*D].

    Work is split into `n_chunks` runs of consecutive tables (one per thread); each walks the
    batch in tiles of :data:`TILE` samples, table by table within a tile. Every output entry is
    written (empty bags give zeros), so `out` may be uninitialised. `single` says every bag holds
    one id (then sample b's id of field f sits at f*B + b, and the loop needs no offsets).
    `stream` (only with `single`) says each row fills whole 64-byte-aligned lines of `out` (dim a
    multiple of 16, `out`'s rows and columns aligned): rows are then written with non-temporal
    stores (:func:`_stream16`).
    """
    n_tab = feature.shape[0]
    n_chunks = max(1, min(n_chunks, n_tab))
    one = np.float32(1.0)
    for c in prange(n_chunks):
        k0 = c * n_tab // n_chunks
        k1 = (c + 1) * n_tab // n_chunks
        for b0 in range(0, batch, TILE):
            b1 = min(batch, b0 + TILE)
            for k in range(k0, k1):
                f = feature[k]
                base = row_off[k]
                c0 = col0 + k * dim
                o = f * batch
                j_end = offsets[o + b1]
                hit = 0
                if single:
                    for b in range(b0, b1):
                        if b + PREFETCH < b1:
                            _prefetch_row(weights, slot, cache_w, use_cache, base + values[o + b + PREFETCH])
                        r = base + values[o + b]
                        if use_cache and slot[r] >= 0:
                            hit += 1
                            if stream:
                                for q in range(0, dim, 16):
                                    _stream16(out, b, c0 + q, cache_w, slot[r], q)
                            else:
                                _row_op(out, b, c0, cache_w, slot[r], 0, dim, one, False)
                        elif stream:
                            for q in range(0, dim, 16):
                                _stream16(out, b, c0 + q, weights, r, q)
                        else:
                            _row_op(out, b, c0, weights, r, 0, dim, one, False)
                    hits[f] += hit
                    continue
                for b in range(b0, b1):
                    s = offsets[o + b]
                    e = offsets[o + b + 1]
                    if s == e:
                        _zero_row(out, b, c0, dim)
                        continue
                    sc = one
                    if mean and e - s > 1:
                        sc = np.float32(1.0 / (e - s))
                    for j in range(s, e):
                        if j + PREFETCH < j_end:
                            _prefetch_row(weights, slot, cache_w, use_cache, base + values[j + PREFETCH])
                        r = base + values[j]
                        if use_cache and slot[r] >= 0:
                            hit += 1
                            _row_op(out, b, c0, cache_w, slot[r], 0, dim, sc, j > s)
                        else:
                            _row_op(out, b, c0, weights, r, 0, dim, sc, j > s)
                hits[f] += hit
        if stream:
            _store_fence()
        # lookups counted once per table rather than per id
        for k in range(k0, k1):
            f = feature[k]
            lookups[f] += offsets[(f + 1) * batch] - offsets[f * batch]


@njit(inline="always")
def _apply_row(w, st, r, acc, u, opt, lr, eps, dim):
    """Apply row r's summed gradient acc[u] with optimizer `opt` to w[r] and its state st[r].

    The width stays a run-time value here: passed as a literal (see :func:`_row_op`), the Adagrad
    updates took twice as long (15.6 against 7.7 ms per 100-field step of dim 16 here).
    """
    if opt == GRAD:
        for d in range(dim):
            st[r, d] += acc[u, d]
    elif opt == ADAGRAD:
        for d in range(dim):
            g = acc[u, d]
            st[r, d] += g * g
            w[r, d] -= lr * g / (np.sqrt(st[r, d]) + eps)
    else:
        ss = np.float32(0.0)
        for d in range(dim):
            ss += acc[u, d] * acc[u, d]
        st[r, 0] += ss / dim
        den = np.sqrt(st[r, 0]) + eps
        for d in range(dim):
            w[r, d] -= lr * acc[u, d] / den


@njit(parallel=True, nogil=True, cache=True)
def fused_backward_update(weights, dim, state, slot, cache_w, cache_s, use_cache, feature, row_off, offsets,
                          values, batch, single, mean, grad, col0, opt, lr, eps, mark, n_chunks):
    """Apply the optimizer to every row a group's lookup touched, from the output gradient `grad`.

    opt: SGD (w -= lr g), ADAGRAD (G += g^2; w -= lr g / (sqrt(G) + eps), as torch.optim.Adagrad
    on a coalesced sparse gradient), ROWWISE_ADAGRAD (G_row += mean(g^2)), or GRAD (state += g,
    the dense weight gradient, for checking). `mark` is an all -1 int32 scratch of shape
    ``[threads, largest table's rows]`` (one row of it per thread; unused by SGD).
    Threads own disjoint runs of tables, hence disjoint rows: no two threads update one row.
    """
    n_tab = feature.shape[0]
    n_chunks = max(1, min(n_chunks, n_tab))
    if opt != SGD:
        n_chunks = min(n_chunks, mark.shape[0])
    for c in prange(n_chunks):
        k0 = c * n_tab // n_chunks
        k1 = (c + 1) * n_tab // n_chunks
        if opt == SGD:
            for b0 in range(0, batch, TILE):
                b1 = min(batch, b0 + TILE)
                for k in range(k0, k1):
                    f = feature[k]
                    base = row_off[k]
                    c0 = col0 + k * dim
                    o = f * batch
                    if single:  # sample b's id at o + b, as in pooled_lookup
                        for b in range(b0, b1):
                            if b + PREFETCH < b1:
                                _prefetch_row(weights, slot, cache_w, use_cache, base + values[o + b + PREFETCH])
                                prefetch2(grad, b + PREFETCH, c0)
                            r = base + values[o + b]
                            if use_cache and slot[r] >= 0:
                                _row_op(cache_w, slot[r], 0, grad, b, c0, dim, -lr, True)
                            else:
                                _row_op(weights, r, 0, grad, b, c0, dim, -lr, True)
                        continue
                    j_end = offsets[o + b1]
                    for b in range(b0, b1):
                        if b + PREFETCH < b1:
                            prefetch2(grad, b + PREFETCH, c0)
                        s = offsets[o + b]
                        e = offsets[o + b + 1]
                        sc = lr
                        if mean and e - s > 1:
                            sc = lr / (e - s)
                        for j in range(s, e):
                            if j + PREFETCH < j_end:
                                _prefetch_row(weights, slot, cache_w, use_cache, base + values[j + PREFETCH])
                            r = base + values[j]
                            if use_cache and slot[r] >= 0:
                                _row_op(cache_w, slot[r], 0, grad, b, c0, dim, -sc, True)
                            else:
                                _row_op(weights, r, 0, grad, b, c0, dim, -sc, True)
            continue
        # Adagrad variants: per table, sum the gradient of each distinct row over the whole batch
        # (scratch sized for this thread's largest table), then update each row once.
        most = 1
        for k in range(k0, k1):
            f = feature[k]
            most = max(most, offsets[(f + 1) * batch] - offsets[f * batch])
        acc = np.empty((most, dim), np.float32)
        uniq = np.empty(most, np.int64)
        for k in range(k0, k1):
            f = feature[k]
            base = row_off[k]
            c0 = col0 + k * dim
            o = f * batch
            nu = 0
            for b in range(batch):
                if b + PREFETCH < batch:
                    prefetch2(grad, b + PREFETCH, c0)
                s = offsets[o + b]
                e = offsets[o + b + 1]
                sc = np.float32(1.0)
                if mean and e - s > 1:
                    sc = np.float32(1.0 / (e - s))
                for j in range(s, e):
                    v = values[j]
                    u = mark[c, v]
                    if u < 0:
                        u = nu
                        mark[c, v] = u
                        uniq[u] = v
                        nu += 1
                        _row_op(acc, u, 0, grad, b, c0, dim, sc, False)
                    else:
                        _row_op(acc, u, 0, grad, b, c0, dim, sc, True)
            for u in range(nu):
                if u + PREFETCH < nu:
                    _prefetch_row(weights, slot, cache_w, use_cache, base + uniq[u + PREFETCH])
                v = uniq[u]
                mark[c, v] = -1
                r = base + v
                if use_cache and slot[r] >= 0:
                    _apply_row(cache_w, cache_s, slot[r], acc, u, opt, lr, eps, dim)
                else:
                    _apply_row(weights, state, r, acc, u, opt, lr, eps, dim)


@njit(parallel=True, nogil=True, cache=True)
def count_rows(counts, feature, row_off, offsets, values, batch):
    """Add one to counts[row] for every id a group's lookup reads (id statistics for caching)."""
    for k in prange(feature.shape[0]):
        f = feature[k]
        base = row_off[k]
        for j in range(offsets[f * batch], offsets[(f + 1) * batch]):
            counts[base + values[j]] += 1
