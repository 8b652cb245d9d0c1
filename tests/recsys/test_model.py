"""One model interface: every combination of packing, interleaving and caching trains identically."""

import itertools
import threading
import time

import numpy as np
import pytest
import torch

from labkit.core.cacheplan import hot_rows
from labkit.recsys.data import BadBatch, FieldSpec, JaggedBatch, SyntheticCTR, check_ids, make_fields
from labkit.recsys.model import RecModel, Techniques, count_ops


def _train(kind, specs, steps=8, batch=64, **kw):
    gen = SyntheticCTR(specs, seed=4)
    with RecModel(kind, specs, **kw) as m:
        if kw.get("cache"):
            m.warm_cache(gen.batches(batch, 2))
        losses = [m.train_step(gen.batch(batch, i)) for i in range(steps)]
        return losses, m.eval_loss(gen.batch(256, 999)), m.hit_rate


COMBOS = [dict(packing=p, interleave=i, cache=c) for p, i, c in itertools.product([False, True], [0, 3], [0.0, 0.1])]


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_every_combination_reaches_the_baseline_loss(optimizer):
    specs = make_fields(5, cardinality=[40, 300, 2000], dims=[4, 8], hotness=[1, 2])
    ref, ref_eval, _ = _train("wide_deep", specs, optimizer=optimizer)
    assert ref[-1] < ref[0]  # it learns
    for combo in COMBOS[1:]:
        losses, ev, hr = _train("wide_deep", specs, optimizer=optimizer, **combo)
        np.testing.assert_allclose(losses, ref, rtol=1e-5, err_msg=str(combo))
        assert abs(ev - ref_eval) < 1e-5, combo
        if combo["cache"]:
            assert hr > 0.3


@pytest.mark.parametrize("kind", ["dlrm", "deepfm"])
def test_interaction_models_packed_equal_baseline(kind):
    specs = make_fields(6, cardinality=500, dims=8, hotness=[1, 3])
    ref, ref_eval, _ = _train(kind, specs, steps=5)
    got, ev, _ = _train(kind, specs, steps=5, packing=True)
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    assert abs(ev - ref_eval) < 1e-5


def test_interaction_models_need_one_dim():
    specs = make_fields(3, cardinality=10, dims=[4, 8])
    with pytest.raises(ValueError, match=r"field 'C2': dim=8 is not accepted; dlrm"):
        RecModel("dlrm", specs)
    with pytest.raises(ValueError, match="kind='gbdt'"):
        RecModel("gbdt", specs)
    with pytest.raises(ValueError, match="interleave=-1"):
        Techniques(interleave=-1)


def test_train_step_refuses_out_of_range_ids_and_mismatched_specs():
    specs = [FieldSpec("C1", 10), FieldSpec("C2", 10)]
    m = RecModel("wide_deep", specs, packing=True)
    bad = JaggedBatch(["C1", "C2"], np.array([1, 2, 30, 4]), np.ones(4, np.int64), np.zeros((2, 13)), np.zeros(2))
    with pytest.raises(ValueError, match="field 'C2': id=30"):
        m.train_step(bad)
    other = JaggedBatch(["C1", "X"], np.array([1, 2, 3, 4]), np.ones(4, np.int64), np.zeros((2, 13)), np.zeros(2))
    with pytest.raises(ValueError, match="field spec does not match the data"):
        m.train_step(other)
    with pytest.raises(ValueError, match="cache=0"):
        m.warm_cache([])


def test_packing_cuts_operators_per_step():
    specs = make_fields(20, cardinality=100, dims=8)
    gen = SyntheticCTR(specs)
    counts = {}
    for packing in (False, True):
        m = RecModel("wide_deep", specs, packing=packing)
        counts[packing] = count_ops(lambda: m.train_step(gen.batch(32, 0)))
    assert counts[True]["kernels"] == 4  # 2 packed tables x (lookup + fused update)
    assert counts[False]["ops"] > 10 * counts[True]["ops"]


def test_cache_plan_prefers_hot_rows_across_tables():
    counts = [np.array([0, 5, 1, 9]), np.array([100, 0])]
    plan = hot_rows(counts, 3)
    assert [r.tolist() for r in plan.rows] == [[1, 3], [0]]
    assert plan.order.tolist() == [4, 3, 1]  # best first, in the packed id space
    six = hot_rows(counts, 6)
    assert six.size == 4 and six.capacity == 6  # rows never seen are not cached
    with pytest.raises(ValueError, match="capacity=7"):
        hot_rows(counts, 7)


