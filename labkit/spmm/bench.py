"""`labkit bench spmm`: Tiled-CSL SpMM vs dense bf16, CSR, and the byte roofline; decoder tokens/s.

Profiles: "ci" uses small shapes so it runs in seconds; "small" uses the OPT-66B MLP shapes at
N = 1 for the claims, the OPT-66B MLP-up shape (36864 x 9216, 680 MB in bf16: more than the
L3, like real decoding) for the N sweep, and an OPT-style decoder
with d_model 4096 for tokens/s; "large" adds all OPT-66B and OPT-30B layer shapes and more N.
"""

from __future__ import annotations

import math
import time

import torch

from labkit.core.bench import Bench, Claim
from labkit.core.errors import check_choice
from labkit.core.spread import ratio_spread
from labkit.core.systems import System, register
from labkit.spmm import kernels_cpu
from labkit.spmm.baselines import BF16CSR, DenseTorch, ScipyCSR, TiledCSLMatmul, TorchCSR
from labkit.spmm.decoder import Decoder, DecoderConfig, random_weights, tokens_per_second
from labkit.spmm.prune import random_sparse
from labkit.spmm.tiled_csl import byte_bound_speedup, encode

CLAIMS = [
    Claim("spmm.speedup_dense_s90_n1", "SpMM vs dense bf16 torch, 90% sparse, N=1, OPT-66B MLP (geo-mean)",
          "5x byte bound; 2.1x over cuBLAS on A100 (N>=8)", target=2.0),
    Claim("spmm.speedup_dense_s80_n1", "SpMM vs dense bf16 torch, 80% sparse, N=1, OPT-66B MLP (geo-mean)",
          "2.5x byte bound; 1.7x over cuBLAS on A100", target=1.2),
    Claim("spmm.speedup_dense_s70_n1", "SpMM vs dense bf16 torch, 70% sparse, N=1, OPT-66B MLP (geo-mean)",
          "1.67x byte bound; 1.4x over cuBLAS on A100", target=0.9),
    Claim("spmm.speedup_csr_s80_n1", "SpMM vs faster of torch CSR / scipy CSR, 80% sparse, N=1",
          "2.9x over Sputnik (CSR-class) on A100", target=2.0),
    Claim("spmm.e2e_tokens_speedup_s90_b1", "Decoder tokens/s, 90% sparse vs dense bf16, batch 1",
          "up to 3.8x tokens/GPU-s over DeepSpeed (OPT-66B)", target=1.6),
    Claim("spmm.bytes_per_nnz_ratio", "Tiled-CSL bytes / ((1-s) M K), worst case over the shapes run",
          "~4 bytes per non-zero (16-bit value + 16-bit location)", target=4.1, unit="B", op="<="),
    Claim("spmm.gpu_speedup_cublas_s80_n16", "GPU Tiled-CSL SpMM vs cuBLAS fp16, 80% sparse, N=16",
          "1.7x on A100", target=1.5),
]

OPT66_MLP = ((36864, 9216), (9216, 36864))
SETTINGS = {
    "ci": dict(mlp=((512, 256), (256, 512)), sparsities=(0.7, 0.8, 0.9), extra=(), sweep_shape=(512, 512),
               sweep_s=(0.8,), sweep_n=(1, 4, 16), repeats=5, warmup=1,
               decoder=DecoderConfig(d_model=128, n_heads=4, ffn_dim=512, n_layers=2, vocab=256, max_len=64),
               new_tokens=8, batches=(1, 4), dec_repeats=5, probe=1024,
               max_rounds=7),
    "small": dict(mlp=OPT66_MLP, sparsities=(0.7, 0.8, 0.9), extra=((27648, 9216), (28672, 7168)),
                  sweep_shape=(36864, 9216), sweep_s=(0.8, 0.9), sweep_n=(1, 2, 4, 8, 16, 32), repeats=5, warmup=1,
                  decoder=DecoderConfig(d_model=4096, n_heads=32, ffn_dim=16384, n_layers=2, vocab=1024, max_len=64),
                  new_tokens=12, batches=(1, 16), dec_repeats=5, probe=4096,
                  max_rounds=15),
    "large": dict(mlp=OPT66_MLP, sparsities=(0.7, 0.8, 0.9),
                  extra=((27648, 9216), (9216, 9216), (21504, 7168), (7168, 7168), (28672, 7168), (7168, 28672)),
                  sweep_shape=(36864, 9216), sweep_s=(0.7, 0.8, 0.9), sweep_n=(1, 2, 4, 8, 16, 32, 64), repeats=9,
                  warmup=2, decoder=DecoderConfig(d_model=9216, n_heads=72, ffn_dim=36864, n_layers=1, vocab=1024,
                                                  max_len=64),
                  new_tokens=16, batches=(1, 4, 16), dec_repeats=5, probe=4096,
                  max_rounds=15),
}


