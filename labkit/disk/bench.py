"""`labkit bench disk`: naive disk, Ginex-style, CaliEX and in-memory training, side by side.

Same graph, same budget (15% of the dataset's bytes at small/large), same mini-batches: every
round gives each system the same group of mini-batches, order rotated, in one process.

The speedup claims are per epoch of whole-job time: each contender's one-off setup (CaliEX's
pre-sampling and opening with its plans, tuner and cache fill; Ginex's opening and its
superbatches' sample-and-inspect phases; the in-memory system's load; naive's opening) plus
one epoch of mini-batches at the pace of each round. Each round gives one value of the ratio;
the claim is their median with a bootstrap 95% interval (``Bench.measure_samples``), and the
steady-state ratios (mini-batches only) are recorded beside them.
"""

from __future__ import annotations

import math
import os
import time
import resource

import numpy as np

from labkit.core.bench import Bench, Claim
from labkit.core.memory import MemoryBudget, fmt_bytes
from labkit.core.spread import spread
from labkit.core.systems import System, register
from labkit.disk.system import QUEUE_DEPTH, SAMPLERS, open_system, presample, reference_budget, workload

CLAIMS = [
    Claim("disk.speedup_naive", "CaliEX vs naive disk training per epoch, setup included, GraphSAGE [15,10,5] h256 b1024",
          "3.28x average over existing disk-based systems", target=3.28),
    Claim("disk.speedup_naive_gat", "CaliEX vs naive disk training per epoch, setup included, GAT 2 layers [10,10] 4 heads",
          "3.28x average over existing disk-based systems", target=3.28),
    Claim("disk.speedup_ginex", "CaliEX vs Ginex-style per epoch, setup included (degree neighbour cache, Belady "
          "over a superbatch spilled to disk, at Ginex's best superbatch size of a sweep up to one epoch)",
          "CaliEX beats Ginex (lab target)", target=1.5),
    Claim("disk.slowdown_vs_memory", "CaliEX time / in-memory time per epoch, setup included, GraphSAGE",
          "close to in-memory (lab target)", target=2.0, unit="x", op="<="),
    Claim("disk.tuner_gap", "auto-tuned split vs best split of a measured sweep (time / best - 1), the worse "
          "of two budgets whose best split is interior",
          "tuner picks the split (lab target)", target=0.05, unit="", op="<="),
    Claim("disk.peak_rss_vs_stated", "CaliEX peak RSS growth / (budget + model + overhead stated before the run)",
          "peak RSS within the budget plus the model and a stated fixed overhead (lab target)",
          target=1.0, unit="x", op="<="),
]

#: Per profile: mini-batches per timed call (16 at small/large: training runs for epochs of
#: hundreds of mini-batches, and CaliEX's pipeline first fills two sampling groups of 4 before
#: the trainer starts, so calls of 2 or 8 batches would weigh fill and drain far above what an
#: epoch pays; each call still pays them once, recorded as fill_s), timed rounds (5: the fewest
#: that give a bootstrap interval; the shared disk's speed drifts by a third between minutes, so
#: a claim whose interval straddles its target gets more rounds, up to `max_rounds`), budget as a
#: share of the dataset's bytes, Ginex's superbatch sizes (0 stands for one epoch's mini-batches),
#: the tuner's two budgets (shares of the dataset's bytes) with its split sweep (mini-batches per
#: call, rounds, splits: 16 per call as in the main comparison, since the tuner predicts
#: steady-state time per mini-batch; with calls of 4 the fill, which differs by split, moved the
#: measured best split from run to run) and the PyG-on-mmap anchor's mini-batches per group
#: (it takes seconds per batch).
#:
#: The tuner's budgets at small, 30% and 60% of the dataset's bytes, were chosen from a measured
#: sweep (splits 0, 0.25, 0.5, 0.75; 2 interleaved rounds of 16 mini-batches; median s per
#: mini-batch, on a quiet 2-core VM): at 15% (the main budget) the recorded sweep rises
#: monotonically with the topology share (0.37, 0.41, 0.49, 0.60, 0.73 at 0 .. 1), so the best
#: split is 0, on the boundary, and any tuner that gives the topology nothing has a gap of 0; at
#: 22%: 0.27, 0.35, 0.44, 0.60 (boundary again); at 30%: 0.32, 0.29, 0.30, 0.53 (best 0.25,
#: inside); at 45%: 0.230, 0.227, 0.257, 0.401 (0.25 by 1%, within noise); at 60%: 0.25, 0.25,
#: 0.24, 0.34 (best 0.5, inside). Past about a quarter of the graph the feature cache already
#: holds the rows most batches touch and caching neighbour lists too pays. The bench records
#: whether the best measured split is inside the sweep in each run (disk.tuner.b0/b1.best_interior).
SETTINGS = {"ci": {"per_call": 1, "repeats": 5, "max_rounds": 6, "fraction": 2.0, "superbatches": (1, 4, 0),
                   "tuner_fractions": (2.0, 1.0), "sweep_per_call": 1, "sweep_repeats": 5,
                   "sweep": (0.0, 0.5, 1.0)},
            "small": {"per_call": 16, "repeats": 5, "max_rounds": 7, "fraction": 0.15,
                      "superbatches": (4, 16, 64, 0), "pyg_rounds": 2, "pyg_per_call": 8,
                      "tuner_fractions": (0.30, 0.60), "sweep_per_call": 16, "sweep_repeats": 5,
                      "sweep": (0.0, 0.25, 0.5, 0.75)},
            "large": {"per_call": 16, "repeats": 5, "max_rounds": 7, "fraction": 0.15,
                      "superbatches": (4, 16, 64, 0), "pyg_rounds": 2, "pyg_per_call": 8,
                      "tuner_fractions": (0.30, 0.60), "sweep_per_call": 16, "sweep_repeats": 5,
                      "sweep": (0.0, 0.25, 0.5, 0.75)}}

