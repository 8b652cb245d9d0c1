"""The one batch every embedding module takes: :class:`JaggedBatch` (TorchRec's ``KeyedJaggedTensor``
shape: ids of all fields concatenated field-major, one length per (field, sample)) and its checks.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from labkit.core.errors import LabkitError, bad_value, check_range
from labkit.recsys.data.specs import FieldSpec


@dataclass
class JaggedBatch:
    """One mini-batch: dense features, labels, and the ids of every field as one jagged array.

    ``values`` holds field 0's ids for samples 0..B-1, then field 1's, and so on; ``lengths``
    has F*B entries (ids per field and sample); ``offsets`` is its exclusive prefix sum.
    """

    keys: list[str]
    values: np.ndarray  # int64 [nnz]
    lengths: np.ndarray  # int64 [F * B]
    dense: np.ndarray  # float32 [B, n_dense]
    labels: np.ndarray  # float32 [B]
    offsets: np.ndarray = field(init=False, repr=False)
    _single_hot: bool | None = field(init=False, repr=False, default=None)
    _tops: np.ndarray | None = field(init=False, repr=False, default=None, compare=False)

    def __post_init__(self) -> None:
        # Every array is checked for shape and kind here (cheap, vectorised): a negative length or
        # a float id would otherwise reach the embedding kernels, which do not bounds-check.
        if isinstance(self.keys, str) or not isinstance(self.keys, Iterable):
            raise bad_value("keys", self.keys, "a list of field names (strings)", exc=BadBatch)
        self.keys = list(self.keys)  # a generator is read once, here
        if not all(isinstance(k, str) for k in self.keys):
            raise bad_value("keys", self.keys, "a list of field names (strings)", exc=BadBatch)
        if len(set(self.keys)) != len(self.keys):
            dup = next(k for k in self.keys if self.keys.count(k) > 1)
            raise bad_value("keys", dup, "unique field names", exc=BadBatch)
        self.values = _int_array("values", self.values)
        self.lengths = _int_array("lengths", self.lengths)
        self.dense = _float_array("dense", self.dense, 2)
        self.labels = _float_array("labels", self.labels, 1)
        b, f = self.batch_size, len(self.keys)
        if self.dense.shape[0] != b:
            rows = self.dense.shape[0]
            if f and self.lengths.shape == (f * rows,):  # dense and lengths agree: the labels are off
                raise bad_value("labels", f"shape {self.labels.shape}", f"{rows} labels, one per row of dense "
                                "(and per bag of each field in lengths)", exc=BadBatch)
            raise bad_value("dense", f"shape {self.dense.shape}", f"{b} rows, one per label", exc=BadBatch)
        if self.lengths.shape != (f * b,):
            raise bad_value("lengths", f"shape {self.lengths.shape}", f"shape ({f * b},) = fields x batch",
                            exc=BadBatch)
        if self.lengths.size and self.lengths.min() < 0:
            i = int(np.argmin(self.lengths))
            raise bad_value(f"lengths[{i}]", int(self.lengths[i]),
                            f"ids per bag >= 0 (field {self.keys[i // b]!r}, sample {i % b})", exc=BadBatch)
        self.offsets = np.zeros(f * b + 1, np.int64)
        np.cumsum(self.lengths, out=self.offsets[1:])
        if self.offsets[-1] != self.values.shape[0]:
            raise bad_value("values", f"{self.values.shape[0]} ids", f"{self.offsets[-1]} ids (sum of lengths)",
                            exc=BadBatch)

    @property
    def batch_size(self) -> int:
        return int(self.labels.shape[0])

    @property
    def single_hot(self) -> bool:
        """True when every (field, sample) bag holds exactly one id (then ids of field f sit at f*B + b)."""
        if self._single_hot is None:
            self._single_hot = bool(self.lengths.size == self.values.size and (self.lengths == 1).all())
        return self._single_hot

    @property
    def n_fields(self) -> int:
        return len(self.keys)

    def field_tops(self) -> np.ndarray:
        """Return the largest id of each field as uint64 (a negative id reads as >= 2**63; an empty
        field as 0), computed once per batch: one vectorised pass over the ids."""
        if self._tops is None:
            b, nf = self.batch_size, len(self.keys)
            tops = np.zeros(nf, np.uint64)
            if self.values.size:
                # Fields with ids start strictly increasing, and each one's ids run up to the next one's start.
                starts = self.offsets[0:nf * b:b]
                full = np.flatnonzero(self.offsets[b:nf * b + 1:b] > starts)
                tops[full] = np.maximum.reduceat(self.values.view(np.uint64), starts[full])
            self._tops = tops
        return self._tops

    def field_ids(self, f: int) -> tuple[np.ndarray, np.ndarray]:
        """Return (ids, offsets relative to them, length B+1) of field index `f`."""
        if not 0 <= f < len(self.keys):
            raise bad_value("f", f, f"a field index in [0, {len(self.keys)})")
        b = self.batch_size
        off = self.offsets[f * b:(f + 1) * b + 1]
        return self.values[off[0]:off[-1]], off - off[0]

    def slice(self, start: int, stop: int) -> "JaggedBatch":
        """Return samples [start, stop) as a new batch (a micro-batch)."""
        b = self.batch_size
        if not 0 <= start <= stop <= b:
            raise bad_value("(start, stop)", (start, stop), f"0 <= start <= stop <= {b} (the batch size)")
        lens = self.lengths.reshape(len(self.keys), b)[:, start:stop]
        if self.single_hot:  # ids of field f at f*B + sample: one strided copy
            out = JaggedBatch(self.keys, self.values.reshape(len(self.keys), b)[:, start:stop].reshape(-1),
                              lens.reshape(-1), self.dense[start:stop], self.labels[start:stop])
            out._single_hot = True
            return out
        vals = [self.values[self.offsets[f * b + start]:self.offsets[f * b + stop]] for f in range(len(self.keys))]
        return JaggedBatch(self.keys, np.concatenate(vals) if vals else self.values[:0], lens.reshape(-1),
                           self.dense[start:stop], self.labels[start:stop])

    def split(self, n: int) -> list["JaggedBatch"]:
        """Split into `n` micro-batches of near-equal size (in sample order)."""
        edges = self.split_points(n)
        return [self.slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]

    def split_points(self, n: int) -> np.ndarray:
        """Return the n + 1 sample boundaries :meth:`split` cuts at."""
        check_range("n", n, 1, self.batch_size, integer=True)
        return np.linspace(0, self.batch_size, n + 1).round().astype(int)

    def to_torchrec(self):
        """Return this batch's ids as a torchrec ``KeyedJaggedTensor`` (needs torchrec)."""
        import torch
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
        return KeyedJaggedTensor(keys=list(self.keys), values=torch.from_numpy(self.values),
                                 lengths=torch.from_numpy(self.lengths))


