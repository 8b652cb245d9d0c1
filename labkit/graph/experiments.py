"""Small, bounded experiments the notebook (and its widgets) call: one function per question."""

from __future__ import annotations

import os
import time

# As in `labkit bench graph`: OpenMP threads spinning at barriers starve the thread doing the work
# on a shared 2-core machine (torch's sampler most of all). Set before torch starts its pool.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np  # noqa: E402
import torch  # noqa: E402

from labkit.core.bench import Comparison, interleave
from labkit.core.errors import bad_value, check_range, check_seed
from labkit.core.metrics import ResultTable
from labkit.core.spread import Spread
from labkit.graph.csr import CSR, build_csr_chunked
from labkit.graph.datasets import GraphData
from labkit.graph.importance import CachePlan, CacheStats, NeighborCache, importance, plan_cache
from labkit.graph.negative import negative_sample
from labkit.graph.partition import partition
from labkit.graph.rmat import RMatParams, rmat_edge_chunks, rmat_edges
from labkit.graph.sampling import AliasTable, NeighborSampler, sample_neighbors, sample_weighted, topk_neighbors
from labkit.graph.storage import CSRTopology
from labkit.graph.store import PartitionedStore
from labkit.graph.train import SAGE, train_epoch


def build_streamed(params: RMatParams, chunk_edges: int = 1 << 18,
                   progress: Callable[[int], None] | None = None) -> tuple[CSR, float]:
    """Return (CSR, seconds) built out of core from the R-MAT stream (two passes, progress per chunk).

    A tiny graph of the same kind is built first, untimed, so that the seconds measure the build
    and not numba compiling (or loading from its cache) the generator and builder kernels.
    """
    tiny = replace(params, scale=min(params.scale, max(6, params.num_communities.bit_length() - 1)))
    build_csr_chunked(lambda: rmat_edge_chunks(tiny, chunk_edges), tiny.num_nodes, dedup=True, drop_self_loops=True)
    t = time.perf_counter()
    csr = build_csr_chunked(lambda: rmat_edge_chunks(params, chunk_edges), params.num_nodes,
                            dedup=True, drop_self_loops=True, progress=progress)
    return csr, time.perf_counter() - t


@dataclass
class BuildComparison:
    """The build section's answer: labkit's speedup over scipy on one thread each (with its spread) and on
    every core, a table, the streamed CSR."""

    rows: list[dict]
    speedup: Spread
    edges_per_s: float
    streamed: CSR
    comparison: Comparison
    speedup_all_threads: Spread | None = None

    @property
    def speedup_scipy(self) -> float:
        """Median over rounds of time(scipy) / time(labkit), both on one thread."""
        return self.speedup.median

    def table(self) -> ResultTable:
        return ResultTable(self.rows, title=f"building a CSR from {self.comparison.work:,.0f} edges")


def build_comparison(params: RMatParams, *, rounds: int = 5, chunk_edges: int = 1 << 18,
                     progress: Callable[[int], None] | None = None) -> BuildComparison:
    """Build the R-MAT edges of `params` out of core once, then time labkit against scipy in memory.

    1. labkit streamed: two passes over generated chunks (:func:`build_streamed`, run once after
       an untimed tiny build, with `progress(n_edges)` after each chunk): the edge list is never
       held. It is not timed against anything; the notebook shows what it built.
    2. scipy COO->CSR with 1-byte bool values (its cheapest path to the same canonical CSR; it sums
       duplicates, one thread), labkit in memory held to one numba thread (the equal-thread
       speedup) and labkit on every core: checked equal once, then timed interleaved
       (:func:`labkit.core.bench.interleave`, `rounds` rounds after one warm-up round).
    """
    import numba

    from labkit.graph.baselines import scipy_builder
    from labkit.graph.bench import labkit_builder

    check_range("rounds", rounds, 1, integer=True)
    streamed, _ = build_streamed(params, chunk_edges, progress)
    src, dst = rmat_edges(params)
    n, m = params.num_nodes, params.num_edges
    scipy_build = scipy_builder(src, dst, n)
    labkit_1, labkit_all = labkit_builder(src, dst, n, 1), labkit_builder(src, dst, n, None)

    ours, ref = labkit_1(), scipy_build()  # numba compiles (or loads its cache) here, untimed
    if not (np.array_equal(ours.indptr, ref.indptr) and np.array_equal(ours.indices, ref.indices)):
        raise AssertionError("labkit build and scipy disagree on the CSR")
    del ours, ref
    c = interleave({"scipy": scipy_build, "labkit@1": labkit_1, "labkit": labkit_all}, rounds=rounds, warmup=1,
                   case=f"build CSR, {m:,} edges")
    c.work, c.work_unit = m, "edges"
    threads = numba.get_num_threads()
    rows = []
    for name, label in (("scipy", "scipy COO->CSR (1 thread)"), ("labkit@1", "labkit in memory (1 thread)"),
                        ("labkit", f"labkit in memory ({threads} thread{'s' * (threads > 1)})")):
        t = c.time_spread(name)
        rows.append({"builder": label, "seconds (median [95% interval])": str(t),
                     "M edges/s": f"{m / t.median / 1e6:.1f}",
                     "speedup vs scipy": "1 (baseline)" if name == "scipy" else str(c.spread("scipy", name))})
    return BuildComparison(rows, c.spread("scipy", "labkit@1"), c.throughput("labkit"), streamed, c,
                           c.spread("scipy", "labkit"))


