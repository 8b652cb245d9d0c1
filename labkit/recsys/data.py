"""CTR data for PICASSO: field specs, jagged batches, a Zipf generator and Criteo TSV / Parquet readers.

A batch is named once (:class:`JaggedBatch`, TorchRec's ``KeyedJaggedTensor`` shape: ids of all
fields concatenated field-major, one length per (field, sample)) and every embedding module, per
field or packed, takes that same batch.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import re
import warnings
from dataclasses import MISSING, asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from labkit.core.atomic import atomic_write_json
from labkit.core.errors import (LabkitError, bad_value, check_choice, check_file, check_range, check_seed,
                                 not_parquet, open_parquet)
from labkit.core.progress import progress_bar

POOLINGS = ("sum", "mean")
OUT_OF_RANGE = ("refuse", "hash")
N_DENSE_CRITEO = 13
N_CAT_CRITEO = 26


@dataclass(frozen=True)
class FieldSpec:
    """One categorical feature field: its table size, embedding dim, pooling and id statistics.

    `hotness` is the mean number of ids per sample (1 = single-hot); `zipf` the skew of the
    synthetic ids; `out_of_range` says whether ids >= `cardinality` are refused or hashed.
    """

    name: str
    cardinality: int
    dim: int = 16
    pooling: str = "sum"
    hotness: int = 1
    zipf: float = 1.05
    out_of_range: str = "refuse"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise bad_value("name", self.name, "a non-empty string")
        check_range(f"{self.name}.cardinality", self.cardinality, 1, integer=True)
        check_range(f"{self.name}.dim", self.dim, 1, 1024, integer=True)
        check_choice(f"{self.name}.pooling", self.pooling, POOLINGS)
        check_range(f"{self.name}.hotness", self.hotness, 1, 1000, integer=True)
        check_range(f"{self.name}.zipf", self.zipf, 0.0, 10.0)
        check_choice(f"{self.name}.out_of_range", self.out_of_range, OUT_OF_RANGE)
        for n in ("cardinality", "dim", "hotness"):  # 4.0 or np.int64(4) is kept as 4 (JSON-able)
            object.__setattr__(self, n, int(getattr(self, n)))
        object.__setattr__(self, "zipf", float(self.zipf))


def make_fields(n_fields: int, *, cardinality: int | Sequence[int] = 100_000,
                dims: int | Sequence[int] = 16, hotness: int | Sequence[int] = 1,
                zipf: float | Sequence[float] = 1.05, pooling: str | Sequence[str] = "sum",
                prefix: str = "C") -> list[FieldSpec]:
    """Return `n_fields` field specs; per-field values (table size, dim, hotness, Zipf skew, pooling)
    cycle through any sequence given."""
    n_fields = int(check_range("n_fields", n_fields, 1, 100_000, integer=True))

    for arg, v, what in (("cardinality", cardinality, "integers"), ("dims", dims, "integers"),
                         ("hotness", hotness, "integers"), ("zipf", zipf, "numbers"), ("pooling", pooling, "poolings")):
        if isinstance(v, (list, tuple, np.ndarray)) and len(v) == 0:
            raise bad_value(arg, list(v), f"a single value or a non-empty sequence of {what}")

    def pick(v, i):  # FieldSpec checks (and refuses 1.5, rather than truncating it here)
        return v[i % len(v)] if isinstance(v, (list, tuple, np.ndarray)) else v
    return [FieldSpec(f"{prefix}{i + 1}", pick(cardinality, i), pick(dims, i), pick(pooling, i), pick(hotness, i),
                      pick(zipf, i)) for i in range(n_fields)]


def check_lr(arg: str, lr: float) -> float:
    """Return learning rate `lr` as a float if it is finite and > 0, else raise naming `arg`."""
    return float(check_range(arg, lr, 0.0, math.inf, lo_open=True, hi_open=True))


def check_specs(specs: Sequence[FieldSpec]) -> list[FieldSpec]:
    """Return `specs` as a list if it holds at least one FieldSpec and nothing else, else raise."""
    if isinstance(specs, (str, bytes, FieldSpec)) or not isinstance(specs, (Sequence, np.ndarray)):
        raise bad_value("specs", type(specs).__name__, "a list of FieldSpec (see make_fields)")
    specs = list(specs)
    if not specs:
        raise bad_value("specs", specs, "at least one FieldSpec (see make_fields)")
    for i, s in enumerate(specs):
        if not isinstance(s, FieldSpec):
            raise bad_value(f"specs[{i}]", type(s).__name__, "a FieldSpec (see make_fields)")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise bad_value("specs", next(n for n in names if names.count(n) > 1), "unique field names")
    return specs


def criteo_like_cardinalities(n_fields: int, *, max_rows: int = 1_000_000, min_rows: int = 10,
                              seed: int = 0) -> list[int]:
    """Return log-uniform table sizes between `min_rows` and `max_rows`, as Criteo's 26 fields spread."""
    n_fields = int(check_range("n_fields", n_fields, 1, 100_000, integer=True))
    check_range("min_rows", min_rows, 1, integer=True)
    check_range("max_rows", max_rows, min_rows, integer=True)
    rng = np.random.default_rng([check_seed(seed, bits=64), 7])
    return [int(x) for x in np.exp(rng.uniform(math.log(min_rows), math.log(max_rows), n_fields))]


