"""Tiled-CSL: Flash-LLM's compressed weight format, laid out for a CPU.

The matrix (M x K) is cut into tiles of ``tile_rows x tile_cols``. Each tile's non-zeros live in
one stream of 32-bit words, found through one offset per tile. A word is

    bits 31..16  the value (bf16 or fp16 bits)
    bits 15..0   the location inside the tile: row * tile_cols + col

exactly as in the paper (whose GPU tile is 128 x 64, 13 location bits). Putting the value in
the *high* half means that for bf16 ``word & 0xFFFF0000`` reinterpreted as fp32 *is* the value:
the CPU kernel decodes a non-zero with one AND, no conversion.

The location packs (row << col_bits) | col, col_bits = ceil(log2(tile_cols)); with power-of-two
tiles that is the paper's row * tile_cols + col. The CPU tile is 8 rows by at most 8192 columns
(3 + 13 bits; K is cut into equal column tiles, so 9216 becomes 2 x 4608; any shape whose row
and column bits sum to <= 16 works). Why that shape: the gather reads activations at random
inside one tile's columns, and an 8192-column fp32 slice (32 KiB) still fits the 48 KiB L1 while
the words stream past; and a tile row of 4600-8200 columns holds 460-2500 non-zeros at 70-90%
sparsity, so padding each row to 16 words costs ~1-2% bytes (16 x 4096 tiles cost 2.5% at 90%,
over the 4.1 bytes-per-non-zero budget) and the per-row reduction is amortised.

Inside a tile, words are sorted by (row, col) and each tile row's run is padded with zero-valued
words to a multiple of ``pad`` (16 = one AVX-512 gather), so the kernel's vector loop has no
scalar tail. The padded per-row counts (``row_nnz``, uint16) are what the kernel needs to find
row boundaries; they cost 2 bytes per 4600-8200 matrix elements. Padding words carry the location
of their row's column 0 so every location is in bounds.

Zeros: a bf16/fp16 ``-0.0`` is a zero, not a non-zero; decoding returns ``+0.0`` for it. Every
non-zero (NaN and inf included) decodes bit-exactly.

Limits the fields set (:func:`check_tile` refuses any tile past them): a location is 16 bits, so
``ceil(log2 rows) + ceil(log2 cols) <= 16``; a tile row's padded count is a uint16, so a full row
padded to a multiple of ``pad`` must stay <= 65535, i.e. ``cols <= 65535 // pad * pad`` (65520 at
the default pad of 16: a 65536-column row would count 0 and the fill would run past its buffer).
A :class:`TiledCSL` checks its arrays when it is built (by :func:`encode` or by hand), so the
numba passes over them never index outside an array.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numba import njit, prange

from labkit.core.errors import bad_value
from labkit.spmm.prune import check_sparsity

#: Value types the format stores; the 16 bits of each go in the word's high half.
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
DEFAULT_TILE = (8, 8192)
DEFAULT_PAD = 16
#: Largest per-row count: ``row_nnz`` is uint16.
ROW_NNZ_MAX = int(np.iinfo(np.uint16).max)
#: Per-row counts an encoding may hold beyond one per weight element (a tile much taller than the
#: weight pads every tile with empty rows; past this its metadata would outgrow the dense weight).
ROW_NNZ_FLOOR = 2**20


def _torch_dtype_name(dtype: torch.dtype) -> str | None:
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype)


def _bits_for(n: int) -> int:
    """Bits needed to hold 0..n-1."""
    return max(0, int(n - 1).bit_length())


def _is_int(v) -> bool:
    """True for a Python or numpy integer, False for a bool (and everything else)."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def check_pad(pad: int) -> int:
    """Return `pad` as an int if it is a power of two from 1 to 64, else raise."""
    if not (_is_int(pad) and 1 <= pad <= 64 and (pad & (pad - 1)) == 0):
        raise bad_value("pad", pad, "a power of two from 1 to 64 (an int or numpy integer, not a bool)")
    return int(pad)