#: The dense bf16 contenders; every speedup is taken against the faster of them (by median).
DENSE = ("dense_bf16", "dense_bf16_linear")
#: The dense fp32 contenders (torch.matmul and F.linear: at N = 16 on a Zen1 EPYC fp32 matmul ran
#: 2.3x faster than F.linear's GEMM on 16384x4096, so both are raced where fp32 is).
FP32 = ("dense_fp32", "dense_fp32_linear")


#: A contender whose probe (below) takes this many times its rival's time is not timed in the N sweep
#: or the decoder: dense bf16 against dense fp32, and the dense-tile kernel against the sparse one.
#: It cannot be the faster of the pair, and on a CPU without native bf16 matmul or tensor cores both
#: are slow (the batch-16 bf16 decoder took 57 s per call on a Zen1 EPYC; on 36864x9216 on an AVX2
#: Zen3 EPYC bf16 took 6 s at N = 8 against fp32's 1.6 s, and dense-tile 16 s at N = 32 against the
#: sparse kernel's 1 s), which set the small profile's runtime on such hosts.
SLOW = 2.0


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _best_dense(c, names=DENSE + FP32) -> str:
    """Name of the fastest dense contender of `c` (by median): bf16, or fp32 where it is timed and faster.

    On a CPU without native bf16 matmul (AVX2 only) torch's bf16 GEMM takes a slow path from N = 2 on
    (5 s against fp32's 0.3 s for 36864x9216 at N = 16 on a Zen1 EPYC), and nobody would run dense in
    bf16 there: the sweep's speedups are taken over the dense product a user would pick.
    """
    return min((n for n in names if n in c.times), key=c.median)


def _best_tiled(c, names=("tiled_csl_sparse", "tiled_csl_dense_tile")) -> str:
    return min((n for n in names if n in c.times), key=c.median)


class _Held:
    """The operators a comparison's contenders call, dropped once its claims are measured.

    The harness keeps every comparison's contenders so it can run more rounds; the spmm weights are
    hundreds of MB each, so a case's operators are released (and any later call refused) once the
    claims that may need more of its rounds are settled.
    """

    def __init__(self, ops: dict) -> None:
        self.ops = dict(ops)

    def contenders(self, x) -> dict:
        ops = self.ops
        return {n: (lambda n=n: ops[n](x)) for n in ops}

    def release(self) -> None:
        self.ops.clear()


_PROBES: dict[tuple[str, int, int], float] = {}


def _best_of(ops: dict, x, calls: int = 2) -> float:
    """Least seconds of `calls` timed calls of each operator (after one warm-up call each), over `ops`."""
    t = math.inf
    for op in ops:
        op(x)
        for _ in range(calls):
            t0 = time.perf_counter()
            op(x)
            t = min(t, time.perf_counter() - t0)
    return t


