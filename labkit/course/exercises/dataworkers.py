"""GoldMiner exercises: the stateless cut, the autoscaler's step, exactly-once re-issue.

Each exercise is one piece of the paper's machinery in :mod:`labkit.dataworkers`, small enough
for a notebook cell: which transforms of a pipeline may move to data workers (the cut of
:mod:`~labkit.dataworkers.extract`), how many workers to settle on from measured throughput (the
hill climbing of :mod:`~labkit.dataworkers.autoscale`, and the marginal-gain rule of
:func:`~labkit.dataworkers.scheduler.allocate`), and which batches a dead worker's death owes
again (the bookkeeping of the process pool's exactly-once delivery).
"""

from __future__ import annotations

import math
import time
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from labkit.course.exercise import Case, Exercise, register
from labkit.course.exercises._checks import case as _case
from labkit.course.exercises._checks import compile_reference as _compile


def _equal(fn: Callable, name: str, args: tuple, expected: Any, kwargs: dict | None = None) -> Case:
    import copy
    a, kw = copy.deepcopy(args), dict(kwargs or {})
    return _case(name, lambda: fn(*a, **kw), lambda got: got == expected, expected)


# =====================================================================================
# 1. The stateless cut
# =====================================================================================

_CUT_STUB = '''def movable_steps(steps):
    """Return the names of the pipeline steps that can move to data workers, in pipeline order.

    `steps` lists the transforms in execution order, one dict each:
      name        (str) the step's name
      reads       names of the values it takes; default: the step before it (the program's
                  input for the first step). A name no step has is a program input.
      params      True if it reads a parameter or buffer (model state)
      rng         "global" (draws from the process's random generator), "seeded" (draws from a
                  generator seeded by (seed, sample index)) or None
      inplace     True if it mutates its input
      side_effect True if it writes anything else (a file, a counter, stdout)
    Missing keys mean False/None. A step is stateless when it reads no parameter or buffer, draws
    from no global RNG, mutates nothing and has no side effect. A seeded random crop is stateless:
    its output is a function of (seed, sample index), so any worker reproduces it. A step moves
    when it is stateless and everything it reads moved too (or is a program input).

    >>> movable_steps([{"name": "decode"}, {"name": "crop", "rng": "seeded"},
    ...                {"name": "conv", "params": True}, {"name": "relu"}])
    ['decode', 'crop']
    """
'''

_CUT_SOLUTION = '''    names = {s["name"] for s in steps}
    moved, out, prev = set(), [], None
    for s in steps:
        reads = s.get("reads")
        if reads is None:
            reads = [] if prev is None else [prev]
        pure = not (s.get("params") or s.get("inplace") or s.get("side_effect")) and s.get("rng") != "global"
        if pure and all(r in moved or r not in names for r in reads):
            moved.add(s["name"])
            out.append(s["name"])
        prev = s["name"]
    return out
'''

_cut_ref = _compile(_CUT_STUB, _CUT_SOLUTION, "movable_steps")


def _random_pipeline(rng: np.random.Generator, n: int) -> list[dict]:
    steps = []
    for i in range(n):
        s: dict[str, Any] = {"name": f"s{i}"}
        r = rng.random()
        if r < 0.15:
            s["params"] = True
        elif r < 0.22:
            s["rng"] = "global"
        elif r < 0.35:
            s["rng"] = "seeded"
        elif r < 0.40:
            s["inplace"] = True
        elif r < 0.43:
            s["side_effect"] = True
        if i and rng.random() < 0.5:  # a DAG: read one or two earlier values or a program input
            picks = {int(j) for j in rng.integers(-2, i, int(rng.integers(1, 3)))}
            s["reads"] = [f"s{j}" if j >= 0 else "xy"[j] for j in sorted(picks)]
        steps.append(s)
    return steps


