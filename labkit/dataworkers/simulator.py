"""A trace-driven cluster simulator: static CPU-per-GPU provisioning vs elastic data workers.

The cluster (:class:`Cluster`): GPU servers with a fixed number of GPUs and CPUs each, plus
CPU-only servers. Static provisioning is how jobs run without GoldMiner: a job's input pipeline
runs on its own server, with the CPUs that come with its GPUs. Elastic data workers run on any
CPU in the cluster (GPU servers' unused CPUs and the CPU-only servers), allocated among the
running jobs by the same :func:`~labkit.dataworkers.scheduler.allocate` that drives live jobs.
GPUs are scheduled the same way in both: first come, first served, gang allocation.

Everything here is **modelled**: the figures are outputs of this model on a trace the lab chose.

The trace (:func:`synthetic_trace`) is drawn, seeded, from a :class:`WorkloadMix`. What the paper
says about its cluster's jobs (see PAPERS.md): they are image models whose CPUs decode and augment,
and recommendation (CTR) models whose CPUs run feature transforms; their CPU-per-GPU demands differ
from the fixed ratio the servers give; the cluster has 64 GPUs. The paper's mix as summarised there
gives no numbers, so every number of :data:`MIX` is the lab's **assumption**, named in
:data:`ASSUMPTIONS`:
- job families (share of jobs; median vCPUs per GPU to never starve the GPU, lognormal with
  sigma 0.35 around it): image/video (decode + augmentation) 45%, median 24; CTR/recommendation
  (feature transforms) 30%, median 12; NLP/speech (tokenisation; light) 25%, median 3;
- GPUs per job: 1, 2, 4, 8 with probabilities 0.45, 0.25, 0.2, 0.1;
- size: GPU time at full speed, lognormal with median 1 h and sigma 1.0, capped at 24 h;
- arrivals: Poisson, rate set so the offered load is `load` times the GPU capacity when every
  job runs at full speed (0.4 in the bench);
- the cluster: 8 servers of 8 GPUs and 64 vCPUs (8 per GPU), plus 4 CPU-only servers of 96 vCPUs.
A job's speed is min(1, CPUs it gets / CPUs it demands); its GPUs are "utilised" by that factor.
:func:`sensitivity` replays one trace with every job's demand scaled, to show how the JCT gain
depends on the CPU-per-GPU demand.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from labkit.core.errors import bad_value, check_choice, check_range, check_seed
from labkit.dataworkers.scheduler import JobDemand, allocate



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


#: The lab's assumptions behind :data:`MIX` and :class:`Cluster`'s defaults (the paper gives no number).
ASSUMPTIONS = {
    "families": "job families and their shares: image/video 45%, CTR/recommendation 30%, NLP/speech 25%",
    "demand": "median vCPUs per GPU that keep a GPU busy: image 24, CTR 12, NLP 3; lognormal, sigma 0.35",
    "gpus": "GPUs per job: 1, 2, 4, 8 with probabilities 0.45, 0.25, 0.2, 0.1",
    "size": "GPU time at full speed: lognormal, median 1 h, sigma 1.0, capped at 24 h",
    "arrivals": "Poisson arrivals at an offered load of 0.4 of the GPUs (jobs at full speed)",
    "cluster": "8 servers of 8 GPUs and 64 vCPUs, plus 4 CPU-only servers of 96 vCPUs",
}


@dataclass(frozen=True)
class Family:
    """One kind of job in a mix: its share of jobs and its CPU-per-GPU demand.

    `cpus_per_gpu` is the median vCPUs per GPU that keep the job's GPUs busy; a job's own demand
    is lognormal around it with `sigma`. `pipeline` says what those CPUs do.
    """

    name: str
    share: float
    cpus_per_gpu: float
    sigma: float = 0.35
    pipeline: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise bad_value("name", self.name, "a non-empty family name")
        check_range("share", self.share, 0, 1, lo_open=True)
        check_range("cpus_per_gpu", self.cpus_per_gpu, 0, float("inf"), lo_open=True, hi_open=True)
        check_range("sigma", self.sigma, 0, 5)


@dataclass(frozen=True)
class WorkloadMix:
    """The distribution a trace is drawn from: job families, GPUs per job, job sizes.

    Family shares and GPU-size probabilities each sum to 1; a job's demand is never below
    `min_cpus_per_gpu`. :data:`MIX` is the lab's default (see :data:`ASSUMPTIONS`).
    """

    families: tuple[Family, ...] = (
        Family("image", 0.45, 24.0, 0.35, "JPEG/video decode + augmentation (ResNet/ViT-style vision jobs)"),
        Family("ctr", 0.30, 12.0, 0.35, "feature transforms: hashing, bucketising, crosses (recommendation jobs)"),
        Family("nlp", 0.25, 3.0, 0.35, "tokenisation and padding (light pre-processing)"),
    )
    gpu_sizes: tuple[tuple[int, float], ...] = ((1, 0.45), (2, 0.25), (4, 0.20), (8, 0.10))
    work_median_h: float = 1.0
    work_sigma: float = 1.0
    work_cap_h: float = 24.0
    min_cpus_per_gpu: float = 0.5

    def __post_init__(self) -> None:
        fams = tuple(self.families) if isinstance(self.families, (list, tuple)) else None
        if not fams or not all(isinstance(f, Family) for f in fams):
            raise bad_value("families", self.families, "a non-empty tuple of Family")
        if len({f.name for f in fams}) != len(fams):
            raise bad_value("families", [f.name for f in fams], "families with distinct names")
        if abs(sum(f.share for f in fams) - 1) > 1e-6:
            raise bad_value("families", [f.share for f in fams], "shares that sum to 1")
        sizes = tuple(self.gpu_sizes) if isinstance(self.gpu_sizes, (list, tuple)) else None
        if not sizes or not all(isinstance(s, (list, tuple)) and len(s) == 2 for s in sizes):
            raise bad_value("gpu_sizes", self.gpu_sizes, "a non-empty tuple of (gpus, probability)")
        for g, p in sizes:
            check_range("gpu_sizes gpus", g, 1, integer=True)
            check_range("gpu_sizes probability", p, 0, 1)
        if abs(sum(p for _, p in sizes) - 1) > 1e-6:
            raise bad_value("gpu_sizes", [p for _, p in sizes], "probabilities that sum to 1")
        check_range("work_median_h", self.work_median_h, 0, lo_open=True)
        check_range("work_sigma", self.work_sigma, 0, 5)
        check_range("work_cap_h", self.work_cap_h, 0, lo_open=True)
        check_range("min_cpus_per_gpu", self.min_cpus_per_gpu, 0, lo_open=True)
        object.__setattr__(self, "families", fams)
        object.__setattr__(self, "gpu_sizes", tuple((int(g), float(p)) for g, p in sizes))

    def scaled(self, factor: float) -> "WorkloadMix":
        """Return this mix with every family's CPU-per-GPU demand multiplied by `factor`."""
        check_range("factor", factor, 0, float("inf"), lo_open=True, hi_open=True)
        return replace(self, families=tuple(replace(f, cpus_per_gpu=f.cpus_per_gpu * factor)
                                            for f in self.families))

    def table(self) -> list[dict]:
        """One row per family: share, median CPU-per-GPU demand, spread, what the CPUs do."""
        return [{"family": f.name, "share of jobs": f.share, "median vCPUs per GPU": f.cpus_per_gpu,
                 "lognormal sigma": f.sigma, "pre-processing": f.pipeline} for f in self.families]