def save_field_specs(specs: Sequence[FieldSpec], path: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Write a field spec file (JSON list of fields); refuses to overwrite unless asked."""
    atomic_write_json(path, {"fields": [asdict(s) for s in specs]}, overwrite=overwrite)


def load_field_specs(path: str | os.PathLike) -> list[FieldSpec]:
    """Read a field spec file written by :func:`save_field_specs` (or by hand).

    Raises ValueError naming the file (and the row, for a bad row) when it is missing, unreadable,
    not JSON or not a list of fields.
    """
    try:
        obj = json.loads(Path(path).read_text())
    except OSError as e:
        raise bad_value("path", str(path), f"a readable field spec file ({e.strerror or type(e).__name__})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        where = f"line {e.lineno}: {e.msg}" if isinstance(e, json.JSONDecodeError) else "not UTF-8 text"
        raise bad_value("path", str(path), f"a JSON field spec file ({where})") from None
    rows = obj.get("fields") if isinstance(obj, dict) else obj
    if not isinstance(rows, list) or not rows:
        raise bad_value("path", str(path), "a JSON file with a non-empty 'fields' list")
    known = set(FieldSpec.__dataclass_fields__)
    required = {n for n, f in FieldSpec.__dataclass_fields__.items()
                if f.default is MISSING and f.default_factory is MISSING}
    out = []
    for i, r in enumerate(rows):
        arg = f"{path}: fields[{i}]"
        if not isinstance(r, dict):
            raise bad_value(arg, r, "an object with keys among " + ", ".join(sorted(known)))
        extra = set(r) - known
        if extra:
            raise bad_value(arg, sorted(extra)[0], "keys among " + ", ".join(sorted(known)))
        missing = required - set(r)
        if missing:
            raise bad_value(arg, r, "an object with keys " + ", ".join(sorted(required)) +
                            f" (missing {sorted(missing)[0]!r})")
        try:
            out.append(FieldSpec(**r))
        except ValueError as e:
            raise ValueError(f"{arg}: {e}") from None
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise bad_value(f"{path}: fields.name", dup, "unique field names")
    return out


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


class ZipfSampler:
    """Draws Zipf-skewed ids for one field by inverse-CDF sampling over its finite id range.

    Rank k (0-based) has probability proportional to (k+1)^-s. Ranks map to ids through a seeded
    permutation, so hot ids are scattered over the table as in real logs.
    """

    def __init__(self, cardinality: int, s: float, seed: int | Sequence[int] = 0) -> None:
        check_range("cardinality", cardinality, 1, integer=True)
        check_range("s", s, 0.0, 10.0)
        if isinstance(seed, (list, tuple, np.ndarray)):
            seed = [check_seed(x, f"seed[{i}]", bits=64) for i, x in enumerate(seed)]
        else:
            seed = check_seed(seed, bits=64)
        self.cardinality, self.s = int(cardinality), float(s)
        w = np.arange(1, self.cardinality + 1, dtype=np.float64) ** -self.s
        self.cdf = np.cumsum(w)
        self.cdf /= self.cdf[-1]
        self.perm = np.random.default_rng(seed).permutation(self.cardinality).astype(np.int64)

    def ranks(self, rng: np.random.Generator, n: int) -> np.ndarray:
        r = np.searchsorted(self.cdf, rng.random(n), side="right")
        return np.minimum(r, self.cardinality - 1)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Return `n` ids."""
        return self.perm[self.ranks(rng, n)]

    def top_mass(self, k: int) -> float:
        """Probability mass of the `k` most frequent ids (the ideal hit rate of a k-row cache)."""
        return float(self.cdf[min(max(k, 1), self.cardinality) - 1]) if k > 0 else 0.0


class SyntheticCTR:
    """A seeded stream of CTR batches over `specs`: Zipf ids, Gaussian dense features, learnable labels.

    Labels follow a fixed hidden logistic model of the ids and dense features, so a model's loss
    falls as it trains.
    """

    def __init__(self, specs: Sequence[FieldSpec], *, n_dense: int = N_DENSE_CRITEO, seed: int = 0) -> None:
        self.specs = specs = check_specs(specs)
        self.n_dense = int(check_range("n_dense", n_dense, 0, 1000, integer=True))
        self.seed = seed = check_seed(seed, bits=64)
        self.samplers = [ZipfSampler(s.cardinality, s.zipf, [seed, 1000 + i]) for i, s in enumerate(specs)]
        self.dense_w = np.random.default_rng([seed, 3]).normal(0, 0.3, n_dense).astype(np.float32)
        self._step = 0

    def batch(self, batch_size: int, index: int | None = None) -> JaggedBatch:
        """Return batch number `index` (the next one if None); the same index gives the same batch."""
        batch_size = int(check_range("batch_size", batch_size, 1, 10_000_000, integer=True))
        if index is None:
            index, self._step = self._step, self._step + 1
        index = check_seed(index, "index", bits=64)
        rng = np.random.default_rng([self.seed, 11, index])
        keys = [s.name for s in self.specs]
        lengths, values = [], []
        logit = np.zeros(batch_size, np.float64)
        for f, (s, smp) in enumerate(zip(self.specs, self.samplers)):
            if s.hotness == 1:
                ln = np.ones(batch_size, np.int64)
            else:
                ln = rng.integers(1, 2 * s.hotness, batch_size)  # mean = hotness
            ranks = smp.ranks(rng, int(ln.sum()))
            values.append(smp.perm[ranks])
            # hidden effect: hot ranks carry signal, cold ones are noise-like
            eff = np.cos(ranks * 2.399963 + f) * (0.6 / math.sqrt(len(self.specs) / 8 + 1))
            seg = np.repeat(np.arange(batch_size), ln)
            logit += np.bincount(seg, weights=eff, minlength=batch_size) / ln
            lengths.append(ln)
        dense = rng.normal(0, 1, (batch_size, self.n_dense)).astype(np.float32)
        logit += dense @ self.dense_w - 0.5
        labels = (rng.random(batch_size) < 1 / (1 + np.exp(-logit))).astype(np.float32)
        return JaggedBatch(keys, np.concatenate(values), np.concatenate(lengths), dense, labels)

    def batches(self, batch_size: int, n: int) -> Iterator[JaggedBatch]:
        for i in range(int(check_range("n", n, 0, integer=True))):
            yield self.batch(batch_size, i)


# ----------------------------------------------------------------------------------------------
# Readers for real CTR logs
# ----------------------------------------------------------------------------------------------

class MalformedRow(LabkitError):
    """A row of a CTR log could not be parsed (the message names the file and line)."""


class SkippedRowsWarning(UserWarning):
    """A reader skipped malformed rows and no :class:`ReadStats` was passed to record them."""


@dataclass
class ReadStats:
    """What a reader saw: rows read, rows skipped and the first few problems with line numbers."""

    rows: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)

    def add_problem(self, msg: str, keep: int = 20) -> None:
        self.skipped += 1
        if len(self.problems) < keep:
            self.problems.append(msg)


