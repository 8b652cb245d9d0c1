"""Flash-LLM exercises: the Tiled-CSL format, one tile at a time.

A student encodes one tile into Tiled-CSL words, multiplies one encoded tile by a vector (decode
and multiply, what the kernel's inner loop does), and counts the bytes the whole format costs per
non-zero (the paper's ~4-byte budget that makes "load as sparse, compute as dense" pay). The
checks compare against :mod:`labkit.spmm.tiled_csl` and :mod:`labkit.spmm.kernels_cpu`.
"""

from __future__ import annotations

import time

import numpy as np

from labkit.course.exercise import Exercise, register
from labkit.course.exercises._checks import best_time as _best_time
from labkit.course.exercises._checks import judged as _case
from labkit.course.exercises._checks import short as _short

# --- shared by the checks: run the candidate on one case, never let its error escape ---------


def _as_bf16(bits: np.ndarray):
    import torch
    return torch.from_numpy(np.ascontiguousarray(bits, np.uint16).view(np.int16)).view(torch.bfloat16)


def _random_bits(rng: np.random.Generator, shape: tuple[int, int], sparsity: float) -> np.ndarray:
    """bf16 bit patterns of random values in +-[0.05, 1), a `sparsity` share of them zero."""
    vals = rng.uniform(0.05, 1.0, shape).astype(np.float32) * rng.choice([-1.0, 1.0], shape).astype(np.float32)
    vals[rng.random(shape) < sparsity] = 0.0
    return (vals.view(np.uint32) >> 16).astype(np.uint16)


# --- 1. encode one tile ----------------------------------------------------------------------

ENCODE_STUB = '''import numpy as np


def encode_tile(bits, pad=16):
    """Encode one tile in Flash-LLM's Tiled-CSL; return (words, row_nnz).

    `bits` is a 2-D uint16 array (rows x cols) of bf16 bit patterns (0x3F80 is 1.0). A value is
    zero when its bits without the sign are 0 (so -0.0, 0x8000, is a zero too). Each non-zero
    becomes one uint32 word: the value's 16 bits in the high half, its location in the low half,
    location = (row << col_bits) | col with col_bits = ceil(log2(cols)) (0 for one column).
    Words go in (row, col) order; each row's run is padded with zero-valued words that carry
    the location of that row's column 0 (row << col_bits) up to a multiple of `pad`.
    `row_nnz` (uint16, one per row) is each row's padded word count.

    >>> w, n = encode_tile(np.array([[0, 0x3F80], [0, 0]], np.uint16), pad=2)
    >>> [hex(x) for x in w], n.tolist()
    (['0x3f800001', '0x0'], [2, 0])
    """
'''

ENCODE_SOLUTION = '''    bits = np.asarray(bits, np.uint16)
    rows, cols = bits.shape
    col_bits = (cols - 1).bit_length()
    runs = []
    row_nnz = np.zeros(rows, np.uint16)
    for r in range(rows):
        c = np.flatnonzero(bits[r] & 0x7FFF)
        n = c.size
        padded = -(-n // pad) * pad
        run = np.full(padded, r << col_bits, np.uint32)
        run[:n] = (bits[r, c].astype(np.uint32) << 16) | np.uint32(r << col_bits) | c.astype(np.uint32)
        runs.append(run)
        row_nnz[r] = padded
    return np.concatenate(runs), row_nnz
'''


def _ref_encode(bits: np.ndarray, pad: int = 16):
    from labkit.spmm.tiled_csl import encode
    w = encode(_as_bf16(bits), tile=tuple(bits.shape), pad=pad)
    return w.words, w.row_nnz[0]


def _judge_encode(bits: np.ndarray, pad: int):
    want_w, want_n = _ref_encode(bits, pad)

    def judge(got):
        if not (isinstance(got, tuple) and len(got) == 2):
            return f"expected a tuple (words, row_nnz), got {_short(got)}"
        w = np.asarray(got[0]).astype(np.int64).ravel()
        n = np.asarray(got[1]).astype(np.int64).ravel()
        if not np.array_equal(n, want_n.astype(np.int64)):
            return f"row_nnz: expected {_short(want_n.astype(np.int64))}, got {_short(n)}"
        if w.shape != want_w.shape:
            return f"expected {want_w.size} words, got {w.size}"
        bad = np.flatnonzero(w != want_w.astype(np.int64))
        if bad.size:
            i = int(bad[0])
            return f"word {i}: expected {int(want_w[i]):#010x}, got {int(w[i]) & 0xFFFFFFFF:#010x}"
        return None
    return judge


