"""Criteo TSV and Parquet readers (and a TSV writer): rows to batches, bad rows counted, skipped or refused."""

from __future__ import annotations

import hashlib
import math
import numbers
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from labkit.core.errors import LabkitError, bad_value, check_choice, check_file, check_range, not_parquet, open_parquet
from labkit.core.progress import progress_bar
from labkit.recsys.data.batch import JaggedBatch, check_ids
from labkit.recsys.data.specs import N_CAT_CRITEO, N_DENSE_CRITEO, FieldSpec, criteo_field_specs


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