#: How the tuner's budgets were chosen (said in the bench's notes).
TUNER_BUDGETS_NOTE = ("at the small profile the two budgets, 30% and 60% of the dataset's bytes, were chosen from "
                      "a measured sweep of splits at budgets of 15% to 60%: at 15% (the main budget) and 22% the "
                      "time rises with the topology share, so the best split is 0, on the boundary, and a gap there "
                      "says nothing; at 30% and 60% the best measured split lay inside the sweep (at ci the two "
                      "budgets only exercise the mechanism)")


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process (all threads, I/O threads included)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _read_cost(system) -> float:
    """Seconds the run's reads cost at the calibrated disk speed (requests and bytes, both files)."""
    t = 0.0
    for store in (system.topology, system.features):
        if hasattr(store, "file"):
            c, m = store.file.counters, store.policy.model
            t += m.cost(c.requests, c.bytes_read)
    return t


def epoch_seconds(setup_s: float, call_s, per_call: int, epoch_batches: float) -> list[float]:
    """Whole-job seconds of one epoch, one value per round: the one-off setup plus the epoch's
    mini-batches at that round's pace (`call_s`: seconds of a call of `per_call` mini-batches)."""
    return [float(setup_s) + float(epoch_batches) * float(t) / per_call for t in call_s]


def _index(k: int, i: int) -> int:
    """The index of mini-batch `i` of call `k` (its sampling draws depend on it), the same for every contender."""
    return 10_000 * (k + 1) + i


def _runner(system, groups: list[list[np.ndarray]]):
    """A callable that trains `system` on the next group of mini-batches each time it is called."""
    state = {"k": 0}

    def call():
        k = state["k"]
        state["k"] += 1
        c0 = _cpu_seconds()
        r = system.run(groups[k], first_index=_index(k, 0))
        if k > 0:  # not the warm-up call
            r.cpu_seconds = _cpu_seconds() - c0  # contenders run one at a time: the process's CPU is this one's
            system.info.setdefault("runs", []).append(r)
        return r
    return call


def _stream_runner(system, groups: list[list[np.ndarray]]):
    """Ginex over the same groups as one stream: its superbatch may span calls (up to an epoch's worth)."""
    flat = [s for g in groups for s in g]
    idx = [_index(k, i) for k, g in enumerate(groups) for i in range(len(g))]
    stream = system.stream(flat, indices=idx)
    system.info["stream"] = stream
    state = {"k": 0}

    def call():
        k = state["k"]
        state["k"] += 1
        c0 = _cpu_seconds()
        r = stream.run(len(groups[k]))
        if k > 0:
            r.cpu_seconds = _cpu_seconds() - c0
            system.info.setdefault("runs", []).append(r)
        return r
    return call


class _Epochs:
    """Per-round whole-job epoch seconds of every contender of one comparison (recomputed as rounds are added)."""

    def __init__(self, comp, systems: dict, setup: dict, per_call: int, epoch_batches: float) -> None:
        self.comp, self.systems, self.setup = comp, systems, setup
        self.per_call, self.epoch = per_call, epoch_batches

    def phase_rate(self, name: str) -> float:
        """Ginex: seconds of its sample-and-inspect phases per mini-batch they sampled (all its calls)."""
        st = self.systems[name].info["stream"]
        return st.phase_seconds / max(1, st.phase_batches)

    def train_phase(self, name: str) -> list[float]:
        """Ginex: each timed call's seconds less the sample-and-inspect phases it ran."""
        runs = self.systems[name].info["runs"]
        return [t - (r.busy["sample"] + r.busy["inspect"]) for t, r in zip(self.comp.times[name], runs)]

    def setup_s(self, name: str) -> float:
        """The one-off part of an epoch: the contender's setup (Ginex: plus an epoch of its phases)."""
        if name.startswith("ginex"):
            return self.setup[name] + self.epoch * self.phase_rate(name)
        return self.setup[name]

    def __call__(self, name: str) -> list[float]:
        calls = self.train_phase(name) if name.startswith("ginex") else self.comp.times[name]
        return epoch_seconds(self.setup_s(name), calls, self.per_call, self.epoch)

    def ratios(self, base: str, new: str) -> list[float]:
        return [a / b for a, b in zip(self(base), self(new))]


def _measure_epoch_ratio(b: Bench, claim: str, ep: _Epochs, base: str, new: str, st: dict) -> None:
    """Measure `claim` as per-round epoch(base) / epoch(new), adding rounds while its interval straddles the target."""
    def more() -> float:
        b.more_rounds(ep.comp, 1)
        return ep.ratios(base, new)[-1]
    b.measure_samples(claim, ep.ratios(base, new), more=more, max_rounds=st["max_rounds"])


def _steady(b: Bench, claim: str, ep: _Epochs, base: str, new: str) -> None:
    """Record the steady-state ratio (mini-batches only, no setup) beside a per-epoch claim, over all rounds run."""
    steady = ep.comp.spread(base, new)
    b.record(f"{claim}.steady_state", steady.median)
    b.record(f"{claim}.steady_state_lo", steady.lo)
    b.record(f"{claim}.steady_state_hi", steady.hi)