def check_encode(fn):
    rng = np.random.default_rng(7)
    one = np.zeros((2, 2), np.uint16)
    one[0, 1] = 0x3F80
    cases = [("docstring example", one, 2), ("all-zero tile", np.zeros((8, 64), np.uint16), 16)]
    negz = np.zeros((4, 16), np.uint16)
    negz[1, 3], negz[2, 5] = 0x8000, 0xBF80  # -0.0 is dropped, -1.0 kept
    cases.append(("-0.0 is a zero", negz, 16))
    full = np.full((2, 16), 0x4000, np.uint16)
    cases.append(("row of exactly pad non-zeros (no padding)", full, 16))
    cases.append(("one non-zero per row (padding words)", np.eye(8, 64, dtype=np.uint16) * 0x3F80, 16))
    cases.append(("tile width not a power of two", _random_bits(rng, (8, 100), 0.7), 16))
    cases.append(("one-column tile", _random_bits(rng, (8, 1), 0.5), 4))
    special = np.zeros((2, 8), np.uint16)
    special[0, 1], special[1, 2] = 0x7FC0, 0xFF80  # NaN and -inf are values like any other
    cases.append(("NaN and inf are non-zeros", special, 4))
    cases.append(("pad=1 (no padding at all)", _random_bits(rng, (8, 64), 0.8), 1))
    cases.append(("wide tile (8 x 4608)", _random_bits(rng, (8, 4608), 0.8), 16))
    for i, s in enumerate((0.5, 0.9, 0.99)):
        cases.append((f"random tile {i + 1} at {s:.0%} sparsity", _random_bits(rng, (8, 256), s), 16))
    for name, bits, pad in cases:
        yield _case(name, fn, (bits.copy(), pad), _judge_encode(bits, pad))


def measure_encode(fn) -> dict:
    from labkit.spmm.prune import random_sparse
    from labkit.spmm.tiled_csl import encode
    w = random_sparse((8, 4608), 0.8, seed=1)
    bits = w.view(__import__("torch").int16).numpy().view(np.uint16)
    encode(w, tile=(8, 4608))  # compiled before it is timed
    ts = _best_time(lambda: fn(bits.copy(), 16))
    tr = _best_time(lambda: encode(w, tile=(8, 4608)))
    words, _ = fn(bits.copy(), 16)
    return {"student_s": ts, "reference_s": tr, "words": int(np.asarray(words).size),
            "nnz": int(np.count_nonzero(bits & 0x7FFF)),
            "note": "one 8 x 4608 tile of an OPT-style weight at 80% sparsity; the reference is numba-compiled"}


# --- 2. multiply one tile by a vector ------------------------------------------------------------

DOT_STUB = '''import numpy as np


def tile_dot(words, row_nnz, col_bits, x):
    """Return y = T @ x for one Tiled-CSL tile T, as float32 (one entry per tile row).

    `words` (uint32) hold each non-zero as (bf16 value << 16) | location, location =
    (row << col_bits) | col; rows are stored one after another, row r's run being
    `row_nnz[r]` words long (padding words have value 0). `x` is a float32 vector as long as
    the tile is wide. A bf16 value is the high half of a float32: `w & 0xFFFF0000`
    reinterpreted (`.view(np.float32)`) *is* the value, no conversion needed.

    >>> w = np.array([0x3FC00003], np.uint32)          # 1.5 at row 0, column 3
    >>> tile_dot(w, np.array([1], np.uint16), 4, np.arange(16, dtype=np.float32))
    array([4.5], dtype=float32)
    """
'''

DOT_SOLUTION = '''    words = np.asarray(words, np.uint32)
    row_nnz = np.asarray(row_nnz, np.int64)
    vals = (words & np.uint32(0xFFFF0000)).view(np.float32)
    cols = (words & np.uint32((1 << col_bits) - 1)).astype(np.int64)
    prod = vals * np.asarray(x, np.float32)[cols]
    rows = np.repeat(np.arange(row_nnz.size), row_nnz)
    return np.bincount(rows, weights=prod, minlength=row_nnz.size).astype(np.float32)
'''


def _encoded(bits: np.ndarray, pad: int = 16):
    from labkit.spmm.tiled_csl import encode
    return encode(_as_bf16(bits), tile=tuple(bits.shape), pad=pad)


def _judge_dot(bits: np.ndarray, x: np.ndarray):
    w = _encoded(bits)
    want = w.tile_dense(0, 0).astype(np.float64) @ x.astype(np.float64)
    scale = float((np.abs(w.tile_dense(0, 0)).astype(np.float64) @ np.abs(x).astype(np.float64)).max())

    def judge(got):
        y = np.asarray(got, np.float64)
        if y.shape != want.shape:
            return f"expected shape {want.shape} (one value per tile row), got {y.shape}"
        err = np.abs(y - want)
        bad = np.flatnonzero(err > 1e-5 * max(scale, 1.0))
        if bad.size:
            i = int(bad[0])
            return f"row {i}: expected {want[i]:.6g}, got {y[i]:.6g}"
        return None
    return w, judge