def _describe_graph(model) -> tuple[list[dict], list[str], set[str]]:
    """A traced model as step dicts (what each node does), the operators labkit's cut moves, and the
    constants (get_attr nodes: labkit moves them with the operators that read them, unlisted)."""
    from labkit.dataworkers.extract import _split_model, node_verdict, trace
    from labkit.dataworkers.workloads import Program

    gm = trace(model, type(model).__name__)
    params = {n for n, _ in model.named_parameters()}
    buffers = {n for n, _ in model.named_buffers()}
    steps = []
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        why = node_verdict(node, gm, params, buffers)
        steps.append({"name": node.name, "reads": [a.name for a in node.all_input_nodes],
                      "params": "parameter" in why or "buffer" in why,
                      "rng": "global" if "RNG" in why else None,
                      "inplace": "in-place" in why, "side_effect": "side effect" in why})
    n_inputs = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    program = Program(type(model).__name__, list(range(4)), list, model, lambda y, t: y.sum(), 1)
    cut = _split_model(program, n_inputs).cut
    return steps, list(cut.prefix_nodes), {n.name for n in gm.graph.nodes if n.op == "get_attr"}


def _graph_models():
    import torch

    from labkit.dataworkers.workloads import CtrModel, ImageClassifier
    torch.manual_seed(0)
    return {"CtrModel": CtrModel(4), "ImageClassifier": ImageClassifier()}


def _cut_check(fn: Callable):
    steps = [{"name": "decode"}, {"name": "jitter", "rng": "global"}, {"name": "normalize"}]
    yield _equal(fn, "empty pipeline", ([],), [])
    yield _equal(fn, "one stateless step", ([{"name": "decode"}],), ["decode"])
    yield _equal(fn, "one stateful step", ([{"name": "batchnorm", "params": True}],), [])
    yield _equal(fn, "seeded random crop is stateless",
                 ([{"name": "decode"}, {"name": "crop", "rng": "seeded"}, {"name": "flip", "rng": "seeded"}],),
                 ["decode", "crop", "flip"])
    yield _equal(fn, "global-RNG augmentation stops the cut", (steps,), ["decode"])
    yield _equal(fn, "in-place op stops the cut",
                 ([{"name": "cast"}, {"name": "clamp_", "inplace": True}, {"name": "log1p"}],), ["cast"])
    yield _equal(fn, "side effect stops the cut",
                 ([{"name": "decode"}, {"name": "log_to_file", "side_effect": True}, {"name": "scale"}],),
                 ["decode"])
    yield _equal(fn, "steps after a stateful one stay",
                 ([{"name": "a"}, {"name": "emb", "params": True}, {"name": "b"}, {"name": "c"}],), ["a"])
    yield _equal(fn, "a branch off the input still moves",
                 ([{"name": "clamp", "reads": ["dense"]}, {"name": "salt", "params": True, "reads": []},
                   {"name": "add", "reads": ["ids", "salt"]}, {"name": "log1p", "reads": ["clamp"]}],),
                 ["clamp", "log1p"])
    yield _equal(fn, "stateless step reading a stateful one stays",
                 ([{"name": "w", "params": True, "reads": []}, {"name": "scale", "reads": ["x"]},
                   {"name": "mul", "reads": ["scale", "w"]}],), ["scale"])
    rng = np.random.default_rng(32)
    bad = None
    for trial in range(40):
        p = _random_pipeline(rng, int(rng.integers(1, 30)))
        want = _cut_ref(p)
        c = _equal(fn, "random pipelines", (p,), want)
        if not c.passed:
            bad = Case(c.name, False, f"pipeline {trial}: {c.detail}")
            break
    yield bad or Case("random pipelines", True, "")
    for name, model in _graph_models().items():
        steps, labkit_moved, consts = _describe_graph(model)

        def same(got, labkit_moved=labkit_moved, consts=consts):
            ops = [n for n in got if n not in consts]
            return ops == labkit_moved or f"labkit's extract moves the operators {labkit_moved}"
        yield _case(f"{name}: the same cut as labkit's extract", lambda s=steps: fn(s), same)


