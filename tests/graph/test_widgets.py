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


def _fake_measure(size):
    from labkit.core.spread import Spread
    return {p: Spread(100 * size * w, 100 * size * w - 1, 100 * size * w + 2, 5, "%")
            for p, w in (("importance", 2.0), ("in-degree", 1.5), ("degree", 0.5), ("random", 1.0))}


def test_cache_explorer_draws_each_size_with_its_interval():
    from labkit.ui.graph import cache_explorer
    view, fig, state = cache_explorer(_fake_measure, sizes=(0.1, 0.2, 0.4), value=0.1)
    assert list(fig.data[0].x) == ["importance", "in-degree", "degree", "random"]
    assert list(fig.data[0].y) == [20.0, 15.0, 5.0, 10.0]
    assert list(fig.data[0].error_y.array) == [2.0] * 4 and list(fig.data[0].error_y.arrayminus) == [1.0] * 4
    assert "10% of list bytes" in fig.layout.title.text and "importance serves 20%" in fig.layout.title.text
    state.controls["size"].value = 0.4
    assert list(fig.data[0].y) == [80.0, 60.0, 20.0, 40.0]
    assert list(fig.data[1].x) == [10.0, 40.0] and list(fig.data[1].y) == [20.0, 80.0]  # importance line
    assert sorted(state.result["history"]) == [0.1, 0.4] and state.result["current"]["size"] == 0.4
    assert state.controls["size"].style.description_width == "initial"


def test_cache_explorer_names_bad_sizes():
    from labkit.ui.graph import cache_explorer
    with pytest.raises(ValueError, match="value=0.3"):
        cache_explorer(_fake_measure, sizes=(0.1, 0.2), value=0.3)
    with pytest.raises(ValueError, match="sizes="):
        cache_explorer(_fake_measure, sizes=("a",))
    with pytest.raises(ValueError, match="sizes="):
        cache_explorer(_fake_measure, sizes=(0.0, 0.5), value=0.5)


def test_lab_settings_know_every_notebook_profile():
    from labkit.ui.graph import lab_settings
    assert lab_settings("lab")["dataset"] == "ci" and lab_settings("lab")["build_scale"] > lab_settings("ci")["build_scale"]
    assert lab_settings("small")["dataset"] == "small"
    with pytest.raises(ValueError, match="PROFILE='tiny'"):
        lab_settings("tiny")


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


def test_rate_explorer_measures_each_rate_and_keeps_the_slider_order():
    from labkit.core.spread import Spread
    from labkit.ui.graph import rate_explorer
    asked = []

    def measure(rate):
        asked.append(rate)
        sp = {"100mbit": 2.0, "10gbit": 1.1, "loopback": 1.0}[rate]
        label = {"100mbit": "100 Mbit/s", "10gbit": "10 Gbit/s", "loopback": "loopback"}[rate]
        return {"rate": label, "speedup": Spread(sp, sp - 0.1, sp + 0.2, 3, "x"),
                "ms_per_batch_off": 10 * sp, "ms_per_batch_on": 10.0}

    view, fig, state = rate_explorer(measure, ["100mbit", "10gbit", "loopback"])
    assert asked == ["100mbit"] and list(fig.data[0].y) == [20.0, 10.0]
    state.controls["rate"].value = "loopback"
    state.controls["rate"].value = "10gbit"
    assert asked == ["100mbit", "loopback", "10gbit"]
    # The speedup panel reads in the slider's order, whatever order the rates were measured in.
    assert list(fig.data[1].x) == ["100 Mbit/s", "10 Gbit/s", "loopback"]
    assert list(fig.data[1].y) == [2.0, 1.1, 1.0]
    assert list(fig.data[1].error_y.array) == pytest.approx([0.2] * 3)
    assert "10 Gbit/s" in fig.layout.title.text and set(state.result["history"]) == {"100 Mbit/s", "10 Gbit/s",
                                                                                      "loopback"}
    with pytest.raises(ValueError, match="value"):
        rate_explorer(measure, ["10gbit"], value="1gbit")
