"""Explorer arguments are checked up front: a named one-line error, never ipywidgets' TraitError."""

from __future__ import annotations

import math

import pytest

from labkit.core.machine import memory_bytes


@pytest.mark.parametrize("v", [10, 12, -1, 2.5, "20"])
def test_gather_explorer_names_a_bad_max_log2_rows(v):
    from labkit.ui.tour import gather_explorer
    with pytest.raises(ValueError, match=rf"max_log2_rows={v!r} is not accepted; expected an integer in \[13, \d+\]"):
        gather_explorer(max_log2_rows=v)


def test_gather_explorer_caps_the_table_at_this_machines_memory():
    from labkit.ui.tour import gather_explorer
    top = int(math.log2(memory_bytes() // (4 * 16)))
    with pytest.raises(ValueError, match=rf"max_log2_rows={top + 1} is not accepted; expected an integer in "
                                         rf"\[13, {top}\]"):
        gather_explorer(max_log2_rows=top + 1)
    with pytest.raises(ValueError, match=r"dim=0 is not accepted"):
        gather_explorer(max_log2_rows=13, dim=0)
    with pytest.raises(ValueError, match=r"repeats=0 is not accepted"):
        gather_explorer(max_log2_rows=13, repeats=0)
    view, fig, state = gather_explorer(max_log2_rows=13, repeats=1)
    assert state.error is None and state.result["rows"] == 2**13


@pytest.mark.parametrize("v", [-1, 7, 1.5])
def test_n_explorer_names_a_bad_max_log2_n(v):
    from labkit.ui.spmm import n_explorer
    with pytest.raises(ValueError, match=rf"max_log2_n={v!r} is not accepted; expected an integer in \[0, 6\]"):
        n_explorer((64, 64), max_log2_n=v)


def test_control_panel_and_simulator_explorer_check_first():
    from labkit.ui.dataworkers import control_panel, simulator_explorer
    with pytest.raises(ValueError, match=r"max_cpus=0 is not accepted; expected an integer in \[1, inf\]"):
        control_panel(None, max_cpus=0)
    with pytest.raises(ValueError, match=r"seed=-1 is not accepted"):
        simulator_explorer(10, seed=-1)


@pytest.mark.parametrize("budget", [(10, 5, 7), (-1, 5, 3), (1, 5), (1.5, 5, 3), "big"])
def test_split_explorer_names_a_bad_budget_range(budget):
    from labkit.ui.disk import split_explorer
    with pytest.raises(ValueError, match=r"budget_mib=.* is not accepted; expected \(min, max, value\) integer MiB "
                                         r"with 0 <= min <= max"):
        split_explorer(None, None, None, None, budget_mib=budget)
    with pytest.raises(ValueError, match=r"split=2 is not accepted"):
        split_explorer(None, None, None, None, budget_mib=(1, 5, 3), split=2)