#: The lab's default workload mix (every number an assumption; see :data:`ASSUMPTIONS`).
MIX = WorkloadMix()


def synthetic_trace(n_jobs: int = 400, *, cluster: Cluster = Cluster(), load: float = 0.4,
                    seed: int = 0, mix: WorkloadMix = MIX) -> list[TraceJob]:
    """Return `n_jobs` jobs drawn, seeded, from `mix` (see the module docstring).

    The draws are made in a fixed order, so two mixes that differ only in their families'
    demands (``mix.scaled(f)``) give the same jobs, arrivals and sizes with scaled demands.
    """
    check_range("n_jobs", n_jobs, 1, integer=True)
    check_range("load", load, 0, lo_open=True)
    check_seed(seed)
    if not isinstance(mix, WorkloadMix):
        raise bad_value("mix", mix, "a WorkloadMix")
    rng = np.random.default_rng([int(seed), 6])
    sizes = np.array([g for g, _ in mix.gpu_sizes])
    gpus = rng.choice(sizes, n_jobs, p=[p for _, p in mix.gpu_sizes])
    fams = mix.families
    fam = rng.choice(len(fams), n_jobs, p=[f.share for f in fams])
    sigma = np.array([fams[f].sigma for f in fam])
    demand = np.array([fams[f].cpus_per_gpu for f in fam]) * np.exp(sigma * rng.standard_normal(n_jobs))
    work = np.minimum(rng.lognormal(np.log(mix.work_median_h * 3600.0), mix.work_sigma, n_jobs),
                      mix.work_cap_h * 3600.0)
    mean_gpu_s = float(np.mean(gpus * work))
    rate = load * cluster.gpus / mean_gpu_s  # jobs per second
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n_jobs))
    return [TraceJob(i, float(arrivals[i]), int(gpus[i]), float(max(demand[i], mix.min_cpus_per_gpu)),
                     float(work[i]), fams[fam[i]].name)
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


def policy_speeds(jobs: list[TraceJob], policy: str, cluster: Cluster = Cluster()) -> dict[int, float]:
    """Return each running job's speed (share of its GPUs kept busy) under policy 'static' or 'elastic'.

    Static: a job has its GPUs' own vCPUs. Elastic: the cluster's pooled vCPUs go where they keep
    the most GPUs busy (:func:`~labkit.dataworkers.scheduler.allocate`), so the busy GPUs summed
    over `jobs` are never fewer than static's whenever the jobs fit the cluster's GPUs.
    """
    check_choice("policy", policy, ("static", "elastic"))
    if policy == "static":
        return {j.jid: min(1.0, cluster.cpus_per_gpu / j.demand_per_gpu) for j in jobs}
    # One CPU keeps demand_per_gpu**-1 of a GPU busy; the policy spreads the pooled CPUs.
    plan = allocate([JobDemand(j.jid, j.gpus, 1.0, j.gpus * j.demand_per_gpu) for j in jobs], cluster.cpus)
    return {j.jid: min(1.0, plan[j.jid] / (j.gpus * j.demand_per_gpu)) for j in jobs}


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

    planned: list = [None]  # the running jobs the speeds were last planned for

    def speeds() -> None:
        # Speeds depend only on which jobs run (in start order): re-plan only when that changes.
        key = tuple(running)
        if running and key != planned[0]:
            sp = policy_speeds([r[0] for r in running.values()], policy, cluster)
            for jid, r in running.items():
                r[2] = sp[jid]
            planned[0] = key

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


#: Mean CPU-per-GPU demands the sensitivity study sweeps by default (vCPUs per GPU, GPU-weighted).
SENSITIVITY_DEMANDS = (1.0, 2.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0)


def trace_demand(trace: list[TraceJob]) -> float:
    """Return the trace's mean CPU-per-GPU demand, weighted by each job's GPU time (vCPUs per GPU)."""
    w = np.array([j.gpus * j.work_s for j in trace])
    return float(np.dot(w, [j.demand_per_gpu for j in trace]) / w.sum())


def sensitivity(demands: tuple = SENSITIVITY_DEMANDS, n_jobs: int = 400, *, cluster: Cluster = Cluster(),
                load: float = 0.4, seed: int = 0, mix: WorkloadMix = MIX, include_base: bool = True) -> Any:
    """Return a DataFrame: the modelled JCT and GPU-utilisation gains at each mean CPU-per-GPU demand.

    One trace is drawn from `mix`; for each level of `demands` every job's demand is scaled so the
    trace's mean demand (:func:`trace_demand`) is that level, the mix of families, sizes and
    arrivals staying the same. With `include_base` the trace's own mean demand is a level too
    (its row, ``base`` True, is :func:`compare`'s result on the same trace). Columns: ``demand``
    (the level), ``base``, ``max_job_demand``,
    ``starved_static`` (share of jobs whose demand exceeds the GPUs' own vCPUs),
    ``static_avg_jct_h``, ``elastic_avg_jct_h``, ``jct_gain`` (static / elastic average JCT) and
    ``gpu_util_gain`` (elastic / static). Where no job needs more than the GPUs' own vCPUs both
    policies run every job at full speed and the gain is exactly 1.
    """
    import pandas as pd

    if not isinstance(demands, (list, tuple, np.ndarray)) or len(demands) == 0:
        raise bad_value("demands", demands, "a non-empty list of mean vCPUs per GPU > 0")
    for d in demands:
        check_range("demands", d, 0, float("inf"), lo_open=True, hi_open=True)
    base = synthetic_trace(n_jobs, cluster=cluster, load=load, seed=seed, mix=mix)
    if any(j.gpus > cluster.gpus for j in base):
        raise ValueError(f"trace has a job with more than the cluster's {cluster.gpus} GPUs; expected jobs that fit")
    base_mean = trace_demand(base)
    levels = {float(x): False for x in demands}
    if include_base:
        levels[base_mean] = True
    rows = []
    for d in sorted(levels):
        f = d / base_mean
        trace = base if levels[d] else [replace(j, demand_per_gpu=j.demand_per_gpu * f) for j in base]
        st, el = simulate(trace, "static", cluster), simulate(trace, "elastic", cluster)
        rows.append({"demand": d, "base": levels[d], "max_job_demand": max(j.demand_per_gpu for j in trace),
                     "starved_static": float(np.mean([j.demand_per_gpu > cluster.cpus_per_gpu for j in trace])),
                     "static_avg_jct_h": st.avg_jct / 3600, "elastic_avg_jct_h": el.avg_jct / 3600,
                     "jct_gain": st.avg_jct / el.avg_jct, "gpu_util_gain": el.gpu_util / st.gpu_util})
    out = pd.DataFrame(rows)
    out.attrs.update(base_demand=base_mean, cpus_per_gpu=cluster.cpus_per_gpu,
                     pooled_cpus_per_gpu=cluster.cpus / cluster.gpus, n_jobs=int(n_jobs), load=float(load))
    return out
