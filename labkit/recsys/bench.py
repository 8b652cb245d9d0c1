"""`labkit bench recsys`: PICASSO's packing, interleaving and caching against per-field and TorchRec baselines.

Cases (profile "small"; "ci" shrinks every size so the bench runs in seconds; "large" keeps the field
counts, doubles the rows per field and quadruples the batch, within a 24 GiB machine: :func:`memory_need`):
- embedding stage (lookup forward, backward and sparse SGD update) at 100 and 500 fields, dim 16,
  100k rows per field, Zipf 1.05 ids, batch 2048: per-field ``nn.EmbeddingBag`` + ``torch.optim.SGD``
  vs packed tables with the fused backward + update vs TorchRec ``FusedEmbeddingBagCollection``
  (FBGEMM table-batched embedding, EXACT_SGD) and ``EmbeddingBagCollection`` (one lookup per
  table, sparse gradients, ``torch.optim.SGD``) when torchrec is installed; the stages' tables must agree afterwards;
- the full training step of the documented Wide & Deep configuration (:data:`E2E_CONFIG`) with
  each technique alone and together (interleaving: 4 micro-batches on two one-thread lanes;
  caching: 5% of rows hot, the rest in a memory-mapped file); the end-to-end claim times all three
  together (:data:`E2E_PICASSO`, fixed before the run, not the fastest variant); every model's loss
  must agree with the baseline's afterwards; and the
  packed step's two halves (embedding, dense network) alone at 1 and all threads, which bound what
  interleaving can gain;
- operators per training step from ``torch.profiler``;
- hot-row cache hit rate with 5% of rows cached, planned from observed id counts;
- PICASSO's hybrid-parallel setting (:mod:`labkit.recsys.hybrid`): Wide & Deep on 2 ranks, each in its own
  network namespace behind a link shaped to :data:`DIST_RATE` (:mod:`labkit.core.cluster`), tables sharded
  by field, the dense part data parallel: per-field all-to-alls vs one packed all-to-all per exchange, the
  packed step with and without interleaved micro-batches, and TorchRec's ``DistributedModelParallel``
  (table-wise, fused SGD) as the anchor. Without the privilege to build the namespaces these claims are
  marked "not measured" with the reason (the loopback claims above are unaffected).

Every timed claim is the median of per-round ratios with a bootstrap 95% interval
(:meth:`Bench.measure_ratio`; more rounds while the interval straddles the target); the operator
count and the hit rate are exact counts over the run and carry none.
"""

from __future__ import annotations

import gc
import os

import numba
import numpy as np
import torch

from labkit.core.bench import Bench, Claim, Comparison
from labkit.core.cacheplan import hot_fraction
from labkit.core.errors import check_range
from labkit.core.systems import System, register
from labkit.recsys.cache import SlowTier
from labkit.recsys.data import SyntheticCTR, criteo_like_cardinalities, make_fields
from labkit.recsys.model import RecModel, count_ops
from labkit.recsys.layers import PerFieldEmbeddings
from labkit.recsys.packing import PackedEmbeddings
from labkit.recsys.tables import tables_for

CLAIMS = [
    Claim("recsys.emb_speedup_f100", "embedding stage (fwd+bwd+update), packed vs per-field, 100 fields",
          "up to 6x end to end on GPUs", target=5.0),
    Claim("recsys.emb_speedup_f500", "embedding stage (fwd+bwd+update), packed vs per-field, 500 fields",
          "up to 6x end to end on GPUs", target=5.0),
    Claim("recsys.vs_torchrec_fused", "embedding stage, packed vs TorchRec FusedEmbeddingBagCollection, 100 fields, SGD",
          "FBGEMM TBE 10-23x over per-table on GPU", target=3.0),
    Claim("recsys.e2e_speedup_f100", "full Wide & Deep training step, PICASSO (packing + interleaving + caching) "
          "vs per-field, 100 fields",
          "up to 6x throughput", target=1.5),
    Claim("recsys.ops_reduction", "operators per training step, per-field / packed, 100 fields",
          "hardware utilisation up an order of magnitude", target=10.0),
    Claim("recsys.cache_hit_5pct", "hot-row cache hit rate, 5% of rows cached, Zipf 1.05",
          "hot part of skewed tables in fastest memory", target=0.85, unit=""),
    Claim("recsys.interleave_speedup", "training step, interleaving alone (packed model with vs without it), 2 cores",
          "overlap memory- and compute-bound work", target=1.1),
    Claim("recsys.dist_packing_speedup", "hybrid-parallel Wide & Deep training step, packed vs per-field "
          "all-to-all, 100 fields, 2 ranks over 10 Gbit/s links",
          "data packing merges the per-field communication ops", target=2.0),
    Claim("recsys.dist_interleave_speedup", "hybrid-parallel training step, packed, with vs without 4 interleaved "
          "micro-batches, 100 fields, 2 ranks over 10 Gbit/s links",
          "interleaving hides embedding communication behind dense compute", target=1.2),
    Claim("recsys.vs_torchrec_dmp", "hybrid-parallel training step, packed vs TorchRec DistributedModelParallel "
          "(table-wise, fused SGD), 100 fields, 2 ranks over 10 Gbit/s links",
          "TorchRec: the industrial hybrid-parallel trainer", target=1.0),
]

#: The shaped cluster the recsys.dist_* claims run on: ranks, one host each, and every link's rate
#: (the claims' text names it), and the micro-batches of the interleaved contender.
DIST_RANKS, DIST_RATE, DIST_MICRO = 2, "10gbit", 4
#: The slower rate the interleaved step is also timed at (recsys.dist_interleave_speedup_slow_links).
DIST_SLOW_RATE = "1gbit"
DIST_CLAIMS = ("recsys.dist_packing_speedup", "recsys.dist_interleave_speedup", "recsys.vs_torchrec_dmp")
#: Sizes of the hybrid-parallel case per profile (the ranks' tables are small: the case measures
#: communication, and the single-machine claims above measure the tables' kernels).
DIST_SIZES = {
    "ci": {"fields": 26, "rows": 1_000, "batch": 256, "repeats": 5, "max_rounds": 5},
    "small": {"fields": 100, "rows": 10_000, "batch": 1024, "repeats": 9},
    "large": {"fields": 100, "rows": 10_000, "batch": 2048, "repeats": 9},
}