@pytest.mark.parametrize("packing", [False, True])
def test_predict_and_eval_loss_check_batches_like_train_step(packing):
    specs = make_fields(3, cardinality=50, dims=8)
    gen = SyntheticCTR(specs, seed=1)
    ok = gen.batch(8, 0)
    far = gen.batch(8, 1)
    far.values[5] = 10**6  # packed kernels would read outside the table (a segfault, not an error)
    short = JaggedBatch(["C1", "C2"], ok.values[:16], ok.lengths[:16], ok.dense, ok.labels)
    renamed = JaggedBatch(["C1", "C2", "X"], ok.values, ok.lengths, ok.dense, ok.labels)
    narrow = JaggedBatch(ok.keys, ok.values, ok.lengths, ok.dense[:, :4], ok.labels)
    with RecModel("dlrm", specs, packing=packing) as m:
        for call in (m.predict, m.eval_loss, m.train_step):
            for batch, msg in ((far, "field 'C1': id=1000000 is not accepted; expected 0 <= id < 50"),
                               (short, "field spec does not match the data: field 'C3' is missing"),
                               (renamed, "field 'C3' is missing from the data, which has 'X' instead"),
                               (narrow, r"batch.dense='shape \(8, 4\)' is not accepted; expected shape \(B, 13\)")):
                with pytest.raises(BadBatch, match=msg) as e:
                    call(batch)
                assert "\n" not in str(e.value), call.__name__
        p = m.predict(ok)
        assert p.shape == (8,) and bool(((p > 0) & (p < 1)).all())
        assert np.isfinite(m.eval_loss(ok))


def test_predict_hashes_ids_where_the_spec_says_so_and_check_false_skips_checks():
    specs = [FieldSpec("C1", 20, 4, out_of_range="hash"), FieldSpec("C2", 20, 4)]
    b = JaggedBatch(["C1", "C2"], np.array([3, 999, 1, 2]), np.ones(4, np.int64), np.zeros((2, 13)), np.zeros(2))
    with RecModel("wide_deep", specs, packing=True) as m, \
            RecModel("wide_deep", specs, packing=True, check=False) as trusted:
        hashed = check_ids(specs, b)
        assert hashed.values[1] < 20
        assert torch.equal(m.predict(b), m.predict(hashed))
        assert m.eval_loss(b) == m.eval_loss(hashed)
        # check=False: the caller vouches for the data; names are not compared (documented opt-out)
        renamed = JaggedBatch(["A", "B"], hashed.values, hashed.lengths, hashed.dense, hashed.labels)
        assert torch.equal(trusted.predict(renamed), m.predict(hashed))


def test_failed_constructor_leaves_no_slow_tier_files(tmp_path):
    # dims 4 and 8: dlrm refuses them in its dense network, i.e. after the slow tier exists
    specs = make_fields(4, cardinality=100, dims=[4, 8])
    root = tmp_path / "tier"
    for kind, kw, msg in (("wide_deep", dict(lr=-1.0), "lr=-1.0"), ("wide_deep", dict(hidden=(0,)), "hidden=0"),
                          ("dlrm", {}, "dlrm needs one embedding dim")):
        with pytest.raises(ValueError, match=msg) as e:
            RecModel(kind, specs, packing=True, cache=0.05, slow_tier_root=root, **kw)
        # Checked while the traceback (and the frames in it) is alive, as a notebook keeps the
        # last one: the garbage collector cannot have removed the files yet.
        assert e.tb is not None and (not root.exists() or not list(root.iterdir())), (kind, kw)


# ---- interleaving interrupted: nothing of the step may run on after train_step has raised ----

def _interleaved(monkeypatch):
    """A warmed-up interleaved model, a batch, and the log of embedding updates (thread, time).

    Updates are slowed down so that a helper lane left running would still be updating well
    after train_step raised.
    """
    specs = make_fields(4, cardinality=2000, dims=8)
    batch = SyntheticCTR(specs, seed=0).batch(512, 0)
    m = RecModel("wide_deep", specs, packing=True, interleave=8)
    m.train_step(batch)  # compiles the kernels
    log = []
    apply = m.embeddings.apply

    def slow_apply(*a, **k):
        time.sleep(0.05)
        log.append((threading.current_thread().name, time.perf_counter()))
        return apply(*a, **k)

    monkeypatch.setattr(m.embeddings, "apply", slow_apply)
    return m, batch, log


def _tables(m):
    return [m.embeddings.table_weights(i).copy() for i in range(len(m.embeddings.tables))]


def _assert_step_left_nothing_running(m, log, raised_at):
    after = _tables(m)
    time.sleep(0.6)  # > the slowed-down updates a helper lane left running would still apply
    assert [n for n, t in log if t > raised_at] == []
    assert all(np.array_equal(a, b) for a, b in zip(after, _tables(m)))
    assert m._interleaver._thread.is_alive()  # the helper lane is idle, ready for the next step