def check_dot(fn):
    rng = np.random.default_rng(11)
    cases = []
    one = np.zeros((1, 16), np.uint16)
    one[0, 3] = 0x3FC0
    cases.append(("docstring example", one, np.arange(16, dtype=np.float32)))
    cases.append(("all-zero tile", np.zeros((8, 64), np.uint16), rng.standard_normal(64).astype(np.float32)))
    neg = np.zeros((1, 4), np.uint16)
    neg[0, 0], neg[0, 2] = 0xC040, 0x3E80  # -3.0 and 0.25: the sign and exponent bits decode too
    cases.append(("values decode from the high 16 bits", neg, np.array([2, 100, 8, 100], np.float32)))
    gaps = _random_bits(rng, (8, 64), 0.5)
    gaps[[1, 2, 5]] = 0
    cases.append(("empty rows between full ones", gaps, rng.standard_normal(64).astype(np.float32)))
    lone = np.eye(8, 64, k=7, dtype=np.uint16) * 0x3F80
    x = np.arange(64, dtype=np.float32)
    cases.append(("one non-zero per row (padding words add nothing)", lone, x))
    cases.append(("tile width not a power of two", _random_bits(rng, (8, 100), 0.7),
                  rng.standard_normal(100).astype(np.float32)))
    cases.append(("wide tile (8 x 4608)", _random_bits(rng, (8, 4608), 0.8),
                  rng.standard_normal(4608).astype(np.float32)))
    for i, s in enumerate((0.5, 0.9, 0.99)):
        cases.append((f"random tile {i + 1} at {s:.0%} sparsity", _random_bits(rng, (8, 512), s),
                      rng.standard_normal(512).astype(np.float32)))
    for name, bits, x in cases:
        w, judge = _judge_dot(bits, x)
        yield _case(name, fn, (w.words.copy(), w.row_nnz[0].copy(), w.col_bits, x.copy()), judge)


def measure_dot(fn) -> dict:
    import torch

    from labkit.spmm.kernels_cpu import spmm
    from labkit.spmm.prune import random_sparse
    from labkit.spmm.tiled_csl import encode
    dense = random_sparse((1024, 4608), 0.8, seed=2)
    w = encode(dense, tile=(8, 4608))
    x = np.random.default_rng(0).standard_normal(4608).astype(np.float32)
    tr_, gr = w.tile[0], w.grid[0]

    def student():  # the whole layer, one tile per call (the grid has one tile column)
        y = np.empty(w.shape[0], np.float32)
        for t in range(gr):
            words = w.words[w.tile_offsets[t]:w.tile_offsets[t + 1]]
            y[t * tr_:(t + 1) * tr_] = fn(words, w.row_nnz[t], w.col_bits, x)
        return y

    want = spmm(w, x)  # compiled before it is timed
    got = np.asarray(student(), np.float64)
    ts = _best_time(student)
    tr = _best_time(lambda: spmm(w, x), repeat=5)
    dense_f32, xt = dense.float(), torch.from_numpy(x)
    td = _best_time(lambda: dense_f32 @ xt, repeat=5)
    return {"student_s": ts, "reference_s": tr, "dense_torch_s": td,
            "max_abs_diff": float(np.abs(got - want).max()), "nnz": int(w.nnz),
            "note": "a 1024 x 4608 layer at 80% sparsity times a vector, 128 tiles of 8 x 4608 through the "
                    "student's tile_dot, beside labkit's SIMD kernel and a dense fp32 matmul"}


# --- 3. bytes the format costs ---------------------------------------------------------------

BYTES_STUB = '''import numpy as np


def tiled_csl_nbytes(bits, tile, pad=16):
    """Return the bytes a matrix costs in Tiled-CSL: words, tile offsets and row counts.

    `bits` is an (M, K) uint16 array of bf16 bit patterns (a value is zero when `bits & 0x7FFF`
    is 0). The matrix is cut into tiles of `tile` = (rows, cols), row-major, the last tiles in
    each direction cut short. The format stores:
      - 4 bytes per word: each tile row's non-zeros padded up to a multiple of `pad`,
      - 8 bytes per tile offset: one per tile plus one,
      - 2 bytes per row count: `rows` of them per tile (a short edge tile still has `rows`).
    Divide by the non-zeros to get the paper's bytes per non-zero (about 4).

    >>> tiled_csl_nbytes(np.array([[0x3F80, 0], [0, 0]], np.uint16), (2, 2), pad=4)
    36
    """
'''

