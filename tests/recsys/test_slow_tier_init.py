"""PICASSO's slow tier is initialised block by block into its files: same values, no table-sized RAM."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from labkit.recsys import packing
from labkit.recsys.cache import SlowTier
from labkit.recsys.packing import PackedEmbeddings, init_rows
from labkit.recsys.tables import Table, init_table


def _tables():
    return [Table("a", 0, 37, 8, "sum"), Table("b", 1, 1001, 8, "mean"), Table("c", 2, 5, 3, "sum"),
            Table("d", 3, 250, 3, "sum"), Table("w", 4, 77, 1, "sum", wide=True)]


@pytest.mark.parametrize("block_bytes", [1, 100, 8 << 20])  # one row, a few odd-sized rows, one block
@pytest.mark.parametrize("tiered", [False, True])
def test_initial_rows_equal_init_table_bit_for_bit(tmp_path, monkeypatch, block_bytes, tiered):
    monkeypatch.setattr(packing, "_INIT_BLOCK_BYTES", block_bytes)
    tables = _tables()
    tier = SlowTier.create(tmp_path) if tiered else None
    stage = PackedEmbeddings(tables, optimizer="adagrad", seed=7, slow_tier=tier)
    try:
        assert all(isinstance(g.weights.base, np.memmap) == tiered for g in stage.groups)
        for i, t in enumerate(tables):
            want = init_table(i, t, 7)
            assert stage.table_weights(i).view(np.uint32).tobytes() == want.view(np.uint32).tobytes()
        for g in stage.groups:
            assert g.state.shape == g.weights.shape and not g.state.any()
    finally:
        stage.close()


def test_init_rows_into_a_plain_memmap_at_an_offset(tmp_path):
    t = Table("x", 0, 333, 5, "sum")
    mm = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32, shape=(400, 5))
    init_rows(mm, 40, 3, t, seed=2)
    assert np.array_equal(mm[40:373], init_table(3, t, 2)) and not mm[:40].any() and not mm[373:].any()
    with pytest.raises(ValueError, match="rows >= 373"):
        init_rows(np.zeros((372, 5), np.float32), 40, 3, t)


_CHILD = """
import json, resource, sys
import numpy as np
from labkit.recsys.cache import SlowTier
from labkit.recsys.packing import PackedEmbeddings
from labkit.recsys.tables import Table

tables = [Table("big", 0, ROWS, 32, "sum")]
PackedEmbeddings([Table("warm", 0, 10, 32, "sum")])  # import-time and first-call costs out of the way
tier = SlowTier.create(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
stage = PackedEmbeddings(tables, slow_tier=tier)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
w = stage.groups[0].weights
print(json.dumps({"growth": (after - before) * 1024, "nbytes": int(w.nbytes),
                  "memmap": isinstance(w.base, np.memmap), "row0": w[0].tolist()}))
stage.close()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss is in KiB on Linux only")
def test_creating_a_large_slow_tier_table_does_not_hold_it_in_ram(tmp_path):
    rows = 2 << 20  # 2M rows x 32 float32 = 256 MiB
    code = textwrap.dedent(_CHILD).replace("ROWS", str(rows))
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["memmap"] and out["nbytes"] == rows * 32 * 4
    assert out["row0"] == init_table(0, Table("big", 0, 1, 32, "sum"), 0)[0].tolist()  # the stream's first row
    # Built in RAM and copied, this grew by 2-3x the table; block by block, by a block or so.
    assert out["growth"] < out["nbytes"] / 8, out