@dataclass
class SamplerComparison:
    """labkit's NEIGHBORHOOD sampler against a vectorised torch sampler: speedup with its spread."""

    speedup: Spread
    rows: list[dict]
    comparison: Comparison

    def table(self) -> ResultTable:
        return ResultTable(self.rows, title=self.comparison.case)


def sampler_comparison(scale: int, *, batch: int = 1024, batches: int = 4, fanouts: tuple[int, ...] = (15, 10),
                       rounds: int = 7, seed: int = 7) -> SamplerComparison:
    """Time multi-hop sampling with replacement on R-MAT in-edges: torch (the baseline) vs labkit, interleaved.

    The same seeds for both, `batches` batches of `batch` per round; the speedup is per-round
    time(torch) / time(labkit) scaled by the sampled-edge counts (near equal: k per vertex).
    """
    from labkit.core.spread import spread
    from labkit.graph.baselines import TorchSampler
    from labkit.graph.csr import build_csc

    check_range("rounds", rounds, 1, integer=True)
    check_range("batches", batches, 1, integer=True)
    p = RMatParams(scale=scale)
    src, dst = rmat_edges(p)
    csc = build_csc(src, dst, p.num_nodes)
    del src, dst
    rng = np.random.default_rng(check_seed(seed))
    seeds = [rng.choice(p.num_nodes, min(batch, p.num_nodes), replace=False) for _ in range(batches)]
    ours = NeighborSampler(csc.indptr, csc.indices, frontier="all")
    base = TorchSampler(csc.indptr, csc.indices, seed=seed)
    fan = list(fanouts)
    edges = {"torch": [], "labkit": []}
    calls = {"n": 0}

    def run_torch():
        edges["torch"].append(sum(base.sample(s, fan) for s in seeds))

    def run_labkit():
        calls["n"] += 1
        edges["labkit"].append(sum(ours.sample(s, fan, replace=True, seed=calls["n"], stream=i).num_sampled_edges
                                   for i, s in enumerate(seeds)))

    c = interleave({"torch": run_torch, "labkit": run_labkit}, rounds=rounds, warmup=1,
                   case=f"sampling {fan} from {batches} x {batch} seeds, R-MAT scale {scale} in-edges")
    # Drop the warm-up round's counts; the rest pair with the timed rounds.
    et, el = np.asarray(edges["torch"][1:], float), np.asarray(edges["labkit"][1:], float)
    ratios = np.asarray(c.times["torch"]) / np.asarray(c.times["labkit"]) * (el / et)
    sp_ = spread(ratios)
    rows = []
    for name, e, label in (("torch", et, "vectorised torch (baseline)"), ("labkit", el, "labkit numba kernels")):
        rate = spread(e / np.asarray(c.times[name]) / 1e6, unit="M edges/s")
        rows.append({"sampler": label, "sampled edges/s (median [95% interval])": str(rate),
                     "speedup vs torch": "1 (baseline)" if name == "torch" else str(sp_)})
    return SamplerComparison(sp_, rows, c)