def max_tile_cols(pad: int = DEFAULT_PAD) -> int:
    """Return the widest tile row whose count, padded to a multiple of `pad`, fits the uint16 row count."""
    return ROW_NNZ_MAX // pad * pad


def check_tile(tile: tuple[int, int], pad: int = DEFAULT_PAD) -> tuple[int, int]:
    """Return `tile` as (rows, cols) if a location (row << col_bits | col) fits 16 bits and a full
    tile row padded to a multiple of `pad` fits the uint16 per-row count; else raise."""
    pad = check_pad(pad)
    limit = max_tile_cols(pad)
    ok = (isinstance(tile, (tuple, list)) and len(tile) == 2
          and all(_is_int(t) and t >= 1 for t in tile)
          and _bits_for(int(tile[0])) + _bits_for(int(tile[1])) <= 16
          and int(tile[1]) <= limit)
    if not ok:
        shown = tuple(tile) if isinstance(tile, list) else tile
        raise bad_value("tile", shown, "(rows, cols) of positive integers with ceil(log2 rows) + "
                        f"ceil(log2 cols) <= 16 (a location fits 16 bits) and cols <= {limit} (a full row "
                        f"padded to a multiple of pad={pad} fits the uint16 count, <= {ROW_NNZ_MAX})")
    return int(tile[0]), int(tile[1])


