"""Peak RSS of CaliEX alone, in a fresh process: ``python -m labkit.disk.rss PROFILE MODEL BATCHES FRACTION``.

Prints one JSON line: the process's resident baseline once everything is imported and the
dataset verified, its peak (VmHWM) while opening the system (tuning, filling the caches) and,
measured apart, while training, the budget's peak, the model's bytes
(parameters + Adam state) and the rest (the mini-batch being trained, activations, allocator
slack): the "fixed overhead" a budget does not cover.
"""

from __future__ import annotations

import json
import subprocess
import sys


def main(argv: list[str]) -> dict:
    profile, model, batches, fraction = argv[0], argv[1], int(argv[2]), float(argv[3])
    from labkit.core.machine import reset_peak_rss, rss_bytes
    from labkit.core.memory import MemoryBudget
    from labkit.disk.system import open_system, presample, workload

    ds, cfg, budget_bytes, pseeds, seeds = workload(profile, model, batches, budget_fraction=fraction)
    pre = presample(ds, cfg, pseeds, MemoryBudget(budget_bytes))
    pre_bytes = sum(b.nbytes for b in pre.batches)
    import gc
    gc.collect()
    reset_peak_rss()
    base, _ = rss_bytes()
    budget = MemoryBudget(budget_bytes)
    s = open_system("caliex", ds, budget, cfg, pre=pre)
    # Setup (tuning, filling the caches) has its own transient peak; training's is measured apart.
    _, setup_peak = rss_bytes()
    reset_peak_rss()
    try:
        s.run(seeds)
        model_bytes = s.trainer.nbytes
    finally:
        s.close()
    _, peak = rss_bytes()
    out = {"baseline_rss": base, "peak_rss": peak, "growth": peak - base, "budget": budget.total,
           "setup_peak_rss": setup_peak, "setup_growth": setup_peak - base,
           "budget_peak": budget.peak, "model": model_bytes, "presampled_batches_held": pre_bytes,
           "rest": peak - base - budget.peak - model_bytes}
    print(json.dumps(out))
    return out


def probe(profile: str, model: str = "sage", batches: int = 3, fraction: float = 0.15, timeout: int = 600) -> dict:
    """Run :func:`main` in a child process and return its JSON."""
    r = subprocess.run([sys.executable, "-m", "labkit.disk.rss", profile, model, str(batches), str(fraction)],
                       capture_output=True, text=True, timeout=timeout, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main(sys.argv[1:])