#: Largest table difference (absolute) and loss difference (relative to the baseline's) between
#: stages or models trained on the same data from the same rows for which a speed claim is measured;
#: float sums in another order differ far less (the tests hold them to 2e-5 and 1e-5).
WEIGHT_TOL, LOSS_TOL = 1e-4, 1e-4
#: Caching in the end-to-end case: the fraction of rows in the hot cache, planned from warm-up batches.
E2E_CACHE_FRACTION, E2E_CACHE_WARMUP = 0.05, 20

#: The configuration recsys.e2e_speedup_f100 times as PICASSO, fixed before the run: packing, interleaving
#: and caching together, as the paper and notebooks/05_picasso.ipynb present it (not the fastest variant).
E2E_PICASSO = "packing+interleave+caching"

#: The documented Wide & Deep configuration of the end-to-end case (profile "small").
E2E_CONFIG = {"kind": "wide_deep", "fields": 100, "rows": 100_000, "dim": 16, "zipf": 1.05, "batch": 2048,
              "hidden": (128, 64), "n_dense": 13, "optimizer": "sgd", "lr": 0.05, "micro_batches": 4}

SIZES = {
    # ci's tables are too small for a verdict to mean anything: its 5 rounds give each claim an interval
    # and no more rounds run (max_rounds); the other profiles use the harness's bound.
    "ci": {"fields": (26, 52), "rows": 2_000, "batch": 256, "repeats": 5, "n_batches": 2, "cache_rows_max": 20_000,
           "cache_fields": 26, "max_rounds": 5},
    "small": {"fields": (100, 500), "rows": 100_000, "batch": 2048, "repeats": 9, "n_batches": 3,
              "cache_rows_max": 1_000_000, "cache_fields": 100},
    # Twice small's rows and four times its batch, at the same field counts (the claims name them):
    # the 500-field stages hold 12 GiB of tables between them, what a 24 GiB machine can give.
    "large": {"fields": (100, 500), "rows": 200_000, "batch": 8192, "repeats": 7, "n_batches": 4,
              "cache_rows_max": 2_000_000, "cache_fields": 500},
}

#: Memory the bench holds besides its tables: torch, numba and TorchRec loaded (a fixed part), and per
#: id of a batch at the larger field count the stage outputs, the gradient they receive and the
#: per-field baseline's sparse gradient tensors. Fitted to the peak RSS of the small and large runs.
MEMORY_OVERHEAD, MEMORY_PER_ID = 3 << 29, 512


def memory_need(profile: str) -> int:
    """Estimated peak memory (bytes) of `labkit bench recsys --profile PROFILE`: the largest set of
    tables alive at once, plus :data:`MEMORY_OVERHEAD` and :data:`MEMORY_PER_ID` per id of a batch."""
    sz = SIZES[profile]
    f_small, f_big = sz["fields"]
    rows, deep_row = sz["rows"], 16 * 4  # fp32, dim 16
    live = [
        4 * f_small * rows * deep_row,  # per-field, packed, TorchRec fused and TorchRec plain (sparse gradients)
        2 * f_big * rows * deep_row,  # per-field and packed
        # Wide & Deep: six models and the reference that replays one's batches, deep + wide (dim 1) columns.
        7 * f_small * rows * (deep_row + 4),
        # the cache case: dim-4 tables and the memory-mapped slow tier's pages behind them
        2 * 16 * (sum(criteo_like_cardinalities(sz["cache_fields"], max_rows=sz["cache_rows_max"]))
                  + sz["cache_fields"] * rows),
    ]
    return max(live) + MEMORY_OVERHEAD + MEMORY_PER_ID * sz["batch"] * f_big


def set_threads(n: int | None = None) -> int:
    """Use `n` threads (default: all cores) for both torch and numba; return the number set."""
    n = n or int(os.environ.get("LABKIT_RECSYS_THREADS", 0)) or os.cpu_count() or 1
    n = max(1, min(n, numba.config.NUMBA_NUM_THREADS))
    torch.set_num_threads(n)
    numba.set_num_threads(n)
    return n


def with_threads(n: int, fn):
    """Return a callable that runs `fn` with `n` torch and numba threads (contenders differ only in that)."""
    def run():
        torch.set_num_threads(n)
        numba.set_num_threads(n)
        fn()
    return run


def thread_counts() -> list[int]:
    """Thread settings each contender is timed at: 1 and all cores (the best one is its number)."""
    n = set_threads()
    return sorted({1, n})


def best(c, prefix: str) -> str:
    """Name of the fastest (by median) contender of `c` whose name starts with `prefix`."""
    return min((n for n in c.names if n.split("@")[0] == prefix), key=c.median)


def _emb_step(stage, batches, grad):
    """Return a callable running lookup + backward + update on the next batch (cycling)."""
    state = {"i": 0}

    def run():
        b = batches[state["i"] % len(batches)]
        state["i"] += 1
        emb = stage.lookup(b)
        stage.apply(b, emb, grad)
    return run


def _releasable(fns: dict) -> tuple[dict, "callable"]:
    """Wrap each callable of `fns` so the wrapper holds no reference to it; return the wrappers and a
    function that drops the callables (and the tables they hold). The harness keeps every comparison's
    contenders so it can run more rounds; once a case's claims are measured its tables must go."""
    box = dict(fns)

    def wrap(n):
        return lambda: box[n]()
    return {n: wrap(n) for n in box}, box.clear