class BadBatch(LabkitError, ValueError):
    """A batch is malformed or does not fit the field spec it is used with (fields, ids, dense width,
    labels); one line, names the field."""


def _int_array(arg: str, x) -> np.ndarray:
    """`x` as a contiguous 1-D int64 array; refuses floats (1.7 would be truncated), bools and strings."""
    try:
        a = np.asarray(x)
    except (ValueError, TypeError):
        raise bad_value(arg, type(x).__name__, "a 1-D array of integers", exc=BadBatch) from None
    if a.ndim != 1:
        raise bad_value(arg, f"shape {a.shape}", "a 1-D array of integers", exc=BadBatch)
    if a.dtype.kind not in "iu" and a.size:  # an empty list arrives as float64: fine
        raise bad_value(arg, f"dtype {a.dtype}, e.g. {a[0].item()!r}",
                        "an integer array (int64; whole floats: use .astype(np.int64))", exc=BadBatch)
    return np.ascontiguousarray(a, dtype=np.int64)


def _float_array(arg: str, x, ndim: int) -> np.ndarray:
    """`x` as a contiguous float32 array of `ndim` dimensions."""
    try:
        a = np.asarray(x)
        if a.dtype.kind not in "biuf" and a.size:
            raise TypeError
        a = np.ascontiguousarray(a, dtype=np.float32)
    except (ValueError, TypeError):
        raise bad_value(arg, type(x).__name__, f"a {ndim}-D array of numbers", exc=BadBatch) from None
    if a.ndim != ndim:
        raise bad_value(arg, f"shape {a.shape}", f"a {ndim}-D array" + (" (samples x dense features)" if ndim == 2
                                                                        else " (one label per sample)"), exc=BadBatch)
    return a