def epoch_batches(ds, cfg) -> int:
    """Mini-batches in one epoch of the training nodes (the last one partial)."""
    return math.ceil(len(ds.array("train", mmap=False)) / cfg.batch_size)


def _ginex_names(st: dict, epoch: int) -> dict[str, int]:
    return {f"ginex_sb{s or epoch}": (s or epoch) for s in st["superbatches"]}


def _compare(b: Bench, model: str, names: list[str], st: dict):
    calls = st["max_rounds"] + 1  # the warm-up, the timed rounds, and room for added ones
    k = st["per_call"]
    ds, cfg, budget_bytes, pseeds, seeds = workload(b.profile, model, calls * k, budget_fraction=st["fraction"])
    epoch = epoch_batches(ds, cfg)
    if "ginex" in names and epoch > len(seeds):
        # Ginex's epoch-long superbatch samples a whole epoch ahead, past the mini-batches the rounds
        # train: the same seeds, continued (the list's prefix does not depend on its length).
        seeds = workload(b.profile, model, epoch, budget_fraction=st["fraction"], full_verify=False)[4]
    groups = [seeds[i * k:(i + 1) * k] for i in range(-(-len(seeds) // k))]
    b.log(f"{model}: budget {fmt_bytes(budget_bytes)} ({st['fraction']:.0%} of {ds.name}/{ds.profile}); presampling")
    pre = presample(ds, cfg, pseeds, MemoryBudget(budget_bytes))
    b.record(f"disk.{model}.presample_s", pre.seconds)
    sizes = _ginex_names(st, epoch) if "ginex" in names else {}
    names = [n for n in names if n != "ginex"] + list(sizes)
    systems, open_s, setup = {}, {}, {}
    try:
        for n in names:  # opening is each system's one-off setup (plans, tuning, cache fill): timed apart
            t0 = time.perf_counter()
            budget = MemoryBudget(budget_bytes) if n != "memory" else reference_budget()
            kind = "ginex" if n in sizes else n
            systems[n] = open_system(kind, ds, budget, cfg, pre=pre, superbatch=sizes.get(n, 4))
            open_s[n] = time.perf_counter() - t0
            setup[n] = open_s[n] + (pre.seconds if n == "caliex" else 0.0)
            b.record(f"disk.{model}.{n}.open_s", open_s[n])
            b.record(f"disk.{model}.{n}.setup_s", setup[n])
        b.record(f"disk.{model}.epoch_batches", epoch)
        for s in systems.values():
            s.reset_counters()
        runners = {n: (_stream_runner(s, groups) if n in sizes else _runner(s, groups)) for n, s in systems.items()}
        c = b.compare(f"{model}: {st['per_call']} mini-batches", runners,
                      repeats=st["repeats"], warmup=1, memory=True, work=st["per_call"] * cfg.batch_size,
                      work_unit="seed")
        return c, systems, pre, groups, _Epochs(c, systems, setup, st["per_call"], epoch)
    except BaseException:
        for s in systems.values():
            s.close()
        raise


def _system_records(b: Bench, model: str, systems: dict, ep: _Epochs, st: dict) -> dict:
    """Record each system's epoch time, accuracy, budget peak, reads and hit rates; return their metrics."""
    mets = {n: s.metrics() for n, s in systems.items()}
    for n, s in systems.items():
        runs = s.info.get("runs", [])
        nb = sum(r.batches for r in runs) or 1
        if not n.startswith("ginex"):  # Ginex's sizes were recorded when its best was chosen
            b.record(f"disk.{model}.{n}.epoch_s", float(np.median(ep(n))))
        b.record(f"disk.{model}.{n}.acc_last_batches", float(np.mean(s.trainer.accs[-st['per_call']:])))
        b.record(f"disk.{model}.{n}.peak_budget_mib", s.budget.peak / 2**20)
        if n == "memory":
            continue
        m = mets[n]
        b.record(f"disk.{model}.{n}.read_amplification", m["read_amplification"])
        b.record(f"disk.{model}.{n}.bytes_read_per_batch_mib", m["bytes_read"] / 2**20 / nb)
        b.record(f"disk.{model}.{n}.hit_rate_features", m["hit_rate_features"])
        b.record(f"disk.{model}.{n}.hit_rate_topology", m["hit_rate_topology"])
        b.record(f"disk.{model}.{n}.requests_per_batch", m["requests"] / nb)
        for key in ("topology", "features"):
            b.record(f"disk.{model}.{n}.mib_read_{key}_per_batch", m[f"bytes_read_{key}"] / 2**20 / nb)
        b.record(f"disk.{model}.{n}.read_cost_s_per_batch", _read_cost(s) / nb)
        if n.startswith("ginex"):
            stream = s.info["stream"]
            b.record(f"disk.{model}.{n}.superbatch", s.superbatch)
            b.record(f"disk.{model}.{n}.phase_s_per_batch", ep.phase_rate(n))
            b.record(f"disk.{model}.{n}.train_phase_s_per_batch", float(np.median(ep.train_phase(n))) / st["per_call"])
            b.record(f"disk.{model}.{n}.inspect_s_per_batch", sum(r.busy["inspect"] for r in runs) / nb)
            # The superbatch went to disk and came back: MiB written per mini-batch the phases sampled
            # (the batch and its next uses) and MiB read back in all (inspection and training).
            b.record(f"disk.{model}.{n}.phase_batches", stream.phase_batches)
            b.record(f"disk.{model}.{n}.spill_mib_written_per_batch",
                     m["spill_bytes_written"] / 2**20 / max(1, stream.phase_batches))
            b.record(f"disk.{model}.{n}.spill_mib_read", m["spill_bytes_read"] / 2**20)
    return mets


def _setup_note(b: Bench, model: str, ep: _Epochs, claim: str, names: list[str]) -> None:
    """Say what each contender's one-off setup is and what it adds to an epoch of mini-batches."""
    r = b.results
    parts = []
    for n in names:
        per = float(np.median(ep.comp.times[n] if not n.startswith("ginex") else ep.train_phase(n))) / ep.per_call
        parts.append(f"{n} {ep.setup_s(n):.1f} s + {ep.epoch:.0f} x {per:.3f} s")
    b.record(f"disk.{model}.caliex.setup_s_per_epoch_batch", ep.setup_s("caliex") / ep.epoch)
    b.note(f"per epoch ({ep.epoch:.0f} mini-batches of the training nodes), setup included: "
           + "; ".join(parts) + f" (median round). CaliEX's setup is {r[f'disk.{model}.presample_s']:.1f} s of "
           f"pre-sampling and {r[f'disk.{model}.caliex.open_s']:.1f} s opening (plans, tuner, cache fill), timed once; "
           "the steady-state ratio (mini-batches only) is recorded as "
           f"{claim}.steady_state = {r[claim + '.steady_state']:.2f} [{r[claim + '.steady_state_lo']:.2f}, "
           f"{r[claim + '.steady_state_hi']:.2f}].", claim=claim)


def _stage_split(b: Bench, model: str, systems: dict) -> None:
    """Record each system's busy seconds per stage and wall seconds, per mini-batch."""
    for n, s in systems.items():
        runs = s.info.get("runs", [])
        nb = sum(r.batches for r in runs) or 1
        for stage in ("sample", "gather", "train"):
            b.record(f"disk.{model}.{n}.{stage}_s_per_batch", sum(r.busy[stage] for r in runs) / nb)
        b.record(f"disk.{model}.{n}.wall_s_per_batch", sum(r.seconds for r in runs) / nb)
        b.record(f"disk.{model}.{n}.cpu_s_per_batch", sum(getattr(r, "cpu_seconds", 0.0) for r in runs) / nb)
        # Pipeline fill: seconds from a call's start until its first mini-batch starts training.
        fills = [min(t0 for st, _, t0, _ in r.timeline if st == "train") for r in runs if r.timeline]
        if fills:
            b.record(f"disk.{model}.{n}.fill_s", float(np.mean(fills)))


def _pyg_mmap(b: Bench, st: dict, naive_losses: list[float]) -> None:
    """PyG on np.memmap in a child process under a memory cgroup: a reported anchor, not a claim."""
    from labkit.disk.pygmmap import run_pyg_mmap
    rounds = st.get("pyg_rounds", st["repeats"] + 1)
    per_call = st.get("pyg_per_call", st["per_call"])
    b.log(f"sage: pyg_mmap in a memory cgroup ({rounds} groups of {per_call} mini-batches, the first a warm-up)")
    try:
        r = run_pyg_mmap(b.profile, "sage", st["per_call"], rounds, st["fraction"], take=per_call)
    except Exception as e:  # an anchor: report why it is missing, never fail the bench
        r = {"skipped": f"the run failed: {type(e).__name__}: {e}"}
    if "skipped" in r:
        b.record("disk.pyg_mmap.skipped", 1.0)
        b.note(f"disk.pyg_mmap (PyG on a memory-mapped dataset under a memory cgroup) not measured: {r['skipped']}.")
        return
    nb, g = r["batches"], "disk.sage.pyg_mmap"
    b.record(g + ".wall_s_per_batch", r["seconds"] / nb)
    for stage in ("sample", "gather", "train"):
        b.record(f"{g}.{stage}_s_per_batch", r["busy"][stage] / nb)
    b.record(g + ".acc_last_batches", float(np.mean(r["accs"][-per_call:])))
    # Same mini-batches, same model seed: its first group's losses are naive's first ones (later
    # groups differ: it trains only the first `per_call` of each of the bench's groups).
    n = per_call
    b.record(g + ".losses_match_naive", float(len(naive_losses) >= n and len(r["losses"]) >= n and bool(
        np.allclose(r["losses"][:n], naive_losses[:n], rtol=1e-4, atol=1e-6))))
    b.record(g + ".mib_read_per_batch", r["read_bytes"] / 2**20 / nb)
    b.record(g + ".major_faults_per_batch", r["major_faults"] / nb)
    cg = r["cgroup"]
    b.record(g + ".cgroup_limit_mib", r["limit"] / 2**20)
    b.record(g + ".baseline_charged_mib", r["baseline_charged"] / 2**20)
    b.record(g + ".batch_anon_growth_mib", r["anon_growth"] / 2**20)
    b.record(g + ".cgroup_peak_mib", cg["max_usage"] / 2**20)
    b.record(g + ".page_cache_end_mib", cg.get("stat_cache", 0) / 2**20)
    b.record(g + ".limit_hits", cg["failcnt"])
    b.record("disk.speedup_pyg_mmap", r["seconds"] / nb / b.results["disk.sage.caliex.wall_s_per_batch"])
    b.record(g + ".vs_naive", r["seconds"] / nb / b.results["disk.sage.naive.wall_s_per_batch"])
    b.note(f"disk.speedup_pyg_mmap (a reported anchor, no target) = pyg_mmap's seconds per mini-batch / "
           f"CaliEX's: PyG-style training with indptr, indices, features and labels opened as np.memmap "
           "(sampling and gathering through page faults and the kernel's default readahead, no direct I/O, "
           "no labkit caches, stages in turn), same sampler, seeds and mini-batches as the other systems, "
           "run after them in a child process in a fresh cgroup v1 memory group and timed batch by batch "
           f"in the child ({nb} mini-batches after a warm-up group of {per_call}: the first {per_call} of "
           f"each of the bench's groups of {st['per_call']}; not interleaved "
           "with the others" + (", and fewer groups, so its acc_last_batches is from earlier in training"
                                if rounds < st["repeats"] + 1 else "")
           + f"; losses_match_naive = {b.results[g + '.losses_match_naive']:.0f}: 1 when its warm-up "
           "group's losses equal naive's on the same mini-batches). The dataset files' page cache is dropped first "
           "(posix_fadvise DONTNEED); "
           f"the limit, {r['limit'] / 2**20:.0f} MiB, is the child's baseline charged to the group "
           f"({r['baseline_charged'] / 2**20:.0f} MiB: anonymous plus mapped file pages, after imports, "
           f"before touching the data) + the budget ({r['budget'] / 2**20:.0f} MiB) + the peak "
           f"anonymous growth of a mini-batch in training measured during the warm-up "
           f"({r['anon_growth'] / 2**20:.0f} MiB: gathered rows, activations, model; the allowance "
           "CaliEX also gets outside its budget; at the small profile a limit without it got the child "
           "OOM-killed), so the page cache "
           f"holds about the budget. It read {r['read_bytes'] / 2**20 / nb:,.0f} MiB from the disk per "
           f"mini-batch (readahead around each fault, pages evicted before reuse; the group hit its "
           f"limit {cg['failcnt']:,} times) and spent {r['busy']['gather'] / nb:.2f} s per mini-batch "
           "gathering.")


def _tuner(b: Bench, st: dict, pre) -> dict:
    """The tuner at two budgets: CaliEX at a sweep of splits plus its tuned one, interleaved on the same
    mini-batches; returns, per budget, the comparison, the tuned and best split and the per-round gaps."""
    k, out, opened = st["sweep_per_call"], [], []
    calls = st["max_rounds"] + 1
    try:
        for i, frac in enumerate(st["tuner_fractions"]):
            ds, cfg, budget_bytes, _, seeds = workload(b.profile, "sage", calls * k, budget_fraction=frac)
            t = open_system("caliex", ds, MemoryBudget(budget_bytes), cfg, pre=pre)
            tuned, curve = t.split, t.info["predicted"]
            t.close()
            groups = [seeds[j * k:(j + 1) * k] for j in range(calls)]
            splits = sorted(set(st["sweep"]) | {tuned})
            sweep = {}
            for f in splits:
                sweep[f"f={f:.2f}"] = open_system("caliex", ds, MemoryBudget(budget_bytes), cfg, pre=pre, split=f)
                opened.append(sweep[f"f={f:.2f}"])
            ct = b.compare(f"sage: caliex split sweep at {frac:.0%} of the dataset, {k} mini-batches",
                           {name: _runner(s, groups) for name, s in sweep.items()},
                           repeats=st["sweep_repeats"], warmup=1)
            g = f"disk.tuner.b{i}"
            b.record(g + ".fraction", frac)
            b.record(g + ".budget_mib", budget_bytes / 2**20)
            for f in splits:
                pred = next((p["total"] for p in curve if abs(p["f"] - f) < 1e-9), float("nan"))
                b.record(f"{g}.measured_s_f{f:.2f}", ct.median(f"f={f:.2f}") / k)
                b.record(f"{g}.predicted_s_f{f:.2f}", pred)
            # The best split is the one the tuned split loses to most, by the statistic the gap reports
            # (the median of per-round ratios; the tuned split is in the sweep, so the gap is never below 0).
            mine = f"f={tuned:.2f}"
            best = max(ct.names, key=lambda n: ct.ratio(mine, n))
            fbest = float(best[2:])
            b.record(g + ".split", tuned)
            b.record(g + ".best_split", fbest)
            b.record(g + ".best_interior", float(min(splits) < fbest < max(splits)))

            def gaps(ct=ct, mine=mine, best=best) -> list[float]:
                return [a / z - 1.0 for a, z in zip(ct.times[mine], ct.times[best])]
            sp = spread(gaps(), unit="")
            b.record(g + ".gap", sp.median)
            b.record(g + ".gap_lo", sp.lo)
            b.record(g + ".gap_hi", sp.hi)
            b.log(f"tuner at {frac:.0%}: split {tuned:.2f}, best measured {best}, gap {sp}")
            out.append({"comp": ct, "tuned": tuned, "best": best, "gaps": gaps, "fraction": frac, "splits": splits})
        # The claim is the worse of the two budgets (by median gap), with more rounds of that sweep if needed.
        worst = max(range(len(out)), key=lambda j: float(np.median(out[j]["gaps"]())))
        w = out[worst]

        def more() -> float:
            b.more_rounds(w["comp"], 1)
            return w["gaps"]()[-1]
        b.measure_samples("disk.tuner_gap", w["gaps"](), more=more, max_rounds=st["max_rounds"])
        b.record("disk.tuner.worse_budget", worst)
        b.record("disk.tuner.split", w["tuned"])
        b.note("disk.tuner_gap: the worse gap of two budgets: " + TUNER_BUDGETS_NOTE + ". In this run, "
               + "; ".join(f"at {o['fraction']:.0%} the tuner picked {o['tuned']:.2f} and the best measured split "
                           f"was {o['best'][2:]} ("
                           + ("inside" if min(o['splits']) < float(o['best'][2:]) < max(o['splits']) else "on the edge of")
                           + f" the sweep {', '.join(f'{f:g}' for f in o['splits'])})" for o in out) + ".",
               claim="disk.tuner_gap")
        return {"out": out, "worst": worst}
    finally:
        for s in opened:
            s.close()
        for o in out:
            b.release(o["comp"])


def bench(b: Bench) -> None:
    st = SETTINGS[b.profile]
    load0 = os.getloadavg()[0]
    b.record("disk.loadavg_1min_start", load0)
    c, systems, pre, groups, ep = _compare(b, "sage", ["naive", "ginex", "caliex", "memory"], st)
    try:
        ginexes = [n for n in systems if n.startswith("ginex")]
        # Ginex's own best superbatch size: the lowest median epoch time of the sweep (over the first rounds,
        # before any claim adds rounds).
        for n in ginexes:
            b.record(f"disk.sage.{n}.epoch_s", float(np.median(ep(n))))
        gbest = min(ginexes, key=lambda n: b.results[f"disk.sage.{n}.epoch_s"])
        b.record("disk.sage.ginex.best_superbatch", systems[gbest].superbatch)
        b.record("disk.sage.ginex.largest_superbatch", max(systems[n].superbatch for n in ginexes))
        _measure_epoch_ratio(b, "disk.speedup_naive", ep, "naive", "caliex", st)
        _measure_epoch_ratio(b, "disk.speedup_ginex", ep, gbest, "caliex", st)
        _measure_epoch_ratio(b, "disk.slowdown_vs_memory", ep, "caliex", "memory", st)
        for cid, base, new in (("disk.speedup_naive", "naive", "caliex"), ("disk.speedup_ginex", gbest, "caliex"),
                               ("disk.slowdown_vs_memory", "caliex", "memory")):
            _steady(b, cid, ep, base, new)
        b.record("disk.upper_bound_speedup_naive", float(np.median(ep.ratios("naive", "memory"))))
        mets = _system_records(b, "sage", systems, ep, st)
        m = mets["caliex"]
        b.record("disk.read_amplification", m["read_amplification"])
        b.record("disk.hit_rate_features", m["hit_rate_features"])
        b.record("disk.hit_rate_topology", m["hit_rate_topology"])
        b.record("disk.caliex.split_topology", systems["caliex"].split)
        b.record("disk.budget_mib", systems["caliex"].budget.total / 2**20)
        b.record("disk.indices_mib", systems["caliex"].topology.file.size / 2**20)
        engine = systems["caliex"].topology.file.engine
        ci = systems["caliex"].info
        b.record("disk.caliex.cache_mib", ci["cache_bytes"] / 2**20)
        grp = systems["caliex"].group
        b.record("disk.caliex.sampling_group", grp)
        for g, t in sorted(ci.get("predicted_by_group", {}).items()):
            b.record(f"disk.caliex.predicted_s_group{g}", t)
        b.record("disk.caliex.queue_slots_mib",
                 (SAMPLERS * grp * ci["slot_bytes"][0] + ci["slot_bytes"][1]) / 2**20)
        fc = systems["caliex"].features.cache
        b.record("disk.caliex.feature_rows_cached_fraction",
                 (fc.nodes.size if fc is not None else 0) / systems["caliex"].features.num_nodes)
        b.record("disk.presample_s", pre.seconds)
        _stage_split(b, "sage", systems)
        for cid, base in (("disk.speedup_naive", "naive"), ("disk.speedup_ginex", gbest),
                          ("disk.slowdown_vs_memory", "memory")):
            _setup_note(b, "sage", ep, cid, [base, "caliex"])
        sizes = sorted(ginexes, key=lambda n: systems[n].superbatch)
        b.note("disk.speedup_ginex: Ginex samples each superbatch to a file on the data disk, inspects it (next "
               "uses, read back from disk) and reads each mini-batch back to gather and train, its stages in turn; "
               "per epoch by superbatch size, setup included: "
               + ", ".join(f"{systems[n].superbatch}: {b.results[f'disk.sage.{n}.epoch_s']:.1f} s (features hit "
                           f"{mets[n]['hit_rate_features']:.0%})" for n in sizes)
               + f"; the claim takes its best, {systems[gbest].superbatch}. Its sample-and-inspect phases are "
               "timed as they run and counted per epoch at their mean rate per mini-batch, like a setup.",
               claim="disk.speedup_ginex")
        systems_group = {"sage": systems["caliex"].group}
    finally:
        for s in systems.values():
            s.close()
        b.release(c)  # its claims are measured: no more rounds, let go of the systems
    naive_losses = list(systems["naive"].trainer.losses)
    del systems
    _pyg_mmap(b, st, naive_losses)

    _tuner(b, st, pre)

    # GAT: naive vs CaliEX on its own mini-batches.
    cg, sg, gpre, _, gep = _compare(b, "gat", ["naive", "caliex"], st)
    try:
        _measure_epoch_ratio(b, "disk.speedup_naive_gat", gep, "naive", "caliex", st)
        _steady(b, "disk.speedup_naive_gat", gep, "naive", "caliex")
        _system_records(b, "gat", sg, gep, st)
        _stage_split(b, "gat", sg)
        _setup_note(b, "gat", gep, "disk.speedup_naive_gat", ["naive", "caliex"])
        systems_group["gat"] = sg["caliex"].group
        b.record("disk.gat.caliex.sampling_group", sg["caliex"].group)
    finally:
        for s in sg.values():
            s.close()
        b.release(cg)
    # Peak RSS of CaliEX alone, in a fresh process.
    from labkit.disk.rss import probe
    rss = probe(b.profile, "sage", 2 * st["per_call"], st["fraction"])
    for k in ("baseline_rss", "setup_growth", "peak_rss", "growth", "budget_peak", "model", "rest",
              "training_working_set", "plans", "allocator_allowance", "stated_overhead", "bound"):
        b.record(f"disk.caliex.rss.{k}_mib", rss[k] / 2**20)
    b.measure("disk.peak_rss_vs_stated", rss["over_bound"])
    b.record("disk.loadavg_1min_end", os.getloadavg()[0])

    ub = b.results["disk.upper_bound_speedup_naive"]
    fd, td = pre.profile.feature_disk, pre.profile.topology_disk
    disk = (f"the disk, read through {engine} with {QUEUE_DEPTH} reads in flight per file and calibrated on the "
            f"pre-sampled reads, does "
            f"{1 / fd.seconds_per_request:,.0f} random requests/s and {td.bytes_per_second / 1e9:.2f} GB/s sequential")
    r = b.results
    load = (f"1-min load average {load0:.1f} at the start, {r['disk.loadavg_1min_end']:.1f} at the end "
            "(tasks waiting on the disk count too)")

    def floor(model: str) -> str:
        g = f"disk.{model}.caliex"
        share = r[g + ".mib_read_topology_per_batch"] / r["disk.indices_mib"]
        return (f"CaliEX runs {r[g + '.wall_s_per_batch']:.3f} s per mini-batch; its caches serve "
                f"{r[g + '.hit_rate_features']:.0%} of feature rows and {r[g + '.hit_rate_topology']:.0%} "
                f"of sampled neighbour entries, and what they miss is {r[g + '.mib_read_topology_per_batch']:.0f} MiB "
                f"of topology ({share:.0%} of the indices file's size"
                + (": each hop's sampled entries are spread over most of its pages; a sampling "
                   f"group of {systems_group.get(model, 1)} mini-batches reads them once for all"
                   if share > 0.25 else "")
                + f") and {r[g + '.mib_read_features_per_batch']:.0f} MiB of feature pages, "
                f"{r[g + '.requests_per_batch']:,.0f} requests in all, which cost "
                f"{r[g + '.read_cost_s_per_batch']:.3f} s per mini-batch at the disk's speed ({disk}); "
                f"the process burns {r[g + '.cpu_s_per_batch']:.2f} CPU-s per mini-batch on 2 cores "
                + (f"(in memory {r[f'disk.{model}.memory.cpu_s_per_batch']:.2f}; "
                   if f"disk.{model}.memory.cpu_s_per_batch" in r else "(")
                + f"naive {r[f'disk.{model}.naive.cpu_s_per_batch']:.2f})")

    def short(cid: str) -> bool:
        """A claim that did not pass (a miss, or an interval straddling its target) gets its reason."""
        return b.claims[cid].status in ("miss", "inconclusive")

    for cid, model in (("disk.speedup_naive", "sage"), ("disk.speedup_naive_gat", "gat")):
        if not short(cid):
            continue
        g, nv = f"disk.{model}.caliex", f"disk.{model}.naive"
        epoch = r[f"disk.{model}.epoch_batches"]
        need = r[nv + ".epoch_s"] / 3.28
        setup = r[g + ".setup_s"]
        steady = r[cid + ".steady_state"]
        if model == "sage" and ub < 3.28:
            b.note(f"{cid}: the in-memory system itself (no disk at all, its load included) is only {ub:.2f}x "
                   f"faster than naive disk per epoch here, so no disk system can reach 3.28x: {disk}; {load}.")
            continue
        lead = (f"3.28x needs an epoch in {need:.0f} s against naive's {r[nv + '.epoch_s']:.0f} s; CaliEX's setup "
                f"alone takes {setup:.0f} s ({setup / r[g + '.epoch_s']:.0%} of its epoch; steady state it runs "
                f"{steady:.2f}x naive's pace)")
        if steady >= 3.28:
            b.note(f"{cid}: {lead}, so the one-off setup, spread over a single epoch, is what pulls it under. "
                   f"{load[0].upper() + load[1:]}.")
            continue
        tr = r[g + ".train_s_per_batch"]
        if tr >= max(r[g + ".sample_s_per_batch"] / SAMPLERS, r[g + ".gather_s_per_batch"]):
            why = (f"CaliEX is training-bound: {tr:.3f} s of training per mini-batch against {r[g + '.wall_s_per_batch']:.3f} s wall; naive spends "
                   f"{r[nv + '.sample_s_per_batch'] + r[nv + '.gather_s_per_batch']:.3f} s on sampling and "
                   f"gathering and {r[nv + '.train_s_per_batch']:.3f} s training, so hiding all of its I/O caps "
                   f"the speedup near {r[nv + '.wall_s_per_batch'] / tr:.2f}x; training slows under the "
                   f"overlapped stages because 2 cores are shared ({floor(model)})")
        else:
            why = floor(model)
        b.note(f"{cid}: {lead} (naive: same engine, no caches, stages in turn). {why}. "
               f"{load[0].upper() + load[1:]}.")

    if short("disk.speedup_ginex"):
        gb = f"disk.sage.ginex_sb{int(r['disk.sage.ginex.best_superbatch'])}"
        b.note(f"disk.speedup_ginex: Ginex-style at its best superbatch runs on the same direct-I/O engine, its "
               f"degree-ranked neighbour cache serves {r[gb + '.hit_rate_topology']:.0%} of sampled entries and "
               f"Belady over the superbatch {r[gb + '.hit_rate_features']:.0%} of feature rows (CaliEX: "
               f"{r['disk.sage.caliex.hit_rate_features']:.0%}); CaliEX's edge is that overlap and hit rate, "
               f"against its own setup ({r['disk.sage.caliex.setup_s']:.0f} s) in one epoch.")
    if short("disk.slowdown_vs_memory"):
        mem = r["disk.sage.memory.wall_s_per_batch"]
        b.note(f"disk.slowdown_vs_memory: per epoch in memory takes {r['disk.sage.memory.epoch_s']:.0f} s (its "
               f"load {r['disk.sage.memory.setup_s']:.0f} s, then {mem:.3f} s per mini-batch), so 2x needs CaliEX "
               f"in {2 * r['disk.sage.memory.epoch_s']:.0f} s, setup ({r['disk.sage.caliex.setup_s']:.0f} s) "
               f"included; {floor('sage')}. The budget ({r['disk.budget_mib']:.0f} MiB) gives "
               f"{r['disk.caliex.cache_mib']:.0f} MiB to the caches "
               f"({r['disk.caliex.feature_rows_cached_fraction']:.0%} of the feature rows; the rest is "
               f"indptr, staging and {r['disk.caliex.queue_slots_mib']:.0f} MiB of pipeline slots), and the "
               f"tuner's split gives the topology {r['disk.caliex.split_topology']:.0%} of it.")
    if short("disk.tuner_gap"):
        w = int(r["disk.tuner.worse_budget"])
        b.note(f"disk.tuner_gap: at {r[f'disk.tuner.b{w}.fraction']:.0%} of the dataset the tuner picked "
               f"{r[f'disk.tuner.b{w}.split']:.2f} and the best measured split was {r[f'disk.tuner.b{w}.best_split']:.2f}: "
               "its model prices I/O and training per stage from a few pre-sampled batches, and run-to-run "
               "noise on this shared machine is of the same order as the gap.")
    b.note("Budget = 15% of the dataset's bytes (ci: 200%, its batches touch a third of the graph); it "
           "holds indptr, both caches, staging buffers (and the io_uring rings reading into them) and the pipeline's in-flight batches (for CaliEX one "
           "sampling group of mini-batches per sampler thread and one gathered batch's disk rows). Outside it: "
           f"the model with its Adam state ({rss['model'] / 2**20:.1f} MiB) and the mini-batch being "
           f"trained with its activations; in a fresh process CaliEX's peak RSS while training grew "
           f"{rss['growth'] / 2**20:.0f} MiB over its baseline (opening it, with the tuner's scoring and "
           f"the cache fill, peaked at {rss['setup_growth'] / 2**20:.0f} MiB) for a budget peak of "
           f"{rss['budget_peak'] / 2**20:.0f} MiB and a {rss['model'] / 2**20:.1f} MiB model; the rest, "
           f"{rss['rest'] / 2**20:.0f} MiB, is the batch in training, its activations, the working arrays of "
           "the sampler and gatherer threads (the sampled entries and a batch's rows as read) and allocator "
           "slack (glibc keeps freed pages in each thread's arena). The fixed overhead is stated before "
           f"CaliEX opens: the training working set, {rss['training_working_set'] / 2**20:.0f} MiB (the "
           "trainer's peak on the largest pre-sampled mini-batch, its rows included, measured alone), "
           f"{rss['plans'] / 2**20:.0f} MiB for the two cache plans kept while the caches fill (bytes per node "
           "from their dtypes, labkit.disk.plans.caliex_plans_nbytes), plus "
           f"{rss['allocator_allowance'] / 2**20:.0f} MiB for allocator slack and thread working arrays "
           f"(labkit.disk.rss.ALLOCATOR_ALLOWANCE): a bound of {rss['bound'] / 2**20:.0f} MiB with the budget and "
           "the model, which disk.peak_rss_vs_stated checks against the larger of the two peaks.")
    bare = rss["bound"] - rss["allocator_allowance"]
    bare_ratio = max(rss["growth"], rss["setup_growth"]) / bare
    b.record("disk.caliex.rss.over_bound_without_allowance", bare_ratio)
    b.note(f"disk.peak_rss_vs_stated: without the allowance (budget + model + training working set + plans, "
           f"{bare / 2**20:.0f} MiB) the ratio is {bare_ratio:.2f}"
           + (", so the allowance, a constant stated from earlier runs at the small profile rather than measured "
              "in this one, decides the verdict." if bare_ratio > 1 else ": the verdict holds without it."),
           claim="disk.peak_rss_vs_stated")


register(System("disk", "CaliEX", "CaliEX: disk-based GNN training with joint caching and execution (ICDE 2025)",
                bench, CLAIMS, "03_caliex.ipynb"))
