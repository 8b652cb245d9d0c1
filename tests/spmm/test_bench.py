"""The spmm bench at profile ci fills every CPU claim and records its side-by-side numbers."""

import math

import pytest

from labkit.catalog import load


@pytest.mark.slow
def test_bench_ci_records_claims():
    system = load("spmm")
    report = system.run_bench("ci", progress=False)
    claims = {c.id: c for c in report.claims}
    for cid in ("spmm.speedup_dense_s90_n1", "spmm.speedup_dense_s80_n1", "spmm.speedup_dense_s70_n1",
                "spmm.speedup_csr_s80_n1", "spmm.e2e_tokens_speedup_s90_b1", "spmm.bytes_per_nnz_ratio"):
        assert claims[cid].measured is not None and math.isfinite(claims[cid].measured) and claims[cid].measured > 0
    assert 4.0 <= claims["spmm.bytes_per_nnz_ratio"].measured < 6.0   # tiny ci shapes: padding shows
    gpu = claims["spmm.gpu_speedup_cublas_s80_n16"]
    assert gpu.measured is None or gpu.measured > 0
    assert any("gpu_speedup" in n for n in report.notes) or gpu.measured is not None
    assert report.results["spmm.torch_threads"] >= 1
    assert "spmm.crossover_n_s80" in report.results
    names = {n for c in report.comparisons for n in c.names}
    assert {"dense_bf16", "tiled_csl_sparse", "tiled_csl_dense_tile", "torch_csr", "scipy_csr"} <= names