def criteo_field_specs(cardinality: int = 1_000_000, dim: int = 16, *, out_of_range: str = "hash") -> list[FieldSpec]:
    """Return specs for Criteo's 26 categorical columns C1..C26 (hex ids hashed into `cardinality`)."""
    return [FieldSpec(f"C{i + 1}", cardinality, dim, out_of_range=out_of_range) for i in range(N_CAT_CRITEO)]


def _criteo_rows_to_batch(specs, labels, dense, cats) -> JaggedBatch:
    b = len(labels)
    lengths = np.ones((len(specs), b), np.int64)
    vals = np.asarray(cats, dtype=np.int64).reshape(b, len(specs)).T.copy() if b else np.zeros((len(specs), 0), np.int64)
    missing = vals < 0
    lengths[missing] = 0
    batch = JaggedBatch([s.name for s in specs], vals[~missing], lengths.reshape(-1),
                        np.asarray(dense, np.float32).reshape(b, N_DENSE_CRITEO), np.asarray(labels, np.float32))
    return check_ids(specs, batch)


#: A string category that is an id: hex digits, as Criteo writes its categories ("68fd1e64"), with
#: an optional sign and 0x prefix. Anything else ("M", "technician", "7_0") is text.
_HEX_ID = re.compile(r"[+-]?(?:0[xX])?[0-9a-fA-F]+")
_M64 = 2**64 - 1


def _text_key(data: bytes) -> int:
    # blake2b is in every Python and never salted: the same text gives the same key in every
    # process and on every machine (Python's hash() of a str is salted per process).
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little", signed=True)


def _int_key(v: int) -> int:
    """The int64 key of integer id `v`: itself if it fits 64 bits (read as uint64 and wrapped if
    >= 2**63), else the text key of its hex digits, the key of its hex string too."""
    if -2**63 <= v < 2**64:
        return v - 2**64 if v >= 2**63 else v
    return _text_key((("-" if v < 0 else "") + format(abs(v), "x")).encode())