def emb_case(b: Bench, n_fields: int, sz: dict, *, torchrec: bool, claims: tuple = ()) -> dict:
    """Time the embedding stage at `n_fields`; return the comparison ratios.

    `claims` lists ``(claim_id, base, new)``: claims measured as the speedup of contender `new` over
    `base` (names without the thread suffix; each at its fastest thread setting) with a 95% interval
    (more rounds while it straddles the target), after the stages are checked to have trained alike;
    their spreads are returned under ``"spreads"``.
    """
    specs = make_fields(n_fields, cardinality=sz["rows"], dims=16, zipf=1.05)
    tables = tables_for(specs)
    gen = SyntheticCTR(specs, seed=1)
    batches = [gen.batch(sz["batch"], i) for i in range(sz["n_batches"])]
    grad = torch.randn(sz["batch"], 16 * n_fields, generator=torch.Generator().manual_seed(0)) * 0.01
    stages = {"per_field": PerFieldEmbeddings(tables, optimizer="sgd"),
              "packed": PackedEmbeddings(tables, optimizer="sgd")}
    if torchrec:
        from labkit.recsys.baselines.torchrec import TorchRecEmbeddings
        stages["torchrec_fused"] = TorchRecEmbeddings(tables, kind="fused", optimizer="sgd")
        # The plain collection: one lookup per table, sparse gradients, torch.optim.SGD (an anchor, no claim).
        stages["torchrec_ebc"] = TorchRecEmbeddings(tables, kind="ebc", optimizer="sgd")
    steps, release = _releasable({f"{n}@{t}": with_threads(t, _emb_step(s, batches, grad))
                                  for n, s in stages.items() for t in thread_counts()})
    c = b.compare(f"embedding stage, {n_fields} fields x {sz['rows']:,} rows, dim 16, batch {sz['batch']}",
                  steps, repeats=sz["repeats"], warmup=1, work=sz["batch"], work_unit="samples")
    pf, pk = best(c, "per_field"), best(c, "packed")
    # Every stage took the same updates from the same rows: their tables must agree, or the
    # speed was bought with wrong training (the claims are then left unmeasured).
    diff = max(float(np.abs(s.table_weights(i) - stages["per_field"].table_weights(i)).max())
               for n, s in stages.items() if n != "per_field" for i in range(len(tables)))
    out = {"weights_max_diff": diff, "spreads": {}, "comparison": c}
    b.record(f"recsys.emb_weights_max_abs_diff_f{n_fields}", diff)
    b.record(f"recsys.lookups_per_step_per_field_f{n_fields}", stages["per_field"].n_lookups)
    b.record(f"recsys.lookups_per_step_packed_f{n_fields}", stages["packed"].n_lookups)
    if claims and _trained_alike(b, diff, WEIGHT_TOL, f"the embedding stages at {n_fields} fields",
                                 *(cid for cid, _, _ in claims)):
        for cid, base, new in claims:
            out["spreads"][cid] = b.measure_ratio(cid, c, best(c, base), best(c, new), max_rounds=sz.get("max_rounds"))
    release()  # the stages' tables (the harness keeps only the emptied wrappers)
    stages.clear()
    gc.collect()
    # Ratios after any extra rounds the claims ran, so side figures and claims rest on the same rounds.
    out["packed_vs_per_field"] = c.ratio(pf, pk)
    if torchrec:
        tf, te = best(c, "torchrec_fused"), best(c, "torchrec_ebc")
        out["packed_vs_torchrec_fused"] = c.ratio(tf, pk)
        out["torchrec_fused_vs_per_field"] = c.ratio(pf, tf)
        out["packed_vs_torchrec_ebc"] = c.ratio(te, pk)
        out["torchrec_ebc_vs_per_field"] = c.ratio(pf, te)
    b.record(f"recsys.emb_ms_per_field_f{n_fields}", c.median(pf) * 1e3)
    b.record(f"recsys.emb_ms_packed_f{n_fields}", c.median(pk) * 1e3)
    ids = sz["batch"] * n_fields
    out["ns_per_id_packed"] = c.median(pk) / ids * 1e9
    out["ns_per_id_per_field"] = c.median(pf) / ids * 1e9
    out["table_gib"] = n_fields * sz["rows"] * 16 * 4 / 2**30
    out["names"] = (pf, pk)
    return out


def comparison_table(c: Comparison, base: str):
    """Return a :class:`~labkit.core.metrics.ResultTable` of comparison `c`: one row per contender
    (name, threads, median and range in ms, throughput, speedup over contender `base`)."""
    from labkit.core.metrics import ResultTable
    rows = []
    for r in c.rows(base):  # the harness's own per-contender numbers, in notebook units
        name, _, threads = r["contender"].partition("@")
        row = {"contender": name, "threads": int(threads) if threads else "-", "median ms": r["median_s"] * 1e3,
               "min ms": r["min_s"] * 1e3, "max ms": r["max_s"] * 1e3}
        if r["throughput"] is not None:
            row[f"k{c.work_unit or 'items'}/s"] = r["throughput"] / 1e3
        row[f"speedup vs {base}"] = r["speedup"]
        rows.append(row)
    return ResultTable(rows, title=c.case)


def embedding_side_by_side(profile: str, *, fields: int, rows: int, batch: int, repeats: int = 3,
                           torchrec: bool | None = None):
    """Run the bench's embedding-stage case (:func:`emb_case`) once at one size, as the notebook does.

    Returns ``(table, ratios)``: :func:`comparison_table` of the contenders against the fastest
    per-field setting, and emb_case's ratios (``packed_vs_per_field``, and the TorchRec ones when
    `torchrec`; None means "when TorchRec is installed").
    """
    check_range("fields", fields, 1, 100_000, integer=True)
    check_range("rows", rows, 1, integer=True)
    check_range("batch", batch, 1, 10_000_000, integer=True)
    check_range("repeats", repeats, 1, integer=True)
    if torchrec is None:
        from labkit.recsys.baselines import torchrec as trec
        torchrec = trec.available()
    b = Bench("recsys", profile, progress=False)
    out = emb_case(b, int(fields), dict(SIZES[b.profile], rows=int(rows), batch=int(batch), repeats=int(repeats)),
                   torchrec=bool(torchrec))
    return comparison_table(b.comparisons[-1], out["names"][0]), out


