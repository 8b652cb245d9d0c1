"""`labkit bench disk`: naive disk, Ginex-style, CaliEX and in-memory training, side by side.

Same graph, same budget (15% of the dataset's bytes at small/large), same mini-batches: every
round gives each system the same group of mini-batches, order rotated, in one process.
"""

from __future__ import annotations

import os
import time
import resource

import numpy as np

from labkit.core.bench import Bench, Claim
from labkit.core.memory import MemoryBudget, fmt_bytes
from labkit.core.systems import System, register
from labkit.disk.system import QUEUE_DEPTH, SAMPLERS, open_system, presample, reference_budget, workload

CLAIMS = [
    Claim("disk.speedup_naive", "CaliEX vs naive disk training, GraphSAGE [15,10,5] h256 b1024",
          "3.28x average over existing disk-based systems", target=3.28),
    Claim("disk.speedup_naive_gat", "CaliEX vs naive disk training, GAT 2 layers [10,10] 4 heads",
          "3.28x average over existing disk-based systems", target=3.28),
    Claim("disk.speedup_ginex", "CaliEX vs Ginex-style (degree neighbour cache + Belady superbatch)",
          "CaliEX beats Ginex (lab target)", target=1.5),
    Claim("disk.slowdown_vs_memory", "CaliEX time / in-memory time, GraphSAGE", "close to in-memory (lab target)",
          target=2.0, unit="x", op="<="),
    Claim("disk.tuner_gap", "auto-tuned split vs best split of a measured sweep (time / best - 1)",
          "tuner picks the split (lab target)", target=0.05, unit="", op="<="),
    Claim("disk.peak_rss_vs_stated", "CaliEX peak RSS growth / (budget + model + overhead stated before the run)",
          "peak RSS within the budget plus the model and a stated fixed overhead (lab target)",
          target=1.0, unit="x", op="<="),
]

#: Per profile: mini-batches per timed call (16 at small/large: training runs for epochs of
#: hundreds of mini-batches, and CaliEX's pipeline first fills two sampling groups of 4 before
#: the trainer starts, so calls of 2 or 8 batches would weigh fill and drain far above what an
#: epoch pays; each call still pays them once, recorded as fill_s), rounds (4 at small: the shared
#: disk's speed drifts by a third between minutes), budget as a share of
#: the dataset's bytes, the split sweep (mini-batches per call, rounds, splits: 16 per call as in
#: the main comparison, since the tuner predicts steady-state time per mini-batch; with calls of 4
#: the fill, which differs by split, moved the measured best split from run to run) and the
#: PyG-on-mmap anchor's mini-batches per group (it takes seconds per batch).
SETTINGS = {"ci": {"per_call": 1, "repeats": 2, "fraction": 2.0,
                   "sweep_per_call": 1, "sweep_repeats": 2, "sweep": (0.0, 0.5, 1.0)},
            "small": {"per_call": 16, "repeats": 4, "fraction": 0.15, "pyg_rounds": 2, "pyg_per_call": 8,
                      "sweep_per_call": 16, "sweep_repeats": 3, "sweep": (0.0, 0.25, 0.5, 0.75, 1.0)},
            "large": {"per_call": 16, "repeats": 3, "fraction": 0.15, "pyg_rounds": 2, "pyg_per_call": 8,
                      "sweep_per_call": 16, "sweep_repeats": 3, "sweep": (0.0, 0.25, 0.5, 0.75, 1.0)}}


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


def _runner(system, groups: list[list[np.ndarray]]):
    """A callable that trains `system` on the next group of mini-batches each time it is called."""
    state = {"k": 0}

    def call():
        k = state["k"]
        state["k"] += 1
        c0 = _cpu_seconds()
        r = system.run(groups[k], first_index=10_000 * (k + 1))
        if k > 0:  # not the warm-up call
            r.cpu_seconds = _cpu_seconds() - c0  # contenders run one at a time: the process's CPU is this one's
            system.info.setdefault("runs", []).append(r)
        return r
    return call


