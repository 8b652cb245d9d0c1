"""Training is real (accuracy well above chance), and every system trains on the very same batches."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from labkit.core.memory import MemoryBudget
from labkit.disk.sampler import NeighborSampler, batch_seeds
from labkit.disk.store import MemoryFeatures, MemoryTopology
from labkit.disk.system import SYSTEMS, dataset_bytes, open_system, presample, reference_budget
from labkit.disk.train import ModelConfig, Trainer


@pytest.mark.parametrize("model, floor", [("sage", 0.4), ("gat", 0.2)])
def test_models_learn_the_planted_communities(ds, model, floor):
    """30 small mini-batches lift held-out accuracy far above chance (1/16 communities)."""
    mt, mf = MemoryTopology.from_dataset(ds), MemoryFeatures.from_dataset(ds)
    labels = ds.array("labels", mmap=False)
    chance = 1 / ds.meta["num_classes"]
    cfg = ModelConfig(model, (5, 5), hidden=32, heads=4, batch_size=256, lr=1e-2)
    tr = Trainer(cfg, mf.dim, int(ds.meta["num_classes"]), seed=0)
    sampler = NeighborSampler(mt, list(cfg.fanouts), seed=0)
    val = ds.array("val", mmap=False)
    b = sampler.sample(val, 10**6)
    before = tr.evaluate(b, mf.gather(b.n_id), labels)
    for i, s in enumerate(batch_seeds(ds.array("train"), cfg.batch_size, 30, seed=1)):
        bt = sampler.sample(s, i)
        tr.step(bt, mf.gather(bt.n_id), labels)
    after = tr.evaluate(b, mf.gather(b.n_id), labels)
    assert before < 2 * chance < floor <= after
    assert np.mean(tr.accs[-5:]) > np.mean(tr.accs[:5])


def _digest(batch, x) -> str:
    h = hashlib.sha256()
    for a in (batch.n_id, batch.edge_src, batch.edge_dst, batch.node_hops, batch.edge_hops, np.ascontiguousarray(x)):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _trained_batches(system, seeds) -> list[str]:
    seen = []
    step = system.trainer.step

    def record(batch, x, labels):
        seen.append((batch.index, _digest(batch, x)))
        return step(batch, x, labels)

    system.trainer.step = record
    r = system.run(seeds)
    assert r.batches == len(seeds)
    assert [i for i, _ in seen] == list(range(len(seeds)))  # in order, whatever the schedule
    return [d for _, d in seen]


def test_every_system_trains_on_identical_batches(ds):
    """Sampled graph and gathered features reach the trainer bit for bit the same in every mode."""
    cfg = ModelConfig("sage", (5, 5), hidden=16, batch_size=256)
    seeds = batch_seeds(ds.array("train"), cfg.batch_size, 7, seed=3)
    pseeds, seeds = seeds[:2], seeds[2:]
    budget = int(0.5 * dataset_bytes(ds))  # caches hold part of the graph: hits and misses both
    pre = presample(ds, cfg, pseeds, MemoryBudget(budget))
    runs = {}
    for name, kw in [(n, {}) for n in SYSTEMS] + [("caliex", {"group": 2, "samplers": 2})]:
        b = MemoryBudget(budget) if name != "memory" else reference_budget()
        s = open_system(name, ds, b, cfg, pre=pre, **kw)
        try:
            runs[(name, tuple(kw.items()))] = _trained_batches(s, seeds)
            if name in ("ginex", "caliex"):
                m = s.metrics()
                assert 0 < m["hit_rate_features"] < 1, name
        finally:
            s.close()
        assert b.used == 0
    ref = runs[("memory", ())]
    assert len(set(ref)) == len(seeds)
    for key, got in runs.items():
        assert got == ref, key


class _SlowTrainer:
    """Stands in for the model: each step takes a while, so a pipeline without bounds would run ahead."""

    def __init__(self, events, seconds=0.05):
        self.events, self.seconds = events, seconds

    def step(self, batch, x, labels):
        import time
        self.events.append(("train", batch.index, time.perf_counter()))
        time.sleep(self.seconds)
        return 0.0, 0.0


@pytest.mark.parametrize("depth, samplers, group", [(1, 1, 1), (2, 2, 1), (1, 1, 2)])
def test_pipeline_queues_are_bounded_and_charged(ds, depth, samplers, group):
    """A fast sampler never runs more than the queues' capacity ahead of a slow trainer."""
    import time

    from labkit.core.memory import BudgetExceeded
    from labkit.disk.pipeline import run_pipelined
    mt, mf = MemoryTopology.from_dataset(ds), MemoryFeatures.from_dataset(ds)
    labels = ds.array("labels", mmap=False)
    seeds = batch_seeds(ds.array("train"), 64, 10, seed=2)
    events: list = []
    sampler = NeighborSampler(mt, [3, 3], seed=0)
    sample_group = sampler.sample_group

    def timed_group(ss, idx):
        out = sample_group(ss, idx)
        events.extend(("sampled", i, time.perf_counter()) for i in idx)
        return out

    sampler.sample_group = timed_group
    b = MemoryBudget("64MiB")
    r = run_pipelined(sampler, mf, _SlowTrainer(events), seeds, labels, b, depth=depth, slot_bytes=(1000, 2000),
                      samplers=samplers, group=group)
    assert r.batches == 10 and b.used == 0
    cap = depth * samplers * group
    # slots reserved up front, grown to the largest batch (these batches exceed 1000 / 2000 bytes)
    assert b.peak >= cap * 1000 + depth * 2000
    events.sort(key=lambda e: e[2])
    done = 0
    for kind, i, _ in events:
        if kind == "sampled":
            done += 1
        else:  # when the trainer takes batch i: batches up to i + depth taken by the gatherer, cap more sampled
            assert done <= i + 1 + depth + cap + group, (i, done)
    # A budget that holds the first slots but not the grown ones refuses instead of overrunning.
    tight = MemoryBudget(cap * 1000 + depth * 2000 + 100)
    with pytest.raises(BudgetExceeded):
        run_pipelined(NeighborSampler(mt, [3, 3], seed=0), mf, _SlowTrainer([], 0.0), seeds, labels, tight,
                      depth=depth, slot_bytes=(1000, 2000), samplers=samplers, group=group)
    assert tight.used == 0 and tight.peak <= tight.total
