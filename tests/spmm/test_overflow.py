"""Issue 33: Tiled-CSL's 16-bit fields never overflow; tiles past the format's limits are refused."""

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.core.errors import LabkitError
from labkit.spmm.tiled_csl import ROW_NNZ_MAX, check_tile, decode, encode, max_tile_cols
from tests.fuzz import FUZZ_SETTINGS

PADS = [1, 2, 4, 8, 16, 32, 64]


def _run(code: str) -> subprocess.CompletedProcess:
    # The old code aborted the interpreter (munmap_chunk / segfault): run it where that is survivable.
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_encode_ones_1x65536_tile_1x65536_is_refused_not_a_crash():
    r = _run("import torch\n"
             "from labkit.spmm.tiled_csl import encode\n"
             "from labkit.core.errors import LabkitError\n"
             "try:\n"
             "    encode(torch.ones(1, 65536, dtype=torch.bfloat16), tile=(1, 65536))\n"
             "except LabkitError as e:\n"
             "    print('REFUSED', e)\n")
    assert r.returncode == 0, r.stderr[-2000:]
    line = r.stdout.strip()
    assert line.startswith("REFUSED tile=(1, 65536) is not accepted; expected") and "cols <= 65520" in line
    assert "\n" not in line


def test_row_of_65521_nonzeros_is_refused_at_the_default_pad():
    # 65521 non-zeros pad to 65536 at pad 16: the smallest row that used to wrap the uint16 count
    # (in a subprocess too: on the old code this wrote past the word buffer)
    r = _run("import torch\n"
             "from labkit.spmm.tiled_csl import encode\n"
             "from labkit.core.errors import LabkitError\n"
             "try:\n"
             "    encode(torch.ones(1, 65521, dtype=torch.bfloat16), tile=(1, 65521))\n"
             "except LabkitError as e:\n"
             "    print('REFUSED', e)\n")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("REFUSED tile=(1, 65521) is not accepted; expected") and "cols <= 65520" in r.stdout


@pytest.mark.parametrize("pad", [1, 16, 64])
def test_full_row_at_the_limit_round_trips(pad):
    cols = max_tile_cols(pad)
    w = torch.ones(1, cols, dtype=torch.bfloat16)
    enc = encode(w, tile=(1, cols), pad=pad)
    assert int(enc.row_nnz[0, 0]) == cols <= ROW_NNZ_MAX and enc.nnz == cols
    assert torch.equal(decode(enc), w)
    with pytest.raises(LabkitError, match=rf"^tile=\(1, {cols + 1}\) is not accepted"):
        check_tile((1, cols + 1), pad)  # one past the limit (encode's refusal is the subprocess tests')


def test_limits_per_pad():
    assert [max_tile_cols(p) for p in PADS] == [65535, 65534, 65532, 65528, 65520, 65504, 65472]


@FUZZ_SETTINGS
@given(st.integers(0, 16), st.integers(1, 70000), st.sampled_from(PADS), st.integers(-1, 1))
def test_check_tile_accepts_exactly_the_shapes_the_fields_hold(row_bits, cols, pad, drow):
    rows = max(1, (1 << row_bits) + drow)
    loc_ok = (rows - 1).bit_length() + (cols - 1).bit_length() <= 16
    count_ok = -(-cols // pad) * pad <= ROW_NNZ_MAX
    if loc_ok and count_ok:
        assert check_tile((rows, cols), pad) == (rows, cols)
    else:
        with pytest.raises(LabkitError, match=rf"^tile=\({rows}, {cols}\) is not accepted; expected"):
            check_tile((rows, cols), pad)


@settings(parent=FUZZ_SETTINGS, max_examples=40)
@given(st.data(), st.sampled_from(PADS))
def test_every_accepted_tile_encodes_full_rows_exactly(data, pad):
    # Dense weights fill every tile row, the worst case for the padded counts and the fill.
    col_bits = data.draw(st.integers(0, 16))
    cols = min(max_tile_cols(pad), data.draw(st.integers(max(1, (1 << col_bits) // 2 + 1), 1 << col_bits)))
    rows = data.draw(st.integers(1, 1 << (16 - (cols - 1).bit_length())))
    m = data.draw(st.integers(1, min(rows + 1, 3)))
    k = data.draw(st.integers(1, cols + 2)) if cols <= 4096 else data.draw(st.sampled_from([cols - 1, cols, cols + 1]))
    w = torch.full((m, k), 1.5, dtype=torch.bfloat16)
    enc = encode(w, tile=(rows, cols), pad=pad)
    assert torch.equal(decode(enc), w)
    assert int(enc.row_nnz.max()) == -(-min(cols, k) // pad) * pad
    assert enc.nnz == m * k and enc.words.size == int(enc.row_nnz.sum(dtype=np.int64))


def test_tile_taller_than_useful_is_refused_before_allocating():
    # 100000 one-column tiles of 65536 rows each would need 6.5e9 uint16 counts for 1e5 elements
    with pytest.raises(LabkitError, match=r"^tile=\(65536, 1\) is not accepted; expected .*weight.shape=\(1, 100000\)"):
        encode(torch.ones(1, 100000, dtype=torch.bfloat16), tile=(65536, 1))


def test_hand_built_tiled_csl_with_bad_arrays_is_refused():
    enc = encode(torch.ones(3, 40, dtype=torch.bfloat16), tile=(2, 16), pad=4)
    bad_loc = enc.words.copy()
    bad_loc[0] |= np.uint32(0xFFFF)  # location outside the tile and the matrix
    cases = [  # (change, the argument the refusal names)
        (dict(words=enc.words[:-1]), "tile_offsets"),  # a truncated word stream: the offsets overrun it
        (dict(tile_offsets=enc.tile_offsets[::-1].copy()), "tile_offsets"),
        (dict(row_nnz=(enc.row_nnz + 4).astype(np.uint16)), "tile_offsets"),
        (dict(row_nnz=(enc.row_nnz + 1).astype(np.uint16)), "row_nnz"),
        (dict(row_nnz=enc.row_nnz.astype(np.int64)), "row_nnz"),
        (dict(words=bad_loc), r"words\[0\]"),
        (dict(nnz=enc.nnz + 1), "nnz"),
        (dict(tile=(1, 65536)), "tile"),
        (dict(shape=(0, 40)), "shape"),
        (dict(dtype="fp32"), "dtype"),
    ]
    for change, arg in cases:
        with pytest.raises(LabkitError, match=rf"^{arg}=.* is not accepted; expected"):
            dataclasses.replace(enc, **change)