def _cut_measure(fn: Callable) -> dict:
    out: dict[str, Any] = {}
    agree = 0
    for name, model in _graph_models().items():
        steps, labkit_moved, consts = _describe_graph(model)
        got = [n for n in fn(steps) if n not in consts]
        out[f"{name}_student"] = ", ".join(map(str, got))
        out[f"{name}_labkit"] = ", ".join(labkit_moved)
        agree += got == labkit_moved
    p = _random_pipeline(np.random.default_rng(1), 20_000)
    t0 = time.perf_counter()
    fn(p)
    t1 = time.perf_counter()
    _cut_ref(p)
    t2 = time.perf_counter()
    out.update({"models_agreeing": agree, "student_s": t1 - t0, "reference_s": t2 - t1,
                "note": "the cut on the traced graphs of the lab's CTR and image models, beside labkit's "
                        "extract; times on a 20,000-step random pipeline"})
    return out


register(Exercise(
    id="dataworkers.stateless_cut", system="dataworkers", title="Which transforms can move to data workers",
    func="movable_steps", stub=_CUT_STUB, solution=_CUT_SOLUTION, check=_cut_check, measure=_cut_measure,
    goal="A transform is movable when it reads no model state, no global RNG and writes nothing; a seeded "
         "random crop is a function of (seed, sample index), so it moves too.",
    reference="labkit.dataworkers.extract:extract",
    forbid=("labkit.dataworkers.extract", "labkit.dataworkers"), minutes=20, tags=("goldminer", "cut")))


# =====================================================================================
# 2. The autoscaler's step
# =====================================================================================

_SCALE_STUB = '''def workers_to_keep(rates, gain=0.07):
    """Return how many data workers to settle on, hill climbing on measured throughput.

    rates[i] is the trainer's measured throughput (batches/s) with i + 1 data workers. Start at
    one worker and add one while the step pays: going from n to n + 1 workers pays when
    rates[n] > rates[n - 1] * (1 + gain), strictly. Stop at the first step that does not pay,
    even if a later one would (the autoscaler only sees the step it tries). With no
    measurements at all, return 0.

    >>> workers_to_keep([10.0, 19.0, 26.0, 27.0, 40.0])
    3
    """
'''

_SCALE_SOLUTION = '''    if len(rates) == 0:
        return 0
    n = 1
    while n < len(rates) and rates[n] > rates[n - 1] * (1 + gain):
        n += 1
    return n
'''

_scale_ref = _compile(_SCALE_STUB, _SCALE_SOLUTION, "workers_to_keep")


def _demand_curve(job, max_workers: int) -> list[float]:
    return [job.progress(c) for c in range(1, max_workers + 1)]


def _random_jobs(rng: np.random.Generator, n: int):
    from labkit.dataworkers.scheduler import JobDemand
    return [JobDemand(f"job{i}", int(rng.integers(1, 9)), float(rng.uniform(5, 60)), float(rng.uniform(20, 800)))
            for i in range(n)]


def _scale_check(fn: Callable):
    from labkit.dataworkers.scheduler import allocate

    yield _equal(fn, "no measurements", ([],), 0)
    yield _equal(fn, "one measurement", ([12.5],), 1)
    yield _equal(fn, "the docstring's example", ([10.0, 19.0, 26.0, 27.0, 40.0],), 3)
    yield _equal(fn, "flat curve stays at one worker", ([50.0, 50.0, 50.0],), 1)
    yield _equal(fn, "gain exactly at the threshold does not pay", ([10.0, 15.0, 30.0],), 1, {"gain": 0.5})
    yield _equal(fn, "a step that does not pay stops the climb", ([10.0, 10.2, 30.0, 60.0],), 1)
    yield _equal(fn, "the threshold is the gain argument", ([10.0, 14.0, 30.0],), 1, {"gain": 0.5})
    yield _equal(fn, "starting from zero throughput", ([0.0, 5.0, 9.0],), 3)
    yield _equal(fn, "zero throughput throughout", ([0.0, 0.0, 0.0],), 1)
    yield _equal(fn, "every step pays", ([1.0, 2.0, 4.0, 8.0],), 4)
    # With gain 0 the climb stops where the job's GPUs saturate: labkit's scheduler gives one job the same.
    rng = np.random.default_rng(7)
    bad = None
    for job in _random_jobs(rng, 30):
        m = 32
        want = max(1, min(m, allocate([job], m)[job.name]))
        c = _equal(fn, "gain 0 agrees with labkit's scheduler.allocate", (_demand_curve(job, m),), want, {"gain": 0.0})
        if not c.passed:
            bad = Case(c.name, False, f"{job}: {c.detail}")
            break
    yield bad or Case("gain 0 agrees with labkit's scheduler.allocate", True, "")
    bad = None
    for trial in range(60):
        rates = list(np.cumsum(rng.exponential(1.0, int(rng.integers(1, 12))) * rng.choice([0.05, 1.0], 1)))
        rates = [float(x) * float(rng.uniform(0.9, 1.1)) for x in rates]
        c = _equal(fn, "noisy measured curves", (rates,), _scale_ref(rates))
        if not c.passed:
            bad = c
            break
    yield bad or Case("noisy measured curves", True, "")


