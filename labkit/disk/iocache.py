"""Feature-row cache mechanisms: how a lookup hits or misses, kept apart from the plans that fill them.

The neighbour-list cache is the graph core's :class:`labkit.graph.cache.ListCache` (a compact CSR
of the cached lists plus a node -> slot map), which :class:`labkit.disk.store.DiskTopology` fills
from its indices file. Here:

- :class:`FeatureCache`: a dense block of cached feature rows, found by their sorted ids (static).
- :class:`BeladyFeatureCache`: Ginex's feature cache, re-filled before every mini-batch with
  the rows whose next use in the current superbatch is soonest (Belady's optimal replacement,
  possible because the superbatch was sampled ahead).

Every byte (maps included) is reserved from the one :class:`~labkit.core.memory.MemoryBudget`.
"""

from __future__ import annotations

import numpy as np

from labkit.core.arrays import unique
from labkit.core.cacheplan import NEVER, NextUse, belady_keep
from labkit.core.errors import check_range
from labkit.core.memory import BudgetExceeded, MemoryBudget


class FeatureCache:
    """Feature rows of the planned nodes held in RAM (a static plan).

    Rows are stored in node-id order and found by binary search over the sorted cached ids
    (8 bytes per cached row), not through a dense node -> slot map (4 bytes per node of the
    graph: 8 MiB at 2M nodes, which a 15% budget would rather spend on rows).
    """

    #: Bytes of lookup structure per cached row (its sorted int64 id).
    ID_BYTES = 8

    def __init__(self, nodes: np.ndarray, num_nodes: int, dim: int, dtype, budget: MemoryBudget,
                 rows_source, owner: str = "feature cache") -> None:
        """`rows_source(sorted_nodes) -> (k, dim) array` reads the rows once."""
        nodes = unique(np.asarray(nodes, np.int64))
        row_bytes = dim * np.dtype(dtype).itemsize
        self.reservation = budget.reserve(owner, nodes.size * (self.ID_BYTES + row_bytes))
        self.nodes = nodes
        self.rows = rows_source(nodes) if nodes.size else np.zeros((0, dim), dtype)
        self.nbytes = self.reservation.nbytes

    def lookup(self, nodes: np.ndarray) -> np.ndarray:
        """Return each node's slot (-1 where not cached)."""
        if self.nodes.size == 0:
            return np.full(np.shape(nodes), -1, np.int64)
        pos = np.searchsorted(self.nodes, nodes)
        np.minimum(pos, self.nodes.size - 1, out=pos)
        return np.where(self.nodes[pos] == nodes, pos, -1)

    def release(self) -> None:
        self.reservation.release()
        self.nodes = self.rows = None


