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


def _fake_point(t):
    return {"threshold": t, "cached_fraction": 0.1, "cache_bytes_fraction": 0.05,
            "hit_rate": 1 / t, "feature_hit_rate": 0.5 / t, "epoch_s": t if np.isfinite(t) else 9.0}


def test_cache_explorer_keeps_history():
    from labkit.ui.graph import cache_explorer
    view, fig, state = cache_explorer(_fake_point, thresholds=(1.0, 2.0, 4.0), off=False)
    state.controls["threshold"].value = 4.0
    assert [h["threshold"] for h in state.result["history"]] == [2.0, 4.0]
    assert list(fig.data[1].y) == [2.0, 4.0]


def test_cache_explorer_starts_from_cache_off():
    from labkit.ui.graph import cache_explorer
    view, fig, state = cache_explorer(_fake_point, thresholds=(1.0, 2.0, 4.0), epoch_title="in-process epoch")
    assert state.controls["threshold"].options[0] == ("off", float("inf"))
    assert state.result["current"]["threshold"] == float("inf")  # the baseline comes first
    state.controls["threshold"].value = 4.0
    assert [h["threshold"] for h in state.result["history"]] == [float("inf"), 4.0]
    assert list(fig.data[1].text) == ["cache off", "Imp>=4"] and list(fig.data[1].y) == [9.0, 4.0]
    assert "cache off: 9.000 s" in fig.layout.title.text
    assert any(a.text == "in-process epoch" for a in fig.layout.annotations)
    with pytest.raises(ValueError, match="value=3.0"):
        cache_explorer(_fake_point, thresholds=(1.0, 2.0), value=3.0)
    with pytest.raises(ValueError, match="thresholds="):
        cache_explorer(_fake_point, thresholds=("a",))


def test_cache_reserves_its_bytes(csr):
    plan = plan_cache(csr, importance(csr, csr.reverse(), 1), 0.0)
    budget = MemoryBudget("1MiB")
    cache = NeighborCache.build(csr, plan, budget=budget)
    assert budget.used >= cache.nbytes and cache.reservation is not None
    with pytest.raises(BudgetExceeded, match="importance cache"):
        NeighborCache.build(csr, plan, np.zeros((csr.num_nodes, 512), np.float32), budget=MemoryBudget("64KiB"))


def test_partition_explorer_names_a_bad_max_parts(csr):
    from labkit.ui.graph import partition_explorer
    with pytest.raises(ValueError, match=r"max_parts=0 is not accepted"):
        partition_explorer(csr, max_parts=0)
    view, fig, state = partition_explorer(csr, max_parts=2)
    assert state.controls["partitions"].value == 2 and len(fig.data[0].x) == 2