def _category(value, column: str) -> tuple[int | None, int | None]:
    """Return (id, key) of one category cell: id is the integer it denotes (None for text), key its
    canonical int64 key; (None, None) for a missing value. See :func:`category_key`."""
    if value is None:
        return None, None
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return None, _text_key(value)
    if isinstance(value, str):
        tok = value.strip()
        if not tok:
            return None, None  # an empty cell is a missing value, in a TSV and in Parquet alike
        if _HEX_ID.fullmatch(tok):
            v = int(tok, 16)
            return v, _int_key(v)
        return None, _text_key(tok.encode("utf-8", "surrogatepass"))
    if isinstance(value, numbers.Integral):
        v = int(value)
        return v, _int_key(v)
    if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
        v = int(value)
        return v, _int_key(v)
    shown = _short(value) if isinstance(value, numbers.Real) else f"<{type(value).__name__}>"
    raise ValueError(f"{column}={shown} is not accepted; expected an integer id, a hex id or a string")


def category_key(value) -> int | None:
    """Return the canonical int64 key of one categorical value (None for a missing value).

    One category has one key however it is stored, so it lands on one row in both readers:

    * an integer (an int column of Parquet, a whole float) is its own key: ``7`` -> 7;
    * a string of hex digits (optional sign and ``0x``; Criteo's convention, in a TSV and in a
      Parquet string column alike) is the id it spells: ``"7"``, ``"0x7"`` and ``"07"`` -> 7, and
      ``"10"`` -> 16 (the integer 16, not 10);
    * ids outside int64 are read as uint64 and wrapped (2**64 - 1 -> -1, the bits TorchRec keeps);
      an id wider than 64 bits is never truncated: its key is the text key of its lowercase hex
      digits (``"-"`` first if negative, no ``0x``, no leading zeros), for an int and a hex string alike;
    * any other string ("M", "technician") is text: its key is the first 8 bytes of the BLAKE2b
      hash of its UTF-8 bytes, little-endian, as a signed int64; bytes that are not UTF-8 hash as they are;
    * ``None``, ``""`` and a blank string are missing values (an empty bag).

    So a word spelled with the letters a-f only ("F", "cafe") is a hex id, not text: in a column
    of words where that matters, give every word a prefix that is not hex ("sex=F").

    Surrounding whitespace is ignored. A key maps to a row as an id does: kept if it lies in
    ``[0, cardinality)``, else hashed with :func:`hash_ids` (``out_of_range="hash"``) or refused.
    Text is always hashed, or refused by a field with ``out_of_range="refuse"``.
    """
    return _category(value, "value")[1]


def _hash_one(key: int, cardinality: int) -> int:
    """:func:`hash_ids` of one key, in plain Python (one id per cell in the readers' row loops)."""
    x = ((key & _M64) * 0x9E3779B97F4A7C15) & _M64
    x ^= x >> 29
    return x % cardinality


def _cat_row(value, spec: FieldSpec) -> int:
    """Return the row of categorical cell `value` in field `spec` (-1: missing), or raise
    ValueError naming the field (a malformed row)."""
    v, key = _category(value, spec.name)
    if key is None:
        return -1  # missing value: an empty bag for this field
    if v is not None and 0 <= v < spec.cardinality:
        return v
    if spec.out_of_range == "hash":
        return _hash_one(key, spec.cardinality)
    if v is None:
        raise ValueError(f"{spec.name}={_short(value)} is not accepted; expected a hex id "
                         f"(set out_of_range='hash' in the field spec to hash strings)")
    # a negative id must not read as a missing value (-1)
    shown = v if v.bit_length() <= 64 else f"{hex(v)[:20]}... ({v.bit_length()} bits)"
    raise ValueError(f"field {spec.name!r}: id={shown} is not accepted; expected 0 <= id < {spec.cardinality}")


def _short(value) -> str:
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."


#: The share of bad rows is first judged after this many rows (or `batch_size`, if more), so that
#: a few bad rows near the start of a long log do not stop it on a share of a handful of rows.
BAD_SHARE_WINDOW = 1024


class TooManyBadRows(MalformedRow):
    """A reader skipped more than `max_bad_share` of the rows it read (the message names the
    counts and the first bad row: file, row number, column)."""


class _Tally:
    """What one read saw, for the bad-row share: rows read, rows bad, the first problem."""

    def __init__(self, name: str, max_bad_share: float, batch_size: int, unit: str) -> None:
        self.name, self.share, self.unit = name, max_bad_share, unit
        self.window = max(batch_size, BAD_SHARE_WINDOW)
        self.next_check = self.window
        self.seen = self.bad = 0
        self.first: str | None = None
        self.failed = False

    def add_bad(self, msg: str) -> None:
        self.bad += 1
        if self.first is None:
            self.first = msg

    def judge(self, bar, final: bool = False) -> None:
        """Raise TooManyBadRows if the share of bad rows so far passes the limit (checked when a
        window of rows is complete, or at the end of the file)."""
        if not final:
            if self.seen < self.next_check:
                return
            while self.next_check <= self.seen:
                self.next_check += self.window
        if self.bad and (self.bad > self.share * self.seen or (final and self.bad == self.seen)):
            self.failed = True
            bar.close()
            where = "in the file" if final else f"in the first {self.seen} read"
            what = (f"all {self.bad} {self.unit}s {where} are malformed" if self.bad == self.seen else
                    f"{self.bad} of {self.seen} {self.unit}s {where} are malformed ({self.bad / self.seen:.1%}), "
                    f"more than max_bad_share={self.share} allows")
            raise TooManyBadRows(f"{self.name}: {what}; the first: {self.first} (fix the file, or pass a larger "
                                 "max_bad_share to skip such rows)")