def _compare(b: Bench, model: str, names: list[str], st: dict):
    rounds = st["repeats"] + 1
    ds, cfg, budget_bytes, pseeds, seeds = workload(b.profile, model, rounds * st["per_call"],
                                                    budget_fraction=st["fraction"])
    groups = [seeds[i * st["per_call"]:(i + 1) * st["per_call"]] for i in range(rounds)]
    b.log(f"{model}: budget {fmt_bytes(budget_bytes)} ({st['fraction']:.0%} of {ds.name}/{ds.profile}); presampling")
    pre = presample(ds, cfg, pseeds, MemoryBudget(budget_bytes))
    systems, open_s = {}, {}
    try:
        for n in names:  # opening is each system's one-off setup (plans, tuning, cache fill): timed apart
            t0 = time.perf_counter()
            budget = MemoryBudget(budget_bytes) if n != "memory" else reference_budget()
            systems[n] = open_system(n, ds, budget, cfg, pre=pre)
            open_s[n] = time.perf_counter() - t0
            b.record(f"disk.{model}.{n}.open_s", open_s[n])
        b.record(f"disk.{model}.epoch_batches", len(ds.array("train", mmap=False)) / cfg.batch_size)
        for s in systems.values():
            s.reset_counters()
        c = b.compare(f"{model}: {st['per_call']} mini-batches", {n: _runner(s, groups) for n, s in systems.items()},
                      repeats=st["repeats"], warmup=1, memory=True, work=st["per_call"] * cfg.batch_size,
                      work_unit="seed")
        mets = {n: s.metrics() for n, s in systems.items()}
        for n, s in systems.items():
            # Time per stage, from each system's own busy clocks (summed over its runs).
            tr = s.trainer
            b.record(f"disk.{model}.{n}.acc_last_batches", float(np.mean(tr.accs[-st['per_call']:])))
            b.record(f"disk.{model}.{n}.peak_budget_mib", s.budget.peak / 2**20)
            if n != "memory":
                m = mets[n]
                b.record(f"disk.{model}.{n}.read_amplification", m["read_amplification"])
                b.record(f"disk.{model}.{n}.bytes_read_per_batch_mib",
                         m["bytes_read"] / 2**20 / (rounds * st["per_call"]))
                b.record(f"disk.{model}.{n}.hit_rate_features", m["hit_rate_features"])
                b.record(f"disk.{model}.{n}.hit_rate_topology", m["hit_rate_topology"])
                nb = rounds * st["per_call"]
                b.record(f"disk.{model}.{n}.requests_per_batch", m["requests"] / nb)
                for key in ("topology", "features"):
                    b.record(f"disk.{model}.{n}.mib_read_{key}_per_batch", m[f"bytes_read_{key}"] / 2**20 / nb)
                b.record(f"disk.{model}.{n}.read_cost_s_per_batch", _read_cost(s) / nb)
        return c, systems, pre, mets, groups
    except BaseException:
        for s in systems.values():
            s.close()
        raise


def _setup_note(b: Bench, model: str, presample_s: float, claim: str) -> None:
    """Say what CaliEX's one-off setup (pre-sampling, tuning, cache fill) costs per mini-batch of an epoch."""
    r = b.results
    setup = presample_s + r[f"disk.{model}.caliex.open_s"]
    epoch = r[f"disk.{model}.epoch_batches"]
    per = r[f"disk.{model}.caliex.wall_s_per_batch"]
    b.record(f"disk.{model}.caliex.setup_s_per_epoch_batch", setup / epoch)
    b.note(f"CaliEX's one-off setup ({presample_s:.1f} s pre-sampling, {r[f'disk.{model}.caliex.open_s']:.1f} s "
           f"opening: plans, tuner, cache fill) is outside the timed mini-batches, as each system's opening is; "
           f"spread over one epoch ({epoch:.0f} mini-batches of the training nodes) it adds {setup / epoch:.3f} s "
           f"per mini-batch to CaliEX's {per:.3f} s ({model}).", claim=claim)


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


