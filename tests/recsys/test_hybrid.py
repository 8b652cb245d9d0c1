"""Hybrid-parallel Wide & Deep (labkit.recsys.hybrid): every mode trains what single-process training
trains, the ranks' failures surface as one-line errors naming the rank, and nothing is left running."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from labkit.recsys.baselines import torchrec as trec
from labkit.recsys.hybrid import (TORCHREC, HybridConfig, HybridError, RankGroup, field_owner, free_port,
                                  reference_losses, sample_edges)

TINY = HybridConfig(fields=6, rows=50, dim=4, batch=32, n_batches=2, seed=3)


def _ended(group: RankGroup) -> bool:
    return all(p.poll() is not None for p in group.procs)


def test_every_mode_gives_the_single_process_losses():
    ref = reference_losses(TINY, 3)
    names = ["per_field", "packed", "interleaved"] + ([TORCHREC] if trec.available() else [])
    with RankGroup(2, timeout=120) as g:
        g.setup(TINY, names)
        runs = {"per_field": g.run("per_field", "per_field", 1, 3), "packed": g.run("packed", "packed", 1, 3),
                "interleaved": g.run("interleaved", "packed", 3, 3)}
        if TORCHREC in names:
            runs[TORCHREC] = g.run(TORCHREC, "torchrec", 1, 3)
    assert _ended(g)
    for name, r in runs.items():
        assert len(r["times"]) == 3 and all(t > 0 for t in r["times"]), name
        np.testing.assert_allclose(r["losses"], ref, rtol=1e-5, err_msg=name)


@pytest.mark.slow
def test_three_ranks_with_an_uneven_batch_and_per_field_interleaving():
    cfg = HybridConfig(fields=5, rows=40, dim=8, batch=31, n_batches=2, seed=1)
    ref = reference_losses(cfg, 2)
    with RankGroup(3, timeout=120) as g:
        g.setup(cfg, ["a", "b"])
        np.testing.assert_allclose(g.run("a", "per_field", 2, 2)["losses"], ref, rtol=1e-5)
        np.testing.assert_allclose(g.run("b", "packed", 4, 2)["losses"], ref, rtol=1e-5)


def test_a_rank_that_dies_raises_naming_it_and_the_group_ends():
    with RankGroup(2, timeout=60) as g:
        g.setup(TINY, ["packed"])
        g.procs[1].kill()
        g.procs[1].wait()
        with pytest.raises(HybridError, match=r"^rank 1 died"):
            g.run("packed", "packed", 1, 1)
        assert _ended(g)
        with pytest.raises(HybridError, match="closed"):
            g.run("packed", "packed", 1, 1)


def test_a_rank_that_hangs_raises_within_the_timeout():
    with RankGroup(2, timeout=3) as g:
        g.setup(TINY, ["packed"])
        os.kill(g.procs[1].pid, signal.SIGSTOP)
        with pytest.raises(HybridError, match=r"did not answer run within 3 s") as e:
            g.run("packed", "packed", 1, 1)
        assert "1" in str(e.value).split("did not")[0] and "\n" not in str(e.value)
    assert _ended(g)


def test_a_rank_that_fails_reports_its_error_on_one_line():
    with RankGroup(2, timeout=60) as g:
        with pytest.raises(HybridError, match=r"^rank [01] failed in setup: .*fields=1 is not accepted"):
            g.setup(HybridConfig(fields=1, rows=10, dim=4, batch=8), ["packed"])
    assert _ended(g)


def test_bad_arguments_are_refused_on_one_line_naming_them():
    with pytest.raises(ValueError, match="world_size=0"):
        RankGroup(0)
    with pytest.raises(ValueError, match="batch=0"):
        HybridConfig(batch=0)
    with pytest.raises(TypeError, match="cfg="):
        reference_losses({"fields": 3}, 1)
    with RankGroup(2, timeout=60) as g:
        g.setup(TINY, ["packed"])
        with pytest.raises(ValueError, match="mode='packd'"):
            g.run("packed", "packd")
        with pytest.raises(ValueError, match="name='nosuch'"):
            g.run("nosuch")
        with pytest.raises(ValueError, match="interleave=17"):  # more micro-batches than a rank's 16 samples
            g.run("packed", "packed", 17)
        assert g.run("packed", "packed", 1, 1)["losses"]  # still usable after refusing


def test_layout_helpers():
    assert [field_owner(f, 3) for f in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    e = sample_edges(31, 3)
    assert e[0] == 0 and e[-1] == 31 and np.all(np.diff(e) >= 10)
    assert 0 < free_port() < 65536


def test_on_a_cluster_the_ranks_run_in_its_hosts():
    cluster = pytest.importorskip("labkit.core.cluster")
    cl = cluster.start_cluster(2, "10gbit", fallback=True)
    try:
        with RankGroup(2, cluster=cl, timeout=120) as g:
            assert g.addr == cl.hosts[0].addr
            g.setup(TINY, ["packed"])
            np.testing.assert_allclose(g.run("packed", "packed", 2, 2)["losses"], reference_losses(TINY, 2),
                                       rtol=1e-5)
    finally:
        cl.close()


@pytest.mark.slow
def test_the_rate_slider_reshapes_the_links_and_times_the_three_trainers():
    from labkit.ui.recsys import NETWORK_CONTENDERS, network_lab, rate_explorer
    cl, group = network_lab(4, 50, 32)
    try:
        view, fig, state = rate_explorer(cl, group, rates=(1, 10), value=10, rounds=2)
        state.controls["link Gbit/s"].value = 1
        r = state.result
        assert r["rate_gbit"] == 1 and cl.rate_bit_s == 10**9 and state.updates == 2
        assert set(r["ms"]) == set(NETWORK_CONTENDERS) and all(v > 0 for v in r["ms"].values())
        assert 0 < r["packing"].lo <= r["packing"].median <= r["packing"].hi
        assert list(fig.data[0].y) == [r["ms"][n] for n in NETWORK_CONTENDERS]
        assert ("1 Gbit/s links" if cl.shaped else "rate not applied") in fig.layout.title.text
    finally:
        group.close()
        cl.close()
    assert all(p.poll() is not None for p in group.procs)
