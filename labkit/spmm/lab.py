"""Measurements the Flash-LLM notebook shows: this machine's roofline and interleaved SpMM timings."""

from __future__ import annotations

import time

import numpy as np
import torch

from labkit.core.bench import Bench, Comparison
from labkit.core.errors import bad_value, check_choice, check_range
from labkit.spmm.baselines import DenseTorch, TiledCSLMatmul
from labkit.spmm.prune import check_sparsity, random_sparse
from labkit.spmm.tiled_csl import TiledCSL, byte_bound_speedup, encode


def machine_roofline(mib: int = 256, repeats: int = 3, *, min_sample_s: float = 0.2) -> dict:
    """Return measured memory bandwidth (GB/s, torch sum over `mib` MiB) and fp32/bf16 GEMM FLOP/s.

    A skinny product W (M x K) @ X (K x N) in 16-bit does 2MKN FLOPs over ~2MK bytes, an
    arithmetic intensity of ~N FLOP/byte; it is memory-bound while N is below the ridge point
    flops / bandwidth. Each rate is the best of at least `repeats` timed calls, repeated until
    `min_sample_s` seconds have been timed, after untimed warm-up calls for half as long: the first
    calls of a process (threads and cores waking up, pages not yet mapped) can read several times
    slower than the machine is.
    """
    check_range("mib", mib, 16, 8192, integer=True)
    check_range("repeats", repeats, 1, integer=True)
    check_range("min_sample_s", min_sample_s, 0.0, 10.0)
    a = torch.ones(mib * 2**20 // 4, dtype=torch.float32)
    bw = a.numel() * 4 / _best_time(a.sum, repeats, min_sample_s)
    del a
    out = {"bandwidth_GBps": bw / 1e9}
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        x = torch.randn(1024, 1024).to(dt)
        out[f"gemm_{name}_GFLOPs"] = 2 * 1024**3 / _best_time(lambda: x @ x, repeats, min_sample_s) / 1e9
    out["ridge_flop_per_byte_bf16"] = out["gemm_bf16_GFLOPs"] / out["bandwidth_GBps"]
    out["threads"] = torch.get_num_threads()
    return out


def _best_time(fn, repeats: int, min_sample_s: float) -> float:
    """Best of at least `repeats` timed calls of `fn`, until `min_sample_s` is timed, after warm-up calls for half that."""
    warm = 0.0
    while True:  # at least one warm-up call
        warm += _timed(fn)
        if warm >= min_sample_s / 2:
            break
    best, spent, n = float("inf"), 0.0, 0
    while n < repeats or spent < min_sample_s:
        t = _timed(fn)
        best, spent, n = min(best, t), spent + t, n + 1
    return best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def sparse_case(shape: tuple[int, int], sparsity: float, *, seed: int = 0) -> tuple[torch.Tensor, TiledCSL]:
    """Return a seeded (dense bf16 weight, its Tiled-CSL encoding) pair."""
    check_sparsity(sparsity)
    w = random_sparse(shape, sparsity, seed=seed)
    return w, encode(w)


def _check_pair(weight: torch.Tensor, enc: TiledCSL) -> None:
    """Raise ValueError unless `enc` is a TiledCSL and `weight` a 2-D tensor of the shape it encodes."""
    if not isinstance(enc, TiledCSL):
        raise bad_value("enc", type(enc).__name__, "a TiledCSL (labkit.spmm.tiled_csl.encode)")
    if not isinstance(weight, torch.Tensor):
        raise bad_value("weight", type(weight).__name__, f"a torch.Tensor of shape enc.shape={enc.shape}")
    if tuple(weight.shape) != tuple(enc.shape):
        raise bad_value("weight.shape", tuple(weight.shape), f"enc.shape={tuple(enc.shape)} "
                        "(the dense weight that enc encodes)")


#: The dense contenders a comparison can take as its baseline.
DENSE = ("dense_bf16", "dense_fp32")


def dense_for(n: int, roof: dict | None) -> str:
    """Return the dense baseline one would run at N columns on this machine: "dense_bf16" or "dense_fp32".

    At N = 1 it is dense bf16 (the paper's baseline: a GEMV reads half the bytes of fp32). For N >= 2
    it is dense fp32 where `roof` (:func:`machine_roofline`) measured bf16 GEMM slower than fp32's:
    a CPU without native bf16 arithmetic runs a bf16 GEMM many times slower, and no one would
    serve a batch that way, so beating it would prove nothing.
    """
    check_range("n", n, 1, 64, integer=True)
    if int(n) == 1 or not isinstance(roof, dict):
        return "dense_bf16"
    bf16, fp32 = roof.get("gemm_bf16_GFLOPs"), roof.get("gemm_fp32_GFLOPs")
    slow = isinstance(bf16, (int, float)) and isinstance(fp32, (int, float)) and bf16 < fp32
    return "dense_fp32" if slow else "dense_bf16"


def compare_once(weight: torch.Tensor, enc: TiledCSL, n: int, *, repeats: int = 3,
                 kernels: tuple[str, ...] = ("sparse", "dense_tile"), dense: str = "dense_bf16",
                 min_sample_s: float = 0.0) -> Comparison:
    """Time a dense torch product against the Tiled-CSL kernels at N columns, over `repeats` interleaved rounds.

    `dense` is the baseline ("dense_bf16" or "dense_fp32", see :func:`dense_for`); it is always the
    first name of the Comparison. `min_sample_s` repeats fast calls so one round's sample lasts at
    least that long (a single call of a few milliseconds is at the mercy of a busy machine).
    Read a speedup with its spread as ``c.spread(dense, "tiled_csl_sparse")``.
    """
    check_range("n", n, 1, 64, integer=True)
    check_choice("dense", dense, DENSE)
    n = int(n)
    _check_pair(weight, enc)
    k = weight.shape[1]
    x = torch.randn(k, n, generator=torch.Generator().manual_seed(n)).to(torch.bfloat16)
    if n == 1:
        x = x[:, 0]
    dt = torch.bfloat16 if dense == "dense_bf16" else torch.float32
    ops = {dense: DenseTorch(weight, dt)}
    ops.update({f"tiled_csl_{kn}": TiledCSLMatmul(enc, kernel=kn) for kn in kernels})
    b = Bench("spmm", "ci", progress=False)
    return b.compare(f"{weight.shape[0]}x{k} N={n}", {name: (lambda op=op: op(x)) for name, op in ops.items()},
                     repeats=repeats, warmup=1, min_sample_s=min_sample_s,
                     work=2.0 * weight.numel() * n, work_unit="dense flop")


def roofline_points(weight: torch.Tensor, enc: TiledCSL, ns: tuple[int, ...] = (1, 4, 16), *,
                    repeats: int = 3, kernels: tuple[str, ...] = ("sparse", "dense_tile"),
                    min_sample_s: float = 0.0) -> list[dict]:
    """Return where dense bf16 and the Tiled-CSL kernels land on this machine's roofline, per N.

    One dict per (kernel, N) with ``intensity`` (FLOP per weight byte read), ``GFLOPs`` (FLOP per
    second at the median time of :func:`compare_once`) and ``ms``. Dense bf16 does 2MKN FLOPs
    over its 2MK bytes (intensity N); the Tiled-CSL kernels are credited with the 2·nnz·N FLOPs
    that touch a non-zero over ``enc.nbytes`` (4 bytes per non-zero, intensity ~N/2), so the
    dense-tile kernel's extra multiplications by zero do not count. Activation and output bytes are
    left out: for skinny N they are small next to the weights.
    """
    if not isinstance(ns, (tuple, list)) or not ns:
        raise bad_value("ns", ns, "a non-empty tuple of column counts N in [1, 64]")
    _check_pair(weight, enc)
    m, k = weight.shape
    flops_per_n = {"dense_bf16": 2.0 * m * k, "tiled_csl": 2.0 * enc.nnz}
    nbytes = {"dense_bf16": 2.0 * m * k, "tiled_csl": float(enc.nbytes)}
    out = []
    for n in ns:
        c = compare_once(weight, enc, n, repeats=repeats, kernels=kernels, min_sample_s=min_sample_s)
        for name in c.names:
            kind = "dense_bf16" if name == "dense_bf16" else "tiled_csl"
            flops = flops_per_n[kind] * n
            out.append({"kernel": name, "n": int(n), "intensity": flops / nbytes[kind],
                        "GFLOPs": flops / c.median(name) / 1e9, "ms": c.median(name) * 1e3})
    return out


def summary(c: Comparison, enc: TiledCSL, sparsity: float) -> dict:
    """Return the numbers a plot shows for one comparison: times, best kernel, speedup, bytes."""
    m, k = enc.shape
    best = min((n for n in c.names if n.startswith("tiled_csl")), key=c.median)
    speed = c.ratio("dense_bf16", best)
    return {"dense_ms": c.median("dense_bf16") * 1e3,
            **{f"{n}_ms": c.median(n) * 1e3 for n in c.names if n.startswith("tiled_csl")},
            "best": best, "speedup": speed, "bound": byte_bound_speedup(sparsity),
            "roofline_fraction": speed / byte_bound_speedup(sparsity),
            "dense_MB": 2 * m * k / 2**20, "tiled_csl_MB": enc.nbytes / 2**20}


def max_rel_error(enc: TiledCSL, weight: torch.Tensor, n: int = 4, kernel: str = "auto") -> float:
    """Return max |spmm - float64 reference| / max |reference| on fresh random activations."""
    from labkit.spmm.kernels_cpu import MAX_N, spmm
    n = int(check_range("n", n, 1, MAX_N, integer=True))
    _check_pair(weight, enc)
    x = torch.randn(weight.shape[1], n).to(torch.bfloat16)
    ref = weight.double() @ x.double()
    got = spmm(enc, x, kernel=kernel)
    return float(np.abs(got - ref.numpy()).max() / max(1e-30, ref.abs().max().item()))


def decoder_comparison(weights: dict, batch: int, tokens: int, *, rounds: int = 5, seed: int = 0) -> Comparison:
    """Time greedy generation of `tokens` tokens at `batch`, dense bf16 vs Tiled-CSL decoder, interleaved.

    Both decoders are built from the same `weights` (:func:`labkit.spmm.decoder.random_weights`);
    names "dense_bf16" and "tiled_csl". Tokens per second are ``batch * tokens / c.median(name)``;
    the speedup with its spread is ``c.spread("dense_bf16", "tiled_csl")``.
    """
    from labkit.core.bench import interleave
    from labkit.spmm.decoder import Decoder
    batch = int(check_range("batch", batch, 1, 64, integer=True))
    models = {"dense_bf16": Decoder(weights, linear="dense"), "tiled_csl": Decoder(weights, linear="sparse")}
    prompt = torch.randint(0, models["tiled_csl"].cfg.vocab, (batch, 1),
                           generator=torch.Generator().manual_seed(seed))
    return interleave({name: (lambda m=m: m.generate(prompt, tokens)) for name, m in models.items()},
                      rounds=rounds, warmup=1, case=f"decoder batch {batch}")
