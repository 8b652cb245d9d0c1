"""The AliGraph notebook's timed experiments warm up before timing, and the warm-up leaves no trace."""

from __future__ import annotations

import numpy as np

from labkit.graph import experiments
from labkit.graph.rmat import RMatParams


def test_build_streamed_builds_a_tiny_graph_first_untimed(monkeypatch):
    built = []
    real = experiments.build_csr_chunked

    def spy(chunks, num_nodes, **kw):
        built.append((num_nodes, kw.get("progress")))
        return real(chunks, num_nodes, **kw)
    monkeypatch.setattr(experiments, "build_csr_chunked", spy)
    p = RMatParams(scale=10, seed=3)
    ticks = []
    csr, seconds = experiments.build_streamed(p, 1 << 12, progress=ticks.append)
    assert [n for n, _ in built] == [1 << 6, 1 << 10]   # the warm-up graph, then the real one
    assert built[0][1] is None and sum(ticks) == 2 * p.num_edges  # progress counts only the real build
    assert csr.num_nodes == p.num_nodes and seconds > 0
    # A graph smaller than the warm-up size is built at its own size (communities must fit).
    built.clear()
    experiments.build_streamed(RMatParams(scale=4, num_communities=4), 1 << 12)
    assert [n for n, _ in built] == [1 << 4, 1 << 4]


def test_cache_point_warm_up_runs_first_and_leaves_no_counts(monkeypatch):
    from labkit.graph.datasets import load_graph
    g = load_graph("ci")
    calls = []
    real = experiments.train_epoch

    def spy(*a, **kw):
        calls.append((a[7], kw.get("max_batches")))  # (batch_size, max_batches)
        return real(*a, **kw)
    monkeypatch.setattr(experiments, "train_epoch", spy)
    warm = experiments.cache_point(g, 2.0, batches=2)
    assert calls == [(8, 1), (256, 2)]  # one tiny untimed batch, then the timed epoch
    monkeypatch.setattr(experiments, "_warm_up", lambda *a, **kw: None)
    cold = experiments.cache_point(g, 2.0, batches=2)
    for k in ("hit_rate", "feature_hit_rate", "remote_bytes", "cached_fraction", "batches"):
        assert np.isclose(warm[k], cold[k]), k  # the warm-up's lookups and fetches were not counted


def test_hit_rate_lab_fills_equal_byte_budgets_and_importance_wins():
    from labkit.graph.csr import build_csr
    from labkit.graph.rmat import rmat_edges
    p = RMatParams(scale=12, split_roles=True)
    csr = build_csr(*rmat_edges(p), p.num_nodes, dedup=True, drop_self_loops=True)
    lab = experiments.HitRateLab(csr, csr.reverse(), rounds=3, batches=2, batch_size=128)
    budget = 0.1 * (csr.indptr.nbytes + csr.indices.nbytes)
    for policy in experiments.POLICIES:
        plan = lab.plan(policy, 0.1)
        used = int(lab.cost[plan.vertices].sum())
        assert used <= budget and (csr.degree()[plan.vertices] > 0).all(), policy
    m = lab.measure(0.1)
    assert set(m) == set(experiments.POLICIES) | {"vertices"}
    assert all(m[p].n == 3 and m[p].lo <= m[p].median <= m[p].hi for p in experiments.POLICIES)
    # The same lookups, the same bytes: ranking by D_in / D_out serves the most.
    assert m["importance"].lo > max(m[p].hi for p in ("in-degree", "degree", "random"))
    assert lab.measure(0.4)["importance"].median > m["importance"].median  # a bigger cache serves more
    rows = lab.table([0.1]).rows
    assert rows[0]["cache size (% of list bytes)"] == "10%" and rows[0]["hit rate: importance"].endswith("]")