def e2e_case(b: Bench, sz: dict) -> dict:
    """Time the full Wide & Deep step with each technique alone and together; count operators."""
    cfg = dict(E2E_CONFIG, fields=sz["fields"][0], rows=sz["rows"], batch=sz["batch"])
    specs = make_fields(cfg["fields"], cardinality=cfg["rows"], dims=cfg["dim"], zipf=cfg["zipf"])
    gen = SyntheticCTR(specs, seed=2)
    batches = [gen.batch(cfg["batch"], i) for i in range(sz["n_batches"])]
    mb = cfg["micro_batches"]
    kw = dict(optimizer=cfg["optimizer"], lr=cfg["lr"], hidden=cfg["hidden"], seed=0)
    cache = E2E_CACHE_FRACTION
    variants = {"baseline": {}, "packing": {"packing": True}, "interleave": {"interleave": mb},
                "caching": {"cache": cache}, "packing+interleave": {"packing": True, "interleave": mb},
                E2E_PICASSO: {"packing": True, "interleave": mb, "cache": cache}}
    models, logs = {}, {}
    try:
        for n, v in variants.items():
            models[n], logs[n] = RecModel(cfg["kind"], specs, **v, **kw), []
            if v.get("cache"):  # planned from id counts of warm-up batches the timed steps never see
                models[n].warm_cache(gen.batch(cfg["batch"], 500 + i) for i in range(E2E_CACHE_WARMUP))
        return _e2e_timed(b, cfg, specs, gen, batches, kw, models, logs, sz["repeats"], sz.get("max_rounds"))
    finally:
        for m in models.values():
            m.close()
        models.clear()
        gc.collect()


def _e2e_timed(b: Bench, cfg: dict, specs, gen, batches, kw: dict, models: dict, logs: dict,
               repeats: int, max_rounds: int | None = None) -> dict:
    def stepper(n):
        m, log = models[n], logs[n]

        def run():
            i = len(log) % len(batches)
            m.train_step(batches[i])
            log.append(i)  # the batches each model trained on, in order
        return run
    # Interleaved models run their own two lanes (one torch and one numba thread each, set inside).
    steps, release = _releasable({f"{n}@{t}": with_threads(t, stepper(n)) for n in models
                                  for t in (thread_counts() if "interleave" not in n else [max(thread_counts())])})
    try:
        return _e2e_claims(b, cfg, specs, gen, batches, kw, models, logs, stepper, max_rounds,
                           b.compare(f"Wide & Deep training step, {cfg['fields']} fields, batch {cfg['batch']}",
                                     steps, repeats=repeats, warmup=1, work=cfg["batch"], work_unit="samples"))
    finally:
        release()


def _e2e_claims(b: Bench, cfg: dict, specs, gen, batches, kw: dict, models: dict, logs: dict, stepper,
                max_rounds: int | None, c: Comparison) -> dict:
    """Check the timed models trained alike, measure the end-to-end claims and gather side figures."""
    parts = stage_parts(b, models["packing"], batches[0])
    set_threads()
    ops_base = count_ops(stepper("baseline"))
    ops_packed = count_ops(stepper("packing"))
    b.record("recsys.ops_per_step_baseline", ops_base["ops"])
    b.record("recsys.ops_per_step_packed", ops_packed["ops"])
    b.record("recsys.top_level_ops_baseline", ops_base["top_level_ops"])
    b.record("recsys.top_level_ops_packed", ops_packed["top_level_ops"])
    # Every model must have trained what the per-field baseline trains from the same batches: a fresh
    # baseline replays each model's sequence of batches (models timed at 1 and 2 threads took twice
    # the steps), and the losses on a probe batch must agree.
    probe = gen.batch(cfg["batch"], 10_000)
    losses = {n: m.eval_loss(probe) for n, m in models.items()}
    refs: dict = {}
    for n in models:
        seq = tuple(logs[n])
        if seq not in refs:
            with RecModel(cfg["kind"], specs, **kw) as ref:
                for i in seq:
                    ref.train_step(batches[i])
                refs[seq] = ref.eval_loss(probe)
    loss_diff = max(abs(losses[n] - refs[tuple(logs[n])]) / abs(refs[tuple(logs[n])]) for n in models)
    b.record("recsys.e2e_loss_baseline", losses["baseline"])
    b.record("recsys.e2e_loss_packed", losses["packing"])
    b.record("recsys.e2e_loss_max_rel_diff", loss_diff)
    for n in ("caching", E2E_PICASSO):  # hit rate of the timed steps (counters start at the plan)
        b.record(f"recsys.e2e_cache_hit_rate_{n.replace('+', '_')}", models[n].hit_rate)
    base, pack = best(c, "baseline"), best(c, "packing")
    inter, both = best(c, "interleave"), best(c, "packing+interleave")
    cach, picasso = best(c, "caching"), best(c, E2E_PICASSO)
    spreads = {}
    # The claims are measured only if every model trained what the baseline trains; more rounds (while an
    # interval straddles its target) train the same models further, on the same code.
    if _trained_alike(b, loss_diff, LOSS_TOL, "the Wide & Deep models (relative loss on a probe batch)",
                      "recsys.e2e_speedup_f100", "recsys.interleave_speedup"):
        # PICASSO is one configuration fixed before the run (E2E_PICASSO), whichever runs fastest here.
        spreads["e2e"] = b.measure_ratio("recsys.e2e_speedup_f100", c, base, picasso, max_rounds=max_rounds)
        spreads["interleave"] = b.measure_ratio("recsys.interleave_speedup", c, pack, both, max_rounds=max_rounds)
    b.note(f"recsys.e2e_speedup_f100 compares {base} (the baseline's fastest thread setting) with {picasso}: "
           "PICASSO as the paper and the notebook present it, all three techniques on, fixed before the run; "
           "each technique alone and packing + interleaving are side results (recsys.e2e_*).",
           claim="recsys.e2e_speedup_f100")
    fastest = min((n for n in c.names if not n.startswith("baseline")), key=c.median)
    if "e2e" in spreads and b.claims["recsys.e2e_speedup_f100"].status != "pass":
        cost = c.ratio(picasso, both)  # time with caching / without, per round
        why = (f"adding caching to packing + interleaving made the step {cost:.2f}x slower "
               "(recsys.e2e_caching_on_packing_interleave): on a CPU the cache's slow tier is a memory-mapped file "
               "no slower than RAM, so the cache adds a row-to-slot lookup per id and saves nothing" if cost > 1 else
               "the per-step costs behind it are in the notes on interleaving and caching")
        lead = (f"PICASSO's fixed configuration ({picasso}) ran {spreads['e2e']} over {base} while {fastest} ran "
                f"{c.median(base) / c.median(fastest):.2f}x (medians), the fastest here"
                if fastest != picasso else f"PICASSO's fixed configuration ({picasso}), the fastest here, ran "
                f"{spreads['e2e']} over {base}")
        b.note(f"{lead}; {why}.", claim="recsys.e2e_speedup_f100")
    return {"e2e": c.ratio(base, picasso), "packing": c.ratio(base, pack), "interleave": c.ratio(base, inter),
            "interleave_over_packing": c.ratio(pack, both), "packing+interleave": c.ratio(base, both),
            "packing_thread_scaling": (c.median(f"packing@{min(thread_counts())}") /
                                       c.median(f"packing@{max(thread_counts())}")),
            "caching": c.ratio(base, cach), "all_three": c.ratio(base, picasso),
            "caching_on_packing_interleave": c.ratio(both, picasso),
            "ops": ops_base["ops"] / ops_packed["ops"], "parts": parts, "names": (pack, both, picasso, base),
            "fastest": fastest, "spreads": spreads,
            "ms": {n: c.median(n) * 1e3 for n in c.names}, "loss_diff": loss_diff}


