"""CaliEX's topology is built out of core: indices go straight into their file, equal to the in-RAM build."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from labkit.disk.datasets import count_csc_degrees, rmat_params, scatter_csc_file
from labkit.graph.csr import build_csr_chunked
from labkit.graph.rmat import rmat_edge_chunks


def _stream(n, e, chunk, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, e).astype(np.int32)
    dst = (rng.integers(0, n, e) ** 2 % n).astype(np.int32)  # skewed rows, some self-loops
    return lambda: ((src[lo:lo + chunk], dst[lo:lo + chunk]) for lo in range(0, e, chunk))


def _in_ram(chunks, n):
    return build_csr_chunked(lambda: ((d, s) for s, d in chunks()), n, drop_self_loops=True)


@pytest.mark.parametrize("n, e, chunk, window", [(1, 10, 3, 4), (50, 1000, 77, 64), (1000, 100_000, 9_999, 4096),
                                                 (7, 0, 5, 8), (300, 5000, 5000, 1 << 20)])
def test_file_equals_the_in_ram_builder(tmp_path, n, e, chunk, window):
    chunks = _stream(n, e, chunk)
    ref = _in_ram(chunks, n)
    indptr, out_deg = count_csc_degrees(chunks, n)
    size = scatter_csc_file(chunks, indptr, tmp_path / "indices.bin", align=4096, window_bytes=window)
    raw = np.fromfile(tmp_path / "indices.bin", np.int32)
    m = ref.num_edges
    assert np.array_equal(indptr, ref.indptr) and np.array_equal(raw[:m], ref.indices)
    assert np.array_equal(out_deg, np.bincount(ref.indices, minlength=n))
    assert size == raw.nbytes == -(-m * 4 // 4096) * 4096 and not raw[m:].any()


def test_ci_dataset_equals_the_in_ram_build(ds):
    """The committed files are those the in-RAM chunked builder gives (same bytes, same padding)."""
    rp = rmat_params(ds.params)
    ref = _in_ram(lambda: rmat_edge_chunks(rp, 1 << 16), rp.num_nodes)
    assert np.array_equal(ds.array("indptr"), ref.indptr)
    assert np.array_equal(ds.array("indices"), ref.indices)
    assert np.array_equal(ds.array("out_degree"), np.bincount(ref.indices, minlength=rp.num_nodes))
    raw = np.fromfile(ds.path("indices"), np.int32)
    assert raw.nbytes % 4096 == 0 and not raw[ref.num_edges:].any()
    assert ds.info("indices")["align"] == 4096 and ds.info("indices")["shape"] == [ref.num_edges]


def test_a_stream_that_does_not_replay_is_refused(tmp_path):
    chunks = _stream(100, 2000, 300)
    indptr, _ = count_csc_degrees(chunks, 100)
    other = _stream(100, 2000, 300, seed=1)
    with pytest.raises(ValueError, match="replay the same stream"):
        scatter_csc_file(other, indptr, tmp_path / "x.bin")
    with pytest.raises(ValueError, match="replay the same stream"):
        scatter_csc_file(_stream(100, 1000, 300), indptr, tmp_path / "y.bin")  # fewer edges
    with pytest.raises(ValueError, match=r"dst\[2\]=100"):
        scatter_csc_file(lambda: iter([(np.zeros(3, np.int32), np.array([1, 2, 100], np.int32))]), indptr,
                         tmp_path / "z.bin")
    with pytest.raises(ValueError, match="non-decreasing"):
        scatter_csc_file(chunks, indptr[::-1], tmp_path / "w.bin")


_CHILD = """
import json, resource, sys
import numpy as np
from labkit.disk.datasets import count_csc_degrees, scatter_csc_file

n, chunk, nchunks = 1 << 18, 1 << 20, 48
def chunks():
    for k in range(nchunks):
        rng = np.random.default_rng([5, k])
        yield rng.integers(0, n, chunk, dtype=np.int32), rng.integers(0, n, chunk, dtype=np.int32)

def tiny():  # loads (or compiles) the kernels and starts numba's threads before measuring
    return iter([(np.array([0, 1, 1], np.int32), np.array([1, 0, 1], np.int32))])
scatter_csc_file(tiny, count_csc_degrees(tiny, 2)[0], sys.argv[1] + "/tiny.bin")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
indptr, out_deg = count_csc_degrees(chunks, n)
size = scatter_csc_file(chunks, indptr, sys.argv[1] + "/indices.bin", align=4096, window_bytes=8 << 20)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
want = sum(int(s[s != d].sum(dtype=np.int64)) for s, d in chunks())
got = 0
with open(sys.argv[1] + "/indices.bin", "rb") as fh:
    while b := fh.read(1 << 22):
        got += int(np.frombuffer(b, np.int32).sum(dtype=np.int64))
print(json.dumps({"growth": (after - before) * 1024, "size": size, "edges": int(indptr[-1]),
                  "out_edges": int(out_deg.sum()), "sum_ok": got == want}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss is in KiB on Linux only")
def test_indices_are_written_through_the_file_not_held(tmp_path):
    """Peak RSS grows by O(nodes) + a chunk + a window, far less than the 192 MiB of indices written."""
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(_CHILD), str(tmp_path)], capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["sum_ok"] and out["edges"] == out["out_edges"] > 47 << 20
    assert out["size"] == out["edges"] * 4 + (-out["edges"] * 4) % 4096
    assert out["growth"] < out["size"] / 3, out