def check_ids(specs: Sequence[FieldSpec], batch: JaggedBatch) -> JaggedBatch:
    """Return `batch` with ids checked against each field's cardinality (hashed where the spec says so).

    Raises :class:`BadBatch` (a ValueError) naming the field when the batch's fields do not match
    the specs, an id is out of range for a field that refuses such ids, the batch is empty, a label
    lies outside [0, 1] or a label or dense feature is not finite. One vectorised pass over the
    ids (the batch's shapes and lengths were checked when it was made).
    """
    if not isinstance(batch, JaggedBatch):
        raise bad_value("batch", type(batch).__name__, "a JaggedBatch", exc=BadBatch)
    names = [s.name for s in specs]
    if list(batch.keys) != names:
        missing = [n for n in names if n not in batch.keys]
        extra = [k for k in batch.keys if k not in names]
        what = (f"field {missing[0]!r} is missing from the data, which has {extra[0]!r} instead" if missing and extra
                else f"field {missing[0]!r} is missing from the data" if missing else
                f"field {extra[0]!r} is not in the field spec" if extra else "fields are in a different order")
        raise BadBatch(f"field spec does not match the data: {what}; spec has {len(names)} fields, "
                       f"batch.keys has {len(batch.keys)}")
    b, nf = batch.batch_size, len(specs)
    if b == 0:
        raise bad_value("batch", "0 samples", "at least one sample", exc=BadBatch)
    _check_labels_dense(batch)
    values = batch.values
    if values.size == 0:
        return batch
    # One pass over the ids: the largest id of each field, as unsigned (a negative id reads as
    # >= 2**63, so one comparison with the cardinality catches both ends).
    cards = np.fromiter((s.cardinality for s in specs), np.uint64, nf)
    bad_fields = np.flatnonzero(batch.field_tops() >= cards)
    for f in bad_fields:
        s = specs[f]
        lo, hi = batch.offsets[f * b], batch.offsets[(f + 1) * b]
        ids = values[lo:hi]
        bad = ids.view(np.uint64) >= np.uint64(s.cardinality)
        if s.out_of_range == "hash":
            if values is batch.values:
                values = values.copy()
            values[lo:hi] = np.where(bad, hash_ids(ids, s.cardinality), ids)
        else:
            v = int(ids[np.argmax(bad)])
            raise BadBatch(f"field {s.name!r}: id={v} is not accepted; expected 0 <= id < "
                           f"{s.cardinality} (set out_of_range='hash' in the field spec to hash it)")
    if values is batch.values:
        return batch
    return JaggedBatch(batch.keys, values, batch.lengths, batch.dense, batch.labels)


def check_fits(batch: JaggedBatch, cardinalities: Sequence[int], arg: str = "batch") -> JaggedBatch:
    """Return `batch` if it has a field for each table size in `cardinalities` (field f is looked up
    in a table of ``cardinalities[f]`` rows) and every id fits its table, else raise BadBatch.

    The embedding modules call this before their kernels, which do not bounds-check: an id out of
    range must be an error naming the field, not a read outside the table. O(fields) for a batch
    that :func:`check_ids` has checked (its per-field largest ids are kept on the batch).
    """
    if not isinstance(batch, JaggedBatch):
        raise bad_value(arg, type(batch).__name__, "a JaggedBatch", exc=BadBatch)
    nf = len(cardinalities)
    if batch.n_fields < nf:
        raise bad_value(f"{arg}.keys", batch.keys, f"{nf} fields, one per table of the embeddings", exc=BadBatch)
    cards = np.asarray(cardinalities, np.uint64)
    bad = np.flatnonzero(batch.field_tops()[:nf] >= cards)
    if bad.size:
        f = int(bad[0])
        ids = batch.field_ids(f)[0]
        v = int(ids[np.argmax(ids.view(np.uint64) >= cards[f])])
        raise bad_value(f"{arg} field {batch.keys[f]!r}: id", v, f"0 <= id < {int(cards[f])} (the rows of its table; "
                        "check_ids hashes or refuses such ids as the field spec says)", exc=BadBatch)
    return batch


def _check_labels_dense(batch: JaggedBatch) -> None:
    """Refuse labels outside [0, 1] and non-finite labels or dense features (NaN fails every comparison)."""
    lab = batch.labels
    if not (lab.min() >= 0 and lab.max() <= 1):
        i = int(np.flatnonzero(~((lab >= 0) & (lab <= 1)))[0])
        raise bad_value(f"batch.labels[{i}]", float(lab[i]), "a click label in [0, 1]", exc=BadBatch)
    d = batch.dense
    if d.size and not (np.isfinite(d.min()) and np.isfinite(d.max())):
        i, j = np.argwhere(~np.isfinite(d))[0]
        raise bad_value(f"batch.dense[{i}, {j}]", float(d[i, j]), f"finite values (dense column {j})",
                        exc=BadBatch)


def hash_ids(ids: np.ndarray, cardinality: int) -> np.ndarray:
    """Map arbitrary int64 ids into [0, cardinality) with a multiplicative hash."""
    x = ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(29)
    return (x % np.uint64(cardinality)).astype(np.int64)