def stage_parts(b: Bench, model: RecModel, batch) -> dict:
    """Time the packed step's two halves alone at 1 and all threads: embedding (lookup + fused update)
    and dense network (forward + backward), the work interleaving overlaps; return the fastest run of each
    in ms (they explain a ratio rather than make one, and the fastest is the least disturbed by other load)."""
    stage = model.embeddings

    def emb():
        stage.apply(batch, stage.lookup(batch), grad)

    def mlp():
        e = emb_out.detach().requires_grad_()
        model.loss(e, batch).backward()
        model.dense.zero_grad(set_to_none=True)
    emb_out = stage.lookup(batch)
    grad = torch.zeros_like(emb_out)  # a zero gradient: the same memory traffic, weights unchanged
    halves, release = _releasable({f"{n}@{t}": with_threads(t, f) for n, f in (("embedding", emb), ("dense", mlp))
                                   for t in thread_counts()})
    c = b.compare("packed Wide & Deep step, its halves alone", halves, repeats=7, warmup=1)
    release()
    out = {n: c.min(n) * 1e3 for n in c.names}
    for n, v in out.items():
        b.record(f"recsys.e2e_part_ms_{n.replace('@', '_t')}", v)
    # The same halves side by side, one thread each (what the interleaver's two lanes do): the embedding
    # half loops on a second thread while the dense half runs 7 times on this one. On two independent
    # cores each would take as long as alone; the ratios say how much the lanes slow each other.
    side = beside(emb, mlp, runs=7)
    for n, alone in (("embedding", c.median("embedding@1")), ("dense", c.median("dense@1"))):
        out[f"{n}_slowdown_beside"] = b.record(f"recsys.e2e_part_slowdown_{n}_beside", side[n] / alone)
    return out


def beside(bg, fg, runs: int) -> dict:
    """Median seconds per call of `bg` (looping on a second thread) and `fg` (`runs` calls here) while
    both run at once, one torch and one numba thread each; `bg`'s calls that end after `fg`'s last
    are left out. Returns ``{"embedding": bg_s, "dense": fg_s}``."""
    import statistics
    import threading
    import time
    stop, bg_times, fg_times = threading.Event(), [], []

    def loop():
        numba.set_num_threads(1)  # thread-local in numba
        while not stop.is_set():
            t0 = time.perf_counter()
            bg()
            bg_times.append((time.perf_counter() - t0, time.perf_counter()))
    set_threads(1)
    th = threading.Thread(target=loop, name="labkit-beside", daemon=True)
    th.start()
    try:
        for _ in range(runs):
            t0 = time.perf_counter()
            fg()
            fg_times.append(time.perf_counter() - t0)
        end = time.perf_counter()
    finally:
        stop.set()
        th.join()
        set_threads()
    inside = [d for d, t in bg_times if t <= end] or [d for d, _ in bg_times]
    return {"embedding": statistics.median(inside), "dense": statistics.median(fg_times)}


def cache_case(b: Bench, sz: dict) -> dict:
    """Hit rate of a hot-row cache holding 5% of rows (and a curve), planned from warm-up id counts."""
    out = {}
    n_f = sz["cache_fields"]
    layouts = {
        "criteo_like": make_fields(n_f, cardinality=criteo_like_cardinalities(n_f, max_rows=sz["cache_rows_max"]),
                                   dims=4, zipf=1.05),
        "uniform": make_fields(n_f, cardinality=sz["rows"], dims=4, zipf=1.05),
    }
    for name, specs in layouts.items():
        gen = SyntheticCTR(specs, seed=3)
        tier = SlowTier.create()
        try:
            stage = PackedEmbeddings(tables_for(specs), slow_tier=tier)
            counts = stage.count_ids(gen.batch(sz["batch"], i) for i in range(20))
            test = [gen.batch(sz["batch"], 1000 + i) for i in range(5)]
            seen = int(sum(int(np.count_nonzero(c)) for c in counts))
            for frac in (0.01, 0.02, 0.05, 0.10, 0.20):
                stage.plan_cache(hot_fraction(counts, frac))
                for t in test:
                    stage.lookup(t)
                hr = stage.hit_rate
                b.record(f"recsys.cache_hit_{name}_{int(frac * 100)}pct", hr)
                b.record(f"recsys.cache_rows_cached_{name}_{int(frac * 100)}pct", stage.cached_rows)
                if frac == 0.05:
                    out[name] = hr
            b.record(f"recsys.cache_rows_{name}", stage.total_rows)
            b.record(f"recsys.cache_rows_seen_{name}", seen)
            out[f"{name}_oracle"] = b.record(f"recsys.cache_hit_oracle_{name}_5pct", oracle_hit_rate(specs, gen, 0.05))
            if seen < 0.20 * stage.total_rows:
                b.note(f"Cache plans ({name} layout): the 20 warm-up batches touched {seen:,} distinct rows "
                       f"({seen / stage.total_rows:.1%} of {stage.total_rows:,}), and a plan caches only rows it "
                       "saw (an unseen row has no count to rank it by), so the plans above that fraction hold "
                       "the same rows and their hit rates are equal (recsys.cache_rows_cached_*).",
                       claim="recsys.cache_hit_5pct" if name == "criteo_like" else None)
            stage.close()
        finally:
            tier.close()
    return out


