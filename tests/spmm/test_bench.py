"""The spmm bench at profile ci fills every CPU claim and records its side-by-side numbers."""

import math

import pytest
import torch

from labkit.catalog import load


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
    if claims["spmm.speedup_csr_s80_n1"].passed is False:
        assert any(n.startswith("spmm.speedup_csr_s80_n1 missed") and "GB/s" in n for n in report.notes)
    names = {n for c in report.comparisons for n in c.names}
    assert {"dense_bf16", "tiled_csl_sparse", "tiled_csl_dense_tile", "torch_csr", "scipy_csr"} <= names
    sweep = next(c for c in report.comparisons if c.case.startswith("sweep"))
    assert {"dense_bf16", "dense_bf16_linear", "dense_fp32", "dense_fp32_linear"} <= set(sweep.names)
    # the decoder also races a dense fp32 model; each batch records the speedup over the fastest dense one
    for batch in (1, 4):
        dec = next(c for c in report.comparisons if c.case.startswith("decoder") and c.case.endswith(f"batch={batch}"))
        dense = ("dense_bf16", "dense_bf16_linear", "dense_fp32", "dense_fp32_linear")
        assert set(dense) | {"tiled_csl"} == set(dec.names)
        fastest = min(dense, key=dec.median)
        assert report.results[f"spmm.e2e_tokens_speedup_best_dense_s90_b{batch}"] == pytest.approx(
            dec.ratio(fastest, "tiled_csl"))
        assert report.results[f"spmm.e2e_tokens_speedup_best_dense_s90_b{batch}"] <= \
            report.results[f"spmm.e2e_tokens_speedup_s90_b{batch}"] * (1 + 1e-12)


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
