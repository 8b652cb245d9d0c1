"""Graph stores: one interface over an in-process graph, or partitions served by workers.

- :class:`LocalStore`: the whole graph in this process (the embedded default).
- :class:`PartitionedStore`: vertices split by a :class:`~labkit.graph.partition.Partitioning`;
  each partition is a :class:`PartitionServer` holding its vertices' out-edges and attributes
  (topology and attributes kept apart). Backends: ``"embedded"`` (servers are objects in this
  process) or ``"dask"`` (each server is a Dask actor on its own worker process, so a remote
  fetch really is serialised and crosses a process boundary). The client may be one on a
  :func:`local_cluster` or ``Client("tcp://scheduler:8786")`` for workers on several machines:
  partition p goes to the p-th worker (round robin). Create that client with
  ``direct_to_workers=True`` (as :func:`local_cluster` does): otherwise Dask relays every actor
  call through the scheduler, which doubled the cost of a round on loopback. An optional
  :class:`~labkit.graph.importance.NeighborCache` answers lookups for important vertices
  locally and only the misses go to the owners.

Both implement the graph core's store protocols (:mod:`labkit.graph.storage`: ``GraphStore`` and
``FeatureStore``), so the one sampler (:class:`~labkit.graph.sampling.NeighborSampler`), the PyG
adapters (:mod:`labkit.graph.pyg`) and the trainers read them as they read CaliEX's disk stores.

A failed fetch (e.g. a dead worker) raises :class:`StoreError` naming the partition and the
worker; a sample is never returned with parts missing.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from labkit.core.errors import LabkitError, bad_value, check_choice
from labkit.graph.checks import check_features, check_labels
from labkit.graph.csr import CSR
from labkit.graph.importance import NeighborCache
from labkit.graph.storage import gather_lists
from labkit.graph.partition import Partitioning
from labkit.graph.storage import check_ids, entries_from_neighbors

#: Seconds a round waits for a partition's reply before naming that partition in a StoreError.
_REPLY_TIMEOUT_S = 60.0
#: Seconds between checks, while replies are late, that each partition's worker is still in the cluster.
_LIVENESS_S = 1.0


class WorkerGone(ConnectionError):
    """A partition's Dask worker left the cluster while a round waited for its reply."""

BACKENDS = ("embedded", "dask")


class StoreError(LabkitError):
    """A partition could not answer (its worker died or raised); the request was not completed."""


@dataclass
class FetchStats:
    """What went over the wire: request rounds, calls to partition servers, ids asked for, bytes returned.

    A *round* is one batch of requests sent to every partition that has misses, then waited
    for; ``wait_s`` is the time spent blocked on the replies (the remote fetch time);
    ``calls_skipped`` counts partitions that owned some requested ids but got no call because
    the cache served all of them.
    """

    remote_calls: int = 0
    remote_ids: int = 0
    remote_bytes: int = 0
    rounds: int = 0
    calls_skipped: int = 0
    wait_s: float = 0.0

    def reset(self) -> None:
        self.remote_calls = self.remote_ids = self.remote_bytes = self.rounds = self.calls_skipped = 0
        self.wait_s = 0.0


def _check_cache(cache: NeighborCache | None, num_nodes: int) -> None:
    if cache is not None and len(cache.slot) != num_nodes:
        raise bad_value("cache", f"a NeighborCache over {len(cache.slot)} nodes",
                        f"one built from this graph ({num_nodes} nodes)")