def dist_case(b: Bench, sz: dict, torchrec: bool, rate: str = DIST_RATE) -> dict:
    """Time the hybrid-parallel step on a shaped cluster of :data:`DIST_RANKS` hosts (see the module doc);
    fill the recsys.dist_* claims, or mark them not measured where no shaped cluster can be built.
    Returns the comparison's medians (ms) and link bytes per step by contender ({} when not measured)."""
    from labkit.core.cluster import can_shape, fmt_rate, parse_rate, start_cluster
    from labkit.recsys.hybrid import TORCHREC, HybridConfig, HybridError, RankGroup

    ok, why = can_shape()
    if not ok:
        for cid in DIST_CLAIMS:
            b.note(f"not measured: no shaped cluster on this machine ({why}); the hybrid-parallel step needs "
                   "network namespaces and tc (run as root or with CAP_NET_ADMIN).", claim=cid)
        return {}
    cfg = HybridConfig(fields=sz["fields"], rows=sz["rows"], dim=16, batch=sz["batch"], seed=0)
    inter = f"packed+interleave{DIST_MICRO}"
    runs = {"per_field": ("per_field", 1), "packed": ("packed", 1), inter: ("packed", DIST_MICRO)}
    if torchrec:
        runs[TORCHREC] = ("torchrec", 1)
    else:
        from labkit.recsys.baselines import torchrec as trec
        b.note(f"not measured: TorchRec does not import here ({trec.why_unavailable()}).", claim="recsys.vs_torchrec_dmp")
    losses: dict[str, list[float]] = {n: [] for n in runs}
    out: dict = {}
    try:
        with start_cluster(DIST_RANKS, rate, fallback=False) as cl, \
                RankGroup(DIST_RANKS, cluster=cl, timeout=120, threads=1) as g:
            g.setup(cfg, list(runs))

            def contender(n):
                mode, micro = runs[n]
                return lambda: losses[n].extend(g.run(n, mode, micro, 1)["losses"])
            link, link_bits = fmt_rate(cl.rate_bit_s), cl.rate_bit_s
            c = b.compare(f"hybrid-parallel Wide & Deep step, {DIST_RANKS} ranks over {link} links, "
                          f"{cfg.fields} fields x {cfg.rows:,} rows, batch {cfg.batch}",
                          {n: contender(n) for n in runs}, repeats=sz["repeats"], warmup=1, work=cfg.batch,
                          work_unit="samples")
            # Every contender took as many steps on the same batches from the same weights: the same
            # losses, or the faster one trained something else (then its claims stay unmeasured).
            n_steps = min(len(v) for v in losses.values())

            def drift(names) -> float:
                ref = np.asarray(losses["per_field"][:n_steps])
                return max(float(np.max(np.abs(np.asarray(losses[n][:n_steps]) - ref) / np.abs(ref))) for n in names)
            hyb = b.record("recsys.dist_loss_max_rel_diff", drift(["packed", inter]))
            alike = _trained_alike(b, hyb, LOSS_TOL, "the hybrid-parallel contenders' losses",
                                   "recsys.dist_packing_speedup", "recsys.dist_interleave_speedup")
            if alike:
                b.measure_ratio("recsys.dist_packing_speedup", c, "per_field", "packed", max_rounds=sz.get("max_rounds"))
                b.measure_ratio("recsys.dist_interleave_speedup", c, "packed", inter, max_rounds=sz.get("max_rounds"))
            if torchrec:
                n_steps = min(len(v) for v in losses.values())
                trd = b.record("recsys.dist_torchrec_loss_max_rel_diff", drift([TORCHREC]))
                if _trained_alike(b, trd, LOSS_TOL, "TorchRec's and the hybrid trainer's losses",
                                  "recsys.vs_torchrec_dmp"):
                    b.measure_ratio("recsys.vs_torchrec_dmp", c, TORCHREC, "packed", max_rounds=sz.get("max_rounds"))
            # Bytes on the links per step, contender by contender (one more step each, counted alone).
            for n, (mode, micro) in runs.items():
                before = cl.link_bytes()
                g.run(n, mode, micro, 1)
                after = cl.link_bytes()
                sent = sum(after[h][0] - before[h][0] for h in after)
                out[f"bytes_{n}"] = b.record(f"recsys.dist_link_bytes_per_step_{n.replace('+', '_')}", sent)
            b.release(c)
            # The same packed step with and without interleaving on slower links (a result, not a claim):
            # there the all-to-alls are long enough for the overlap to have something to hide.
            cl.set_rate(DIST_SLOW_RATE)
            slow = b.compare(f"packed hybrid-parallel step over {fmt_rate(cl.rate_bit_s)} links",
                             {n: contender(n) for n in ("packed", inter)}, repeats=sz["repeats"], warmup=1)
            out["interleave_slow"] = slow.spread("packed", inter)
            b.record("recsys.dist_interleave_speedup_slow_links", out["interleave_slow"].median)
            b.release(slow)
    except HybridError as exc:
        for cid in DIST_CLAIMS:
            if b.claims[cid].measured is None:
                b.note(f"not measured: the hybrid-parallel ranks failed ({exc}).", claim=cid)
        return {}
    ms = {n: c.median(n) * 1e3 for n in runs}
    for n, v in ms.items():
        b.record(f"recsys.dist_step_ms_{n.replace('+', '_')}", v)
    out["ms"] = ms
    # ms the packed step's bytes take on one link (each host sends its share over its own link)
    wire = out["bytes_packed"] / DIST_RANKS * 8 / link_bits * 1e3
    b.note(f"Hybrid-parallel case: {DIST_RANKS} ranks (one torch thread each), each in its own network namespace "
           f"behind a veth link shaped to {link} (tc tbf, both directions); tables sharded by field "
           f"(round robin), the dense network data parallel (one allreduce per step). Per step the per-field "
           f"trainer issues 4 x {cfg.fields} all-to-alls (a field's ids as lengths and values, its pooled rows, their "
           f"gradients) and the packed one 4; both post them asynchronously and use the same lookup and fused update "
           f"kernels, so they differ only in how the bytes are grouped. Medians: per-field {ms['per_field']:.1f} ms, "
           f"packed {ms['packed']:.1f} ms, packed with {DIST_MICRO} micro-batches {ms[inter]:.1f} ms"
           + (f", TorchRec DMP {ms[TORCHREC]:.1f} ms" if torchrec else "") + ".")
    if b.claims["recsys.dist_interleave_speedup"].status not in ("pass", "not measured"):
        b.note(f"The packed step sent {out['bytes_packed'] / 1e6:.2f} MB over the {DIST_RANKS} links, about "
               f"{wire:.1f} ms of wire time per link at {link} against a {ms['packed']:.1f} ms step: most of the step "
               "is dense compute and lookups, and the all-to-alls interleaving would hide behind them are short, so "
               f"there is little to overlap. Over {fmt_rate(parse_rate(DIST_SLOW_RATE))} links, where they take ten "
               f"times as long, the same interleaving ran {out['interleave_slow']} "
               "(recsys.dist_interleave_speedup_slow_links; median and 95% interval of the per-round ratios).",
               claim="recsys.dist_interleave_speedup")
    if torchrec:
        b.note("TorchRec's DMP runs the same tables table-wise (its planner places them) with FBGEMM's fused "
               "SGD and DistributedDataParallel for the dense part; FBGEMM needs a multiple of 4 columns, so each "
               "wide (dim-1) table is 4 wide there and the model reads its first column: more bytes per "
               f"step on the links ({out.get('bytes_' + TORCHREC, 0) / 1e6:.2f} MB against the packed trainer's "
               f"{out['bytes_packed'] / 1e6:.2f} MB).", claim="recsys.vs_torchrec_dmp")
    return out