def _bad_row(msg: str, on_error: str, stats: ReadStats, tally: _Tally, bar) -> None:
    """Refuse a malformed row (MalformedRow) or count it and go on, as `on_error` says."""
    if on_error == "raise":
        tally.failed = True
        bar.close()
        raise MalformedRow(msg + " (pass on_error='skip' to skip and count such rows)") from None
    stats.add_problem(msg)
    tally.add_bad(msg)


def _warn_skipped(tally: _Tally) -> None:
    """Warn (once, at the end of a read) that rows were skipped when the caller kept no ReadStats."""
    if tally.bad and not tally.failed:
        warnings.warn(f"{tally.name}: skipped {tally.bad} malformed row(s) of {tally.seen} read "
                      f"({tally.bad / tally.seen:.2%}, within max_bad_share={tally.share}), the first: {tally.first}; "
                      "pass stats=ReadStats() to collect them or on_error='raise' to stop at the first",
                      SkippedRowsWarning, stacklevel=3)


def _check_reader_args(on_error: str, batch_size: int, max_bad_share: float) -> float:
    check_choice("on_error", on_error, ("skip", "raise"))
    check_range("batch_size", batch_size, 1, integer=True)
    return float(check_range("max_bad_share", max_bad_share, 0.0, 1.0))


def _no_rows(path: Path, kind: str) -> ValueError:
    return bad_value("path", str(path), f"a {kind} file holding at least one row ({path.name} holds no rows)")


def read_criteo_tsv(path: str | os.PathLike, specs: Sequence[FieldSpec] | None = None, *,
                    batch_size: int = 4096, on_error: str = "skip", max_bad_share: float = 0.01,
                    progress: bool = True, stats: ReadStats | None = None) -> Iterator[JaggedBatch]:
    """Stream batches from a Criteo-format TSV (label, 13 integer, 26 hex categorical columns).

    Missing integers become 0 and dense features are log(1 + x) transformed (values <= 0 become 0);
    a missing category is an empty bag. Categories are hex ids by Criteo's convention, and a
    category maps to the same row as in :func:`read_criteo_parquet` (see :func:`category_key`):
    an id in ``[0, cardinality)`` is its own row, any other id, one wider than 64 bits, and a
    cell that is not hex ("M") are hashed into the table with a stable hash (not Python's salted
    ``hash()``; TorchRec's and Criteo pipelines' way) where the field says
    ``out_of_range="hash"`` (:func:`criteo_field_specs`' default), and make the row malformed
    where it says ``"refuse"``.

    Malformed rows are reported with their line numbers and column. With ``on_error="skip"`` (the
    default: one bad line in a day-long log should not stop training) they are skipped and counted
    in `stats`; when no `stats` is passed, a :class:`SkippedRowsWarning` with the count and the
    first bad line is issued once the reader finishes or is closed. With ``on_error="raise"`` the
    first one raises :class:`MalformedRow`.

    Skipping has a limit: a file is not a training set if many of its rows are bad (a wrong
    delimiter, the wrong column order, a header). The share of bad rows among the rows read so
    far is judged every ``max(batch_size, BAD_SHARE_WINDOW)`` rows (blank lines are not rows) and
    at the end of the file; once it exceeds `max_bad_share` (default 0.01, 1%) the reader raises :class:`TooManyBadRows`
    naming the counts and the first bad row (file, row number and column). So a file whose rows
    are all bad fails within its first window, not after a day's log; batches yielded before the
    limit was passed stay yielded. A file in which no row is good raises TooManyBadRows
    whatever `max_bad_share` says (1.0 skips every bad row otherwise), and a file that holds no
    rows at all raises ValueError naming it: a training reader that yields nothing is an error.

    A `path` that is not an existing file, or an empty one, raises ValueError naming it when this
    is called, not at the first batch.
    """
    # Not a generator itself: bad arguments and a missing file are refused here, at the call,
    # not at the first next().
    max_bad_share = _check_reader_args(on_error, batch_size, max_bad_share)
    specs = list(specs) if specs is not None else criteo_field_specs()
    if len(specs) != N_CAT_CRITEO:
        raise bad_value("specs", f"{len(specs)} fields", f"{N_CAT_CRITEO} fields for Criteo's C1..C26")
    path = check_file(path, "Criteo TSV")
    size = path.stat().st_size
    if size == 0:
        raise _no_rows(path, "Criteo TSV")
    tally = _Tally(path.name, max_bad_share, batch_size, "row")
    return _read_tsv(path, size, specs, batch_size, on_error, progress, stats, tally)