def _scale_measure(fn: Callable) -> dict:
    from labkit.dataworkers.scheduler import allocate

    rng = np.random.default_rng(3)
    jobs = _random_jobs(rng, 400)
    m = 64
    curves = [[r * float(rng.uniform(0.95, 1.05)) for r in _demand_curve(j, m)] for j in jobs]  # measured: noisy
    t0 = time.perf_counter()
    got = [int(fn(c)) for c in curves]
    t1 = time.perf_counter()
    ref = [_scale_ref(c) for c in curves]
    t2 = time.perf_counter()
    best = [max(1, allocate([j], m)[j.name]) for j in jobs]
    busy = lambda ns: float(np.mean([j.progress(n) / j.gpus for j, n in zip(jobs, ns)]))  # noqa: E731
    return {"student_s": t1 - t0, "reference_s": t2 - t1,
            "student_workers_mean": float(np.mean(got)), "reference_workers_mean": float(np.mean(ref)),
            "allocate_workers_mean": float(np.mean(best)),
            "student_gpu_busy": busy(got), "reference_gpu_busy": busy(ref), "allocate_gpu_busy": busy(best),
            "note": "400 jobs' throughput curves (labkit's JobDemand, +-5% noise); the hill climb at gain 0.07 "
                    "beside labkit's marginal-gain allocation, which knows the curve exactly"}


register(Exercise(
    id="dataworkers.autoscale_step", system="dataworkers", title="How many data workers to add",
    func="workers_to_keep", stub=_SCALE_STUB, solution=_SCALE_SOLUTION, check=_scale_check, measure=_scale_measure,
    goal="Add a data worker only while the measured throughput rises by more than a threshold; noise and "
         "saturation make the threshold, not the curve's maximum, the stopping rule.",
    reference="labkit.dataworkers.scheduler:allocate",
    forbid=("labkit.dataworkers.autoscale", "labkit.dataworkers.scheduler", "labkit.dataworkers"),
    minutes=15, tags=("goldminer", "autoscale")))


# =====================================================================================
# 3. Exactly-once delivery: which batches a death owes
# =====================================================================================

_ONCE_STUB = '''def batches_to_reissue(events):
    """Return the batches to issue again after worker deaths, in the order they are re-issued.

    `events` is the pool's log in time order, tuples of:
      ("send", seq, worker)    batch `seq` was sent to `worker`
      ("result", seq, worker)  `worker` returned batch `seq` (a batch may be returned twice when it
                               was sent to two workers; the second result is a duplicate)
      ("die", worker)          `worker` died: what it held without a result is lost
    At each death, the batches the dead worker held that no worker has returned yet are
    re-issued, lowest seq first; the list returned concatenates them death by death. A batch
    already returned (by any worker) is never re-issued: delivery is exactly once.

    >>> batches_to_reissue([("send", 0, "a"), ("send", 1, "a"), ("result", 0, "a"), ("die", "a")])
    [1]
    """
'''

