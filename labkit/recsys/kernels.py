"""Numba kernels for packed tables: one pooled lookup per group, and a fused backward + optimizer update.

The update never builds a sparse gradient tensor: for each field (one thread per field, so no two
threads touch the same row) it sums the output gradient of each distinct row in a small buffer
and applies the optimizer to that row in place, which is what FBGEMM's fused backward does.
Rows may live in a hot-row cache (``slot[r] >= 0``) or in the slow tier (``weights[r]``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

SGD, ADAGRAD, ROWWISE_ADAGRAD, GRAD = 0, 1, 2, 3
#: Samples per tile. Kernels walk tile by tile, and within a tile table by table: one table's
#: rows (few TLB entries) against a tile of the output (in L2), instead of every table per sample.
TILE = 256
OPTIMIZERS = {"sgd": SGD, "adagrad": ADAGRAD, "rowwise_adagrad": ROWWISE_ADAGRAD}


@njit(parallel=True, nogil=True, cache=True)
def pooled_lookup(weights, dim, slot, cache_w, use_cache, feature, row_off, offsets, values, batch,
                  mean, out, col0, hits, lookups, n_chunks):
    """Write the pooled rows of each table of a group into out[:, col0 + k*D : col0 + (k+1)*D].

    Work is split into `n_chunks` runs of consecutive tables (one per thread); each walks the
    batch in tiles of :data:`TILE` samples, table by table within a tile.
    """
    n_tab = feature.shape[0]
    n_chunks = max(1, min(n_chunks, n_tab))
    for c in prange(n_chunks):
        k0 = c * n_tab // n_chunks
        k1 = (c + 1) * n_tab // n_chunks
        for b0 in range(0, batch, TILE):
            for k in range(k0, k1):
                for b in range(b0, min(batch, b0 + TILE)):
                    f = feature[k]
                    base = row_off[k]
                    c0 = col0 + k * dim
                    s = offsets[f * batch + b]
                    e = offsets[f * batch + b + 1]
                    for d in range(dim):
                        out[b, c0 + d] = 0.0
                    for j in range(s, e):
                        r = base + values[j]
                        if use_cache and slot[r] >= 0:
                            src = cache_w[slot[r]]
                            hits[f] += 1
                        else:
                            src = weights[r]
                        for d in range(dim):
                            out[b, c0 + d] += src[d]
                    if mean and e - s > 1:
                        inv = np.float32(1.0 / (e - s))
                        for d in range(dim):
                            out[b, c0 + d] *= inv
        # lookups counted once per table rather than per id
        for k in range(k0, k1):
            f = feature[k]
            lookups[f] += offsets[(f + 1) * batch] - offsets[f * batch]


@njit(parallel=True, nogil=True, cache=True)
def fused_backward_update(weights, dim, state, slot, cache_w, cache_s, use_cache, feature, row_off, offsets,
                          values, batch, mean, grad, col0, opt, lr, eps, mark, n_chunks):
    """Apply the optimizer to every row a group's lookup touched, from the output gradient `grad`.

    opt: SGD (w -= lr g), ADAGRAD (G += g^2; w -= lr g / (sqrt(G) + eps), as torch.optim.Adagrad
    on a coalesced sparse gradient), ROWWISE_ADAGRAD (G_row += mean(g^2)), or GRAD (state += g,
    the dense weight gradient, for checking). `mark` is an all -1 scratch of one entry per row.
    Threads own disjoint runs of tables, hence disjoint rows: no two threads update one row.
    """
    n_tab = feature.shape[0]
    n_chunks = max(1, min(n_chunks, n_tab))
    for c in prange(n_chunks):
        k0 = c * n_tab // n_chunks
        k1 = (c + 1) * n_tab // n_chunks
        if opt == SGD:
            for b0 in range(0, batch, TILE):
                for k in range(k0, k1):
                    for b in range(b0, min(batch, b0 + TILE)):
                        f = feature[k]
                        base = row_off[k]
                        c0 = col0 + k * dim
                        s = offsets[f * batch + b]
                        e = offsets[f * batch + b + 1]
                        sc = lr
                        if mean and e - s > 1:
                            sc = lr / (e - s)
                        for j in range(s, e):
                            r = base + values[j]
                            if use_cache and slot[r] >= 0:
                                w = cache_w[slot[r]]
                            else:
                                w = weights[r]
                            for d in range(dim):
                                w[d] -= sc * grad[b, c0 + d]
            continue
        # Sum the gradient of each distinct row first: Adagrad's state must see one g per row.
        nnz = 0
        for k in range(k0, k1):
            f = feature[k]
            nnz += offsets[(f + 1) * batch] - offsets[f * batch]
        acc = np.empty((max(nnz, 1), dim), np.float32)
        uniq = np.empty(max(nnz, 1), np.int64)
        nu = 0
        for b0 in range(0, batch, TILE):
            for k in range(k0, k1):
                for b in range(b0, min(batch, b0 + TILE)):
                    f = feature[k]
                    base = row_off[k]
                    c0 = col0 + k * dim
                    s = offsets[f * batch + b]
                    e = offsets[f * batch + b + 1]
                    sc = np.float32(1.0)
                    if mean and e - s > 1:
                        sc = np.float32(1.0 / (e - s))
                    for j in range(s, e):
                        r = base + values[j]
                        u = mark[r]
                        if u < 0:
                            u = nu
                            mark[r] = u
                            uniq[u] = r
                            for d in range(dim):
                                acc[u, d] = 0.0
                            nu += 1
                        for d in range(dim):
                            acc[u, d] += sc * grad[b, c0 + d]
        for u in range(nu):
            r = uniq[u]
            mark[r] = -1
            if use_cache and slot[r] >= 0:
                w = cache_w[slot[r]]
                st = cache_s[slot[r]]
            else:
                w = weights[r]
                st = state[r]
            if opt == GRAD:
                for d in range(dim):
                    st[d] += acc[u, d]
            elif opt == ADAGRAD:
                for d in range(dim):
                    g = acc[u, d]
                    st[d] += g * g
                    w[d] -= lr * g / (np.sqrt(st[d]) + eps)
            else:
                ss = np.float32(0.0)
                for d in range(dim):
                    ss += acc[u, d] * acc[u, d]
                st[0] += ss / dim
                den = np.sqrt(st[0]) + eps
                for d in range(dim):
                    w[d] -= lr * acc[u, d] / den


@njit(parallel=True, nogil=True, cache=True)
def single_hot_lookup(weights, dim, feature, row_off, values, batch, out, col0, n_chunks):
    """:func:`pooled_lookup` for a batch whose every bag holds one id (ids of field f at f*B + b)."""
    n_tab = feature.shape[0]
    n_chunks = max(1, min(n_chunks, n_tab))
    for c in prange(n_chunks):
        k0 = c * n_tab // n_chunks
        k1 = (c + 1) * n_tab // n_chunks
        for b0 in range(0, batch, TILE):
            for k in range(k0, k1):
                base = row_off[k]
                vo = feature[k] * batch
                c0 = col0 + k * dim
                for b in range(b0, min(batch, b0 + TILE)):
                    r = base + values[vo + b]
                    for d in range(dim):
                        out[b, c0 + d] = weights[r, d]


@njit(parallel=True, nogil=True, cache=True)
def single_hot_sgd(weights, dim, feature, row_off, values, batch, grad, col0, lr, n_chunks):
    """Fused backward + SGD for a single-hot batch: w[row] -= lr * g, straight from the output gradient."""
    n_tab = feature.shape[0]
    n_chunks = max(1, min(n_chunks, n_tab))
    for c in prange(n_chunks):
        k0 = c * n_tab // n_chunks
        k1 = (c + 1) * n_tab // n_chunks
        for b0 in range(0, batch, TILE):
            for k in range(k0, k1):
                base = row_off[k]
                vo = feature[k] * batch
                c0 = col0 + k * dim
                for b in range(b0, min(batch, b0 + TILE)):
                    r = base + values[vo + b]
                    for d in range(dim):
                        weights[r, d] -= lr * grad[b, c0 + d]


@njit(parallel=True, nogil=True, cache=True)
def count_rows(counts, feature, row_off, offsets, values, batch):
    """Add one to counts[row] for every id a group's lookup reads (id statistics for caching)."""
    for k in prange(feature.shape[0]):
        f = feature[k]
        base = row_off[k]
        for j in range(offsets[f * batch], offsets[(f + 1) * batch]):
            counts[base + values[j]] += 1
