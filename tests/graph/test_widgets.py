"""AliGraph widgets driven without a browser; the cache respects a memory budget."""

import numpy as np
import pytest

from labkit.core.memory import BudgetExceeded, MemoryBudget
from labkit.graph.csr import build_csr
from labkit.graph.importance import NeighborCache, importance, plan_cache
from labkit.graph.rmat import RMatParams, rmat_edges


@pytest.fixture(scope="module")
def csr():
    p = RMatParams(scale=10, split_roles=True)
    return build_csr(*rmat_edges(p), p.num_nodes, dedup=True)


def test_partition_explorer_updates_on_slider(csr):
    from labkit.ui.graph import partition_explorer
    view, fig, state = partition_explorer(csr)
    assert state.result["balance"] == 1.0 and len(fig.data[0].x) == 4
    state.controls["partitions"].value = 8
    assert len(fig.data[0].x) == 8 and state.result["edge_cut"] > 0.8
    state.controls["method"].value = "ldg"
    assert "ldg" in fig.layout.title.text


def test_cache_explorer_keeps_history():
    from labkit.ui.graph import cache_explorer
    fake = lambda t: {"threshold": t, "cached_fraction": 0.1, "cache_bytes_fraction": 0.05,  # noqa: E731
                      "hit_rate": 1 / t, "feature_hit_rate": 0.5 / t, "epoch_s": t}
    view, fig, state = cache_explorer(fake, thresholds=(1.0, 2.0, 4.0))
    state.controls["threshold"].value = 4.0
    assert [h["threshold"] for h in state.result["history"]] == [2.0, 4.0]
    assert list(fig.data[1].y) == [2.0, 4.0]


def test_cache_reserves_its_bytes(csr):
    plan = plan_cache(csr, importance(csr, csr.reverse(), 1), 0.0)
    budget = MemoryBudget("1MiB")
    cache = NeighborCache.build(csr, plan, budget=budget)
    assert budget.used >= cache.nbytes and cache.reservation is not None
    with pytest.raises(BudgetExceeded, match="importance cache"):
        NeighborCache.build(csr, plan, np.zeros((csr.num_nodes, 512), np.float32), budget=MemoryBudget("64KiB"))