def cache_point(g: GraphData, threshold: float, *, k: int = 1, num_parts: int = 4, batches: int = 4,
                batch_size: int = 256, fanouts: tuple[int, ...] = (10, 5), backend: str = "embedded",
                client=None, seed: int = 0) -> dict:
    """Return cache size, hit rates and one short epoch's time at importance `threshold` (inf = no cache).

    The epoch is `batches` mini-batches of GraphSAGE through a :class:`PartitionedStore` of
    `num_parts` hash partitions. With the default ``backend="embedded"`` the partitions are
    objects in this process: a miss costs no network round, so the time shows the cache's own
    lookup overhead, not the fetches it saves (``labkit bench graph`` measures those across
    Dask worker processes). One tiny untimed mini-batch goes through the same store first, so
    the epoch (the first setting a notebook measures included) does not pay for numba compiling
    the sampling and cache kernels or torch's first backward; its counts are then reset.
    """
    check_range("threshold", threshold, 0.0)
    seed = check_seed(seed)
    part = partition(g.csr, num_parts, "hash")
    cache = None
    if np.isfinite(threshold):
        plan = plan_cache(g.csr, importance(g.csr, g.csc, k), threshold, max_fraction=0.2, k=k)
        cache = NeighborCache.build(g.csr, plan, g.features)
    store = PartitionedStore(g.csr, part, g.features, backend=backend, client=client, cache=cache)
    _warm_up(g, store, cache, fanouts, seed)
    torch.manual_seed(seed)
    model = SAGE(g.features.shape[1], 32, g.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    r = train_epoch(model, opt, NeighborSampler(store), store, g.train, g.labels, list(fanouts), batch_size,
                    seed=seed, max_batches=batches)
    topo = g.csr.indptr.nbytes + g.csr.indices.nbytes
    return {"threshold": float(threshold), "cache": "off" if cache is None else "on", "backend": backend,
            "batches": r.batches, "cached_fraction": 0.0 if cache is None else cache.plan.fraction,
            "cache_bytes_fraction": 0.0 if cache is None else cache.nbytes / topo,
            "hit_rate": 0.0 if cache is None else cache.stats.hit_rate,
            "feature_hit_rate": 0.0 if cache is None else cache.feature_stats.hit_rate,
            "epoch_s": r.seconds, "sample_s": r.sample_s, "gather_s": r.gather_s, "train_s": r.train_s,
            "remote_bytes": store.stats.remote_bytes}


def _warm_up(g: GraphData, store, cache: NeighborCache | None, fanouts, seed: int) -> None:
    """Train one tiny mini-batch through `store` on a throwaway model, then zero the counts it left."""
    model = SAGE(g.features.shape[1], 32, g.num_classes)
    train_epoch(model, torch.optim.Adam(model.parameters(), lr=0.01), NeighborSampler(store), store, g.train[:8],
                g.labels, list(fanouts), 8, seed=seed, max_batches=1)
    store.stats.reset()
    if cache is not None:
        cache.stats, cache.feature_stats = CacheStats(), CacheStats()


class _RecordingStore(CSRTopology):
    """An in-memory GraphStore that keeps every id list whose entries it was asked for (a sampler's lookups)."""

    counts_reads = True  # sampled through entries(), not the fused in-RAM kernels, so every lookup is seen

    def __init__(self, csr: CSR) -> None:
        super().__init__(csr.indptr, csr.indices)
        self.lookups = []

    def entries(self, ids: np.ndarray, ptr: np.ndarray, pos: np.ndarray) -> np.ndarray:
        self.lookups.append(np.array(ids, np.int64))
        return super().entries(ids, ptr, pos)


#: The cache plans compared: what each ranks vertices by before filling the byte budget.
POLICIES = ("importance", "in-degree", "degree", "random")


class HitRateLab:
    """Hit rates of neighbour caches of a given size (share of list bytes), by importance and by simpler plans.

    Each of `rounds` rounds records the neighbour-list lookups of `batches` mini-batches of
    multi-hop sampling (:class:`~labkit.graph.sampling.NeighborSampler` through a store, `fanouts`,
    `batch_size` random seeds, a different seed stream per round). A plan fills a byte budget with
    the highest-ranked vertices that have an out-list; :class:`NeighborCache` built from it then
    counts the recorded lookups it serves.
    Ranks: importance Imp_k = D_in^k / D_out^k, in-degree, degree (in + out), a random order.
    """

    def __init__(self, csr: CSR, csc: CSR, *, rounds: int = 5, batches: int = 8, batch_size: int = 512,
                 fanouts: tuple[int, ...] = (10, 5), k: int = 1, seed: int = 0) -> None:
        check_range("rounds", rounds, 1, 100, integer=True)
        check_range("batches", batches, 1, integer=True)
        self.csr, self.rounds, self.seed = csr, rounds, check_seed(seed)
        deg_in, deg_out = csc.degree().astype(np.float64), csr.degree()
        self.cost = deg_out.astype(np.int64) * csr.indices.itemsize + 8  # the list and its offset
        self.total = csr.indptr.nbytes + csr.indices.nbytes
        self._has = deg_out > 0
        self.scores = {"importance": importance(csr, csc, k), "in-degree": deg_in,
                       "degree": deg_in + deg_out}
        self.streams = []
        n = csr.num_nodes
        for r in range(rounds):
            rec = _RecordingStore(csr)
            sampler = NeighborSampler(rec)
            rng = np.random.default_rng([self.seed, r])
            for b in range(batches):
                sampler.sample(rng.choice(n, min(batch_size, n), replace=False), list(fanouts),
                               seed=self.seed + r, stream=b)
            self.streams.append(np.concatenate(rec.lookups))
        self._orders: dict[str, np.ndarray] = {}

    def _order(self, policy: str, r: int) -> np.ndarray:
        if policy == "random":
            order = np.random.default_rng([self.seed, 99, r]).permutation(self.csr.num_nodes)
        else:
            if policy not in self._orders:
                self._orders[policy] = np.argsort(-self.scores[policy], kind="stable")
            order = self._orders[policy]
        return order[self._has[order]]

    def plan(self, policy: str, size: float, r: int = 0) -> CachePlan:
        """Return the plan of `policy` whose lists and offsets fit in `size` x the graph's list bytes."""
        if policy not in POLICIES:
            raise bad_value("policy", policy, "one of " + ", ".join(POLICIES))
        check_range("size", size, 0.0, 1.0)
        return CachePlan(policy, self._order(policy, r), self.cost, "topology").cut(size * self.total)

    def measure(self, size: float) -> dict:
        """Return {policy: Spread of the hit rate in %} over the rounds, plus "vertices" (Spread, % cached)."""
        from labkit.core.spread import spread
        out, cached = {}, []
        for policy in POLICIES:
            rates = []
            for r, ids in enumerate(self.streams):
                plan = self.plan(policy, size, r)
                cache = NeighborCache.build(self.csr, plan)
                cache.split(ids)
                rates.append(100 * cache.stats.hit_rate)
                if policy == "importance":
                    cached.append(100 * plan.fraction)
            out[policy] = spread(rates, unit="%")
        out["vertices"] = spread(cached, unit="%")
        return out

    def table(self, sizes) -> ResultTable:
        """Return a table: one row per cache size, the hit rate of each plan (median [95% interval])."""
        rows = []
        for s in sizes:
            m = self.measure(s)
            rows.append({"cache size (% of list bytes)": f"{100 * s:g}%",
                         "vertices cached by importance": f"{m['vertices'].median:.1f}%",
                         **{f"hit rate: {p}": str(m[p]) for p in POLICIES}})
        return ResultTable(rows, title=f"share of neighbour-list lookups the cache serves ({self.rounds} rounds)")


@dataclass
class OperatorRates:
    """Ids drawn per second by each sampling operator, with the spread over rounds."""

    rates: dict[str, Spread]
    ids: dict[str, int]

    def table(self, title: str = "") -> ResultTable:
        rows = [{"operator": k, "ids per call": f"{self.ids[k]:,}", "ids/s (median [95% interval])": str(v)}
                for k, v in self.rates.items()]
        return ResultTable(rows, title=title)


def operator_throughput(csr: CSR, csc: CSR, *, batch: int = 1024, k: int = 10, rounds: int = 5,
                        seed: int = 0) -> OperatorRates:
    """Return each sampling operator's ids drawn per second on `batch` random vertices, over `rounds` interleaved rounds."""
    from labkit.core.spread import spread

    rng = np.random.default_rng(check_seed(seed))
    rows = rng.choice(csr.num_nodes, batch, replace=False)
    w = rng.random(csr.num_edges)
    table = AliasTable.build(csr.indptr, w)
    in_table = AliasTable.build(csr.indptr, csc.degree()[csr.indices].astype(np.float64))
    ops = {
        "NEIGHBORHOOD random (with replacement)":
            lambda: sample_neighbors(csr.indptr, csr.indices, rows, k, replace=True)[1],
        "NEIGHBORHOOD random (without replacement)":
            lambda: sample_neighbors(csr.indptr, csr.indices, rows, k)[1],
        "NEIGHBORHOOD edge_weight (alias)": lambda: sample_weighted(csr.indptr, table, rows, k)[1],
        "NEIGHBORHOOD in_degree (alias)": lambda: sample_weighted(csr.indptr, in_table, rows, k)[1],
        "NEIGHBORHOOD topk by weight": lambda: topk_neighbors(csr.indptr, w, rows, k)[1],
        "NEIGHBORHOOD full": lambda: sample_neighbors(csr.indptr, csr.indices, rows, -1)[1],
        "NEGATIVE random": lambda: negative_sample(csr, rows, k, by="random").dst,
        "NEGATIVE in_degree (rejects neighbours)": lambda: negative_sample(csr, rows, k, by="in_degree").dst,
    }
    ids = {name: len(f()) for name, f in ops.items()}  # also compiles each kernel
    c = interleave(ops, rounds=rounds, warmup=1, min_sample_s=0.01, case=f"operators, {batch} seeds, k={k}")
    rates = {name: spread([n / max(t, 1e-9) / 1e6 for t in c.times[name]], unit="M ids/s")
             for name, n in ids.items()}
    return OperatorRates(rates, ids)


#: Link rates the network section sweeps: data-centre links (1, 10, 25 Gbit/s), two slow ones on which a
#: small graph's fetched bytes, not the round trips, set the epoch time, and "loopback" (the same
#: partitions served over 127.0.0.1, no namespaces).
NETWORK_RATES = ("10mbit", "100mbit", "1gbit", "10gbit", "25gbit", "loopback")


def rate_label(rate) -> str:
    """Return how a rate reads in tables and sliders: "loopback" or e.g. "10 Gbit/s"."""
    from labkit.core.cluster import fmt_rate, parse_rate
    return "loopback" if rate == "loopback" else fmt_rate(parse_rate(rate))


class NetworkCacheLab:
    """The importance cache's epoch speedup with the 4 partitions on shaped hosts, at a link rate you choose.

    `cluster` is a :func:`labkit.core.cluster.start_cluster` cluster with one host per partition; its
    Dask workers hold the partitions (one each), so every remote fetch crosses that host's shaped
    link. A second set of Dask workers on 127.0.0.1 serves the same partitions for the "loopback"
    point. Each measurement interleaves cache-off and cache-on epochs of `batches` GraphSAGE
    mini-batches. Without the privilege to shape links (``cluster.shaped`` false) only "loopback"
    can be measured. Close the lab (or use it as a context manager) to stop its Dask workers; the
    cluster itself belongs to whoever started it.
    """

    def __init__(self, g: GraphData, cluster, *, batches: int = 8, batch_size: int = 256,
                 fanouts: tuple[int, ...] = (10, 5), threshold: float = 1.0, seed: int = 0) -> None:
        from labkit.graph.store import local_cluster

        check_range("batches", batches, 1, integer=True)
        check_range("batch_size", batch_size, 1, integer=True)
        self.g, self.cluster, self.batches, self.batch_size = g, cluster, batches, batch_size
        self.fanouts, self.seed = list(fanouts), check_seed(seed)
        n_parts = max(1, len(cluster.hosts)) if cluster.shaped else 4
        self.part = partition(g.csr, n_parts, "hash")
        plan = plan_cache(g.csr, importance(g.csr, g.csc, 1), threshold, max_fraction=0.2)
        self.cache = NeighborCache.build(g.csr, plan, g.features)
        self.clients: dict[str, object] = {}
        self.stores: dict[str, dict[str, PartitionedStore]] = {}
        try:
            if cluster.shaped:
                self.clients["shaped"] = cluster.dask_client(workers_per_host=1, nthreads=1)
            self.clients["loopback"] = local_cluster(n_parts)
            for where, client in self.clients.items():
                self.stores[where] = {
                    "cache_off": PartitionedStore(g.csr, self.part, g.features, backend="dask", client=client),
                    "cache_on": PartitionedStore(g.csr, self.part, g.features, backend="dask", client=client,
                                                 cache=self.cache)}
                for st in self.stores[where].values():
                    _warm_up(g, st, None, self.fanouts, self.seed)
        except BaseException:
            self.close()
            raise
        torch.manual_seed(self.seed)
        self.model = SAGE(g.features.shape[1], 32, g.num_classes)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=0.01)
        self._epoch = 0

    @property
    def rates(self) -> tuple[str, ...]:
        """The rates this lab can measure: every one of NETWORK_RATES where links can be shaped, else loopback."""
        return NETWORK_RATES if "shaped" in self.clients else ("loopback",)

    def _epoch_fn(self, st: PartitionedStore, out: list):
        def f():
            self._epoch += 1
            st.stats.reset()
            r = train_epoch(self.model, self.opt, NeighborSampler(st), st, self.g.train, self.g.labels,
                            self.fanouts, self.batch_size, epoch=self._epoch, seed=self.seed,
                            max_batches=self.batches)
            out.append((r.batches, st.stats.remote_bytes, st.stats.wait_s))
        return f

    def measure(self, rate, rounds: int = 3) -> dict:
        """Return the cache's epoch speedup at `rate` (a NETWORK_RATES entry) over `rounds` interleaved rounds.

        {"rate": label, "speedup": Spread (off / on), "ms_per_batch_off", "ms_per_batch_on",
        "remote_mib_per_batch_off", "remote_mib_per_batch_on", "wait_ms_per_batch_off", "..._on"}.
        """
        check_range("rounds", rounds, 1, 50, integer=True)
        if rate not in self.rates:
            why = "" if "shaped" in self.clients else f" (links cannot be shaped here: {self.cluster.reason})"
            raise bad_value("rate", rate, "one of " + ", ".join(map(str, self.rates)) + why)
        where = "loopback" if rate == "loopback" else "shaped"
        if where == "shaped":
            self.cluster.set_rate(rate)
        seen: dict[str, list] = {"cache_off": [], "cache_on": []}
        c = interleave({k: self._epoch_fn(st, seen[k]) for k, st in self.stores[where].items()},
                       rounds=rounds, warmup=1, case=f"cache off / on at {rate_label(rate)}")
        out = {"rate": rate_label(rate), "speedup": c.spread("cache_off", "cache_on")}
        for k, tag in (("cache_off", "off"), ("cache_on", "on")):
            runs = seen[k][1:]  # the warm-up round's epoch is not timed
            nb = max(1, runs[0][0])
            out[f"ms_per_batch_{tag}"] = 1e3 * c.median(k) / nb
            out[f"remote_mib_per_batch_{tag}"] = float(np.median([b / 2**20 / max(1, n) for n, b, _ in runs]))
            out[f"wait_ms_per_batch_{tag}"] = float(np.median([1e3 * w / max(1, n) for n, _, w in runs]))
        return out

    def sweep(self, rates=None, rounds: int = 3, progress: Callable[[int], None] | None = None) -> list[dict]:
        """Return :meth:`measure` at each of `rates` (default: every rate this lab can measure)."""
        out = []
        for rate in (self.rates if rates is None else rates):
            out.append(self.measure(rate, rounds))
            if progress is not None:
                progress(1)
        return out

    def table(self, points: list[dict]) -> ResultTable:
        rows = [{"link": p["rate"], "epoch speedup, cache on (median [95% interval])": str(p["speedup"]),
                 "ms per batch, off / on": f"{p['ms_per_batch_off']:.1f} / {p['ms_per_batch_on']:.1f}",
                 "MiB fetched per batch, off / on":
                     f"{p['remote_mib_per_batch_off']:.2f} / {p['remote_mib_per_batch_on']:.2f}"}
                for p in points]
        return ResultTable(rows, title=f"importance cache, {self.part.num_parts} partitions: epoch time off / on by link")

    def close(self) -> None:
        """Stop the lab's Dask workers (idempotent)."""
        from labkit.graph.store import close_cluster
        for st in (s for d in self.stores.values() for s in d.values()):
            st.close()
        self.stores = {}
        clients, self.clients = self.clients, {}
        for where, client in clients.items():
            try:
                if where == "loopback":
                    close_cluster(client)
                else:
                    client.close()
            except Exception:  # closing one must not keep the others running
                pass

    def __enter__(self) -> "NetworkCacheLab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
