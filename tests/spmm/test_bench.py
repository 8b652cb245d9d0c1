"""The spmm bench at profile ci fills every CPU claim and records its side-by-side numbers."""

import math
import re

import pytest
import torch

from labkit.catalog import load
from labkit.core.bench import Bench, Comparison
from labkit.core.spread import geomean_spread, ratio_spread
from labkit.spmm import bench as spmm_bench
from labkit.spmm.bench import CLAIMS, SLOW


def _tiled_csl_bytes(w: torch.Tensor, tile_rows: int, tile_cols: int, pad: int = 16) -> int:
    """Tiled-CSL's size from its layout, not from the encoder: 4 bytes per word (each tile row's
    non-zeros padded up to a multiple of `pad`), one int64 offset per tile plus one, and one
    uint16 padded count per tile row."""
    m, k = w.shape
    gr, gc = -(-m // tile_rows), -(-k // tile_cols)
    nz = torch.zeros(gr * tile_rows, gc * tile_cols, dtype=torch.int64)
    nz[:m, :k] = (w != 0).long()
    per_tile_row = nz.reshape(gr * tile_rows, gc, tile_cols).sum(-1)  # (matrix row, tile col)
    words = int((-(-per_tile_row // pad) * pad).sum())
    return 4 * words + 8 * (gr * gc + 1) + 2 * gr * gc * tile_rows


def _expected_bytes_ratio(profile: str) -> float:
    """The claim's definition: max over the N=1 cases of nbytes / ((1 - s) M K), s the nominal sparsity.

    The cases are the bench's own (same shapes, sparsities and seeds); the tile is 8 rows by
    K cut into equal column tiles of at most 8192, rounded up to a multiple of 16 (auto_tile).
    """
    from labkit.spmm.bench import SETTINGS
    from labkit.spmm.prune import random_sparse
    st = SETTINGS[profile]
    cases = [(shape, s, 100 + i) for s in st["sparsities"] for i, shape in enumerate(st["mlp"])]
    cases += [(shape, 0.8, 200 + j) for j, shape in enumerate(st["extra"])]
    ratios = []
    for (m, k), s, seed in cases:
        n_tiles = -(-k // 8192)
        cols = min(8192, -(-(-(-k // n_tiles)) // 16) * 16)
        ratios.append(_tiled_csl_bytes(random_sparse((m, k), s, seed=seed), 8, cols) / ((1 - s) * m * k))
    return max(ratios)


def test_expected_bytes_ratio_matches_the_encoder():
    from labkit.spmm.prune import random_sparse
    from labkit.spmm.tiled_csl import encode
    for shape, s, tile in (((512, 256), 0.9, (8, 256)), ((37, 300), 0.7, (8, 64)), ((20, 9216), 0.8, (8, 4608))):
        w = random_sparse(shape, s, seed=3)
        enc = encode(w, tile=tile)
        assert enc.nbytes == _tiled_csl_bytes(w, *tile)
    # At ci, 512 x 256 at 90%: ~25.6 non-zeros per 256-column tile row, padded to 32 words, so the
    # worst case is ~5.2 bytes per nominal non-zero (the 4.1 B claim is met on the real shapes only).
    assert 5.0 < _expected_bytes_ratio("ci") < 5.5


@pytest.mark.slow
def test_bench_ci_records_claims():
    system = load("spmm")
    report = system.run_bench("ci", progress=False)
    claims = {c.id: c for c in report.claims}
    for cid in ("spmm.speedup_dense_s90_n1", "spmm.speedup_dense_s80_n1", "spmm.speedup_dense_s70_n1",
                "spmm.speedup_csr_s80_n1", "spmm.e2e_tokens_speedup_s90_b1", "spmm.bytes_per_nnz_ratio"):
        assert claims[cid].measured is not None and math.isfinite(claims[cid].measured) and claims[cid].measured > 0
    # every claim from repeated timings carries a bootstrap 95% interval over at least 5 rounds, and its
    # verdict is read from that interval; the byte count is exact and has none
    for cid in ("spmm.speedup_dense_s90_n1", "spmm.speedup_dense_s80_n1", "spmm.speedup_dense_s70_n1",
                "spmm.speedup_csr_s80_n1", "spmm.e2e_tokens_speedup_s90_b1"):
        c = claims[cid]
        assert c.low is not None and 0 < c.low <= c.measured <= c.high, (cid, c)
        assert c.rounds >= 5 and c.kind == "measured"
        assert c.status == ("pass" if c.low >= c.target else "miss" if c.high < c.target else "inconclusive")
        if c.status != "pass":  # a miss or an inconclusive verdict says why, in one sentence
            assert any(n.startswith(f"{cid}: {c.status if c.status == 'inconclusive' else 'missed'}: ")
                       for n in report.notes), (cid, report.notes)
    assert claims["spmm.bytes_per_nnz_ratio"].low is None and claims["spmm.bytes_per_nnz_ratio"].high is None
    assert claims["spmm.bytes_per_nnz_ratio"].measured == pytest.approx(_expected_bytes_ratio("ci"), rel=1e-12)
    gpu = claims["spmm.gpu_speedup_cublas_s80_n16"]
    assert gpu.measured is None or gpu.measured > 0
    assert any("gpu_speedup" in n for n in report.notes) or gpu.measured is not None
    assert report.results["spmm.torch_threads"] >= 1
    assert "spmm.crossover_n_s80" in report.results
    # each 80%-sparse shape records the faster CSR's read rate beside Tiled-CSL's (the CSR miss note cites both)
    csr_rates = [k for k in report.results if k.startswith("spmm.csr_GBps_")]
    assert len(csr_rates) == 2 and all(report.results[k] > 0 for k in csr_rates)
    for k in csr_rates:
        assert k.replace("csr_GBps", "tiled_csl_GBps") in report.results
    if claims["spmm.speedup_csr_s80_n1"].status == "miss":
        assert any(n.startswith("spmm.speedup_csr_s80_n1: missed: ") and "GB/s" in n for n in report.notes)
    names = {n for c in report.comparisons for n in c.names}
    assert {"dense_bf16", "tiled_csl_sparse", "tiled_csl_dense_tile", "torch_csr", "scipy_csr"} <= names
    sweep = next(c for c in report.comparisons if c.case.startswith("sweep"))
    assert {"dense_bf16", "dense_bf16_linear", "dense_fp32", "dense_fp32_linear"} <= set(sweep.names)
    # the decoder also races a dense fp32 model; each batch records the speedup over the fastest dense one
    # (at batch 4 dense bf16 is left out where the GEMM probe found it at least SLOW times fp32's time)
    for batch in (1, 4):
        dec = next(c for c in report.comparisons if c.case.startswith("decoder") and c.case.endswith(f"batch={batch}"))
        dense = ("dense_bf16", "dense_bf16_linear", "dense_fp32", "dense_fp32_linear")
        slow = batch > 1 and report.results[f"spmm.bf16_over_fp32_gemm_time_n{batch}"] >= SLOW
        assert set(dense[2:] if slow else dense) | {"tiled_csl"} == set(dec.names)
        fastest = min((d for d in dense if d in dec.names), key=dec.median)
        assert report.results[f"spmm.e2e_tokens_speedup_best_dense_s90_b{batch}"] == pytest.approx(
            dec.ratio(fastest, "tiled_csl"))
        if not slow:
            assert report.results[f"spmm.e2e_tokens_speedup_best_dense_s90_b{batch}"] <= \
                report.results[f"spmm.e2e_tokens_speedup_s90_b{batch}"] * (1 + 1e-12)
    dec1 = next(c for c in report.comparisons if c.case.endswith("batch=1"))
    assert len(dec1.times["tiled_csl"]) == claims["spmm.e2e_tokens_speedup_s90_b1"].rounds


def test_the_sweep_takes_its_speedups_over_the_fastest_dense_product_fp32_included():
    """Where bf16 GEMM is slow (no native bf16 on the CPU), the sweep's baseline is dense fp32; where
    bf16 is faster it stays bf16; the N = 1 claims' baseline set stays bf16 only."""
    from labkit.core.bench import Comparison
    from labkit.spmm.bench import DENSE, _best_dense

    def comp(**ms):
        return Comparison("case", {n: [v, v] for n, v in ms.items()})
    no_bf16_hw = comp(dense_bf16=5.2, dense_bf16_linear=4.9, dense_fp32=0.31, tiled_csl_sparse=0.15)
    assert _best_dense(no_bf16_hw) == "dense_fp32"
    assert _best_dense(no_bf16_hw, DENSE) == "dense_bf16_linear"
    # both fp32 calls count (F.linear's GEMM and torch.matmul differ by 2x at N = 16 on some CPUs)
    assert _best_dense(comp(dense_bf16=5.2, dense_fp32=0.9, dense_fp32_linear=0.4)) == "dense_fp32_linear"
    assert _best_dense(comp(dense_bf16=0.033, dense_bf16_linear=0.044, dense_fp32=0.20)) == "dense_bf16"
    assert _best_dense(comp(dense_bf16=0.06, dense_bf16_linear=0.061)) == "dense_bf16"  # no fp32 timed


def _case(shape, s, times, *, csr=None):
    """One N = 1 case as _n1_case returns it, from given per-round times (no weights held)."""
    c = Comparison(f"{shape[0]}x{shape[1]} s{int(s * 100)} N=1", {n: list(t) for n, t in times.items()})
    r = {"c": c, "held": spmm_bench._Held({}), "shape": shape, "s": s, "best": spmm_bench._best_tiled(c),
         "dense": min(spmm_bench.DENSE, key=c.median), "nbytes": 4.2 * (1 - s) * shape[0] * shape[1],
         "bytes_ratio": 4.2}
    if csr:
        r["csr"] = min(("torch_csr", "scipy_csr"), key=c.median)
        r["csr_nbytes"] = 8.0 * (1 - s) * shape[0] * shape[1]
    return r


def test_the_n1_claims_are_geomeans_with_a_joint_interval_over_each_shapes_faster_baseline():
    """Each shape's own faster dense call and faster CSR (by median) is the baseline; the claim is the
    geo-mean of the per-shape median speedups with the joint bootstrap interval over their rounds, and a
    CSR miss carries a one-sentence reason."""
    def rounds(t, k=7):
        return [t * (1 + 0.01 * ((3 * i) % 5 - 2)) for i in range(k)]
    # shape A: scipy's CSR and F.linear are the faster baselines; shape B: torch's CSR and matmul
    a = {"dense_bf16": rounds(1.3), "dense_bf16_linear": rounds(1.0), "tiled_csl_sparse": rounds(0.8),
         "tiled_csl_dense_tile": rounds(1.9), "torch_csr": rounds(1.4), "scipy_csr": rounds(1.1),
         "csr_bf16": rounds(0.9)}
    bb = {"dense_bf16": rounds(2.0), "dense_bf16_linear": rounds(2.5), "tiled_csl_sparse": rounds(1.2),
          "tiled_csl_dense_tile": rounds(1.0), "torch_csr": rounds(1.6), "scipy_csr": rounds(3.0),
          "csr_bf16": rounds(1.1)}
    rs = [_case((64, 32), 0.8, a, csr=True), _case((32, 64), 0.8, bb, csr=True)]
    assert [r["csr"] for r in rs] == ["scipy_csr", "torch_csr"] and [r["best"] for r in rs] == \
        ["tiled_csl_sparse", "tiled_csl_dense_tile"]
    b = Bench("spmm", "ci", CLAIMS, progress=False)
    spmm_bench._n1_claims(b, 0.8, rs)
    csr = b.claims["spmm.speedup_csr_s80_n1"]
    want = geomean_spread([(a["scipy_csr"], a["tiled_csl_sparse"]), (bb["torch_csr"], bb["tiled_csl_dense_tile"])])
    assert (csr.measured, csr.low, csr.high, csr.rounds) == pytest.approx((want.median, want.lo, want.hi, 7))
    assert csr.measured == pytest.approx(math.sqrt(1.1 / 0.8 * 1.6 / 1.0))
    dense = b.claims["spmm.speedup_dense_s80_n1"]
    want = geomean_spread([(a["dense_bf16_linear"], a["tiled_csl_sparse"]),
                           (bb["dense_bf16"], bb["tiled_csl_dense_tile"])])
    assert (dense.measured, dense.low, dense.high) == pytest.approx((want.median, want.lo, want.hi))
    assert dense.status == "pass" and csr.status == "miss"   # 1.48x [.., ..] against 2x, clear of noise
    why = [n for n in b.notes if n.startswith("spmm.speedup_csr_s80_n1: missed: ")]
    assert len(why) == 1 and why[0].endswith(".") and not re.search(r"\. [A-Z]", why[0]), why
    assert not any(n.startswith("spmm.speedup_dense_s80_n1: ") for n in b.notes)   # a pass needs no reason
    assert b.results["spmm.speedup_csr_bf16_s80_n1"] == pytest.approx(math.sqrt(0.9 / 0.8 * 1.1 / 1.0))


def test_the_decoder_claim_gets_more_rounds_while_its_interval_straddles_the_target(monkeypatch):
    """The batch-1 claim is measure_ratio over the decoder's own interleaved rounds: its interval rests on
    every round run, and the bf16 decoders are left out only at a batch where the bf16 GEMM probe is slow."""
    monkeypatch.setattr(spmm_bench, "probe_slowdown", lambda kind, n, size=4096: 10.0 if n >= 2 else 1.0)
    st = dict(spmm_bench.SETTINGS["ci"], batches=(1, 4), dec_repeats=5, max_rounds=9, new_tokens=2)
    b = Bench("spmm", "ci", CLAIMS, progress=False)
    spmm_bench._decoder(b, st)
    c = b.claims["spmm.e2e_tokens_speedup_s90_b1"]
    dec1, dec4 = (x for x in b.comparisons if x.case.startswith("decoder"))
    assert c.rounds == len(dec1.times["tiled_csl"]) and 5 <= c.rounds <= 9
    base = min(spmm_bench.DENSE, key=dec1.median)
    want = ratio_spread(dec1.times[base], dec1.times["tiled_csl"])
    assert (c.measured, c.low, c.high) == (want.median, want.lo, want.hi)
    # more rounds ran only because the first five rounds' interval straddled the target, and stopped
    # once it did not (or at the bound)
    first = ratio_spread(dec1.times[base][:5], dec1.times["tiled_csl"][:5])
    assert c.rounds == 5 or first.lo < c.target <= first.hi
    assert c.rounds == 9 or c.status != "inconclusive"
    assert set(dec4.names) == {"dense_fp32", "dense_fp32_linear", "tiled_csl"}
    assert "spmm.e2e_tokens_speedup_s90_b4" not in b.results and "spmm.e2e_tokens_speedup_best_dense_s90_b4" in b.results
    assert any(n.startswith("At batch 4 the bf16 GEMM probe") for n in b.notes)


def test_the_sweep_leaves_out_a_contender_only_where_its_probe_finds_it_slow(monkeypatch):
    """Dense bf16 (against fp32) and the dense-tile kernel (against the sparse one) are not timed at an N
    where a probe found them at least SLOW times their rival's time; elsewhere every contender races."""
    probes = {("bf16", 4): 1.9, ("bf16", 16): 2.5, ("dense_tile", 4): 2.1}
    monkeypatch.setattr(spmm_bench, "probe_slowdown", lambda kind, n, size=4096: probes.get((kind, n), 1.0))
    st = dict(spmm_bench.SETTINGS["ci"], sweep_n=(1, 4, 16), repeats=3)
    b = Bench("spmm", "ci", CLAIMS, progress=False)
    spmm_bench._sweep(b, st)
    names = {int(c.case.rsplit("=", 1)[1]): set(c.names) for c in b.comparisons}
    assert names[1] == names[4] | {"tiled_csl_dense_tile"} == names[16] | {"dense_bf16", "dense_bf16_linear"}
    assert "tiled_csl_dense_tile" in names[16] and {"dense_fp32", "tiled_csl_sparse"} <= names[4] & names[16]
    assert b.results["spmm.bf16_over_fp32_gemm_time_n16"] == 2.5 and "spmm.bf16_over_fp32_gemm_time_n1" not in b.results
    assert b.results["spmm.sweep_dense_tile_wins_s80_n4"] == 0.0
    assert any("at N = 16 (spmm.bf16_over_fp32" in n and "at N = 4 (spmm.dense_tile" in n for n in b.notes)
    # the operators are released once the sweep is done (the harness keeps every comparison's contenders)
    with pytest.raises(KeyError):
        b.more_rounds(b.comparisons[0], 1)


def test_the_probes_compare_real_calls():
    for kind in ("bf16", "dense_tile"):
        r = spmm_bench.probe_slowdown(kind, 2, 256)
        assert math.isfinite(r) and r > 0 and spmm_bench.probe_slowdown(kind, 2, 256) == r   # cached
    with pytest.raises(ValueError, match="kind"):
        spmm_bench.probe_slowdown("fp16", 2, 256)


def test_the_gpu_claim_takes_its_interval_from_per_round_cuda_timings(monkeypatch):
    from labkit.spmm import kernels_gpu
    cub = [2.0e-3, 2.1e-3, 1.9e-3, 2.0e-3, 2.2e-3, 2.0e-3]
    til = [1.0e-3, 1.1e-3, 1.0e-3, 0.9e-3, 1.0e-3, 1.2e-3]
    monkeypatch.setattr(kernels_gpu, "available", lambda: True)
    monkeypatch.setattr(kernels_gpu, "time_vs_cublas", lambda *a, **k: {
        "rel_err": 1e-4, "ok": True, "speedup": 2.0, "cublas_times_s": cub, "tiled_csl_times_s": til,
        "tiled_csl_GBps": 1000.0, "cublas_GBps": 1500.0})
    b = Bench("spmm", "ci", CLAIMS, progress=False)
    spmm_bench._gpu(b)
    c = b.claims["spmm.gpu_speedup_cublas_s80_n16"]
    want = ratio_spread(cub, til)
    assert (c.measured, c.low, c.high, c.rounds) == (want.median, want.lo, want.hi, 6)
    assert c.status == "pass"


def test_the_gpu_claim_stays_not_measured_without_a_gpu(monkeypatch):
    from labkit.spmm import kernels_gpu
    monkeypatch.setattr(kernels_gpu, "available", lambda: False)
    b = Bench("spmm", "ci", CLAIMS, progress=False)
    spmm_bench._gpu(b)
    assert b.claims["spmm.gpu_speedup_cublas_s80_n16"].status == "not measured"
    assert any(n.startswith("spmm.gpu_speedup_cublas_s80_n16: not measured: ") for n in b.notes)
