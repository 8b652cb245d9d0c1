"""CaliEX's public entry points refuse bad input with one line naming the argument and the value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from labkit.core.memory import MemoryBudget
from labkit.disk.sampler import batch_seeds
from labkit.disk.system import holdout_tuner, open_system, presample, workload
from labkit.disk.train import ModelConfig


@pytest.fixture(scope="module")
def setup(ds):
    _, cfg, budget, pseeds, seeds = workload("ci", "sage", 1, budget_fraction=2.0, presample_batches=2)
    return cfg, budget, presample(ds, cfg, pseeds, MemoryBudget(budget)), seeds


@pytest.mark.parametrize("kw, msg", [
    ({"num_batches": -1}, "num_batches=-1"), ({"num_batches": 0}, "num_batches=0"),
    ({"num_batches": 2.5}, "num_batches=2.5"), ({"presample_batches": -3}, "presample_batches=-3"),
    ({"presample_batches": 0}, "presample_batches=0"), ({"presample_batches": "8"}, "presample_batches='8'"),
])
def test_workload_checks_batch_counts(kw, msg):
    with pytest.raises(ValueError, match=f"^{msg} is not accepted; expected an integer in \\[1, inf\\]$"):
        workload("ci", "sage", **{"num_batches": 1, **kw})


def test_workload_accepts_numpy_counts():
    _, cfg, _, pre_seeds, seeds = workload("ci", "sage", np.int64(3), presample_batches=np.int64(2))
    assert len(seeds) == 3 and len(pre_seeds) == 2
    assert all(s.size == cfg.batch_size for s in seeds + pre_seeds)  # no odd lengths


@pytest.mark.parametrize("name, kw, msg", [
    ("caliex", {"split": math.nan}, "split=nan is not accepted; expected a number in"),
    ("caliex", {"split": 1.5}, "split=1.5 is not accepted"),
    ("caliex", {"group": 2.5}, "group=2.5 is not accepted; expected an integer"),
    ("caliex", {"group": 0}, "group=0 is not accepted"),
    ("naive", {"split": 0.5}, "split=0.5 is not accepted; expected None for system naive"),
    ("memory", {"split": 0.5}, "split=0.5 is not accepted; expected None for system memory"),
    ("ginex", {"group": 2}, "group=2 is not accepted; expected None for system ginex"),
    ("caliex", {"samplers": 0}, "samplers=0 is not accepted"),
    ("caliex", {"pre": None}, "pre=None is not accepted"),
    ("caliex", {"budget": [1]}, r"budget=\[1\] is not accepted; expected a MemoryBudget"),
    ("caliex", {"budget": -5}, "budget=-5 is not accepted"),
    ("caliex", {"cfg": "sage"}, "cfg='sage' is not accepted"),
])
def test_open_system_checks_before_building(ds, setup, name, kw, msg):
    cfg, budget_bytes, pre, _ = setup
    b = MemoryBudget(budget_bytes)
    args = {"budget": b, "cfg": cfg, "pre": pre, **kw}
    with pytest.raises(ValueError, match=msg):
        open_system(name, ds, args.pop("budget"), args.pop("cfg"), **args)
    assert b.used == 0  # refused before anything reserved


def test_open_system_takes_a_byte_count_as_budget(ds, setup):
    cfg, budget_bytes, pre, seeds = setup
    for budget in (budget_bytes, f"{budget_bytes >> 20}MiB"):
        s = open_system("naive", ds, budget, cfg, pre=pre)
        try:
            assert isinstance(s.budget, MemoryBudget) and s.budget.total > 0
            assert s.run(seeds[:1]).batches == 1 and s.budget.peak <= s.budget.total
        finally:
            s.close()
    s = open_system("caliex", ds, np.int64(budget_bytes), cfg, pre=pre, split=np.float64(0.25), group=np.int64(1))
    try:
        assert s.split == 0.25 and s.group == 1 and s.budget.total == budget_bytes
    finally:
        s.close()


def test_tuner_checks_its_inputs(ds, setup):
    _, _, pre, _ = setup
    ip = ds.array("indptr")
    t = holdout_tuner(pre, ip, 512, 1 << 20)
    for f in (math.nan, 2.0, -1, "0.5"):
        with pytest.raises(ValueError, match=r"^f=.* is not accepted; expected a number in \[0.0, 1.0\]$"):
            t.predict(f)
    assert t.predict(np.float64(0.5))["f"] == 0.5
    with pytest.raises(ValueError, match=r"^fs=\[\] is not accepted"):
        t.best(fs=[])
    with pytest.raises(ValueError, match="^fs=0.5 is not accepted"):
        t.curve(0.5)
    with pytest.raises(ValueError, match="^tolerance=-1 is not accepted"):
        t.best(tolerance=-1)
    f, curve = t.best(fs=[0.0, 1.0], tolerance=0)
    assert f in (0.0, 1.0) and len(curve) == 2
    with pytest.raises(ValueError, match="^group=1.5 is not accepted"):
        holdout_tuner(pre, ip, 512, 1 << 20, group=1.5)
    with pytest.raises(ValueError, match="^cache_bytes=-1 is not accepted"):
        holdout_tuner(pre, ip, 512, -1)
    with pytest.raises(ValueError, match="^row_bytes=0 is not accepted"):
        holdout_tuner(pre, ip, 0, 1 << 20)


def test_empty_seeds_are_named(ds, setup):
    cfg, budget_bytes, _, _ = setup
    empty = np.array([], np.int64)
    with pytest.raises(ValueError, match=r"^train=array\(\[\], dtype=int64\) is not accepted; expected a non-empty"):
        batch_seeds(empty, 4, 2)
    assert batch_seeds(empty, 4, 0) == []
    with pytest.raises(ValueError, match=r"^seeds=\[\] is not accepted; expected at least one mini-batch"):
        presample(ds, cfg, [], MemoryBudget(budget_bytes))
    with pytest.raises(ValueError, match="^train_batches=0 is not accepted"):
        presample(ds, cfg, batch_seeds(ds.array("train"), 8, 1), MemoryBudget(budget_bytes), train_batches=0)
    with pytest.raises(ValueError, match="^queue_depth=0 is not accepted"):
        presample(ds, cfg, batch_seeds(ds.array("train"), 8, 1), MemoryBudget(budget_bytes), queue_depth=0)


def test_bad_seeds_are_named_not_sampled(ds, setup):
    cfg, budget_bytes, _, seeds = setup
    n = len(ds.array("indptr")) - 1
    budget = MemoryBudget(budget_bytes)
    for bad, msg in ((np.array([0.9]), r"^seeds\[0\]=dtype\('float64'\) is not accepted; expected an integer"),
                     (np.array([3, 3]), r"^seeds\[0\]='an array with repeated ids' is not accepted"),
                     (np.array([n]), rf"^seeds\[0\]\[0\]={n} is not accepted; expected seed node ids in \[0, {n}\)"),
                     (np.array([-1]), r"^seeds\[0\]\[0\]=-1 is not accepted"),
                     (np.array([[1, 2]]), r"^seeds\[0\]='an array of shape \(1, 2\)' is not accepted")):
        with pytest.raises(ValueError, match=msg):
            presample(ds, cfg, [bad], budget)
    s = open_system("naive", ds, budget, cfg)
    try:
        with pytest.raises(ValueError, match=r"^seeds='ndarray' is not accepted; expected a list of seed arrays"):
            s.run(seeds[0])
        with pytest.raises(ValueError, match=r"^seeds\[1\]='an array with repeated ids'"):
            s.run([seeds[0], np.array([5, 5])])
    finally:
        s.close()


@pytest.mark.parametrize("kw, msg", [
    ({"hidden": -1}, "hidden=-1 is not accepted"), ({"hidden": 2.5}, "hidden=2.5 is"), ({"heads": 0}, "heads=0 is"),
    ({"lr": math.nan}, "lr=nan"), ({"lr": 0.0}, "lr=0.0"), ({"lr": math.inf}, "lr=inf"),
    ({"batch_size": 0}, "batch_size=0"), ({"fanouts": ()}, r"fanouts=\(\)"), ({"fanouts": (15, 0)}, r"fanouts\[1\]=0"),
    ({"name": "gat", "fanouts": (10, 10), "hidden": 10, "heads": 4}, "hidden=10 is not accepted; expected a multiple of heads=4"),
    ({"name": "gcn"}, "model='gcn'"),
])
def test_model_config_checks_every_field(kw, msg):
    with pytest.raises(ValueError, match=f"^{msg}"):
        ModelConfig(**kw)


def test_model_config_normalises_numpy_and_lists():
    c = ModelConfig("sage", [np.int64(4), 3], hidden=np.int64(16), batch_size=np.int32(8), lr=np.float32(0.01))
    assert c.fanouts == (4, 3) and type(c.hidden) is int and type(c.batch_size) is int and type(c.lr) is float
    assert ModelConfig.paper("gat").fanouts == (10, 10) and ModelConfig.paper("sage").hidden == 256