def _read_tsv(path: Path, size: int, specs, batch_size: int, on_error: str, progress: bool,
              stats: ReadStats | None, tally: _Tally) -> Iterator[JaggedBatch]:
    own_stats = stats is None
    stats = stats if stats is not None else ReadStats()
    bar = progress_bar(size, path.name, progress, unit="B", unit_scale=True)
    try:
        yield from _tsv_batches(path, specs, batch_size, on_error, stats, tally, bar)
    finally:
        if own_stats:
            _warn_skipped(tally)


def _dense_value(j: int, tok) -> float:
    """Criteo's integer feature I{j+1} as the models take it, log1p(x) for x > 0, else 0 (empty: 0);
    both readers parse through here. A non-integer or one past float range is a ValueError (a
    malformed row)."""
    if tok is None or tok == "":
        return 0.0
    try:
        x = int(tok)
    except (ValueError, TypeError):
        raise ValueError(f"I{j + 1}={tok!r} is not an integer") from None
    if x > 1e308:  # log1p would raise OverflowError (not a float)
        raise ValueError(f"I{j + 1}={str(tok)[:20]!r}... is too large; expected an integer below 1e308")
    return math.log1p(x) if x > 0 else 0.0


def _tsv_row(cols: list[str], specs) -> tuple[int, list[float], list[int]]:
    """Parse one TSV row: (label, dense, rows of the categories); a ValueError names the column."""
    if len(cols) != 1 + N_DENSE_CRITEO + N_CAT_CRITEO:
        raise ValueError(f"{len(cols)} columns, expected {1 + N_DENSE_CRITEO + N_CAT_CRITEO}")
    try:
        lab = int(cols[0])
    except ValueError:
        lab = None
    if lab not in (0, 1):
        raise ValueError(f"label={cols[0][:40]!r}, expected 0 or 1")
    d = [_dense_value(j, tok) for j, tok in enumerate(cols[1:1 + N_DENSE_CRITEO])]
    return lab, d, [_cat_row(tok, s) for s, tok in zip(specs, cols[1 + N_DENSE_CRITEO:])]


def _tsv_batches(path: Path, specs, batch_size: int, on_error: str, stats: ReadStats, tally: _Tally,
                 bar) -> Iterator[JaggedBatch]:
    labels, dense, cats = [], [], []
    try:
        fh = open(path, "rb")
    except OSError as e:  # checked at the call, but gone or unreadable by now
        bar.close()
        raise bad_value("path", str(path), f"a readable Criteo TSV file ({e.strerror or e})") from None
    with fh:
        for lineno, raw in enumerate(fh, 1):
            bar.update(len(raw))
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if not line.strip():
                continue
            tally.seen += 1
            try:
                lab, d, c = _tsv_row(line.split("\t"), specs)
            except ValueError as e:
                _bad_row(f"{path.name} line {lineno}: {e}", on_error, stats, tally, bar)
            else:
                labels.append(lab)
                dense.append(d)
                cats.append(c)
                stats.rows += 1
            tally.judge(bar)
            if len(labels) == batch_size:
                yield _criteo_rows_to_batch(specs, labels, dense, cats)
                labels, dense, cats = [], [], []
    if tally.seen == 0:
        bar.close()
        raise _no_rows(path, "Criteo TSV")
    tally.judge(bar, final=True)
    bar.close()
    if labels:
        yield _criteo_rows_to_batch(specs, labels, dense, cats)