def bench(b: Bench) -> None:
    st = SETTINGS[b.profile]
    load0 = os.getloadavg()[0]
    b.record("disk.loadavg_1min_start", load0)
    c, systems, pre, mets, groups = _compare(b, "sage", ["naive", "ginex", "caliex", "memory"], st)
    try:
        b.measure("disk.speedup_naive", c.ratio("naive", "caliex"))
        b.measure("disk.speedup_ginex", c.ratio("ginex", "caliex"))
        b.measure("disk.slowdown_vs_memory", c.ratio("caliex", "memory"))
        b.record("disk.upper_bound_speedup_naive", c.ratio("naive", "memory"))
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
        _setup_note(b, "sage", pre.seconds, "disk.speedup_naive")
        tuned = systems["caliex"].split
        systems_group = {"sage": systems["caliex"].group}
        curve = systems["caliex"].info["predicted"]
    finally:
        for s in systems.values():
            s.close()
    naive_losses = list(systems["naive"].trainer.losses)
    del systems
    _pyg_mmap(b, st, naive_losses)

    # Tuner: CaliEX at a sweep of splits plus the tuned one, interleaved on the same mini-batches.
    rounds, k = st["sweep_repeats"] + 1, st["sweep_per_call"]
    ds, cfg, budget_bytes, _, seeds = workload(b.profile, "sage", rounds * k, budget_fraction=st["fraction"])
    sweep_groups = [seeds[i * k:(i + 1) * k] for i in range(rounds)]
    splits = sorted(set(st["sweep"]) | {tuned})
    sweep = {}
    try:
        for f in splits:
            sweep[f"f={f:.2f}"] = open_system("caliex", ds, MemoryBudget(budget_bytes), cfg, pre=pre, split=f)
        ct = b.compare(f"sage: caliex split sweep, {k} mini-batches",
                       {name: _runner(s, sweep_groups) for name, s in sweep.items()},
                       repeats=st["sweep_repeats"], warmup=1)
    finally:
        for s in sweep.values():
            s.close()
    for f in splits:
        pred = next((p["total"] for p in curve if abs(p["f"] - f) < 1e-9), float("nan"))
        b.record(f"disk.tuner.measured_s_f{f:.2f}", ct.median(f"f={f:.2f}") / k)
        b.record(f"disk.tuner.predicted_s_f{f:.2f}", pred)
    # The best split is the one the tuned split loses to most, by the same statistic the gap reports
    # (the median of per-round ratios; the tuned split is in the sweep, so the gap is never below 0).
    mine = f"f={tuned:.2f}"
    best = max(ct.names, key=lambda n: ct.ratio(mine, n))
    b.measure("disk.tuner_gap", ct.ratio(mine, best) - 1.0)
    b.record("disk.tuner.split", tuned)
    b.log(f"tuner: split {tuned:.2f}, best measured {best}")

    # GAT: naive vs CaliEX on its own mini-batches.
    cg, sg, gpre, _, _ = _compare(b, "gat", ["naive", "caliex"], st)
    try:
        b.measure("disk.speedup_naive_gat", cg.ratio("naive", "caliex"))
        _stage_split(b, "gat", sg)
        _setup_note(b, "gat", gpre.seconds, "disk.speedup_naive_gat")
        systems_group["gat"] = sg["caliex"].group
        b.record("disk.gat.caliex.sampling_group", sg["caliex"].group)
    finally:
        for s in sg.values():
            s.close()
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

    for cid, model in (("disk.speedup_naive", "sage"), ("disk.speedup_naive_gat", "gat")):
        if b.claims[cid].passed is not False:
            continue
        g, nv = f"disk.{model}.caliex", f"disk.{model}.naive"
        need = r[nv + ".wall_s_per_batch"] / 3.28
        if model == "sage" and ub < 3.28:
            b.note(f"{cid}: the in-memory system itself (no disk at all) is only {ub:.2f}x faster than naive "
                   f"disk here, so no disk system can reach 3.28x: {disk}; {load}.")
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
        b.note(f"{cid}: 3.28x needs {need:.3f} s per mini-batch against naive's "
               f"{r[nv + '.wall_s_per_batch']:.3f} s (naive: same engine, no caches, stages in turn). {why}. "
               f"{load[0].upper() + load[1:]}.")

    if b.claims["disk.speedup_ginex"].passed is False:
        b.note(f"disk.speedup_ginex: Ginex-style here already runs on the same direct-I/O engine and its "
               f"degree-ranked neighbour cache serves {r['disk.sage.ginex.hit_rate_topology']:.0%} of lists; "
               f"CaliEX's gain is its feature hit rate ({r['disk.sage.caliex.hit_rate_features']:.0%} vs "
               f"{r['disk.sage.ginex.hit_rate_features']:.0%}) and overlap, while both are bound by the "
               "scattered feature reads that remain.")
    if b.claims["disk.slowdown_vs_memory"].passed is False:
        mem = r["disk.sage.memory.wall_s_per_batch"]
        b.note(f"disk.slowdown_vs_memory: in memory a mini-batch costs {mem:.3f} s, so 2x needs CaliEX at "
               f"{2 * mem:.3f} s; {floor('sage')}. The budget ({r['disk.budget_mib']:.0f} MiB) gives "
               f"{r['disk.caliex.cache_mib']:.0f} MiB to the caches "
               f"({r['disk.caliex.feature_rows_cached_fraction']:.0%} of the feature rows; the rest is "
               f"indptr, staging and {r['disk.caliex.queue_slots_mib']:.0f} MiB of pipeline slots), and the "
               f"tuner's split gives the topology {r['disk.caliex.split_topology']:.0%} of it: a topology "
               "cache spares only pages no uncached sampled entry needs, while the feature cache spares a "
               "request per hit row.")
    if b.claims["disk.tuner_gap"].passed is False:
        meds = [ct.median(n) for n in ct.names]
        b.note(f"disk.tuner_gap: the measured split medians span {max(meds) / min(meds) - 1:.0%} in all; "
               "the tuner's prediction misses the best measured split by the gap shown (its model prices "
               "I/O and training per stage; run-to-run noise on this shared machine is of the same order).")
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