def auto_tile(k: int, rows: int = DEFAULT_TILE[0], max_cols: int = DEFAULT_TILE[1]) -> tuple[int, int]:
    """Return (rows, cols): the widest cols <= max_cols (a multiple of 16) cutting K into equal tiles.

    Equal tiles avoid a narrow last tile whose short rows would waste padding (K = 9216 gets
    2 x 4608 rather than 8192 + 1024).
    """
    n = -(-k // max_cols)
    cols = -(-k // n)
    cols = min(max_cols, -(-cols // 16) * 16)
    return rows, cols


@dataclass(frozen=True)
class TiledCSL:
    """A matrix in Tiled-CSL: one word stream, one offset per tile, padded per-row counts."""

    shape: tuple[int, int]
    tile: tuple[int, int]
    dtype: str
    words: np.ndarray          # uint32 (value << 16 | location)
    tile_offsets: np.ndarray   # int64, n_tiles + 1, tiles in row-major (tile_row, tile_col) order
    row_nnz: np.ndarray        # uint16 (n_tiles, tile_rows): padded word count of each tile row
    nnz: int                   # true non-zeros (padding excluded)
    pad: int = DEFAULT_PAD

    def __post_init__(self) -> None:
        """Refuse fields the kernels cannot read safely (they index without bounds checks)."""
        shape, tile = self.shape, self.tile
        if not (isinstance(shape, tuple) and len(shape) == 2 and all(_is_int(v) and v >= 1 for v in shape)):
            raise bad_value("shape", shape, "(M, K) with integers M, K >= 1")
        if self.dtype not in DTYPES:
            raise bad_value("dtype", self.dtype, "one of " + ", ".join(map(repr, DTYPES)))
        check_pad(self.pad)
        if not isinstance(tile, tuple):
            raise bad_value("tile", tile, "a tuple (rows, cols)")
        tr, tc = check_tile(tile, self.pad)
        gr, gc = self.grid
        for name, dtype, ndim in (("words", np.uint32, 1), ("tile_offsets", np.int64, 1), ("row_nnz", np.uint16, 2)):
            a = getattr(self, name)
            if not (isinstance(a, np.ndarray) and a.dtype == dtype and a.ndim == ndim and a.flags.c_contiguous):
                shown = f"{a.dtype}{a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
                raise bad_value(name, shown, f"a C-contiguous {ndim}-D {np.dtype(dtype)} numpy array")
        if self.row_nnz.shape != (gr * gc, tr):
            raise bad_value("row_nnz.shape", self.row_nnz.shape, f"{(gr * gc, tr)} (tiles, tile rows)")
        if self.row_nnz.size and np.any(self.row_nnz % self.pad):
            raise bad_value("row_nnz", "counts", f"multiples of pad={self.pad}")
        toff = self.tile_offsets
        per_tile = self.row_nnz.sum(axis=1, dtype=np.int64)
        if (toff.shape != (gr * gc + 1,) or toff[0] != 0 or toff[-1] != self.words.size
                or not np.array_equal(np.diff(toff), per_tile)):
            raise bad_value("tile_offsets", f"int64{toff.shape}", f"{gr * gc + 1} offsets from 0 to "
                            f"len(words)={self.words.size}, each tile's span the sum of its row_nnz")
        bad, nnz = _check_words(self.words, toff, self.row_nnz, tr, tc, self.col_bits, shape[0], shape[1], gc)
        if bad >= 0:
            raise bad_value(f"words[{bad}]", f"{int(self.words[bad]):#010x}", "a word whose location lies "
                            "in its own tile row and inside the matrix, after its row's previous non-zero")
        if not _is_int(self.nnz) or self.nnz != nnz:
            raise bad_value("nnz", self.nnz, f"{nnz} (the words with a non-zero value)")

    @property
    def grid(self) -> tuple[int, int]:
        """Number of tiles along rows and along columns."""
        (m, k), (tr, tc) = self.shape, self.tile
        return -(-m // tr), -(-k // tc)

    @property
    def col_bits(self) -> int:
        """Low bits of a location that hold the column (the row sits above them)."""
        return _bits_for(self.tile[1])

    @property
    def sparsity(self) -> float:
        m, k = self.shape
        return 1.0 - self.nnz / max(1, m * k)

    @property
    def nbytes(self) -> int:
        """Bytes the kernel reads: words, tile offsets and per-row counts."""
        return int(self.words.nbytes + self.tile_offsets.nbytes + self.row_nnz.nbytes)

    def bytes_per_dense_bound(self) -> float:
        """nbytes / ((1 - s) * M * K): the paper's ~4 bytes per non-zero, padding and metadata included."""
        return self.nbytes / max(1, self.nnz)

    def tile_counts(self) -> np.ndarray:
        """Return the true non-zero count of every tile as a (tile_rows, tile_cols) grid."""
        counts = np.zeros(self.grid[0] * self.grid[1], np.int64)
        _tile_true_counts(self.words, self.tile_offsets, counts)
        return counts.reshape(self.grid)

    def tile_dense(self, tile_row: int, tile_col: int) -> np.ndarray:
        """Return one tile decoded to a float32 (tile_rows, tile_cols) array (for pictures)."""
        gr, gc = self.grid
        if not (_is_int(tile_row) and _is_int(tile_col) and 0 <= tile_row < gr and 0 <= tile_col < gc):
            raise bad_value("tile_row, tile_col", (tile_row, tile_col),
                            f"integers with 0 <= tile_row < {gr}, 0 <= tile_col < {gc}")
        tile_row, tile_col = int(tile_row), int(tile_col)
        t = tile_row * gc + tile_col
        w = self.words[self.tile_offsets[t]:self.tile_offsets[t + 1]]
        out = np.zeros(self.tile[0] << self.col_bits, np.uint16)
        v = (w >> 16).astype(np.uint16)
        keep = v != 0
        out[(w & 0xFFFF)[keep]] = v[keep]
        dense = torch.from_numpy(out.view(np.int16)).view(DTYPES[self.dtype]).float().numpy()
        return dense.reshape(self.tile[0], -1)[:, :self.tile[1]].copy()


def encode(weight: torch.Tensor, *, tile: tuple[int, int] | None = None, pad: int = DEFAULT_PAD) -> TiledCSL:
    """Return `weight` (a 2-D bf16 or fp16 tensor) in Tiled-CSL; zeros (+0.0 and -0.0) are dropped.

    `tile` defaults to :func:`auto_tile` (8 rows, equal column tiles of at most 8192).
    """
    if not isinstance(weight, torch.Tensor):
        raise bad_value("weight", type(weight).__name__, "a torch.Tensor")
    name = _torch_dtype_name(weight.dtype)
    if name is None:
        raise bad_value("weight.dtype", weight.dtype, "torch.bfloat16 or torch.float16")
    if weight.dim() != 2 or weight.shape[0] < 1 or weight.shape[1] < 1:
        raise bad_value("weight.shape", tuple(weight.shape), "a non-empty 2-D shape (M, K)")
    if weight.device.type != "cpu":
        raise bad_value("weight.device", str(weight.device), "a CPU tensor (the encoder runs on the CPU)")
    pad = check_pad(pad)
    tr, tc = check_tile(auto_tile(int(weight.shape[1])) if tile is None else tile, pad)
    m, k = weight.shape
    gr, gc = -(-m // tr), -(-k // tc)
    if gr * gc * tr > max(m * k, ROW_NNZ_FLOOR):
        raise bad_value("tile", (tr, tc), f"a tile whose per-row counts ({gr * gc} tiles x {tr} rows) number at "
                        f"most max(M * K, {ROW_NNZ_FLOOR}) for weight.shape={(m, k)}: fewer rows or more columns")
    bits = weight.detach().contiguous().view(torch.int16).numpy().view(np.uint16)
    # Counted in int64 and checked before the narrowing to uint16, so no tile can wrap a count.
    counts = np.zeros((gr * gc, tr), np.int64)
    true_nnz = np.zeros(gr, np.int64)
    _count(bits, tr, tc, pad, counts, true_nnz)
    if counts.size and counts.max() > ROW_NNZ_MAX:
        raise bad_value("tile", (tr, tc), f"a tile whose padded row counts fit uint16 (<= {ROW_NNZ_MAX})")
    row_nnz = counts.astype(np.uint16)
    tile_offsets = np.zeros(gr * gc + 1, np.int64)
    np.cumsum(counts.sum(axis=1), out=tile_offsets[1:])
    words = np.empty(int(tile_offsets[-1]), np.uint32)
    overrun = np.zeros(gr, np.int64)
    _fill(bits, tr, tc, pad, tile_offsets, words, overrun)
    if overrun.any():  # cannot happen with the counts above; a guard, not a code path
        raise RuntimeError(f"Tiled-CSL fill disagreed with its counts in tile row {int(np.argmax(overrun))}")
    return TiledCSL((m, k), (tr, tc), name, words, tile_offsets, row_nnz, int(true_nnz.sum()), pad)


def decode(w: TiledCSL) -> torch.Tensor:
    """Return the dense tensor `w` encodes (bit-exact on non-zeros; zeros come back as +0.0)."""
    m, k = w.shape
    out = np.zeros((m, k), np.uint16)
    _scatter_bits(w.words, w.tile_offsets, w.tile[0], w.tile[1], w.grid[1], out)
    return torch.from_numpy(out.view(np.int16)).view(DTYPES[w.dtype])


def byte_bound_speedup(sparsity: float) -> float:
    """Best speedup over dense 16-bit weights while memory-bound: 2MK / (4(1-s)MK) = 1 / (2(1-s)).

    `sparsity` is the fraction of zeros, a number in [0, 1) (at 1 the bound is infinite).
    """
    sparsity = check_sparsity(sparsity)
    return 1.0 / (2.0 * (1.0 - sparsity))


# --- numba passes; parallel over tile rows, each writes only its own band ---------------------

@njit(parallel=True, cache=True)
def _count(bits, tr, tc, pad, row_nnz, true_nnz):
    m, k = bits.shape
    gr, gc = true_nnz.shape[0], -(-k // tc)
    for g in prange(gr):
        total = 0
        for r in range(tr):
            i = g * tr + r
            if i >= m:
                break
            for t in range(gc):
                c0 = t * tc
                c1 = min(k, c0 + tc)
                n = 0
                for c in range(c0, c1):
                    if bits[i, c] & 0x7FFF:
                        n += 1
                total += n
                row_nnz[g * gc + t, r] = (n + pad - 1) // pad * pad
        true_nnz[g] = total


@njit(parallel=True, cache=True)
def _fill(bits, tr, tc, pad, tile_offsets, words, overrun):
    """Write each tile's words into its span of `words`; a write past the span (or a span left
    short) sets overrun[tile row] instead of touching memory outside it."""
    m, k = bits.shape
    gc = -(-k // tc)
    gr = (tile_offsets.shape[0] - 1) // gc
    cbits = 0
    while (1 << cbits) < tc:
        cbits += 1
    for g in prange(gr):
        for t in range(gc):
            p = tile_offsets[g * gc + t]
            end = min(tile_offsets[g * gc + t + 1], words.shape[0])
            c0 = t * tc
            c1 = min(k, c0 + tc)
            for r in range(tr):
                i = g * tr + r
                if i >= m:
                    break
                n = 0
                for c in range(c0, c1):
                    b = bits[i, c]
                    if b & 0x7FFF:
                        if p >= end:
                            overrun[g] = 1
                            break
                        words[p] = (np.uint32(b) << np.uint32(16)) | np.uint32((r << cbits) | (c - c0))
                        p += 1
                        n += 1
                while n % pad:
                    if p >= end:
                        overrun[g] = 1
                        break
                    words[p] = np.uint32(r << cbits)
                    p += 1
                    n += 1
            if p != end:
                overrun[g] = 1


@njit(cache=True)
def _check_words(words, toff, row_nnz, tr, tc, cbits, m, k, gc):
    """Return (index of the first word outside its tile row or the matrix, or out of column order,
    or -1; the count of non-zero words).

    A row's non-zero words must have strictly increasing columns: a repeated location would be
    summed by the kernels but overwritten by decode, so the two would disagree.
    """
    cmask = (1 << cbits) - 1
    nnz = 0
    for t in range(toff.shape[0] - 1):
        r0 = (t // gc) * tr
        c0 = (t % gc) * tc
        width = min(tc, k - c0)
        p = toff[t]
        for r in range(tr):
            last = -1
            for _ in range(np.int64(row_nnz[t, r])):
                w = words[p]
                loc = np.int64(w & np.uint32(0xFFFF))
                col = loc & cmask
                if (loc >> cbits) != r or col >= width or r0 + r >= m:
                    return p, nnz
                if w >> np.uint32(16):
                    if col <= last:
                        return p, nnz
                    last = col
                    nnz += 1
                p += 1
    return -1, nnz


@njit(parallel=True, cache=True)
def _scatter_bits(words, tile_offsets, tr, tc, gc, out):
    m, k = out.shape
    cbits = 0
    while (1 << cbits) < tc:
        cbits += 1
    n_tiles = tile_offsets.shape[0] - 1
    for t in prange(n_tiles):
        r0 = (t // gc) * tr
        c0 = (t % gc) * tc
        for p in range(tile_offsets[t], tile_offsets[t + 1]):
            w = words[p]
            v = w >> np.uint32(16)
            if v != 0:
                loc = w & np.uint32(0xFFFF)
                out[r0 + (loc >> cbits), c0 + (loc & ((1 << cbits) - 1))] = np.uint16(v)


@njit(cache=True)
def _tile_true_counts(words, tile_offsets, counts):
    for t in range(tile_offsets.shape[0] - 1):
        n = 0
        for p in range(tile_offsets[t], tile_offsets[t + 1]):
            if words[p] >> np.uint32(16):
                n += 1
        counts[t] = n


__all__ = ["DTYPES", "DEFAULT_TILE", "DEFAULT_PAD", "ROW_NNZ_MAX", "TiledCSL", "encode", "decode", "check_tile",
           "check_pad", "max_tile_cols", "auto_tile", "byte_bound_speedup"]