def test_interrupted_interleaved_step_stops_the_helper_lane(monkeypatch):
    from labkit.recsys import interleave
    m, batch, log = _interleaved(monkeypatch)
    try:
        caller, work = threading.current_thread(), interleave._Step.work

        def interrupted(self):
            if threading.current_thread() is caller:
                raise KeyboardInterrupt  # Ctrl-C as the caller starts its own lane
            return work(self)

        monkeypatch.setattr(interleave._Step, "work", interrupted)
        with pytest.raises(KeyboardInterrupt):
            m.train_step(batch)
        _assert_step_left_nothing_running(m, log, time.perf_counter())
        monkeypatch.setattr(interleave._Step, "work", work)
        assert np.isfinite(m.train_step(batch))  # and the model trains on
    finally:
        m.close()


def test_interrupt_while_waiting_for_the_other_lane_stops_the_helper_lane(monkeypatch):
    from labkit.recsys import interleave
    m, batch, log = _interleaved(monkeypatch)
    try:
        caller, take = threading.current_thread(), interleave._Step._take
        armed = [True]

        def interrupted(self):
            # Ctrl-C reaching the caller while it waits (cond.wait) for the helper lane
            if threading.current_thread() is caller and armed[0] and self.looked_up >= 1 and self.done_a == 0:
                armed[0] = False
                raise KeyboardInterrupt
            return take(self)

        monkeypatch.setattr(interleave._Step, "_take", interrupted)
        with pytest.raises(KeyboardInterrupt):
            m.train_step(batch)
        assert not armed[0]
        _assert_step_left_nothing_running(m, log, time.perf_counter())
    finally:
        m.close()


def test_error_in_the_helper_lanes_scheduling_is_raised_not_hung(monkeypatch):
    from labkit.recsys import interleave
    m, batch, log = _interleaved(monkeypatch)
    try:
        take = interleave._Step._take

        def broken(self):
            if threading.current_thread().name == "picasso-interleave":
                raise RuntimeError("scheduler broke")
            return take(self)

        monkeypatch.setattr(interleave._Step, "_take", broken)
        out = []
        # on a thread of its own, so that a hang fails this test rather than the whole run
        t = threading.Thread(target=lambda: out.append(pytest.raises(RuntimeError, m.train_step, batch)), daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), "train_step hung after the helper lane failed"
        assert "scheduler broke" in str(out[0].value)
        assert m._interleaver._thread.is_alive()
        monkeypatch.setattr(interleave._Step, "_take", take)
        assert np.isfinite(m.train_step(batch))
    finally:
        m.close()


def test_count_ops_keeps_profiler_banners_out_of_stderr(capfd):
    """torch's profiler writes start/stop banners to fd 2; count_ops keeps them out of notebooks."""
    from labkit.recsys.model import count_ops
    x = torch.ones(4, requires_grad=True)
    ops = count_ops(lambda: (x * 2).sum().backward())
    assert ops["aten_ops"] > 0
    err = capfd.readouterr().err
    assert "profiler_start" not in err and "USDT" not in err


def test_count_ops_counts_every_lane_of_an_interleaved_step():
    """The interleaver's helper thread starts before the profiler: its ops were counted only in part
    (the same step read 266, 496 and 726 ops on successive calls); now every call counts them all."""
    specs = make_fields(8, cardinality=500, dims=8)
    b = SyntheticCTR(specs, seed=0).batch(256, 0)
    with RecModel("wide_deep", specs, packing=True, interleave=4, seed=0) as m, \
            RecModel("wide_deep", specs, packing=True, seed=0) as plain:
        counts = [count_ops(lambda: m.train_step(b))["ops"] for _ in range(4)]
        one = count_ops(lambda: plain.train_step(b))["ops"]
    assert len(set(counts)) == 1, counts
    assert counts[0] > 2 * one  # four micro-batches' lookups and MLPs, on both lanes


@pytest.mark.parametrize("batch,n", [(2048, 4), (2048, 3), (1000, 8), (2048, 2), (7, 1), (5, 4), (4, 4), (3, 3)])
def test_micro_batches_cover_the_batch_with_a_smaller_first_and_last(batch, n):
    from labkit.recsys.interleave import FIRST_SHARE, LAST_SHARE, micro_batch_edges
    edges = micro_batch_edges(batch, n)
    sizes = np.diff(edges)
    assert edges[0] == 0 and edges[-1] == batch and len(sizes) == n and (sizes >= 1).all()
    if n >= 3 and batch >= 4 * n:  # room for the shares: first and last smaller, by the stated shares
        mid = sizes[1:-1].mean()
        assert abs(sizes[0] / mid - FIRST_SHARE) < 0.05 and abs(sizes[-1] / mid - LAST_SHARE) < 0.05
    elif n <= 2:
        assert sizes.max() - sizes.min() <= 1  # equal halves


def test_micro_batch_edges_refuses_more_micro_batches_than_samples():
    from labkit.recsys.interleave import micro_batch_edges
    with pytest.raises(ValueError, match="n=9 is not accepted"):
        micro_batch_edges(8, 9)
