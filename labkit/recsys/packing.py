"""PICASSO packing: fields grouped into a few packed tables, one lookup and one fused update per group.

Tables with the same packing key (dim, pooling; wide tables apart) share one ``[rows, dim]``
array with a row offset per field, so a step issues G lookups instead of F, the output lands
already concatenated (no per-field ``cat``), and the backward pass is fused with the optimizer
(:mod:`labkit.recsys.kernels`): no sparse gradient tensor, no per-parameter optimizer ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numba
import numpy as np
import torch

from labkit.core.buffers import BufferPool, aligned_empty
from labkit.core.cacheplan import CachePlan
from labkit.core.errors import bad_value, check_choice
from labkit.recsys import kernels
from labkit.recsys.cache import HotRowCache, SlowTier, hit_rate
from labkit.recsys.data import JaggedBatch, check_fits, check_lr
from labkit.recsys.tables import Table, column_offsets, init_blocks, plan_groups


_INIT_BLOCK_BYTES = 8 << 20  # rows drawn at a time when a table is written into a slow-tier file


def _file_backing(a: np.ndarray) -> tuple[str, int] | None:
    """Return (file, byte offset of a[0] in it) if `a` is a C-contiguous view of a shared, writable np.memmap."""
    base = a
    while isinstance(base, np.ndarray) and not isinstance(base, np.memmap):
        base = base.base
    if not isinstance(base, np.memmap) or base.filename is None or base.mode not in ("r+", "w+") \
            or not a.flags.c_contiguous:
        return None
    return base.filename, int(base.offset) + (a.ctypes.data - base.ctypes.data)


def init_rows(w: np.ndarray, r0: int, table_index: int, table: Table, seed: int = 0) -> None:
    """Write table `table_index`'s seeded initial rows (:func:`~labkit.recsys.tables.init_blocks`)
    into ``w[r0:r0 + cardinality]``, a block at a time, with no table-sized temporary. When `w` is a
    memory-mapped slow tier the blocks are written through its file rather than its mapping, so
    initialising it makes no page of the table resident in this process.
    """
    n, dim = int(table.cardinality), int(table.dim)
    if w.ndim != 2 or w.shape[1] != dim or w.dtype != np.float32 or not 0 <= r0 <= w.shape[0] - n:
        raise bad_value("w", f"{w.dtype} array of shape {w.shape}",
                        f"a float32 [rows >= {r0 + n}, {dim}] array for rows [{r0}, {r0 + n})")
    step = max(1, _INIT_BLOCK_BYTES // (4 * dim))
    blocks = zip(range(r0, r0 + n, step), init_blocks(table_index, table, seed, step))
    backing = _file_backing(w)
    if backing is None:
        for a, x in blocks:
            w[a:a + len(x)] = x
        return
    path, offset = backing
    with open(path, "r+b") as fh:
        for a, x in blocks:
            fh.seek(offset + a * dim * 4)
            fh.write(memoryview(x).cast("B"))


def _state_dim(optimizer: str, dim: int) -> int:
    return {"sgd": 0, "adagrad": dim, "rowwise_adagrad": 1}[optimizer]


@dataclass
class PackedGroup:
    """One packed table: the tables it holds, where each starts, and its storage."""

    tables: list[int]
    dim: int
    mean: bool
    feature: np.ndarray  # batch field index of each table
    row_off: np.ndarray  # first packed row of each table
    col0: int  # first output column
    weights: np.ndarray  # [rows, dim]: RAM, or the memory-mapped slow tier
    state: np.ndarray  # optimizer state rows ([rows, dim], [rows, 1]) or a [1, 1] placeholder
    max_rows: int  # rows of the largest table (the width of the update's per-thread scratch)
    mark: np.ndarray = field(default_factory=lambda: np.full((0, 0), -1, np.int32))  # see :meth:`scratch`
    cache: HotRowCache | None = None

    def scratch(self, threads: int) -> np.ndarray:
        """Return the all -1 ``[threads, max_rows]`` int32 scratch the Adagrad updates deduplicate rows in."""
        if self.mark.shape[0] < threads:
            self.mark = np.full((threads, self.max_rows), -1, np.int32)
        return self.mark

    @property
    def n_rows(self) -> int:
        return int(self.weights.shape[0])


class PackedEmbeddings:
    """Embedding stage with packed tables, fused backward + optimizer, and an optional hot-row cache.

    ``lookup(batch)`` returns the pooled embeddings ``[B, sum of dims]`` (canonical table order)
    and ``apply(batch, emb, grad)`` runs the fused backward + update for the gradient of that
    output. ``group_by="field"`` keeps one table per field (no packing) with the same kernels.
    ``slow_tier`` puts full tables in memory-mapped files; :meth:`plan_cache` then keeps the hot
    rows in RAM.
    """

    packed = True

    def __init__(self, tables: Sequence[Table], *, optimizer: str = "sgd", lr: float = 0.05,
                 eps: float = 1e-10, group_by: str = "dim", seed: int = 0,
                 slow_tier: SlowTier | None = None) -> None:
        if not tables:
            raise bad_value("tables", list(tables), "at least one Table")
        check_choice("optimizer", optimizer, kernels.OPTIMIZERS)
        lr = check_lr("lr", lr)
        self.tables = list(tables)
        self.optimizer, self.lr, self.eps = optimizer, float(lr), float(eps)
        self._opt = kernels.OPTIMIZERS[optimizer]
        # float32 like the tables (and like torch's float32 optimizer arithmetic)
        self._lr32, self._eps32 = np.float32(lr), np.float32(eps)
        self.slow_tier = slow_tier
        cols = column_offsets(self.tables)
        self.width = sum(t.dim for t in self.tables)
        self.groups: list[PackedGroup] = []
        for gi, idx in enumerate(plan_groups(self.tables, group_by)):
            t0 = self.tables[idx[0]]
            sizes = [self.tables[i].cardinality for i in idx]
            row_off = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
            n = int(sum(sizes))
            sd = _state_dim(optimizer, t0.dim)
            if slow_tier is None:
                w = aligned_empty((n, t0.dim))
                state = np.zeros((n, sd) if sd else (1, 1), np.float32)
            else:  # files of zeros, filled below without passing through a full-size array in RAM
                w = slow_tier.array(f"group{gi}_weights", (n, t0.dim))
                state = slow_tier.array(f"group{gi}_state", (n, sd)) if sd else np.zeros((1, 1), np.float32)
            for i, r0 in zip(idx, row_off):
                init_rows(w, int(r0), i, self.tables[i], seed)
            self.groups.append(PackedGroup(
                idx, t0.dim, t0.pooling == "mean", np.array([self.tables[i].feature for i in idx], np.int64),
                row_off, cols[idx[0]], w, state, max(sizes)))
        n_feat = max(t.feature for t in self.tables) + 1
        # rows per field: the kernels index a field's table with its ids unchecked
        self._cards = [min((t.cardinality for t in self.tables if t.feature == f), default=2**62)
                       for f in range(n_feat)]
        self.hits = np.zeros(n_feat, np.int64)
        self.lookups = np.zeros(n_feat, np.int64)
        self._dummy_slot = np.full(1, -1, np.int32)
        self._no_mark = np.full((1, 1), -1, np.int32)
        self._outputs = BufferPool(keep=8)

    # ---- forward / backward --------------------------------------------------------------
    def _cache_args(self, g: PackedGroup):
        if g.cache is not None and g.cache.size:
            return g.cache.slot, g.cache.weights, g.cache.state, True
        return self._dummy_slot, g.weights[:1], g.state[:1], False

    def lookup(self, batch: JaggedBatch) -> torch.Tensor:
        """Return pooled embeddings ``[B, width]`` of `batch` (one kernel call per packed table)."""
        check_fits(batch, self._cards)
        out = self._outputs.take((batch.batch_size, self.width))
        # Rows of single-hot bags are copied into whole, aligned 64-byte lines of `out`: those go
        # out as non-temporal stores, which skip reading each line of the (tens of MiB) output
        # into the cache before overwriting it.
        lines = out.strides[1] == 4 and out.strides[0] % 64 == 0 and out.ctypes.data % 64 == 0
        for g in self.groups:
            slot, cw, _, use = self._cache_args(g)
            stream = lines and batch.single_hot and g.dim % 16 == 0 and g.col0 % 16 == 0
            with torch.profiler.record_function("picasso::packed_lookup"):
                kernels.pooled_lookup(g.weights, g.dim, slot, cw, use, g.feature, g.row_off, batch.offsets,
                                      batch.values, batch.batch_size, batch.single_hot, g.mean, out, g.col0,
                                      self.hits, self.lookups, self.chunks, stream)
        return torch.from_numpy(out)

    def apply(self, batch: JaggedBatch, emb, grad: torch.Tensor) -> None:
        """Fused backward + optimizer update of every packed table for output gradient `grad`."""
        self._backward(batch, grad, self._opt)

    def _backward(self, batch: JaggedBatch, grad: torch.Tensor, opt: int, states=None) -> None:
        check_fits(batch, self._cards)
        g_np = grad.detach().numpy() if isinstance(grad, torch.Tensor) else np.asarray(grad, np.float32)
        if g_np.shape != (batch.batch_size, self.width):
            raise bad_value("grad", f"shape {g_np.shape}", f"shape ({batch.batch_size}, {self.width})")
        for gi, g in enumerate(self.groups):
            slot, cw, cs, use = self._cache_args(g)
            st = g.state if states is None else states[gi]
            if states is not None:
                use = False  # gradients are taken against the slow tier's row numbering
            mark = self._no_mark if opt == kernels.SGD else g.scratch(self.chunks)
            with torch.profiler.record_function("picasso::fused_backward_update"):
                kernels.fused_backward_update(g.weights, g.dim, st, slot, cw, cs, use, g.feature, g.row_off,
                                              batch.offsets, batch.values, batch.batch_size, batch.single_hot,
                                              g.mean, g_np,
                                              g.col0, opt, self._lr32, self._eps32, mark, self.chunks)

    def weight_gradients(self, batch: JaggedBatch, grad: torch.Tensor) -> list[np.ndarray]:
        """Return the dense gradient of each table's rows for output gradient `grad` (no update)."""
        states = [np.zeros_like(np.asarray(g.weights)) for g in self.groups]
        self._backward(batch, grad, kernels.GRAD, states)
        out = [np.empty(0)] * len(self.tables)
        for g, st in zip(self.groups, states):
            for i, r0 in zip(g.tables, g.row_off):
                out[i] = st[r0:r0 + self.tables[i].cardinality]
        return out

    # ---- tables ----------------------------------------------------------------------------
    def table_weights(self, i: int) -> np.ndarray:
        """Return a copy of table `i`'s current rows (cached rows taken from the cache)."""
        for g in self.groups:
            if i in g.tables:
                r0 = int(g.row_off[g.tables.index(i)])
                w = np.array(g.weights[r0:r0 + self.tables[i].cardinality])
                if g.cache is not None and g.cache.size:
                    rows = g.cache.rows
                    sel = (rows >= r0) & (rows < r0 + w.shape[0])
                    w[rows[sel] - r0] = g.cache.weights[np.nonzero(sel)[0]]
                return w
        raise bad_value("i", i, f"a table index in [0, {len(self.tables)})")

    def load_table(self, i: int, w: np.ndarray) -> None:
        """Overwrite table `i`'s rows with `w` (drops any cache; plan it again afterwards)."""
        for g in self.groups:
            if i in g.tables:
                r0 = int(g.row_off[g.tables.index(i)])
                if w.shape != (self.tables[i].cardinality, g.dim):
                    raise bad_value("w", f"shape {w.shape}", f"shape ({self.tables[i].cardinality}, {g.dim})")
                self.drop_cache()
                g.weights[r0:r0 + w.shape[0]] = w
                return
        raise bad_value("i", i, f"a table index in [0, {len(self.tables)})")

    @property
    def chunks(self) -> int:
        """Runs of tables per kernel call: one per numba thread."""
        return int(numba.get_num_threads())

    @property
    def n_lookups(self) -> int:
        """Lookup kernel calls per step (one per packed table)."""
        return len(self.groups)

    @property
    def nbytes(self) -> int:
        return int(sum(g.weights.nbytes + g.state.nbytes for g in self.groups))

    # ---- caching ---------------------------------------------------------------------------
    def count_ids(self, batches, counts: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """Return per-group row counts over `batches` (added to `counts` if given)."""
        counts = counts or [np.zeros(g.n_rows, np.int64) for g in self.groups]
        for k, b in enumerate(batches):
            check_fits(b, self._cards, f"batches[{k}]")
            for g, c in zip(self.groups, counts):
                kernels.count_rows(c, g.feature, g.row_off, b.offsets, b.values, b.batch_size)
        return counts

    def plan_cache(self, plan: CachePlan) -> None:
        """Fill each group's hot-row cache with the rows `plan` names (flushing the old cache first)."""
        if len(plan.rows) != len(self.groups):
            raise bad_value("plan", f"{len(plan.rows)} groups", f"{len(self.groups)} groups (one per packed table)")
        for g, rows in zip(self.groups, plan.rows):
            if g.cache is None:
                g.cache = HotRowCache(g.n_rows, g.dim, g.state.shape[1])
            g.cache.flush(g.weights, g.state)
            g.cache.fill(rows, g.weights, g.state)
        self.reset_hits()

    def drop_cache(self) -> None:
        """Write the cache back to the slow tier and stop caching."""
        for g in self.groups:
            if g.cache is not None:
                g.cache.flush(g.weights, g.state)
                g.cache = None

    def reset_hits(self) -> None:
        self.hits[:] = 0
        self.lookups[:] = 0

    @property
    def hit_rate(self) -> float:
        """Fraction of looked-up ids served by the hot-row cache since the last reset."""
        return hit_rate(self.hits, self.lookups)

    @property
    def cached_rows(self) -> int:
        return int(sum(g.cache.size for g in self.groups if g.cache is not None))

    @property
    def total_rows(self) -> int:
        return int(sum(g.n_rows for g in self.groups))

    def close(self) -> None:
        """Release the slow tier's files (if this stage made them)."""
        self.drop_cache()
        if self.slow_tier is not None:
            self.groups = []
            self.slow_tier.close()
