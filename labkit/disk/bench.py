"""`labkit bench disk`: naive disk, Ginex-style, CaliEX and in-memory training, side by side.

Same graph, same budget (15% of the dataset's bytes at small/large), same mini-batches: every
round gives each system the same group of mini-batches, order rotated, in one process.
"""

from __future__ import annotations

import os

import numpy as np

from labkit.core.bench import Bench, Claim
from labkit.core.memory import MemoryBudget, fmt_bytes
from labkit.core.systems import System, register
from labkit.disk.system import open_system, presample, workload

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
]

#: Per profile: mini-batches per timed call (8 at small/large: a 3-stage pipeline needs a steady
#: state, 2 batches would be mostly fill and drain), rounds, budget as a share of the dataset's
#: bytes, and the split sweep (mini-batches per call, rounds, splits).
SETTINGS = {"ci": {"per_call": 1, "repeats": 2, "fraction": 2.0,
                   "sweep_per_call": 1, "sweep_repeats": 2, "sweep": (0.0, 0.5, 1.0)},
            "small": {"per_call": 8, "repeats": 3, "fraction": 0.15,
                      "sweep_per_call": 3, "sweep_repeats": 3, "sweep": (0.0, 0.25, 0.5, 0.75, 1.0)},
            "large": {"per_call": 8, "repeats": 3, "fraction": 0.15,
                      "sweep_per_call": 3, "sweep_repeats": 3, "sweep": (0.0, 0.25, 0.5, 0.75, 1.0)}}


def _runner(system, groups: list[list[np.ndarray]]):
    """A callable that trains `system` on the next group of mini-batches each time it is called."""
    state = {"k": 0}

    def call():
        k = state["k"]
        state["k"] += 1
        r = system.run(groups[k], first_index=10_000 * (k + 1))
        if k > 0:  # not the warm-up call
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
    systems = {n: open_system(n, ds, MemoryBudget(budget_bytes if n != "memory" else 1 << 42), cfg, pre=pre)
               for n in names}
    try:
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
        return c, systems, pre, mets, groups
    except BaseException:
        for s in systems.values():
            s.close()
        raise


