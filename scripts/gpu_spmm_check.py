"""The one prepared GPU check for Flash-LLM: correctness and timing vs cuBLAS at OPT-66B shapes.

Run on a machine with an NVIDIA GPU and cupy (pip install 'labkit[gpu]'):

    python scripts/gpu_spmm_check.py            # ~2-4 minutes on an A100/H100
    python scripts/gpu_spmm_check.py --quick    # one shape, N=16, 80%: the bench claim only

Prints a Markdown table to read and writes JSON to $OUT/gpu_spmm.json when $OUT is set. Exits 1
if any result is wrong. It records nothing: the claim in BENCHMARKS.md comes only from the harness,
``labkit bench spmm --profile small --record`` on the GPU machine (it measures
spmm.gpu_speedup_cublas_s80_n16 whenever cupy sees a GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from labkit.core.spread import ratio_spread
from labkit.spmm import kernels_gpu

OPT66 = [(27648, 9216), (9216, 9216), (36864, 9216), (9216, 36864)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only 36864x9216, 80%%, N=16")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    if not kernels_gpu.available():
        print("no CUDA GPU / cupy here: nothing measured", file=sys.stderr)
        return 2
    import cupy
    dev = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    cases = ([((36864, 9216), 0.8, 16)] if args.quick else
             [(s, sp, n) for s in OPT66 for sp in (0.7, 0.8, 0.9) for n in (8, 16, 32)])
    rows, t0 = [], time.time()
    for shape, sp, n in cases:
        r = kernels_gpu.time_vs_cublas(shape, sp, n, repeats=args.repeats)
        rows.append(r)
        print(f"{r['shape']} s{int(sp * 100)} N={n}: {r['speedup']:.2f}x  err {r['rel_err']:.1e}", file=sys.stderr)
        cupy.get_default_memory_pool().free_all_blocks()
    print(f"\n### Flash-LLM GPU SpMM vs cuBLAS fp16 on {dev} ({time.time() - t0:.0f} s)\n")
    print("| shape | sparsity | N | Tiled-CSL ms | cuBLAS ms | speedup | Tiled-CSL GB/s | cuBLAS GB/s | rel err |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['shape']} | {r['sparsity']:.0%} | {r['N']} | {r['tiled_csl_ms']:.3f} | {r['cublas_fp16_ms']:.3f} | "
              f"{r['speedup']:.2f}x | {r['tiled_csl_GBps']:.0f} | {r['cublas_GBps']:.0f} | {r['rel_err']:.1e} |")
    claim = [r for r in rows if r["shape"] == "36864x9216" and r["sparsity"] == 0.8 and r["N"] == 16]
    if claim:
        sp = ratio_spread(claim[0]["cublas_times_s"], claim[0]["tiled_csl_times_s"])
        print(f"\nspmm.gpu_speedup_cublas_s80_n16 = {sp} (median of per-round speedups, bootstrap 95%; "
              "target >= 1.5 on the whole interval)")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_spmm.json"), "w") as fh:
            json.dump({"device": dev, "rows": rows}, fh, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