def read_criteo_parquet(path: str | os.PathLike, specs: Sequence[FieldSpec] | None = None, *,
                        batch_size: int = 4096, on_error: str = "skip", max_bad_share: float = 0.01,
                        progress: bool = True, stats: ReadStats | None = None) -> Iterator[JaggedBatch]:
    """Stream batches from a Parquet file with columns label, I1..I13, C1..C26.

    Categorical columns may hold integers, whole floats or strings; nulls and empty strings are
    missing values. A category lands on the same row whether it is stored as an integer, a hex
    string or in a Criteo TSV (:func:`category_key` states the rule): ``7``, ``"7"`` and
    ``"0x7"`` are id 7, and so is ``"7"`` in a TSV. Strings that are not hex ("M", "technician")
    are hashed with a stable 64-bit hash (BLAKE2b of the UTF-8 bytes, not Python's salted
    ``hash()``), as TorchRec's and Criteo pipelines hash categories, into fields with
    ``out_of_range="hash"`` (:func:`criteo_field_specs`' default); a field with ``"refuse"``
    takes only ids in its range, and a row with any other value is malformed.

    Rows whose label is not 0/1 or whose ids do not parse are reported by row number (1-based) and
    column and skipped or refused as with :func:`read_criteo_tsv` (skipped by default; without
    `stats`, skipped rows are reported in a :class:`SkippedRowsWarning`). Float columns are read as
    integers only where they hold whole numbers: a row with, say, I1 = 1.7 or C1 = 3.9 is
    malformed, as "1.7" is in a TSV.

    Skipping has a limit: a file is not a training set if many of its rows are bad (a wrong
    delimiter, the wrong column order, a header). The share of bad rows among the rows read so
    far is judged every ``max(batch_size, BAD_SHARE_WINDOW)`` rows and at the end of the file;
    once it exceeds `max_bad_share` (default 0.01, 1%) the reader raises :class:`TooManyBadRows`
    naming the counts and the first bad row (file, row number and column). So a file whose rows
    are all bad fails within its first window, not after a day's log; batches yielded before the
    limit was passed stay yielded. A file in which no row is good raises TooManyBadRows
    whatever `max_bad_share` says (1.0 skips every bad row otherwise), and a file that holds no
    rows at all raises ValueError naming it: a training reader that yields nothing is an error.

    A `path` that is not an existing Parquet file, or one without rows (a schema only), raises
    ValueError naming it when this is called, not at the first batch.
    """
    # Not a generator itself: bad arguments, a missing file and one that is not Parquet are
    # refused here, at the call, not at the first next().
    max_bad_share = _check_reader_args(on_error, batch_size, max_bad_share)
    specs = list(specs) if specs is not None else criteo_field_specs()
    path = check_file(path, "Parquet")
    names = ["label"] + [f"I{i + 1}" for i in range(N_DENSE_CRITEO)] + [s.name for s in specs]
    pf = open_parquet(path)
    try:
        have = set(pf.schema_arrow.names)
        num_rows = pf.metadata.num_rows
    finally:
        pf.close()  # reopened when the batches are read: a reader never iterated holds no file
    for n in names:
        if n not in have:
            raise ValueError(f"field spec does not match the data: column {n!r} is missing from {path.name}")
    if num_rows == 0:
        raise _no_rows(path, "Parquet")
    tally = _Tally(path.name, max_bad_share, batch_size, "row")
    return _read_parquet(path, specs, names, num_rows, batch_size, on_error, progress, stats, tally)


def _read_parquet(path: Path, specs, names, num_rows: int, batch_size: int, on_error: str, progress: bool,
                  stats: ReadStats | None, tally: _Tally) -> Iterator[JaggedBatch]:
    own_stats = stats is None
    stats = stats if stats is not None else ReadStats()
    bar = progress_bar(num_rows, path.name, progress, unit="rows")
    try:
        yield from _parquet_batches(path, specs, names, batch_size, on_error, stats, tally, bar)
    finally:
        if own_stats:
            _warn_skipped(tally)


def _record_batches(path: Path, names, batch_size: int):
    """Yield the record batches of `path`, naming the file if pyarrow cannot read one."""
    import pyarrow as pa

    with open_parquet(path) as pf:
        it = pf.iter_batches(batch_size=batch_size, columns=names)
        while True:
            try:
                rb = next(it)
            except StopIteration:
                return
            except (pa.ArrowException, OSError) as exc:
                raise not_parquet(path, exc) from None
            yield rb


def _not_whole(rb, names) -> dict[int, str]:
    """Row -> problem for rows of record batch `rb` with a float that is not a whole number in
    I1..I13 or a categorical column (1.7 would be truncated to 1); vectorised, float columns only."""
    import pyarrow as pa

    bad: dict[int, str] = {}
    for name in names[1:]:
        col = rb.column(name)
        if not pa.types.is_floating(col.type):
            continue
        a = col.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)  # nulls read as NaN
        with np.errstate(invalid="ignore"):
            rows = np.flatnonzero(~(np.isfinite(a) & (a == np.floor(a))))
        if rows.size and col.null_count:
            rows = rows[~col.is_null().to_numpy(zero_copy_only=False)[rows]]  # a null is a missing value
        kind = "an integer" if name[0] == "I" and name[1:].isdigit() else "an integer or hex id"
        for i in rows.tolist():
            bad.setdefault(i, f"{name}={a[i].item()!r} is not accepted; expected {kind}")
    return bad


def _parquet_row(cols, i: int, specs, not_whole) -> tuple[int, list[float], list[int]]:
    """Parse row `i` of a record batch: (label, dense, rows of the categories); a ValueError
    names the column."""
    lab = cols["label"][i]
    if isinstance(lab, bool) or lab not in (0, 1) or isinstance(lab, (str, bytes)):
        raise ValueError(f"label={lab!r}, expected 0 or 1")
    if not_whole and i in not_whole:
        raise ValueError(not_whole[i])
    d = [_dense_value(j, cols[f"I{j + 1}"][i]) for j in range(N_DENSE_CRITEO)]
    return int(lab), d, [_cat_row(cols[s.name][i], s) for s in specs]