class BeladyFeatureCache:
    """Ginex's feature cache: Belady replacement over a superbatch of pre-sampled mini-batches.

    Each held row keeps its next use in the superbatch (``slot_next``). The next uses come
    either from an in-memory oracle over the superbatch's node ids (:meth:`start_superbatch`,
    small runs and tests) or, as Ginex does, from an inspection pass over the superbatch
    spilled to disk (:meth:`begin_superbatch` with each node's first use, then :meth:`update`
    with each mini-batch's next-use array, see :class:`labkit.disk.baselines.spill.SampleSpill`).
    """

    def __init__(self, capacity_rows: int, num_nodes: int, dim: int, dtype, budget: MemoryBudget,
                 owner: str = "feature cache (belady)") -> None:
        row_bytes = dim * np.dtype(dtype).itemsize
        check_range("capacity_rows", capacity_rows, 0, integer=True)
        # It can never hold more rows than the graph has, however large the budget it was sized from.
        self.capacity = min(int(capacity_rows), int(num_nodes))
        self.reservation = budget.reserve(owner, num_nodes * 4 + self.capacity * (row_bytes + self.SLOT_BYTES))
        try:
            self.slot = np.full(num_nodes, -1, np.int32)
            self.rows = np.zeros((self.capacity, dim), dtype)
            self.owner_of = np.full(self.capacity, -1, np.int64)  # node held by each slot
            self.slot_next = np.full(self.capacity, NEVER, np.int32)  # its next use in the superbatch
        except MemoryError:
            self.reservation.release()
            raise BudgetExceeded(f"{owner}: the machine could not allocate the {self.capacity} rows "
                                 f"({self.reservation.nbytes} bytes) the budget allows") from None
        self.nbytes = self.reservation.nbytes
        self._oracle: NextUse | None = None
        self._b = 0

    #: Bytes per cached row besides the row itself: the slot's node (int64) and its next use (int32).
    SLOT_BYTES = 12

    def _held(self) -> np.ndarray:
        return np.flatnonzero(self.owner_of >= 0)

    def start_superbatch(self, batches_nodes: list[np.ndarray]) -> None:
        """Record when each node is next needed in this superbatch (the Belady oracle, held in RAM)."""
        self._oracle, self._b = NextUse(batches_nodes), 0
        held = self._held()
        self.slot_next[held] = self._oracle.after(self.owner_of[held], -1)

    def begin_superbatch(self, first_use: np.ndarray) -> None:
        """Start a superbatch whose next uses come with each mini-batch (Ginex's inspection on disk).

        `first_use` gives each node's first mini-batch in the superbatch (NEVER if none); the
        rows already held take their next use from it.
        """
        self._oracle, self._b = None, 0
        held = self._held()
        self.slot_next[held] = first_use[self.owner_of[held]]

    def lookup(self, nodes: np.ndarray) -> np.ndarray:
        return self.slot[nodes]

    def update(self, nodes: np.ndarray, rows: np.ndarray, next_use: np.ndarray | None = None) -> None:
        """After mini-batch `b` gathered `rows` of `nodes`: keep the `capacity` soonest-needed rows.

        `next_use` is each node's next use in the superbatch (from the inspection pass); without
        it the in-memory oracle of :meth:`start_superbatch` says. Belady within the superbatch's
        horizon: rows needed again in it are kept soonest-first; rows with no known next use (none
        in this superbatch) are evicted first but only for room, held rows before newly read ones,
        so the cache stays full across superbatch boundaries.
        """
        b = self._b
        self._b += 1
        if self.capacity == 0:
            return
        nodes = np.asarray(nodes, np.int64)
        if next_use is None:
            if self._oracle is None:
                raise ValueError("next_use=None is not accepted after begin_superbatch(); expected each "
                                 "node's next use in the superbatch (from SampleSpill.read)")
            next_use = self._oracle.after(nodes, b)
        next_use = np.asarray(next_use, np.int32)
        if next_use.shape != nodes.shape:
            raise ValueError(f"next_use has shape {next_use.shape}; expected {nodes.shape}, one per node")
        s_of = self.slot[nodes]
        hit = s_of >= 0
        self.slot_next[s_of[hit]] = next_use[hit]  # the rows just used are next needed then
        held_slots = self._held()
        held = self.owner_of[held_slots]
        fresh_mask = ~hit
        fresh = nodes[fresh_mask]
        cand = np.concatenate([held, fresh])
        nxt = np.concatenate([self.slot_next[held_slots], next_use[fresh_mask]])
        keep = belady_keep(nxt, self.capacity)  # positions into cand; held come first in `cand`
        kept = np.ones(cand.size, bool)
        if keep is not None:
            kept[:] = False
            kept[keep] = True
        # Evict held nodes not kept.
        gone_slots = held_slots[~kept[:held.size]]
        if gone_slots.size:
            self.slot[self.owner_of[gone_slots]] = -1
            self.owner_of[gone_slots] = -1
            self.slot_next[gone_slots] = NEVER
        # Admit fresh nodes that are kept into free slots.
        admit_mask = kept[held.size:]
        admit = fresh[admit_mask]
        if admit.size:
            free = np.flatnonzero(self.owner_of < 0)[:admit.size]
            self.rows[free] = rows[fresh_mask][admit_mask]
            self.owner_of[free] = admit
            self.slot[admit] = free.astype(np.int32)
            self.slot_next[free] = next_use[fresh_mask][admit_mask]

    def release(self) -> None:
        self.reservation.release()
        self.slot = self.rows = None
