"""Fuzz GoldMiner's public entry points that take user data: each case returns a correct result or one line."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch import nn

from labkit.dataworkers.scheduler import JobDemand, allocate
from labkit.dataworkers.transport import flatten, pack, packed_size, unflatten, unpack
from labkit.dataworkers.workers import ProcessWorkerPool
from labkit.dataworkers.workloads import Program
from tests.fuzz import FUZZ_SETTINGS, Refused, fuzz_call


class _Samples:
    """A dataset as GoldMiner's are: indexed by sample key (key // len is the epoch, key % len the sample)."""

    def __init__(self, data):
        self.data = data

    def __len__(self):
        return len(self.data)

    def __getitem__(self, key):
        return self.data[key % len(self.data)]


def _program(data, batch_size, seed=0):
    return Program("toy", _Samples(data), lambda xs: torch.tensor(xs, dtype=torch.float32), nn.Linear(1, 1),
                   nn.functional.mse_loss, batch_size, seed)


numbers = st.floats(allow_nan=True, allow_infinity=True, width=32)


@settings(parent=FUZZ_SETTINGS, max_examples=200)
@given(st.lists(numbers, max_size=40),
       st.one_of(st.integers(1, 6), st.integers(-2, 50), st.floats(allow_nan=True), st.sampled_from(["4", None, True])),
       st.one_of(st.integers(-2, 3), st.just(1.5)), st.one_of(st.none(), st.integers(-1, 5), st.just(2.5)),
       st.one_of(st.integers(0, 100), st.integers(-1, 2**64), st.just("s")))
def test_fuzz_program_batches_and_load(data, batch_size, epoch, limit, seed):
    """Empty datasets, NaN elements, any batch size, epoch, limit and seed."""
    try:
        prog = fuzz_call("dataworkers.Program", _program, data, batch_size, seed)
        batches = fuzz_call("dataworkers.Program.batches", prog.batches, epoch, limit)
    except Refused:
        return
    n = len(data)
    assert len(batches) == (n // batch_size if limit is None else min(n // batch_size, limit))
    keys = [k for b in batches for k in b]
    assert all(len(b) == batch_size for b in batches) and len(set(keys)) == len(keys)
    assert all(epoch * n <= k < (epoch + 1) * n for k in keys)
    for b in batches[:2]:
        got = fuzz_call("dataworkers.Program.load", prog.load, b, refuse_ok=False)
        want = torch.tensor([data[k % n] for k in b], dtype=torch.float32)
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num())


@settings(parent=FUZZ_SETTINGS, max_examples=150)
@given(st.one_of(st.lists(st.integers(-3, 60), max_size=6), st.lists(st.floats(allow_nan=True), max_size=2),
                 st.sampled_from([[], "12", [[1, 2]], [True], None, [1, "2"]])))
def test_fuzz_program_load_keys(keys):
    prog = _program([float(i) for i in range(20)], 4)
    try:
        got = fuzz_call("dataworkers.Program.load", prog.load, keys)
    except Refused:
        return
    assert torch.equal(got, torch.tensor([float(k % 20) for k in keys]))


def _full(shape, v, dt) -> np.ndarray:
    with np.errstate(over="ignore"):  # a float32 value beyond float16's range becomes inf, as a cast does
        return np.full(shape, v).astype(dt)


arrays = st.one_of(
    st.builds(_full,
              st.lists(st.integers(0, 4), max_size=3).map(tuple), numbers,
              st.sampled_from([np.float32, np.float64, np.float16])),
    st.builds(lambda n: np.arange(n, dtype=np.int64), st.integers(0, 50)),
)
trees = st.recursive(arrays | arrays.map(torch.from_numpy) | st.sampled_from([None, 3, "s"]),
                     lambda c: st.lists(c, max_size=3) | st.lists(c, max_size=3).map(tuple)
                     | st.dictionaries(st.text(max_size=3), c, max_size=3), max_leaves=8)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a.nan_to_num(), b.nan_to_num()) \
            and torch.equal(a.isnan(), b.isnan())
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@settings(parent=FUZZ_SETTINGS, max_examples=200)
@given(trees)
def test_fuzz_transport_round_trip(batch):
    """A batch of any shape (NaN, empty arrays, nesting) comes back through a slot exactly as it went."""
    layout, arrs = fuzz_call("dataworkers.flatten", flatten, batch, refuse_ok=False)
    buf = memoryview(bytearray(max(1, packed_size(arrs))))
    specs = fuzz_call("dataworkers.pack", pack, buf, arrs, refuse_ok=False)
    back = unflatten(layout, fuzz_call("dataworkers.unpack", unpack, buf, specs, refuse_ok=False))
    assert _same(batch, back)


rates = st.one_of(st.floats(0, 100), numbers)


@settings(parent=FUZZ_SETTINGS, max_examples=200)
@given(st.lists(st.tuples(st.one_of(st.integers(-1, 8), st.just(1.5)), rates, rates,
                          st.one_of(st.integers(-1, 4), st.just(math.nan))), max_size=5),
       st.one_of(st.integers(-2, 64), st.floats(allow_nan=True)))
def test_fuzz_allocate(specs, cpus):
    try:
        jobs = [fuzz_call("dataworkers.JobDemand", JobDemand, i, g, w, r, m) for i, (g, w, r, m) in enumerate(specs)]
        out = fuzz_call("dataworkers.allocate", allocate, jobs, cpus)
    except Refused:
        return
    assert set(out) == set(range(len(jobs))) and sum(out.values()) <= cpus
    assert all(v >= 0 for v in out.values())
    if sum(j.min_cpus for j in jobs) <= cpus:
        assert all(out[j.name] >= j.min_cpus for j in jobs)


class _Part:
    """A picklable transform: `op` on each key, raising on the keys in `bad`."""

    def __init__(self, op: str, bad: frozenset):
        self.op, self.bad = op, bad

    def __call__(self, keys):
        if self.bad & set(keys):
            raise RuntimeError(f"corrupt sample {min(self.bad & set(keys))}")
        x = np.asarray(keys, np.float64)
        if self.op == "nan":
            return {"x": torch.from_numpy(np.where(x % 2 == 0, np.nan, x)), "n": len(keys)}
        if self.op == "empty":
            return (np.zeros((0, len(keys)), np.float32), [x])
        return torch.from_numpy(x * 2).reshape(-1, 1)


@pytest.mark.slow
@settings(parent=FUZZ_SETTINGS, max_examples=12)
@example("double", 2, 1, [[1, 2], [3, 4], [5, 6]], frozenset({5}))
@example("nan", 1, 2, [], frozenset())
@given(st.sampled_from(["nan", "empty", "double"]), st.integers(1, 2), st.integers(1, 3),
       st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=5), max_size=6), st.frozensets(st.integers(0, 40),
                                                                                                 max_size=2))
def test_fuzz_process_pool_pipeline(op, workers, depth, batches, bad):
    """Random transforms, worker counts and batches (some elements raise): batches in order, or one line."""
    part = _Part(op, bad)
    with ProcessWorkerPool(part, workers=workers, depth=depth, batch_timeout=30) as pool:
        try:
            got = fuzz_call("dataworkers.ProcessWorkerPool.stream", lambda: list(pool.stream(batches)))
        except Refused as r:
            assert bad and "corrupt sample" in str(r) and "failed on batch" in str(r)
            return
    assert not any(bad & set(b) for b in batches)
    assert len(got) == len(batches)
    for b, g in zip(batches, got):
        assert _same(part(b), g)