def _stage_split(b: Bench, model: str, systems: dict) -> None:
    """Record each system's busy seconds per stage and wall seconds, per mini-batch."""
    for n, s in systems.items():
        runs = s.info.get("runs", [])
        nb = sum(r.batches for r in runs) or 1
        for stage in ("sample", "gather", "train"):
            b.record(f"disk.{model}.{n}.{stage}_s_per_batch", sum(r.busy[stage] for r in runs) / nb)
        b.record(f"disk.{model}.{n}.wall_s_per_batch", sum(r.seconds for r in runs) / nb)


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
        fc = systems["caliex"].features.cache
        b.record("disk.caliex.feature_rows_cached_fraction",
                 (fc.nodes.size if fc is not None else 0) / systems["caliex"].features.num_nodes)
        b.record("disk.presample_s", pre.seconds)
        _stage_split(b, "sage", systems)
        tuned = systems["caliex"].split
        curve = systems["caliex"].info["predicted"]
    finally:
        for s in systems.values():
            s.close()

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
    best = min(ct.names, key=ct.median)
    b.measure("disk.tuner_gap", ct.ratio(f"f={tuned:.2f}", best) - 1.0)
    b.log(f"tuner: split {tuned:.2f}, best measured {best}")

    # GAT: naive vs CaliEX on its own mini-batches.
    cg, sg, _, _, _ = _compare(b, "gat", ["naive", "caliex"], st)
    try:
        b.measure("disk.speedup_naive_gat", cg.ratio("naive", "caliex"))
        _stage_split(b, "gat", sg)
    finally:
        for s in sg.values():
            s.close()
    # Peak RSS of CaliEX alone, in a fresh process.
    from labkit.disk.rss import probe
    rss = probe(b.profile, "sage", 2 * st["per_call"], st["fraction"])
    for k in ("baseline_rss", "peak_rss", "growth", "budget_peak", "model", "rest"):
        b.record(f"disk.caliex.rss.{k}_mib", rss[k] / 2**20)
    b.record("disk.loadavg_1min_end", os.getloadavg()[0])

    ub = b.results["disk.upper_bound_speedup_naive"]
    fd = pre.profile.feature_disk
    disk = (f"the feature file was measured (calibrated on the pre-sampled reads) at "
            f"{1 / fd.seconds_per_request:,.0f} requests/s and {fd.bytes_per_second / 1e9:.2f} GB/s")
    r = b.results
    for cid, model in (("disk.speedup_naive", "sage"), ("disk.speedup_naive_gat", "gat")):
        if b.claims[cid].passed is not False:
            continue
        if model == "sage" and ub < 3.28:
            b.note(f"{cid}: the in-memory system itself (no disk at all) is only {ub:.2f}x faster than naive "
                   f"disk here, so no disk system can reach 3.28x: {disk}, and training is CPU-bound on 2 "
                   f"cores shared with other jobs (1-min load average {load0:.1f} at the start, "
                   f"{r['disk.loadavg_1min_end']:.1f} at the end).")
        else:
            g, nv = f"disk.{model}.caliex", f"disk.{model}.naive"
            io = max(r[g + ".sample_s_per_batch"], r[g + ".gather_s_per_batch"])
            tr = r[g + ".train_s_per_batch"]
            cache = (f"its caches (15% of the data, less indptr, staging and pipeline slots) serve "
                     f"{r[g + '.hit_rate_features']:.0%} of feature rows and {r[g + '.hit_rate_topology']:.0%} "
                     "of neighbour lists")
            if io > tr:
                why = (f"CaliEX is I/O-bound: {r[g + '.sample_s_per_batch']:.2f} s sampling and "
                       f"{r[g + '.gather_s_per_batch']:.2f} s gathering (overlapped) per mini-batch against "
                       f"{tr:.2f} s training; {cache}, and the misses are scattered 4 KiB reads ({disk}).")
            else:
                why = (f"CaliEX is training-bound: {tr:.2f} s of training per mini-batch, while naive spends "
                       f"only {r[nv + '.sample_s_per_batch'] + r[nv + '.gather_s_per_batch']:.2f} s on I/O, so "
                       f"hiding all of it caps the speedup near {r[nv + '.wall_s_per_batch'] / tr:.2f}x; {cache}.")
            b.note(f"{cid}: {why} The naive baseline already uses the same direct-I/O engine (page sharing, "
                   f"queue depth 8). Load average {load0:.1f} -> {r['disk.loadavg_1min_end']:.1f} on 2 cores.")

    if b.claims["disk.speedup_ginex"].passed is False:
        b.note(f"disk.speedup_ginex: Ginex-style here already runs on the same direct-I/O engine and its "
               f"degree-ranked neighbour cache serves {r['disk.sage.ginex.hit_rate_topology']:.0%} of lists; "
               f"CaliEX's gain is its feature hit rate ({r['disk.sage.caliex.hit_rate_features']:.0%} vs "
               f"{r['disk.sage.ginex.hit_rate_features']:.0%}) and overlap, while both are bound by the "
               "scattered feature reads that remain.")
    if b.claims["disk.slowdown_vs_memory"].passed is False:
        b.note(f"disk.slowdown_vs_memory: in memory a mini-batch costs {r['disk.sage.memory.wall_s_per_batch']:.2f} s; "
               f"CaliEX's gather stage alone takes {r['disk.sage.caliex.gather_s_per_batch']:.2f} s for the "
               f"{1 - r['disk.sage.caliex.hit_rate_features']:.0%} of rows its cache misses, because a 15% "
               f"budget less indptr, staging and pipeline slots caches "
               f"{r['disk.caliex.feature_rows_cached_fraction']:.0%} of the rows.")
    if b.claims["disk.tuner_gap"].passed is False:
        meds = [ct.median(n) for n in ct.names]
        b.note(f"disk.tuner_gap: the measured split medians span {max(meds) / min(meds) - 1:.0%} in all; "
               "the tuner's prediction misses the best measured split by the gap shown (its model prices "
               "I/O and training per stage; run-to-run noise on this shared machine is of the same order).")
    b.note("Budget = 15% of the dataset's bytes (ci: 200%, its batches touch a third of the graph); it "
           "holds indptr, both caches, staging buffers and the pipeline's in-flight batches. Outside it: "
           f"the model with its Adam state ({rss['model'] / 2**20:.1f} MiB) and the mini-batch being "
           f"trained with its activations; in a fresh process CaliEX's peak RSS grew "
           f"{rss['growth'] / 2**20:.0f} MiB over its baseline for a budget peak of "
           f"{rss['budget_peak'] / 2**20:.0f} MiB and a {rss['model'] / 2**20:.1f} MiB model; the rest, "
           f"{rss['rest'] / 2**20:.0f} MiB, is the batch in training, its activations and allocator slack "
           "(the stated fixed overhead; negative when freed memory was reused).")


register(System("disk", "CaliEX", "CaliEX: disk-based GNN training with joint caching and execution (ICDE 2025)",
                bench, CLAIMS, "03_caliex.ipynb"))