BYTES_SOLUTION = '''    bits = np.asarray(bits, np.uint16)
    m, k = bits.shape
    tr, tc = tile
    gr, gc = -(-m // tr), -(-k // tc)
    nz = np.zeros((gr * tr, gc * tc), bool)
    nz[:m, :k] = (bits & 0x7FFF) != 0
    counts = nz.reshape(gr, tr, gc, tc).sum(axis=3)
    words = int((-(-counts // pad) * pad).sum())
    tiles = gr * gc
    return 4 * words + 8 * (tiles + 1) + 2 * tiles * tr
'''


def _ref_nbytes(bits: np.ndarray, tile, pad: int) -> int:
    from labkit.spmm.tiled_csl import encode
    return encode(_as_bf16(bits), tile=tuple(tile), pad=pad).nbytes


def check_nbytes(fn):
    rng = np.random.default_rng(5)
    one = np.zeros((2, 2), np.uint16)
    one[0, 0] = 0x3F80
    cases = [("docstring example", one, (2, 2), 4),
             ("all-zero matrix", np.zeros((16, 128), np.uint16), (8, 64), 16)]
    negz = np.full((8, 64), 0x8000, np.uint16)
    negz[0, 0] = 0x3F80
    cases.append(("-0.0 is a zero", negz, (8, 64), 16))
    cases.append(("rows padded to a multiple of pad", np.eye(8, 64, dtype=np.uint16) * 0x3F80, (8, 64), 16))
    cases.append(("partial tiles at the edges", _random_bits(rng, (10, 100), 0.6), (8, 64), 16))
    cases.append(("pad=1", _random_bits(rng, (16, 128), 0.7), (8, 64), 1))
    cases.append(("one-row tiles", _random_bits(rng, (4, 64), 0.5), (1, 64), 8))
    for i, s in enumerate((0.5, 0.8, 0.95)):
        cases.append((f"random matrix {i + 1} at {s:.0%} sparsity", _random_bits(rng, (64, 1024), s), (8, 512), 16))
    for name, bits, tile, pad in cases:
        want = _ref_nbytes(bits, tile, pad)

        def judge(got, want=want):
            if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
                return f"expected an int number of bytes ({want}), got {_short(got)}"
            return None if int(got) == want else f"expected {want} bytes, got {int(got)}"
        yield _case(name, fn, (bits.copy(), tile, pad), judge)


def measure_nbytes(fn) -> dict:
    import torch

    from labkit.spmm.prune import random_sparse
    from labkit.spmm.tiled_csl import encode
    out = {}
    shape, tile = (1024, 4608), (8, 4608)
    for s in (0.7, 0.8, 0.9):
        w = random_sparse(shape, s, seed=3)
        bits = w.view(torch.int16).numpy().view(np.uint16)
        ref = encode(w, tile=tile)
        got = int(fn(bits, tile, 16))
        out[f"bytes_per_nnz_student@{s}"] = got / max(1, ref.nnz)
        out[f"bytes_per_nnz_reference@{s}"] = ref.bytes_per_dense_bound()
    t0 = time.perf_counter()
    fn(bits, tile, 16)
    out["student_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    encode(w, tile=tile)
    out["reference_s"] = time.perf_counter() - t0
    out["dense_bytes_per_element"] = 2.0
    out["note"] = ("a 1024 x 4608 bf16 weight; at sparsity s Tiled-CSL beats dense 16-bit weights "
                   "when bytes/nnz * (1 - s) < 2")
    return out


register(Exercise(
    id="spmm.encode_tile", system="spmm", title="Tiled-CSL: encode one tile", func="encode_tile",
    stub=ENCODE_STUB, solution=ENCODE_SOLUTION, check=check_encode, measure=measure_encode,
    goal="Pack a tile's non-zeros as (value, location) words padded per row, as Flash-LLM stores weights.",
    reference="labkit.spmm.tiled_csl:encode", forbid=("labkit.spmm",), minutes=20,
    tags=("format", "flash-llm")))

register(Exercise(
    id="spmm.tile_dot", system="spmm", title="Sparse tile times a vector (decode + multiply)", func="tile_dot",
    stub=DOT_STUB, solution=DOT_SOLUTION, check=check_dot, measure=measure_dot,
    goal="Decode Tiled-CSL words with one mask and multiply: the inner loop of Flash-LLM's SpMM.",
    reference="labkit.spmm.kernels_cpu:spmm", forbid=("labkit.spmm",), minutes=20,
    tags=("kernel", "flash-llm")))

register(Exercise(
    id="spmm.nbytes", system="spmm", title="Bytes per non-zero of Tiled-CSL", func="tiled_csl_nbytes",
    stub=BYTES_STUB, solution=BYTES_SOLUTION, check=check_nbytes, measure=measure_nbytes,
    goal="Count what the format costs (words, padding, metadata) and see why ~4 bytes/nnz beats dense past 50%.",
    reference="labkit.spmm.tiled_csl:TiledCSL.nbytes", forbid=("labkit.spmm",), minutes=15,
    tags=("format", "memory", "flash-llm")))