_ONCE_SOLUTION = '''    held, returned, out = {}, set(), []
    for ev in events:
        if ev[0] == "send":
            held.setdefault(ev[2], set()).add(ev[1])
        elif ev[0] == "result":
            returned.add(ev[1])
            held.get(ev[2], set()).discard(ev[1])
        elif ev[0] == "die":
            out.extend(sorted(s for s in held.pop(ev[1], set()) if s not in returned))
    return out
'''

_once_ref = _compile(_ONCE_STUB, _ONCE_SOLUTION, "batches_to_reissue")


def _labkit_reissue(events: list) -> list[int]:
    """Replay `events` through the process pool's own bookkeeping (ProcessWorkerPool._bury)."""
    import collections

    from labkit.dataworkers.workers.common import PoolStats
    from labkit.dataworkers.workers.process_pool import ProcessWorkerPool

    workers: dict[Any, SimpleNamespace] = {}
    ready: dict[int, Any] = {}
    keys: dict[int, list[int]] = {}
    out: list[int] = []
    pool = SimpleNamespace(_workers={}, slots=SimpleNamespace(release=lambda slot: None), stats=PoolStats(),
                           respawn=False, _owed_respawns=0)
    for ev in events:
        if ev[0] in ("send", "result"):
            w = workers.setdefault(ev[2], SimpleNamespace(
                wid=ev[2], inflight={}, retiring=False, conn=SimpleNamespace(close=lambda: None),
                proc=SimpleNamespace(join=lambda timeout=None: None)))
            pool._workers[ev[2]] = w
            keys[ev[1]] = [ev[1]]
            if ev[0] == "send":
                w.inflight[ev[1]] = (None, 0.0)
            else:
                w.inflight.pop(ev[1], None)
                ready[ev[1]] = True
        elif ev[0] == "die" and ev[1] in workers:
            todo: collections.deque = collections.deque()
            ProcessWorkerPool._bury(pool, workers.pop(ev[1]), todo, ready, 0, keys)
            out.extend(todo)
    return out


def _pool_log(rng: np.random.Generator, n_batches: int, n_workers: int, p_die: float) -> list[tuple]:
    """A pool's event log: batches dealt out, returned, sometimes twice (speculation), workers dying and
    replaced, owed batches sent again to the living."""
    events: list[tuple] = []
    alive = list(range(n_workers))
    held: dict[int, list[int]] = {w: [] for w in alive}
    nxt, returned, owed, wid = 0, set(), [], n_workers
    while nxt < n_batches or owed or any(held.values()):
        r = rng.random()
        if r < p_die and alive:
            w = alive.pop(int(rng.integers(len(alive))))
            events.append(("die", w))
            owed += sorted(s for s in held.pop(w) if s not in returned)
            alive.append(wid)
            held[wid] = []
            wid += 1
        elif r < 0.55 and (owed or nxt < n_batches):
            w = alive[int(rng.integers(len(alive)))]
            s = owed.pop(0) if owed else nxt
            if s == nxt:
                nxt += 1
            events.append(("send", s, w))
            held[w].append(s)
            if rng.random() < 0.05 and len(alive) > 1:  # a speculative second copy
                w2 = alive[(alive.index(w) + 1) % len(alive)]
                events.append(("send", s, w2))
                held[w2].append(s)
        else:
            busy = [w for w in alive if held[w]]
            if not busy:
                continue
            w = busy[int(rng.integers(len(busy)))]
            s = held[w].pop(0)
            events.append(("result", s, w))
            returned.add(s)
    return events