class LocalStore:
    """The whole graph in this process: out-neighbour lists, node features and labels.

    Features must be a 2-d array of finite numbers, one row per node (ints cast to float32), and
    labels class ids in [0, num_classes) (>= 0 when num_classes is not given): both are checked
    here, once (:mod:`labkit.graph.checks`), so a NaN or a bad label never reaches training.
    """

    def __init__(self, csr: CSR, features: np.ndarray | None = None, labels: np.ndarray | None = None, *,
                 num_classes: int | None = None) -> None:
        if features is not None:
            features = check_features(features, csr.num_nodes)
        if labels is not None:
            labels = check_labels(labels, csr.num_nodes, num_classes)
        self.csr, self.x, self.labels = csr, features, labels
        self.num_nodes = csr.num_nodes
        self.stats = FetchStats()

    @property
    def indptr(self) -> np.ndarray:
        """The CSR's offsets: with :attr:`indices`, what the sampler's fused in-RAM kernels read."""
        return self.csr.indptr

    @property
    def indices(self) -> np.ndarray:
        return self.csr.indices

    @property
    def dim(self) -> int | None:
        """Feature columns (None for a store built without features)."""
        return None if self.x is None else self.x.shape[1]

    def degree(self, ids: np.ndarray) -> np.ndarray:
        """Return the out-degrees of `ids` (int64)."""
        ids = check_ids(ids, self.num_nodes)
        return (self.csr.indptr[ids + 1] - self.csr.indptr[ids]).astype(np.int64, copy=False)

    def neighbors(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (ptr, nbrs): the out-neighbour lists of `ids` packed in order."""
        ids = check_ids(ids, self.num_nodes)
        return gather_lists(self.csr.indptr, self.csr.indices, ids)

    def entries(self, ids: np.ndarray, ptr: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Return the entries at local positions `pos` of the lists of `ids` (offsets `ptr`)."""
        from labkit.graph.storage import global_positions
        return self.csr.indices[global_positions(self.csr.indptr, ids, ptr, pos)]

    def features(self, ids: np.ndarray) -> np.ndarray:
        """Return the feature rows of `ids`."""
        if self.x is None:
            raise bad_value("features", None, "a store built with a feature matrix")
        return self.x[check_ids(ids, self.num_nodes)]

    def close(self) -> None:
        pass


class PartitionServer:
    """One partition: its vertices' out-neighbour lists and feature rows, addressed by global id."""

    def __init__(self, part: int, members: np.ndarray, indptr: np.ndarray, indices: np.ndarray,
                 features: np.ndarray | None) -> None:
        self.part = part
        self.members = members  # sorted global ids
        self.indptr, self.indices, self.x = indptr, indices, features

    def _rows(self, ids: np.ndarray) -> np.ndarray:
        rows = np.searchsorted(self.members, ids)
        ok = (rows < len(self.members)) & (self.members[np.minimum(rows, len(self.members) - 1)] == ids)
        if not ok.all():
            bad = int(ids[~ok][0])
            raise ValueError(f"ids contains {bad}, which partition {self.part} does not own")
        return rows

    def neighbors(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (ptr, nbrs) for owned global `ids`."""
        return gather_lists(self.indptr, self.indices, self._rows(ids))

    def features(self, ids: np.ndarray) -> np.ndarray:
        return self.x[self._rows(ids)]

    def ping(self) -> int:
        return self.part


@njit(nogil=True, cache=True)
def _place(out_ptr, pos, ptr, nbrs, out):
    for i in range(len(pos)):
        q = out_ptr[pos[i]]
        for j in range(ptr[i + 1] - ptr[i]):
            out[q + j] = nbrs[ptr[i] + j]


class PartitionedStore:
    """Partitions served by PartitionServers (in-process or Dask actors), with an optional importance cache.

    Features and labels are checked as :class:`LocalStore` checks them, before anything is shipped.
    """

    def __init__(self, csr: CSR, partitioning: Partitioning, features: np.ndarray | None = None, *,
                 backend: str = "embedded", client=None, cache: NeighborCache | None = None,
                 labels: np.ndarray | None = None, num_classes: int | None = None) -> None:
        check_choice("backend", backend, BACKENDS)
        if backend == "dask" and client is None:
            raise bad_value("client", None, "a dask.distributed.Client when backend='dask' "
                            "(see labkit.graph.store.local_cluster)")
        n = csr.num_nodes
        # Checked here, before any partition is cut or shipped to a worker (as LocalStore checks them).
        if features is not None:
            features = check_features(features, n)
        if labels is not None:
            labels = check_labels(labels, n, num_classes)
        if len(partitioning.owner) != n:
            raise bad_value("partitioning", f"a Partitioning of {len(partitioning.owner)} vertices",
                            f"one of this graph's {n} vertices (partition(csr, ...) of the same csr)")
        if n and (partitioning.owner.min() < 0 or partitioning.owner.max() >= partitioning.num_parts):
            bad = int(partitioning.owner.min() if partitioning.owner.min() < 0 else partitioning.owner.max())
            raise bad_value("partitioning", f"an owner id {bad}", f"owners in [0, {partitioning.num_parts})")
        _check_cache(cache, n)
        workers = list(client.scheduler_info()["workers"]) if backend == "dask" else []
        if backend == "dask" and not workers:
            raise bad_value("client", f"a Dask client with 0 workers ({client!r})",
                            "a client whose cluster has at least one worker (wait for workers to join)")
        self.num_nodes, self.backend, self.client = n, backend, client
        # The offsets stay with the client (8 bytes a vertex): degrees for the sampler's draws need no
        # round, and sampled edges get their global positions, as from an in-memory CSR.
        self.indptr = csr.indptr
        self.partitioning, self.owner = partitioning, partitioning.owner
        self.cache, self.labels = cache, labels
        self.indices_dtype = csr.indices.dtype
        self.feature_dim = None if features is None else features.shape[1]
        self.feature_dtype = None if features is None else features.dtype
        self.stats = FetchStats()
        self.servers, self.addresses = [], []
        for p in range(partitioning.num_parts):
            members = partitioning.members(p)
            ptr, idx = gather_lists(csr.indptr, csr.indices, members)
            x = None if features is None else features[members]
            if backend == "embedded":
                self.servers.append(PartitionServer(p, members, ptr, idx, x))
                self.addresses.append("in-process")
            else:
                addr = workers[p % len(workers)]
                # The arrays go to their worker first (scatter) and the actor is built from their futures:
                # passed to submit itself they would ride inside the task graph through the scheduler
                # (Dask warns "Sending large graph" from 10 MiB on; a large profile's partition is 146 MiB).
                parts = client.scatter([members, ptr, idx] + ([] if x is None else [x]), workers=[addr],
                                       direct=True, hash=False)
                fut = client.submit(PartitionServer, p, *parts[:3], None if x is None else parts[3], actor=True,
                                    workers=[addr], pure=False)
                # An actor binds to the current client when it is made: with several clients alive (each
                # cluster with its own TLS credentials) it must be this store's, or its calls fail TLS.
                with client.as_current():
                    self.servers.append(fut.result())
                del parts  # the actor holds the arrays now; the scattered copies' keys are released
                self.addresses.append(addr)

    def _call(self, method: str, groups: dict[int, np.ndarray]) -> dict[int, object]:
        """Ask each partition in `groups` at once, then wait for all; any failure raises StoreError."""
        return self._collect(method, groups, self._issue(method, groups))

    def _issue(self, method: str, groups: dict[int, np.ndarray]) -> dict[int, object]:
        """Send every partition its request without waiting (Dask calls return futures)."""
        pending = {}
        self.stats.rounds += bool(groups)
        for p, ids in groups.items():
            self.stats.remote_calls += 1
            self.stats.remote_ids += len(ids)
            pending[p] = self._send(p, method, ids)
        return pending

    def _send(self, p: int, method: str, *args) -> object:
        try:
            if self.backend == "dask":
                # A lookup takes well under a millisecond: run it on the worker's event loop rather
                # than handing it to the actor thread and back (two thread switches per call).
                return getattr(self.servers[p], method)(*args, separate_thread=False)
            return getattr(self.servers[p], method)(*args)
        except Exception as e:  # noqa: BLE001 - re-raised with the partition named
            raise self._error(p, method, args[0] if args else np.empty(0), e) from e

    def _collect(self, method: str, groups: dict[int, np.ndarray], pending: dict[int, object]) -> dict[int, object]:
        """Wait for every reply of a round (one hand-over to the client's event loop for all of them)."""
        t = time.perf_counter()
        try:
            if self.backend != "dask":
                return dict(pending)
            from distributed.utils import sync

            async def gather():
                async def one(fut):
                    return await fut
                tasks = {p: asyncio.ensure_future(one(fut)) for p, fut in pending.items()}
                gone: dict[int, str] = {}
                deadline = time.monotonic() + _REPLY_TIMEOUT_S
                while True:  # a round normally ends in the first wait, in milliseconds
                    _, waiting = await asyncio.wait(tasks.values(), timeout=min(_LIVENESS_S, _REPLY_TIMEOUT_S))
                    if not waiting or time.monotonic() >= deadline:
                        break
                    # Replies are late: a worker that left the cluster will never send its own
                    # (its actor's reply can wait forever), so fail its partition now.
                    try:
                        workers = set((await self.client.scheduler.identity(n_workers=-1))["workers"])
                    except Exception:  # noqa: BLE001 - the scheduler did not answer: keep waiting
                        continue
                    gone = {p: self.addresses[p] for p, task in tasks.items()
                            if not task.done() and self.addresses[p] not in workers}
                    if gone:
                        break
                got = {}
                for p, task in tasks.items():  # a reply still owed is its partition's error
                    if not task.done():
                        task.cancel()
                        got[p] = (False, WorkerGone(f"its worker {gone[p]} left the cluster") if p in gone
                                  else TimeoutError(f"no reply within {_REPLY_TIMEOUT_S} s"))
                    elif task.exception() is not None:
                        got[p] = (False, task.exception())
                    else:
                        got[p] = (True, task.result())
                return got

            try:
                got = sync(self.client.loop, gather, callback_timeout=_REPLY_TIMEOUT_S + 30)
            except Exception as e:  # noqa: BLE001 - the client's loop itself failed: name the round's first partition
                p = next(iter(pending))
                raise self._error(p, method, groups[p], e) from e
            out = {}
            for p, (ok, v) in got.items():
                if not ok:
                    raise self._error(p, method, groups[p], v) from v
                out[p] = v
            return out
        finally:
            self.stats.wait_s += time.perf_counter() - t

    def _count_skipped(self, ids: np.ndarray, groups: dict[int, np.ndarray]) -> None:
        owners = np.bincount(self.owner[ids], minlength=self.partitioning.num_parts)
        self.stats.calls_skipped += int(np.count_nonzero(owners)) - len(groups)

    def ping(self) -> list[int]:
        """Return every partition's id, asked of all servers in one round (a health check; no data moves)."""
        groups = {p: np.empty(0, np.int64) for p in range(len(self.servers))}
        pending = {p: self._send(p, "ping") for p in groups}
        return [int(v) for v in self._collect("ping", groups, pending).values()]

    def _error(self, p: int, method: str, ids: np.ndarray, e: Exception) -> StoreError:
        return StoreError(f"partition {p} (worker {self.addresses[p]}) failed on {method} of {len(ids)} "
                          f"vertices: {type(e).__name__}: {e}")

    def _group(self, ids: np.ndarray) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
        own = self.owner[ids]
        order = np.argsort(own, kind="stable")
        bounds = np.searchsorted(own[order], np.arange(self.partitioning.num_parts + 1))
        pos, groups = {}, {}
        for p in range(self.partitioning.num_parts):
            sel = order[bounds[p]:bounds[p + 1]]
            if len(sel):
                pos[p], groups[p] = sel, ids[sel]
        return pos, groups

    @property
    def dim(self) -> int | None:
        """Feature columns (None for a store built without features)."""
        return self.feature_dim

    def degree(self, ids: np.ndarray) -> np.ndarray:
        """Return the out-degrees of `ids` (int64; from the client's offsets, no round)."""
        ids = check_ids(ids, self.num_nodes)
        return (self.indptr[ids + 1] - self.indptr[ids]).astype(np.int64, copy=False)

    def entries(self, ids: np.ndarray, ptr: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Return the sampled entries `pos` of the lists of `ids`: whole lists in one round, then picked.

        A partition ships whole lists (and the cache holds whole lists), so a sample costs one
        round per hop, the round :meth:`neighbors` makes.
        """
        return entries_from_neighbors(self, ids, ptr, pos)

    def neighbors(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (ptr, nbrs): out-neighbour lists of `ids` in order; cache hits stay local.

        One round: a single call per partition with misses (none to a partition whose ids all hit).
        """
        ids = check_ids(ids, self.num_nodes)
        cache = self.cache
        if cache is None:
            miss_pos = np.arange(len(ids))
        else:
            hit = cache.split(ids)
            miss_pos = np.flatnonzero(~hit)
        pos, groups = self._group(ids[miss_pos])
        if cache is not None:
            self._count_skipped(ids, groups)
        pending = self._issue("neighbors", groups)
        # The misses are in flight while the cached lengths are read.
        counts = np.zeros(len(ids), np.int64)
        if cache is not None:
            hit_pos = np.flatnonzero(hit)
            cache.list_lengths(ids, hit_pos, counts)
        replies = self._collect("neighbors", groups, pending)
        for p, (ptr, nbrs) in replies.items():
            self.stats.remote_bytes += ptr.nbytes + nbrs.nbytes
            counts[miss_pos[pos[p]]] = np.diff(ptr)
        out_ptr = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(counts, out=out_ptr[1:])
        out = np.empty(int(out_ptr[-1]), self.indices_dtype)
        if cache is not None:
            cache.place_lists(ids, hit_pos, out_ptr, out)
        for p, (ptr, nbrs) in replies.items():
            _place(out_ptr, miss_pos[pos[p]], ptr, nbrs, out)
        return out_ptr, out

    def features(self, ids: np.ndarray) -> np.ndarray:
        """Return feature rows of `ids`, fetched from their owners (cached rows copied locally)."""
        if self.feature_dim is None:
            raise bad_value("features", None, "a store built with a feature matrix")
        ids = check_ids(ids, self.num_nodes)
        out = np.empty((len(ids), self.feature_dim), self.feature_dtype)
        cached = self.cache is not None and self.cache.features is not None
        if cached:
            hit = self.cache.hit_mask(ids)
            miss = np.flatnonzero(~hit)
        else:
            miss = np.arange(len(ids))
        pos, groups = self._group(ids[miss])
        if cached:
            self._count_skipped(ids, groups)
        pending = self._issue("features", groups)
        if cached:  # copied while the misses are in flight
            self.cache.place_feature_rows(ids, np.flatnonzero(hit), out)
        for p, rows in self._collect("features", groups, pending).items():
            self.stats.remote_bytes += rows.nbytes
            out[miss[pos[p]]] = rows
        return out

    def close(self) -> None:
        """Drop the actors (the cluster itself belongs to whoever started it)."""
        self.servers = []


def local_cluster(n_workers: int, **kw):
    """Return a Dask Client on a new LocalCluster of `n_workers` single-thread processes bound to 127.0.0.1.

    The cluster is :func:`labkit.core.dask_cluster.secure_local_cluster`'s: TLS with this run's
    own credentials and no HTTP server, so no other local process can connect to it or run code
    in its workers. Close it with ``client.close(); client.cluster.close()`` (or use :func:`close_cluster`).
    """
    from labkit.core.dask_cluster import secure_client, secure_local_cluster
    cluster = secure_local_cluster(n_workers, **kw)
    try:
        return secure_client(cluster, direct_to_workers=True)
    except BaseException:
        cluster.close()  # nobody else holds it: do not leave its worker processes behind
        raise


def close_cluster(client) -> None:
    """Close `client` and the LocalCluster it was started on (the cluster even if closing the client fails)."""
    cluster = client.cluster
    try:
        client.close()
    finally:
        if cluster is not None:
            cluster.close()