def _parquet_batches(path: Path, specs, names, batch_size: int, on_error: str, stats: ReadStats,
                     tally: _Tally, bar) -> Iterator[JaggedBatch]:
    row0 = 0
    for rb in _record_batches(path, names, batch_size):
        cols = rb.to_pydict()
        n = rb.num_rows
        not_whole = _not_whole(rb, names)
        labels, dense, cats = [], [], []
        for i in range(n):
            try:
                lab, d, c = _parquet_row(cols, i, specs, not_whole)
            except (ValueError, TypeError) as e:
                _bad_row(f"{path.name} row {row0 + i + 1}: {e}", on_error, stats, tally, bar)
                continue
            labels.append(lab)
            dense.append(d)
            cats.append(c)
        stats.rows += len(labels)
        tally.seen += n
        row0 += n
        bar.update(n)
        tally.judge(bar)
        if labels:
            yield _criteo_rows_to_batch(specs, labels, dense, cats)
    if tally.seen == 0:
        bar.close()
        raise _no_rows(path, "Parquet")
    tally.judge(bar, final=True)
    bar.close()


def _criteo_dense_ints(k: int, b: JaggedBatch, round_dense: bool) -> np.ndarray:
    """Check batch `k` can be written as Criteo TSV without losing anything; return its dense ints."""
    arg = f"batches[{k}]"
    if b.n_fields != N_CAT_CRITEO:
        raise bad_value(f"{arg}.n_fields", b.n_fields, f"{N_CAT_CRITEO} (Criteo has C1..C26)")
    if b.dense.ndim != 2 or b.dense.shape[1] != N_DENSE_CRITEO:
        raise bad_value(f"{arg}.dense", f"shape {b.dense.shape}", f"shape (B, {N_DENSE_CRITEO}) (Criteo has I1..I13)")
    lens = b.lengths.reshape(b.n_fields, b.batch_size)
    if lens.size and lens.max() > 1:
        f, i = np.unravel_index(int(np.argmax(lens)), lens.shape)
        raise bad_value(f"{arg}", f"field {b.keys[f]!r} sample {i} with {int(lens[f, i])} ids",
                        "single-hot batches (Criteo TSV holds one id per field and row; empty bags are fine)")
    if b.values.size and b.values.min() < 0:
        f = int(np.searchsorted(b.offsets, int(np.argmin(b.values)), side="right") - 1) // b.batch_size
        raise bad_value(f"{arg}.values", int(b.values.min()), f"ids >= 0 (field {b.keys[f]!r})")
    bad = (b.labels != 0) & (b.labels != 1)
    if bad.any():
        raise bad_value(f"{arg}.labels", float(b.labels[np.argmax(bad)]), "0 or 1")
    d = b.dense.astype(np.float64)
    if not np.isfinite(d).all():
        raise bad_value(f"{arg}.dense", float(d[~np.isfinite(d)][0]), "finite values")
    r = np.round(d)
    if not round_dense and (r != d).any():
        i, j = np.argwhere(r != d)[0]
        raise bad_value(f"{arg}.dense[{i}, {j}]", float(d[i, j]),
                        "integers (Criteo's I1..I13 are counts; pass round_dense=True to round)")
    return r.astype(np.int64)


def write_criteo_tsv(batches: Iterable[JaggedBatch], path: str | os.PathLike, *, overwrite: bool = False,
                     round_dense: bool = False) -> int:
    """Write single-hot batches as Criteo TSV (label, I1..I13 integers, C1..C26 hex ids); return rows.

    Nothing is lost silently: a multi-hot bag (Criteo holds one id per field and row), a label
    other than 0/1, a negative id, a non-finite dense value or, unless ``round_dense=True``, a
    non-integer one raises ValueError naming the batch and what is accepted, and `path` is left
    untouched. Negative integers are written as they are (real Criteo's I2 holds some; the readers
    map dense values <= 0 to 0). An empty bag is written as an empty column (a missing value).
    """
    from labkit.core.atomic import atomic_open
    n = 0
    with atomic_open(path, "w", overwrite=overwrite) as fh:
        for k, b in enumerate(batches):
            dense = _criteo_dense_ints(k, b, round_dense)
            lens = b.lengths.reshape(b.n_fields, b.batch_size)
            for i in range(b.batch_size):
                toks = [str(int(b.labels[i]))] + [str(int(x)) for x in dense[i]]
                for f in range(b.n_fields):
                    if lens[f, i] == 0:
                        toks.append("")
                    else:
                        toks.append(format(int(b.values[b.offsets[f * b.batch_size + i]]), "x"))
                fh.write("\t".join(toks) + "\n")
                n += 1
    return n