def _once_check(fn: Callable):
    yield _equal(fn, "no events", ([],), [])
    yield _equal(fn, "the docstring's example",
                 ([("send", 0, "a"), ("send", 1, "a"), ("result", 0, "a"), ("die", "a")],), [1])
    yield _equal(fn, "no death, nothing to re-issue",
                 ([("send", 0, "a"), ("send", 1, "b"), ("result", 1, "b")],), [])
    yield _equal(fn, "a worker dies holding nothing", ([("send", 0, "a"), ("result", 0, "a"), ("die", "a")],), [])
    yield _equal(fn, "a returned batch is not re-issued",
                 ([("send", 0, "a"), ("send", 1, "a"), ("send", 2, "a"), ("result", 1, "a"), ("die", "a")],), [0, 2])
    yield _equal(fn, "lowest seq first",
                 ([("send", 7, "a"), ("send", 3, "a"), ("send", 5, "a"), ("die", "a")],), [3, 5, 7])
    yield _equal(fn, "a speculative copy already returned",
                 ([("send", 4, "a"), ("send", 4, "b"), ("result", 4, "b"), ("die", "a")],), [])
    yield _equal(fn, "only the dead worker's batches",
                 ([("send", 0, "a"), ("send", 1, "b"), ("send", 2, "a"), ("die", "b")],), [1])
    yield _equal(fn, "a re-issued batch lost again is re-issued again",
                 ([("send", 0, "a"), ("die", "a"), ("send", 0, "b"), ("die", "b")],), [0, 0])
    yield _equal(fn, "deaths in order, each sorted",
                 ([("send", 5, "a"), ("send", 1, "b"), ("send", 3, "a"), ("send", 0, "b"), ("die", "a"),
                   ("die", "b")],), [3, 5, 0, 1])
    yield _equal(fn, "a worker that was never sent anything dies", ([("send", 0, "a"), ("die", "z")],), [])
    rng = np.random.default_rng(11)
    bad = None
    for trial in range(25):
        log = _pool_log(rng, int(rng.integers(1, 60)), int(rng.integers(1, 5)), 0.06)
        c = _equal(fn, "random pool logs, as labkit's pool re-issues", (log,), _labkit_reissue(log))
        if not c.passed:
            bad = Case(c.name, False, f"log {trial} ({len(log)} events): {c.detail}")
            break
    yield bad or Case("random pool logs, as labkit's pool re-issues", True, "")


def _once_measure(fn: Callable) -> dict:
    log = _pool_log(np.random.default_rng(5), 20_000, 8, 0.002)
    t0 = time.perf_counter()
    got = list(fn(log))
    t1 = time.perf_counter()
    ref = _labkit_reissue(log)
    t2 = time.perf_counter()
    from collections import Counter
    g, r = Counter(got), Counter(ref)
    return {"student_s": t1 - t0, "reference_s": t2 - t1, "events": len(log),
            "deaths": sum(1 for e in log if e[0] == "die"), "reissued_reference": len(ref),
            "reissued_student": len(got), "lost": sum((r - g).values()), "duplicated": sum((g - r).values()),
            "note": "a 20,000-batch epoch on 8 workers with deaths and speculative copies, replayed through "
                    "labkit's process pool bookkeeping (the reference) and the student's; lost batches "
                    "would never reach the trainer, duplicated ones would reach it twice"}


register(Exercise(
    id="dataworkers.exactly_once", system="dataworkers", title="Exactly-once delivery when workers die",
    func="batches_to_reissue", stub=_ONCE_STUB, solution=_ONCE_SOLUTION, check=_once_check, measure=_once_measure,
    goal="Exactly-once delivery is bookkeeping: a dead worker's batches are owed again unless some worker "
         "already returned them; speculation and repeated deaths are where it goes wrong.",
    reference="labkit.dataworkers.workers.process_pool:ProcessWorkerPool._bury",
    forbid=("labkit.dataworkers.workers", "labkit.dataworkers"), minutes=15, tags=("goldminer", "fault tolerance")))


# =====================================================================================
# 4. Sharing CPUs among jobs
# =====================================================================================