def probe_slowdown(kind: str, n: int, size: int = 4096) -> float:
    """Time ratio of a contender to its rival on a size x size weight times N columns; cached per process.

    kind "bf16": the best dense bf16 call over the best dense fp32 call (matmul or F.linear each);
    kind "dense_tile": the dense-tile Tiled-CSL kernel over the sparse one, 80% sparse. A ratio of
    :data:`SLOW` or more says the first cannot be the faster of the pair at this N on this CPU.
    """
    check_choice("kind", kind, ("bf16", "dense_tile"))
    if (kind, n, size) not in _PROBES:
        x = torch.randn(size, n, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
        if kind == "bf16":
            w = torch.randn(size, size, generator=torch.Generator().manual_seed(0))
            slow = _best_of([DenseTorch(w, torch.bfloat16, call=c) for c in ("matmul", "linear")], x)
            fast = _best_of([DenseTorch(w, torch.float32, call=c) for c in ("matmul", "linear")], x)
        else:
            enc = encode(random_sparse((size, size), 0.8, seed=0))
            slow = _best_of([TiledCSLMatmul(enc, kernel="dense_tile")], x)
            fast = _best_of([TiledCSLMatmul(enc, kernel="sparse")], x)
        _PROBES[kind, n, size] = slow / fast
    return _PROBES[kind, n, size]


def _too_slow(b: Bench, kind: str, n: int, st) -> bool:
    """True when `kind` (bf16 / dense_tile) is too slow at N columns to be raced (asked for N >= 2 only)."""
    key = {"bf16": "bf16_over_fp32_gemm_time", "dense_tile": "dense_tile_over_sparse_time"}[kind]
    return b.record(f"spmm.{key}_n{n}", probe_slowdown(kind, n, st["probe"])) >= SLOW


def _explain(b: Bench, cid: str, reason: str) -> None:
    """A one-sentence note on a claim that missed (the reason) or whose interval straddles its target."""
    c = b.claims[cid]
    if c.status == "miss":
        b.note(f"missed: {reason}.", claim=cid)
    elif c.status == "inconclusive":
        b.note(f"inconclusive: its 95% interval [{c.low:.2f}, {c.high:.2f}] over {c.rounds} rounds holds the "
               f"{c.target:g}{c.unit} target, so this machine cannot tell a pass from a miss ({reason}).", claim=cid)


def _n1_case(b: Bench, shape, s, seed, st, *, csr: bool) -> dict:
    """Time dense bf16 vs both Tiled-CSL kernels (and CSR when asked) at N = 1.

    Returns the comparison, the names the claims compare (the faster dense bf16 call and the faster
    CSR, each by median, against the faster Tiled-CSL kernel) and the operators, still held.
    """
    m, k = shape
    w = random_sparse(shape, s, seed=seed)
    enc = encode(w)
    ops = {"dense_bf16": DenseTorch(w), "dense_bf16_linear": DenseTorch(w, call="linear"),
           "tiled_csl_sparse": TiledCSLMatmul(enc, kernel="sparse"),
           "tiled_csl_dense_tile": TiledCSLMatmul(enc, kernel="dense_tile")}
    ops["dense_bf16_linear"].weight = ops["dense_bf16"].weight   # one copy of W for both calls
    if csr:
        ops["torch_csr"] = TorchCSR(w)
        ops["scipy_csr"] = ScipyCSR(w)
        ops["csr_bf16"] = BF16CSR(w)  # an anchor at Tiled-CSL's precision, no claim (see labkit.spmm.baselines)
    x = torch.randn(k, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)
    held = _Held(ops)
    c = b.compare(f"{m}x{k} s{int(s * 100)} N=1", held.contenders(x),
                  repeats=st["repeats"], warmup=st["warmup"], work=2.0 * enc.nnz, work_unit="useful flop")
    out = {"c": c, "held": held, "shape": shape, "s": s, "best": _best_tiled(c), "dense": min(DENSE, key=c.median),
           "nbytes": enc.nbytes, "bytes_ratio": enc.nbytes / ((1 - s) * m * k)}
    if csr:
        out["csr"] = min(("torch_csr", "scipy_csr"), key=c.median)
        out["csr_nbytes"] = ops[out["csr"]].nbytes
    return out


def _n1_results(b: Bench, r: dict) -> None:
    """Record one N = 1 case's side figures (after its claims took any extra rounds)."""
    c, best, dense, s = r["c"], r["best"], r["dense"], r["s"]
    m, k = r["shape"]
    tag = f"{m}x{k}_s{int(s * 100)}"
    r["speedup"] = b.record(f"spmm.speedup_dense_{tag}_n1", c.ratio(dense, best))
    b.record(f"spmm.roofline_fraction_{tag}_n1", r["speedup"] / byte_bound_speedup(s))
    b.record(f"spmm.sparse_over_dense_tile_{tag}_n1", c.ratio("tiled_csl_dense_tile", "tiled_csl_sparse"))
    r["GBps"] = b.record(f"spmm.tiled_csl_GBps_{tag}_n1", r["nbytes"] / c.median(best) / 1e9)
    b.record(f"spmm.dense_bf16_GBps_{tag}_n1", 2.0 * m * k / c.median(dense) / 1e9)
    if "csr" in r:
        b.record(f"spmm.speedup_csr_{tag}_n1", c.ratio(r["csr"], best))
        r["csr_bf16"] = b.record(f"spmm.speedup_csr_bf16_{tag}_n1", c.ratio("csr_bf16", best))
        r["csr_GBps"] = b.record(f"spmm.csr_GBps_{tag}_n1", r["csr_nbytes"] / c.median(r["csr"]) / 1e9)


def _n1_claims(b: Bench, s: float, rs: list[dict], max_rounds: int | None = None) -> None:
    """The N = 1 claims of sparsity s: geo-means over the shapes, each with its joint 95% interval."""
    cid = f"spmm.speedup_dense_s{int(s * 100)}_n1"
    b.measure_geomean(cid, [(r["c"], r["dense"], r["best"]) for r in rs], max_rounds=max_rounds)
    if s == 0.8:
        # the faster CSR of each shape was picked by median before any extra rounds
        b.measure_geomean("spmm.speedup_csr_s80_n1", [(r["c"], r["csr"], r["best"]) for r in rs],
                          max_rounds=max_rounds)
    for r in rs:
        _n1_results(b, r)
    c = b.claims[cid]
    bound = byte_bound_speedup(s)
    _explain(b, cid, f"the kernel reached {c.measured / bound:.0%} of the {bound:.1f}x byte bound, held back at "
             "N = 1 by the activation gather (about one cycle per non-zero per core) rather than by memory, "
             "which costs more the sparser the matrix")
    if s != 0.8:
        return
    bf = b.record("spmm.speedup_csr_bf16_s80_n1", _geomean([r["csr_bf16"] for r in rs]))
    b.note(f"over the faster of torch's and scipy's CSR, which hold fp32 values (8 bytes per non-zero); over a "
           f"CSR at Tiled-CSL's own precision (bf16 values, int32 columns, 6 bytes per non-zero, a numba kernel "
           f"written like the lab's; spmm.speedup_csr_bf16_s80_n1) Tiled-CSL is {bf:.2f}x, which is what the "
           "format itself buys at N = 1.", claim="spmm.speedup_csr_s80_n1")
    ours = " and ".join(f"{r['GBps']:.1f}" for r in rs)
    theirs = " and ".join(f"{r['csr_GBps']:.1f}" for r in rs)
    slower = all(r["GBps"] < r["csr_GBps"] for r in rs)
    _explain(b, "spmm.speedup_csr_s80_n1",
             "the CSRs read 8 bytes per non-zero against Tiled-CSL's 4, a 2x gain only if Tiled-CSL streams its "
             f"words as fast as the CSR streams its own, and Tiled-CSL read {ours} GB/s against the faster CSR's "
             f"{theirs} GB/s (per shape; spmm.tiled_csl_GBps_*, spmm.csr_GBps_*)"
             + (", so its per-non-zero work (the activation gather), not memory, sets its pace" if slower else ""))


def _sweep(b: Bench, st) -> None:
    """Dense bf16 / fp32 vs both kernels over N; record the N where dense overtakes Tiled-CSL."""
    m, k = st["sweep_shape"]
    fp32_faster: list[str] = []
    slow_bf16 = [n for n in st["sweep_n"] if n >= 2 and _too_slow(b, "bf16", n, st)]
    slow_tile = [n for n in st["sweep_n"] if n >= 2 and _too_slow(b, "dense_tile", n, st)]
    for s in st["sweep_s"]:
        w = random_sparse((m, k), s, seed=7)
        enc = encode(w)
        ops = {"dense_bf16": DenseTorch(w), "dense_bf16_linear": DenseTorch(w, call="linear"),
               "dense_fp32": DenseTorch(w, torch.float32),
               "dense_fp32_linear": DenseTorch(w, torch.float32, call="linear"),
               "tiled_csl_sparse": TiledCSLMatmul(enc, kernel="sparse"),
               "tiled_csl_dense_tile": TiledCSLMatmul(enc, kernel="dense_tile")}
        # One copy of each dtype's W for both calls (fp32 F.linear ran 10% faster than matmul at N = 2 on
        # 36864x9216 on a Zen1 EPYC, 2x slower from N = 4).
        ops["dense_bf16_linear"].weight = ops["dense_bf16"].weight
        ops["dense_fp32_linear"].weight = ops["dense_fp32"].weight
        del w
        helds = []
        crossover = None
        for n in st["sweep_n"]:
            x = torch.randn(k, n, generator=torch.Generator().manual_seed(n)).to(torch.bfloat16)
            if n == 1:
                x = x[:, 0]
            left_out = (DENSE if n in slow_bf16 else ()) + (("tiled_csl_dense_tile",) if n in slow_tile else ())
            held = _Held({nm: op for nm, op in ops.items() if nm not in left_out})
            helds.append(held)
            c = b.compare(f"sweep {m}x{k} s{int(s * 100)} N={n}", held.contenders(x),
                          repeats=max(3, st["repeats"] - 2), warmup=1, work=2.0 * m * k * n, work_unit="dense flop")
            best, dense = _best_tiled(c), _best_dense(c)
            r = c.ratio(dense, best)
            tag = f"s{int(s * 100)}_n{n}"
            if dense in FP32:
                fp32_faster.append(f"s{int(s * 100)} N={n}")
            b.record(f"spmm.sweep_speedup_dense_{tag}", r)
            b.record(f"spmm.sweep_dense_tile_wins_{tag}", float(best == "tiled_csl_dense_tile"))
            if crossover is None and r < 1.0:
                crossover = n
        b.record(f"spmm.crossover_n_s{int(s * 100)}", float(crossover if crossover is not None else 0))
        for held in helds:
            held.release()
        del ops, enc
    if fp32_faster:
        b.note(f"Dense fp32 ran faster than dense bf16 at {', '.join(fp32_faster)} (on a CPU without native bf16 "
               "matmul torch's bf16 GEMM takes a slow path), so there the sweep's speedups and crossovers are "
               "over dense fp32. The N = 1 claims stay against bf16.")
    if slow_bf16 or slow_tile:
        b.note(f"On a {st['probe']} x {st['probe']} probe a bf16 GEMM took at least {SLOW:g}x an fp32 one at N = "
               f"{', '.join(map(str, slow_bf16)) or 'none'} (spmm.bf16_over_fp32_gemm_time_n*) and the dense-tile "
               f"kernel at least {SLOW:g}x the sparse one at N = {', '.join(map(str, slow_tile)) or 'none'} "
               "(spmm.dense_tile_over_sparse_time_n*), so there the sweep did not time the slower of the pair, "
               "which could not have been the faster dense product or the faster kernel.")


def _decoder(b: Bench, st) -> None:
    """Tokens/s of the OPT-style decoder, dense bf16 (and fp32) vs Tiled-CSL, same 90%-sparse weights.

    The claim (batch 1) is against bf16, Tiled-CSL's value type; every batch also records the
    speedup over the fastest dense decoder, fp32 included, as the sweep does. At a batch where the
    bf16 GEMM probe is slow (see :data:`SLOW`) the bf16 decoders are not timed.
    """
    cfg = st["decoder"]
    weights = random_weights(cfg, 0.9, seed=11)
    models = {"dense_bf16": Decoder(weights, linear="dense"),
              "dense_bf16_linear": Decoder(weights, linear="dense", dense_call="linear"),
              "dense_fp32": Decoder(weights, linear="dense", dense_dtype=torch.float32),
              "dense_fp32_linear": Decoder(weights, linear="dense", dense_call="linear", dense_dtype=torch.float32),
              "tiled_csl": Decoder(weights, linear="sparse")}
    del weights
    fp32_faster: list[int] = []
    untimed: list[int] = []
    b.record("spmm.decoder_dense_linear_MB", models["dense_bf16"].linear_bytes / 2**20)
    b.record("spmm.decoder_sparse_linear_MB", models["tiled_csl"].linear_bytes / 2**20)
    for batch in st["batches"]:
        prompt = torch.randint(0, cfg.vocab, (batch, 1), generator=torch.Generator().manual_seed(batch))
        skip = batch >= 2 and _too_slow(b, "bf16", batch, st)
        if skip:
            untimed.append(batch)
        held = _Held({n: m for n, m in models.items() if not (skip and n in DENSE)})
        c = b.compare(f"decoder d{cfg.d_model} x{cfg.n_layers} s90 batch={batch}",
                      {n: (lambda n=n, ops=held.ops: ops[n].generate(prompt, st["new_tokens"])) for n in held.ops},
                      repeats=st["dec_repeats"] if batch == 1 else 3, warmup=1,
                      work=batch * st["new_tokens"], work_unit="token")
        if batch == 1:
            dense = min(DENSE, key=c.median)
            b.measure_ratio("spmm.e2e_tokens_speedup_s90_b1", c, dense, "tiled_csl", max_rounds=st["max_rounds"])
            _explain(b, "spmm.e2e_tokens_speedup_s90_b1",
                     "attention, LayerNorm and the LM head stay dense and do not shrink with sparsity (Amdahl), "
                     "and each linear's speedup is the N = 1 SpMM's above")
        if not skip:
            dense = min(DENSE, key=c.median)
            b.record(f"spmm.e2e_tokens_speedup_s90_b{batch}", c.ratio(dense, "tiled_csl"))
            b.record(f"spmm.e2e_tokens_per_s_dense_b{batch}", c.throughput(dense))
        b.record(f"spmm.e2e_tokens_per_s_sparse_b{batch}", c.throughput("tiled_csl"))
        best = _best_dense(c)
        b.record(f"spmm.e2e_tokens_speedup_best_dense_s90_b{batch}", c.ratio(best, "tiled_csl"))
        b.record(f"spmm.e2e_tokens_per_s_dense_fp32_b{batch}", c.throughput(min(FP32, key=c.median)))
        if best in FP32 and not skip:
            fp32_faster.append(batch)
        held.release()
    if fp32_faster:
        b.note(f"The dense fp32 decoder ran faster than dense bf16 at batch {', '.join(map(str, fp32_faster))}; "
               "spmm.e2e_tokens_speedup_best_dense_s90_b* is over it there, while spmm.e2e_tokens_speedup_s90_b* "
               "(and the batch-1 claim) stay over bf16, the weights' type in Tiled-CSL.")
    if untimed:
        b.note(f"At batch {', '.join(map(str, untimed))} the bf16 GEMM probe was at least {SLOW:g}x slower than "
               "fp32 (spmm.bf16_over_fp32_gemm_time_n*), so the bf16 decoders were not timed there and only "
               "spmm.e2e_tokens_speedup_best_dense_s90_b* (over fp32) is recorded.")
    del models
    _ = tokens_per_second  # the notebook's one-call measure; the bench times generate() directly


def _gpu(b: Bench) -> None:
    try:
        from labkit.spmm import kernels_gpu
        available = kernels_gpu.available()
    except Exception as exc:  # noqa: BLE001 - any import problem means "no usable GPU"
        available, why = False, f"{type(exc).__name__}: {exc}"
    else:
        why = "no CUDA GPU / cupy on this machine"
    if not available:
        b.note(f"not measured: {why}; scripts/gpu_spmm_check.py runs it where a GPU is lent.",
               claim="spmm.gpu_speedup_cublas_s80_n16")
        return
    res = kernels_gpu.time_vs_cublas((36864, 9216), 0.8, 16)
    b.record("spmm.gpu_rel_err_s80_n16", res["rel_err"])
    if not res["ok"]:  # a wrong kernel's speed is no result
        b.note(f"not measured: the CUDA kernel's output is off by {res['rel_err']:.2e} (relative to the fp32 "
               "product of the same fp16 inputs; at most 2e-3 is accepted).", claim="spmm.gpu_speedup_cublas_s80_n16")
        return
    # per-round speedups of CUDA-event timings, interleaved (cuBLAS, then Tiled-CSL, each round)
    sp = ratio_spread(res["cublas_times_s"], res["tiled_csl_times_s"])
    b.measure("spmm.gpu_speedup_cublas_s80_n16", sp)
    _explain(b, "spmm.gpu_speedup_cublas_s80_n16", f"the kernel read its words at {res['tiled_csl_GBps']:.0f} GB/s "
             f"against cuBLAS's {res['cublas_GBps']:.0f} GB/s")


def bench(b: Bench) -> None:
    """Run the spmm bench at b.profile and fill in its claims."""
    st = SETTINGS[b.profile]
    b.record("spmm.torch_threads", torch.get_num_threads())
    b.record("spmm.numba_threads", kernels_cpu.numba_threads())
    bytes_ratios = []
    for s in st["sparsities"]:
        # both shapes of one sparsity are held until its claims are settled (they may take more rounds)
        rs = [_n1_case(b, shape, s, seed=100 + i, st=st, csr=(s == 0.8)) for i, shape in enumerate(st["mlp"])]
        _n1_claims(b, s, rs, st["max_rounds"])
        bytes_ratios += [r["bytes_ratio"] for r in rs]
        for r in rs:
            r["held"].release()
        del rs
    for j, shape in enumerate(st["extra"]):
        r = _n1_case(b, shape, 0.8, seed=200 + j, st=st, csr=False)
        _n1_results(b, r)
        r["held"].release()
        bytes_ratios.append(r["bytes_ratio"])
    # an exact count over the encoded matrices, not a timing: no interval
    b.measure("spmm.bytes_per_nnz_ratio", max(bytes_ratios))
    _sweep(b, st)
    _decoder(b, st)
    _gpu(b)
    b.note(f"Dense bf16 is the faster (by median) of torch.matmul(W, x) (1-D x at N=1: torch's matrix-vector "
           f"path) and F.linear(x, W) (oneDNN GEMM), both with torch's default {torch.get_num_threads()} threads; "
           f"Tiled-CSL kernels use numba with {kernels_cpu.numba_threads()} "
           "threads; torch's and scipy's CSR are fp32 (CPU torch has no bf16 CSR matmul), scipy's is "
           "single-threaded; csr_bf16 is the lab's numba bf16 CSR with the same threads as Tiled-CSL. "
           "Each N = 1 claim is a geo-mean over the shapes of the median per-round speedup, with a bootstrap "
           "95% interval that resamples every shape's rounds jointly.")


register(System("spmm", "Flash-LLM", "Flash-LLM: sparse LLM inference (VLDB 2024)", bench, CLAIMS,
                "01_flash_llm.ipynb"))
