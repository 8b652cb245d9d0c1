"""A trace-driven cluster simulator: static CPU-per-GPU provisioning vs elastic data workers.

The cluster (:class:`Cluster`): GPU servers with a fixed number of GPUs and CPUs each, plus
CPU-only servers. Static provisioning is how jobs run without GoldMiner: a job's input pipeline
runs on its own server, with the CPUs that come with its GPUs. Elastic data workers run on any
CPU in the cluster (GPU servers' unused CPUs and the CPU-only servers), allocated among the
running jobs by the same :func:`~labkit.dataworkers.scheduler.allocate` that drives live jobs.
GPUs are scheduled the same way in both: first come, first served, gang allocation.

The trace (:func:`synthetic_trace`) is a documented synthetic distribution:
- arrivals: Poisson, rate set so the offered load is `load` times the GPU capacity when every
  job runs at full speed;
- GPUs per job: 1, 2, 4, 8 with probabilities 0.45, 0.25, 0.2, 0.1;
- job family (sets the CPU:GPU demand, vCPUs needed per GPU to never starve it, lognormal with
  sigma 0.35 around the family median): image/video (decode + augmentation) 45%, median 24;
  CTR/recommendation feature transforms 30%, median 12; NLP/speech 25%, median 3;
- size: GPU time at full speed, lognormal with median 1 h and sigma 1.0, capped at 24 h.
A job's speed is min(1, CPUs it gets / CPUs it demands); its GPUs are "utilised" by that factor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from labkit.core.errors import bad_value, check_choice, check_range, check_seed
from labkit.dataworkers.scheduler import JobDemand, allocate

FAMILIES = {"image": (0.45, 24.0), "ctr": (0.30, 12.0), "nlp": (0.25, 3.0)}
GPU_SIZES = ((1, 0.45), (2, 0.25), (4, 0.20), (8, 0.10))


@dataclass(frozen=True)
class Cluster:
    """GPU servers (each with `gpus_per_server` GPUs and `cpus_per_server` vCPUs) plus CPU-only servers.

    Sizes are integers: at least one GPU server with one GPU, at least one vCPU per GPU, and any
    number (>= 0) of CPU-only servers; anything else raises ValueError naming the field.
    """

    gpu_servers: int = 8
    gpus_per_server: int = 8
    cpus_per_server: int = 64
    cpu_servers: int = 4
    cpus_per_cpu_server: int = 96

    def __post_init__(self) -> None:
        for f in ("gpu_servers", "gpus_per_server"):
            check_range(f, getattr(self, f), 1, integer=True)
        # At least one vCPU per GPU, or a static job would never make progress.
        check_range("cpus_per_server", self.cpus_per_server, 0, integer=True)
        if self.cpus_per_server < self.gpus_per_server:
            raise bad_value("cpus_per_server", self.cpus_per_server,
                            f"an integer >= gpus_per_server={self.gpus_per_server} (one vCPU per GPU at least)")
        for f in ("cpu_servers", "cpus_per_cpu_server"):
            check_range(f, getattr(self, f), 0, integer=True)

    @property
    def gpus(self) -> int:
        return self.gpu_servers * self.gpus_per_server

    @property
    def cpus_per_gpu(self) -> int:
        return self.cpus_per_server // self.gpus_per_server

    @property
    def cpus(self) -> int:
        """Every vCPU elastic data workers may use."""
        return self.gpu_servers * self.cpus_per_server + self.cpu_servers * self.cpus_per_cpu_server


@dataclass(frozen=True)
class TraceJob:
    """One job of the trace: arrival (s), GPUs, CPU demand per GPU, and GPU-seconds of work per GPU."""

    jid: int
    arrival: float
    gpus: int
    demand_per_gpu: float
    work_s: float
    family: str


def synthetic_trace(n_jobs: int = 400, *, cluster: Cluster = Cluster(), load: float = 0.4,
                    seed: int = 0) -> list[TraceJob]:
    """Return `n_jobs` jobs drawn from the distribution in the module docstring."""
    check_range("n_jobs", n_jobs, 1, integer=True)
    check_range("load", load, 0, lo_open=True)
    check_seed(seed)
    rng = np.random.default_rng([int(seed), 6])
    sizes = np.array([g for g, _ in GPU_SIZES])
    gpus = rng.choice(sizes, n_jobs, p=[p for _, p in GPU_SIZES])
    fams = list(FAMILIES)
    fam = rng.choice(len(fams), n_jobs, p=[FAMILIES[f][0] for f in fams])
    demand = np.array([FAMILIES[fams[f]][1] for f in fam]) * rng.lognormal(0.0, 0.35, n_jobs)
    work = np.minimum(rng.lognormal(np.log(3600.0), 1.0, n_jobs), 24 * 3600.0)
    mean_gpu_s = float(np.mean(gpus * work))
    rate = load * cluster.gpus / mean_gpu_s  # jobs per second
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n_jobs))
    return [TraceJob(i, float(arrivals[i]), int(gpus[i]), float(max(demand[i], 0.5)), float(work[i]), fams[fam[i]])
            for i in range(n_jobs)]


@dataclass
class SimResult:
    """Average JCT, GPU utilisation and per-job details of one simulated policy."""

    policy: str
    jct: dict[int, float]
    busy_gpu_s: float
    allocated_gpu_s: float
    span_s: float
    gpus: int
    util_timeline: list[tuple[float, float]] = field(default_factory=list)  # (t, busy GPUs / allocated GPUs)

    @property
    def avg_jct(self) -> float:
        return float(np.mean(list(self.jct.values())))

    @property
    def gpu_util(self) -> float:
        """Busy GPU-time over allocated GPU-time: how much of the GPUs jobs hold is doing work."""
        return self.busy_gpu_s / self.allocated_gpu_s if self.allocated_gpu_s else 0.0

    @property
    def cluster_util(self) -> float:
        """Busy GPU-time over all GPU-time until the last job finished."""
        return self.busy_gpu_s / (self.gpus * self.span_s) if self.span_s else 0.0


def simulate(trace: list[TraceJob], policy: str, cluster: Cluster = Cluster()) -> SimResult:
    """Replay `trace` under policy 'static' or 'elastic' and return the measured SimResult."""
    check_choice("policy", policy, ("static", "elastic"))
    if not isinstance(trace, (list, tuple)) or not trace:
        raise bad_value("trace", trace if not isinstance(trace, (list, tuple)) else list(trace),
                        "a non-empty list of TraceJob (see synthetic_trace)")
    if any(j.gpus > cluster.gpus for j in trace):
        raise ValueError(f"trace has a job with more than the cluster's {cluster.gpus} GPUs; expected jobs that fit")
    pending = sorted(trace, key=lambda j: j.arrival)
    queue: list[TraceJob] = []
    running: dict[int, list] = {}  # jid -> [job, remaining_work_s, speed]
    free = cluster.gpus
    t = 0.0
    i = 0
    jct: dict[int, float] = {}
    busy = alloc = 0.0
    timeline: list[tuple[float, float]] = []

    def speeds() -> None:
        if not running:
            return
        jobs = [r[0] for r in running.values()]
        if policy == "static":
            for r in running.values():
                r[2] = min(1.0, cluster.cpus_per_gpu / r[0].demand_per_gpu)
            return
        # One CPU keeps demand_per_gpu**-1 of a GPU busy; the policy spreads the pooled CPUs.
        demands = [JobDemand(j.jid, j.gpus, 1.0, j.gpus * j.demand_per_gpu) for j in jobs]
        plan = allocate(demands, cluster.cpus)
        for r in running.values():
            r[2] = min(1.0, plan[r[0].jid] / (r[0].gpus * r[0].demand_per_gpu))

    while i < len(pending) or queue or running:
        # Start queued jobs in arrival order while the head fits (FIFO, no backfilling).
        started = False
        while queue and queue[0].gpus <= free:
            j = queue.pop(0)
            running[j.jid] = [j, j.work_s, 0.0]
            free -= j.gpus
            started = True
        if started or not timeline or timeline[-1][0] != t:
            speeds()
            b = sum(r[0].gpus * r[2] for r in running.values())
            a = sum(r[0].gpus for r in running.values())
            timeline.append((t, b / a if a else 0.0))
        t_arr = pending[i].arrival if i < len(pending) else float("inf")
        t_done, done_id = float("inf"), None
        for jid, (j, rem, sp) in running.items():
            if sp > 0 and t + rem / sp < t_done:
                t_done, done_id = t + rem / sp, jid
        t_next = min(t_arr, t_done)
        dt = t_next - t
        for r in running.values():
            r[1] -= r[2] * dt
            busy += r[0].gpus * r[2] * dt
            alloc += r[0].gpus * dt
        t = t_next
        if t_done <= t_arr and done_id is not None:
            j = running.pop(done_id)[0]
            free += j.gpus
            jct[j.jid] = t - j.arrival
        else:
            queue.append(pending[i])
            i += 1
        speeds()
    return SimResult(policy, jct, busy, alloc, t - min(j.arrival for j in trace), cluster.gpus, timeline)


def compare(n_jobs: int = 400, *, cluster: Cluster = Cluster(), load: float = 0.4, seed: int = 0) -> dict:
    """Simulate static and elastic on one trace; return both results and the improvement ratios."""
    trace = synthetic_trace(n_jobs, cluster=cluster, load=load, seed=seed)
    st = simulate(trace, "static", cluster)
    el = simulate(trace, "elastic", cluster)
    return {"static": st, "elastic": el, "jct_improvement": st.avg_jct / el.avg_jct,
            "gpu_util_improvement": el.gpu_util / st.gpu_util,
            "cluster_util_improvement": el.cluster_util / st.cluster_util}