_SHARE_STUB = '''def share_cpus(jobs, cpus):
    """Share `cpus` data-worker CPUs among jobs so that the most GPUs are kept busy; return CPUs per job.

    Each job is a dict {"gpus": int, "worker_rate": float, "gpu_rate": float, "min_cpus": int}:
    one CPU's data worker makes worker_rate batches/s, the job's GPUs consume gpu_rate batches/s.
    With c CPUs a job keeps gpus * min(1, c * worker_rate / gpu_rate) GPUs busy (0 when
    gpu_rate is 0): each CPU adds the same until the GPUs saturate, then nothing.
    First give every job its min_cpus, jobs with more GPUs first, while CPUs last. Then hand
    out the rest one CPU at a time to the job whose busy GPUs would grow most (ties: the
    earlier job). A CPU that would add nothing anywhere stays free. Return a list of ints in
    job order.

    >>> share_cpus([{"gpus": 1, "worker_rate": 10.0, "gpu_rate": 30.0, "min_cpus": 1},
    ...             {"gpus": 2, "worker_rate": 10.0, "gpu_rate": 20.0, "min_cpus": 1}], 4)
    [2, 2]
    """
'''

_SHARE_SOLUTION = '''    def busy(j, c):
        if j["gpu_rate"] <= 0:
            return 0.0
        return j["gpus"] * min(1.0, c * j["worker_rate"] / j["gpu_rate"])

    out = [0] * len(jobs)
    left = cpus
    for i in sorted(range(len(jobs)), key=lambda i: -jobs[i]["gpus"]):
        give = min(jobs[i]["min_cpus"], left)
        out[i] += give
        left -= give
    while left > 0:
        gains = [busy(j, out[i] + 1) - busy(j, out[i]) for i, j in enumerate(jobs)]
        best = max(range(len(jobs)), key=lambda i: (gains[i], -i), default=None)
        if best is None or gains[best] <= 1e-12:
            break
        out[best] += 1
        left -= 1
    return out
'''

_share_ref = _compile(_SHARE_STUB, _SHARE_SOLUTION, "share_cpus")


def _as_demands(jobs: list[dict]):
    from labkit.dataworkers.scheduler import JobDemand
    return [JobDemand(i, j["gpus"], j["worker_rate"], j["gpu_rate"], j["min_cpus"]) for i, j in enumerate(jobs)]


def _share_ok(jobs: list[dict], cpus: int) -> Callable[[Any], Any]:
    """Right when it fits, and keeps as many GPUs busy with as many CPUs as labkit's allocate (ties may differ)."""
    from labkit.dataworkers.scheduler import allocate
    demands = _as_demands(jobs)
    plan = allocate(demands, cpus)
    want = [plan[i] for i in range(len(jobs))]
    best = sum(d.progress(c) for d, c in zip(demands, want))

    def ok(got):
        got = list(got)
        if len(got) != len(jobs) or any(int(c) != c or c < 0 for c in got):
            return f"one CPU count (an integer >= 0) per job, {len(jobs)} in all"
        busy = sum(d.progress(int(c)) for d, c in zip(demands, got))
        if sum(got) > cpus:
            return f"hands out {sum(got)} CPUs of {cpus}"
        if not math.isclose(busy, best, rel_tol=1e-9, abs_tol=1e-9):
            return f"keeps {busy:.4g} GPUs busy; labkit's allocate keeps {best:.4g} with {want}"
        if sum(got) != sum(want):
            return f"uses {sum(got)} CPUs for that; labkit's allocate uses {sum(want)} and leaves the rest free"
        return True
    return ok


def _share_case(fn: Callable, name: str, jobs: list[dict], cpus: int) -> Case:
    import copy
    j = copy.deepcopy(jobs)
    return _case(name, lambda: fn(j, cpus), _share_ok(jobs, cpus))


def _job(gpus: int, worker_rate: float, gpu_rate: float, min_cpus: int = 1) -> dict:
    return {"gpus": gpus, "worker_rate": worker_rate, "gpu_rate": gpu_rate, "min_cpus": min_cpus}