def _trained_alike(b: Bench, diff: float, tol: float, what: str, *claims: str) -> bool:
    """True when `diff` (how far contenders' training drifted apart) is within `tol`; else note each claim."""
    if diff <= tol:
        return True
    for cid in claims:
        b.note(f"{cid} not measured: {what} differ by {diff:.2e} after the same updates (more than {tol:g}), "
               "so the faster contender did not train the same model.", claim=cid)
    return False


def oracle_hit_rate(specs, gen: SyntheticCTR, fraction: float) -> float:
    """Hit rate of the ideal cache of `fraction` of all rows: the rows most likely to be looked up
    under the generator's own Zipf distributions (what no plan from observed counts can beat)."""
    # Each row's share of all lookups: its probability in its field times the field's ids per sample.
    p = np.concatenate([np.diff(z.cdf, prepend=0.0) * s.hotness for z, s in zip(gen.samplers, specs)])
    k = int(round(fraction * p.size))
    if k == 0:
        return 0.0
    return float(np.partition(p, p.size - k)[p.size - k:].sum() / p.sum())


def bench(b: Bench) -> None:
    sz = SIZES[b.profile]
    threads = set_threads()
    b.record("recsys.threads", threads)
    b.record("recsys.load_average_at_start", os.getloadavg()[0])
    b.note(f"Each contender is timed with 1 and with {threads} torch/numba threads (name@threads); claims "
           "compare the fastest setting of each side. Interleaved models run two lanes of one thread each.")
    from labkit.recsys.baselines import torchrec as trec
    have_trec = trec.available()
    if not have_trec:
        b.note("TorchRec is not installed (pip install --no-deps -r requirements-nodeps.txt), so "
               "recsys.vs_torchrec_fused is not measured: " + trec.why_unavailable())
    f_small, f_big = sz["fields"]
    r1 = emb_case(b, f_small, sz, torchrec=have_trec,
                  claims=(("recsys.emb_speedup_f100", "per_field", "packed"),)
                  + ((("recsys.vs_torchrec_fused", "torchrec_fused", "packed"),) if have_trec else ()))
    if have_trec:
        b.record("recsys.torchrec_fused_vs_per_field_f100", r1["torchrec_fused_vs_per_field"])
        b.record("recsys.torchrec_ebc_vs_per_field_f100", r1["torchrec_ebc_vs_per_field"])
        b.record("recsys.packed_vs_torchrec_ebc_f100", r1["packed_vs_torchrec_ebc"])
    r2 = emb_case(b, f_big, sz, torchrec=False, claims=(("recsys.emb_speedup_f500", "per_field", "packed"),))
    for cid, f, r in (("recsys.emb_speedup_f100", f_small, r1), ("recsys.emb_speedup_f500", f_big, r2)):
        sp = r["spreads"].get(cid)
        if sp is not None and b.claims[cid].status != "pass":
            b.note(f"Embedding stage at {f} fields: the packed stage ({r['names'][1]}) spends "
                   f"{r['ns_per_id_packed']:.0f} ns per id on lookup + fused update (a row read and a row "
                   f"read-modify-write per id, at random over {r['table_gib']:.1f} GiB of tables); the per-field baseline "
                   f"({r['names'][0]}) spends {r['ns_per_id_per_field']:.0f} ns (medians: "
                   f"{r['ns_per_id_per_field'] / r['ns_per_id_packed']:.2f}x apart); the claim, the median of the "
                   f"per-round ratios with its 95% interval, is {sp}, not clear of 5x on this CPU.", claim=cid)
    r3 = e2e_case(b, sz)
    b.record("recsys.e2e_packing_alone", r3["packing"])
    b.record("recsys.e2e_packing_interleave", r3["packing+interleave"])
    b.record("recsys.e2e_caching_alone", r3["caching"])
    b.record("recsys.e2e_all_three", r3["all_three"])
    b.record("recsys.e2e_caching_on_packing_interleave", r3["caching_on_packing_interleave"])
    b.note(f"Caching in the training step: {E2E_CACHE_FRACTION:.0%} of rows in the hot cache (planned from "
           f"{E2E_CACHE_WARMUP} warm-up batches), the rest in a memory-mapped file. Caching alone keeps one table "
           "per field (F lookups, no packing) but runs on the packed stage's kernels, so its fused update comes "
           f"with it: recsys.e2e_caching_alone = {r3['caching']:.2f}x over the baseline; all three together "
           f"(recsys.e2e_all_three) {r3['all_three']:.2f}x. On a CPU the slow tier is a file in the page "
           "cache, as fast as RAM once read, so the cache buys placement (which rows must stay in the fastest "
           "memory, the GPU's in the paper), not speed; its hit rate during the timed steps is "
           "recsys.e2e_cache_hit_rate_*.")
    b.record("recsys.interleave_on_per_field", r3["interleave"])
    b.record("recsys.packing_thread_scaling", r3["packing_thread_scaling"])
    p, t1, tn = r3["parts"], min(thread_counts()), threads
    e1, m1, en, mn = p[f"embedding@{t1}"], p[f"dense@{t1}"], p[f"embedding@{tn}"], p[f"dense@{tn}"]
    b.note(f"recsys.interleave_speedup compares packing+interleave ({E2E_CONFIG['micro_batches']} micro-batches on two "
           f"lanes of one thread each, {r3['ms'][r3['names'][1]]:.1f} ms) with {r3['names'][0]} "
           f"({r3['ms'][r3['names'][0]]:.1f} ms), the faster non-interleaved setting (the claim is the median of "
           f"the per-round ratios; the ratio of the two medians is "
           f"{r3['ms'][r3['names'][0]] / r3['ms'][r3['names'][1]]:.2f}, and where the two differ much the rounds "
           "scattered: see the min-max column). Halves of the packed step "
           "alone (fastest of 7 runs): "
           f"embedding {e1:.1f} ms and dense {m1:.1f} ms at {t1} thread, {en:.1f} and {mn:.1f} ms at {tn}.")
    inter = r3["spreads"].get("interleave")
    if inter is not None and b.claims["recsys.interleave_speedup"].status != "pass":
        bound = max((e1 + m1) / 2, e1)  # embedding kernels run on one lane at a time; dense work on both
        ceiling, took = (en + mn) / bound, r3["ms"][r3["names"][1]]
        why = (f"the halves already scale {(e1 + m1) / (en + mn):.2f}x from 1 to {tn} threads, so little hardware "
               "idles for overlap to fill" if ceiling < 1.1 else
               f"the interleaved step took {took:.1f} ms against that bound: smaller micro-batch kernels, the lanes' "
               "handoffs and the two cores sharing caches and memory cost the difference")
        b.note(f"Interleaving gains only {inter}: two one-thread lanes can at best finish "
               f"a step in {bound:.1f} ms (half of {e1 + m1:.1f} ms of one-thread work, the embedding half on one lane), "
               f"against {en + mn:.1f} ms for both halves at {tn} threads, a ceiling of {ceiling:.2f}x; {why}. "
               f"Run side by side on two threads, one thread each, the embedding half took "
               f"{p['embedding_slowdown_beside']:.2f}x its time alone and the dense half "
               f"{p['dense_slowdown_beside']:.2f}x (medians; recsys.e2e_part_slowdown_*_beside; above 1 means the "
               "lanes slow each other, so two lanes get less than two cores' worth of work done).",
               claim="recsys.interleave_speedup")
    if r3["interleave"] < 1:
        b.note("Interleaving the per-field model itself loses (recsys.interleave_on_per_field): every "
               "micro-batch repeats its F lookups, F backward ops and their Python dispatch, so the op count "
               "grows with the micro-batches; interleaving pays once packing has cut the ops, so the claim "
               "measures it on the packed model.")
    b.measure("recsys.ops_reduction", r3["ops"])
    r4 = cache_case(b, sz)
    span = f"log-uniform 10..{sz['cache_rows_max']:,} rows"
    b.measure("recsys.cache_hit_5pct", r4["criteo_like"], note=f"Criteo-like table sizes ({span})")
    b.note(f"recsys.cache_hit_5pct is measured on Criteo-like table sizes ({span} per field): "
           f"{r4['criteo_like']:.3f}, where the ideal 5% cache (the rows the generator's Zipf distributions make "
           f"likeliest) would hit {r4['criteo_like_oracle']:.3f}. With every field at {sz['rows']:,} rows the plan "
           f"hits {r4['uniform']:.3f} and even the ideal cache only {r4['uniform_oracle']:.3f}: at Zipf 1.05 over "
           "equal tables the hottest 5% of rows do not carry 85% of the lookups.", claim="recsys.cache_hit_5pct")
    dist_case(b, DIST_SIZES[b.profile], have_trec)
    if b.profile != "small":
        b.note(f"profile {b.profile!r} changes the sizes: fields {sz['fields']}, {sz['rows']:,} rows, "
               f"batch {sz['batch']}; the targets are stated for 'small'")


register(System("recsys", "PICASSO", "PICASSO: packed recommender training (ICDE 2022)", bench, CLAIMS,
                "05_picasso.ipynb", memory=memory_need))
