"""The recsys bench runs at profile ci and fills every claim."""

import importlib

import pytest

from labkit.core.systems import registered


@pytest.mark.slow
def test_bench_ci_measures_every_claim():
    importlib.import_module("labkit.recsys.bench")  # registers the system
    from labkit.recsys.baselines import torchrec as trec
    sysm = registered()["recsys"]
    rep = sysm.run_bench("ci", progress=False)
    claims = {c.id: c for c in rep.claims}
    assert set(claims) == {"recsys.emb_speedup_f100", "recsys.emb_speedup_f500", "recsys.vs_torchrec_fused",
                           "recsys.e2e_speedup_f100", "recsys.ops_reduction", "recsys.cache_hit_5pct",
                           "recsys.interleave_speedup"}
    for cid, c in claims.items():
        if cid == "recsys.vs_torchrec_fused" and not trec.available():
            assert c.measured is None
            continue
        assert c.measured is not None and c.measured > 0, cid
    assert claims["recsys.ops_reduction"].measured > 5
    assert 0.5 < claims["recsys.cache_hit_5pct"].measured <= 1
    r = rep.results
    assert abs(r["recsys.e2e_loss_baseline"] - r["recsys.e2e_loss_packed"]) < 1e-4
    assert r["recsys.lookups_per_step_packed_f26"] == 1 and r["recsys.lookups_per_step_per_field_f26"] == 26
    # the halves of the packed step side by side (the interleaver's lanes): measured, not assumed
    assert r["recsys.e2e_part_slowdown_embedding_beside"] > 0 and r["recsys.e2e_part_slowdown_dense_beside"] > 0