def _share_check(fn: Callable):
    yield _share_case(fn, "the docstring's example", [_job(1, 10.0, 30.0), _job(2, 10.0, 20.0)], 4)
    yield _share_case(fn, "no jobs", [], 8)
    yield _share_case(fn, "no CPUs", [_job(1, 10.0, 30.0), _job(4, 5.0, 50.0)], 0)
    yield _share_case(fn, "CPUs that add nothing stay free", [_job(1, 10.0, 30.0)], 10)
    yield _share_case(fn, "a fractional last CPU still counts", [_job(2, 10.0, 25.0, 0)], 10)
    yield _share_case(fn, "minimums go to the larger jobs first", [_job(1, 10.0, 100.0), _job(4, 10.0, 100.0)], 1)
    yield _share_case(fn, "the largest marginal gain wins",
                      [_job(1, 10.0, 100.0, 0), _job(4, 10.0, 100.0, 0), _job(2, 1.0, 100.0, 0)], 6)
    yield _share_case(fn, "a job with no GPU demand gets only its minimum",
                      [_job(1, 10.0, 0.0, 2), _job(1, 10.0, 40.0, 0)], 8)
    yield _share_case(fn, "a job whose minimum exceeds its need keeps it",
                      [_job(1, 10.0, 10.0, 3), _job(1, 5.0, 20.0)], 6)
    rng = np.random.default_rng(19)
    inputs = []
    for _ in range(25):
        n = int(rng.integers(1, 12))
        jobs = [_job(int(rng.choice([1, 2, 4, 8])), float(rng.uniform(1, 20)), float(rng.uniform(0, 300)),
                     int(rng.integers(0, 3))) for _ in range(n)]
        inputs.append((jobs, int(rng.integers(0, 120))))
    bad = None
    for k, (jobs, cpus) in enumerate(inputs):
        c = _share_case(fn, "random clusters, as labkit's allocate shares", jobs, cpus)
        if not c.passed:
            bad = Case(c.name, False, f"cluster {k} ({len(jobs)} jobs, {cpus} CPUs): {c.detail}")
            break
    yield bad or Case("random clusters, as labkit's allocate shares", True, "")


def _share_measure(fn: Callable) -> dict:
    from labkit.dataworkers import simulator

    trace = simulator.synthetic_trace(150, seed=3)
    timing = {"student_s": 0.0, "calls": 0}

    def student_allocate(demands, cpus):
        jobs = [{"gpus": d.gpus, "worker_rate": d.worker_rate, "gpu_rate": d.gpu_rate, "min_cpus": d.min_cpus}
                for d in demands]
        t0 = time.perf_counter()
        got = fn(jobs, cpus)
        timing["student_s"] += time.perf_counter() - t0
        timing["calls"] += 1
        return {d.name: int(c) for d, c in zip(demands, got)}

    original = simulator.allocate
    simulator.allocate = student_allocate
    try:
        student = simulator.simulate(trace, "elastic")
    finally:
        simulator.allocate = original
    t0 = time.perf_counter()
    reference = simulator.simulate(trace, "elastic")
    ref_s = time.perf_counter() - t0
    static = simulator.simulate(trace, "static")
    return {"student_avg_jct_h": student.avg_jct / 3600, "reference_avg_jct_h": reference.avg_jct / 3600,
            "static_avg_jct_h": static.avg_jct / 3600, "student_gpu_util": student.gpu_util,
            "reference_gpu_util": reference.gpu_util, "static_gpu_util": static.gpu_util,
            "student_s": timing["student_s"], "reference_s": ref_s, "allocations": timing["calls"],
            "note": "GoldMiner's 64-GPU cluster simulator (150 jobs, MODELLED) with the student's policy in place of "
                    "labkit's allocate, beside labkit's and the static CPUs-per-GPU baseline; reference_s is the "
                    "whole simulation's time, student_s only the policy's"}


register(Exercise(
    id="dataworkers.share_cpus", system="dataworkers", title="Share a cluster's CPUs among jobs",
    func="share_cpus", stub=_SHARE_STUB, solution=_SHARE_SOLUTION, check=_share_check, measure=_share_measure,
    goal="Each CPU goes where it keeps the most GPUs busy; with concave, piecewise-linear progress this greedy "
         "marginal-gain rule is optimal, and it is what lets elastic workers beat a fixed CPU:GPU ratio.",
    reference="labkit.dataworkers.scheduler:allocate",
    forbid=("labkit.dataworkers.scheduler", "labkit.dataworkers"), minutes=20, tags=("goldminer", "scheduling")))
