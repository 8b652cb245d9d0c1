"""Bad input to the GoldMiner policy, simulator and programs: one-line errors naming the argument."""

from __future__ import annotations

import math

import numpy as np
import pytest

from labkit.dataworkers.scheduler import JobDemand, allocate
from labkit.dataworkers.simulator import Cluster, compare, simulate, synthetic_trace


def test_allocate_refuses_jobs_that_share_a_name():
    # They used to be merged silently into one entry of the plan.
    jobs = [JobDemand("a", 1, 1.0, 4.0), JobDemand("b", 1, 1.0, 4.0), JobDemand("a", 2, 1.0, 8.0)]
    with pytest.raises(ValueError, match=r"jobs\[2\].name='a' is not accepted; expected a name no other job"):
        allocate(jobs, 8)
    with pytest.raises(ValueError, match=r"jobs\[0\]='a' is not accepted; expected a JobDemand"):
        allocate(["a"], 8)
    plan = allocate(jobs[:2], 8)
    assert plan == {"a": 4, "b": 4}


@pytest.mark.parametrize("kw, match", [
    ({"gpus": -1}, r"gpus=-1 is not accepted; expected an integer in \[1, inf\]"),
    ({"gpus": 0}, r"gpus=0 "),
    ({"gpus": 1.5}, r"gpus=1.5 "),
    ({"worker_rate": float("nan")}, r"worker_rate=nan is not accepted; expected a number in \[0, inf\)"),
    ({"worker_rate": -1.0}, r"worker_rate=-1.0 "),
    ({"gpu_rate": float("nan")}, r"gpu_rate=nan "),
    ({"gpu_rate": float("inf")}, r"gpu_rate=inf "),
    ({"gpu_rate": "fast"}, r"gpu_rate='fast' "),
    ({"min_cpus": -1}, r"min_cpus=-1 "),
])
def test_job_demand_validates_its_fields(kw, match):
    with pytest.raises(ValueError, match=match):
        JobDemand(**{"name": "j", "gpus": 1, "worker_rate": 1.0, "gpu_rate": 2.0, **kw})


def test_job_demand_accepts_numpy_numbers():
    j = JobDemand("j", np.int64(2), np.float32(1.5), np.float64(3.0))
    assert (j.gpus, j.worker_rate, j.gpu_rate) == (2, 1.5, 3.0) and type(j.gpus) is int
    assert j.progress(1) == 1.0 and j.saturating_cpus() == 2.0
    assert JobDemand("idle", 1, 0.0, 0.0).progress(4) == 0.0 and math.isinf(JobDemand("x", 1, 0.0, 1.0).saturating_cpus())


def test_simulate_refuses_an_empty_trace():
    # It used to fail in min() over an empty sequence.
    with pytest.raises(ValueError, match=r"trace=\[\] is not accepted; expected a non-empty list of TraceJob"):
        simulate([], "static")
    with pytest.raises(ValueError, match=r"trace="):
        simulate(None, "elastic")


@pytest.mark.parametrize("kw, match", [
    ({"gpus_per_server": 0}, r"gpus_per_server=0 is not accepted; expected an integer in \[1, inf\]"),
    ({"gpu_servers": 0}, r"gpu_servers=0 "),
    ({"cpu_servers": -1}, r"cpu_servers=-1 "),
    ({"cpus_per_cpu_server": 1.5}, r"cpus_per_cpu_server=1.5 "),
    ({"cpus_per_server": 4}, r"cpus_per_server=4 is not accepted; expected an integer >= gpus_per_server=8"),
])
def test_cluster_validates_its_sizes(kw, match):
    # gpus_per_server=0 used to raise ZeroDivisionError in cpus_per_gpu.
    with pytest.raises(ValueError, match=match):
        Cluster(**kw)


def test_smallest_valid_cluster_still_simulates():
    # One vCPU per GPU and no CPU-only servers (the trace's jobs need up to 8 GPUs).
    c = Cluster(gpu_servers=1, gpus_per_server=8, cpus_per_server=8, cpu_servers=0)
    assert (c.gpus, c.cpus, c.cpus_per_gpu) == (8, 8, 1)
    trace = synthetic_trace(5, cluster=c, load=0.5)
    r = simulate(trace, "elastic", c)
    assert set(r.jct) == {j.jid for j in trace}
    assert compare(5, cluster=c)["jct_improvement"] > 0


@pytest.mark.parametrize("keys, match", [
    ([-1], r"keys\[0\]=-1 is not accepted; expected an integer sample key >= 0"),
    ([0, 1.5], r"keys\[1\]=1.5 "),
    ([True], r"keys\[0\]=True "),
    ([], r"keys=\[\] is not accepted; expected a non-empty list"),
    (3, r"keys='int' is not accepted"),
])
def test_program_load_validates_keys(image_prog, keys, match):
    # load([-1]) used to return a batch built from the last sample.
    with pytest.raises(ValueError, match=match):
        image_prog.load(keys)


def test_program_load_accepts_keys_from_batches(image_prog):
    keys = image_prog.batches(1)[0]
    assert min(keys) >= len(image_prog.dataset)          # epoch 1 keys lie past the dataset's length
    x, y = image_prog.load(keys)
    assert len(y) == image_prog.batch_size
    x2, _ = image_prog.load(np.array(keys))
    assert (x == x2).all()
