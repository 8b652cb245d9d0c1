"""Edge-list readers (CSV, Parquet) that stream chunks into the out-of-core CSR builder.

Each reader returns a *replayable* chunk source (call it again for the second pass), checks
every chunk as it goes and names the file row of the first bad one, so a malformed line fails
with ``edges.csv row 1207: ...`` (``line 1208 (row 1207)`` for a wrong number of fields) rather
than a NumPy traceback. Edge weights, when a column holds them, are returned apart from the
topology (as AliGraph stores attributes apart) and carried into the CSR's ``weights``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from labkit.core.errors import BadInput, bad_value, check_file, check_range, not_parquet, open_parquet
from labkit.graph.csr import CSR, _too_big, build_csr_chunked, check_num_nodes

Chunks = Callable[[], Iterator[tuple[np.ndarray, ...]]]  # (src, dst) chunks, or (src, dst, weights)


def csv_edge_chunks(path: str | Path, *, chunk_rows: int = 1 << 20, src: str = "src", dst: str = "dst",
                    weight: str | None = None, num_nodes: int | None = None) -> Chunks:
    """Return a replayable source of (src, dst) int64 chunks read from a CSV with a header row.

    With `weight` (a column name) the chunks are (src, dst, weights) with float64 weights. A row
    whose ids are missing, not integers, negative or >= num_nodes, or whose weight is not a finite
    number >= 0, raises ValueError naming the file, the row number (1 = first data row) and the value;
    a line with more or fewer fields than the header names its line number too (1 = the header).
    Header names are read as the data are, spaces around them stripped (``src, dst``) and a UTF-8
    byte-order mark (as Excel writes) skipped; a header naming a column it reads twice is refused.
    """
    import pandas as pd

    path = check_file(path, "CSV")
    check_range("chunk_rows", chunk_rows, 1, integer=True)
    if num_nodes is not None:
        num_nodes = check_num_nodes(num_nodes, 1)
    cols = _columns(src, dst, weight)
    names = _csv_names(path, cols)
    accepted = "an integer id >= 0" + (f" and < {num_nodes}" if num_nodes else " and < 2**63")

    def chunks():
        row0 = 1
        fields = _csv_field_checks(path)
        checked, bad_line = 0, None
        # The header's own names are replaced by the stripped ones the header check read.
        reader = lambda: pd.read_csv(path, header=0, names=names, usecols=cols, dtype=str,  # noqa: E731
                                     chunksize=chunk_rows, keep_default_na=False, index_col=False,
                                     encoding="utf-8-sig")
        for df in _decoded(reader, path):
            while bad_line is None and checked < row0 - 1 + len(df):
                checked, bad_line = next(fields, (float("inf"), None))
            errors = []  # (position in chunk, rank within the row, message): the first one is raised
            if bad_line is not None and bad_line[0] < row0 + len(df):
                row, line, n, want = bad_line
                errors.append((row - row0, 0, f"{path.name} line {line} (row {row}): {n} field{'s' * (n != 1)} "
                                              f"is not accepted; expected {want} fields, as in the header"))
            out = []
            for rank, col in enumerate(cols, 1):
                vals = pd.to_numeric(df[col].str.strip(), errors="coerce")
                if col == weight:
                    vals = vals.to_numpy(np.float64)
                    bad = ~np.isfinite(vals) | (vals < 0)
                    what = None  # set for the bad row below: not a finite number, or negative
                else:
                    # Ids past int64 (e.g. "1e20") would wrap to negatives in the cast below.
                    bad = vals.isna() | (vals % 1 != 0) | (vals < 0) | (vals >= _ID_LIMIT)
                    if num_nodes is not None:
                        bad |= vals >= num_nodes
                    bad, what = np.asarray(bad), accepted
                    vals = None if bad.any() else vals.to_numpy(np.int64)
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    if what is None:
                        what = "a finite number" if not np.isfinite(vals[i]) else "a finite number >= 0"
                    errors.append((i, rank, f"{path.name} row {row0 + i}: {col}={df[col].iloc[i]!r} is not accepted; "
                                            f"expected {what}"))
                out.append(vals)
            if errors:
                raise BadInput(min(errors)[2])
            row0 += len(df)
            yield tuple(out)
    return chunks


#: Ids at or past this do not fit an int64 node id.
_ID_LIMIT = float(2**63)


def _columns(src: str, dst: str, weight: str | None) -> list[str]:
    """Return the columns to read, refusing one column named twice."""
    if dst == src:
        raise bad_value("dst", dst, "a column other than src")
    if weight is None:
        return [src, dst]
    if weight in (src, dst):
        raise bad_value("weight", weight, "a column other than src and dst")
    return [src, dst, weight]


def _csv_field_checks(path: Path, block: int = 1 << 24) -> Iterator[tuple]:
    """Check every line of a CSV has the header's number of fields, counting separators with NumPy.

    Yields (data rows checked so far, None) block by block; at the first bad line yields
    (its row, (row, line, fields, header fields)) and stops. Rows are numbered like pandas' (blank lines
    skipped, 1 = first data row), lines like an editor's (1 = the header); quoted commas and
    newlines are not separators, a lone carriage return ends a line (as pandas reads them).
    """
    want, rows, line, tail = None, 0, 1, b""
    with open(path, "rb") as fh:
        while True:
            data = fh.read(block)
            eof, buf = not data, tail + data
            if not buf:
                return
            b = np.frombuffer(buf, np.uint8)
            brk = b == 10
            if b"\r" in buf:
                lone = b == 13
                lone[:-1] &= ~brk[1:]
                lone[-1] &= eof  # a final \r may be followed by \n in the next block
                brk |= lone
            sep = b == 44
            if b'"' in buf:  # quoted commas and newlines do not count
                out = np.bitwise_xor.accumulate(b == 34) == 0
                sep &= out
                ends = np.flatnonzero(brk & out)
            else:
                ends = np.flatnonzero(brk)
            if eof and (not len(ends) or ends[-1] != len(b) - 1):
                ends = np.append(ends, len(b))  # the last line has no newline
            if not len(ends):
                tail = buf
                continue
            counts = np.diff(np.searchsorted(np.flatnonzero(sep), ends), prepend=0) + 1
            j0 = 0
            if want is None:
                want, j0 = int(counts[0]), 1
            blanks = 0
            for j in np.flatnonzero(counts[j0:] != want) + j0:
                lo = int(ends[j - 1]) + 1 if j else 0
                if counts[j] == 1 and not buf[lo:ends[j]].strip(b" \t\r"):
                    blanks += 1  # pandas skips blank lines
                    continue
                row = rows + j - j0 - blanks + 1
                yield row, (row, line + int(np.count_nonzero(brk[:lo])), int(counts[j]), want)
                return
            rows += len(ends) - j0 - blanks
            line += int(np.count_nonzero(brk[:ends[-1] + 1]))
            yield rows, None
            if eof:
                return
            tail = buf[ends[-1] + 1:]


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> ValueError:
    return bad_value("path", str(path), f"a UTF-8 CSV file with a header row ({path.name} is not a UTF-8 CSV: "
                     f"byte {exc.object[exc.start:exc.start + 1]!r} does not decode)")


def _named_errors(open_items: Callable[[], Iterator], errors, name_error: Callable[[Exception], ValueError]):
    """Yield the items of ``open_items()``; an error of type `errors`, raised opening it or at any item,
    becomes ``name_error(exc)`` (an error that names the file)."""
    try:
        it = iter(open_items())
    except errors as exc:
        raise name_error(exc) from None
    while True:
        try:
            item = next(it)
        except StopIteration:
            return
        except errors as exc:
            raise name_error(exc) from None
        yield item


def _decoded(open_reader: Callable[[], Iterator], path: Path):
    """Yield the chunks of ``open_reader()``, turning a decode error in any block into one naming the file."""
    return _named_errors(open_reader, UnicodeDecodeError, lambda exc: _not_utf8(path, exc))


def _csv_names(path: Path, cols: list[str]) -> list[str]:
    """Return the column names to read `path` with: its header's, stripped, BOM skipped (as Excel writes it).

    Refuses a header that lacks one of `cols` or names one of them twice (which one would be
    read?), naming the file; other repeated or blank names get placeholders, as pandas gives them.
    """
    import csv

    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            line = fh.readline()
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from None
    header = [h.strip() for h in next(csv.reader([line]), [])]
    missing = [c for c in cols if c not in header]
    if missing:
        raise bad_value("columns", missing, f"columns present in {path.name}'s header {header}")
    twice = [c for c in cols if header.count(c) > 1]
    if twice:
        raise bad_value("path", str(path), f"a CSV whose header names each column once ({path.name}'s header "
                        f"{header} names {twice[0]!r} {header.count(twice[0])} times)")
    names, seen = [], set()
    for i, h in enumerate(header):
        names.append(h if h and h not in seen else f"\x00unnamed {i}")  # never one of cols (those are unique)
        seen.add(h)
    return names


def parquet_edge_chunks(path: str | Path, *, batch_rows: int = 1 << 20, src: str = "src", dst: str = "dst",
                        weight: str | None = None, num_nodes: int | None = None) -> Chunks:
    """Return a replayable source of (src, dst) chunks read batch by batch from a Parquet file.

    With `weight` (a column name) the chunks are (src, dst, weights), float weights kept as stored
    and others made float64. A null, negative or too large id (>= num_nodes when given), or a
    weight that is null or not finite, raises ValueError naming the file and the row number
    (1 = first row), as csv_edge_chunks does.
    """
    path = check_file(path, "Parquet")
    check_range("batch_rows", batch_rows, 1, integer=True)
    if num_nodes is not None:
        num_nodes = check_num_nodes(num_nodes, 1)
    cols = _columns(src, dst, weight)
    names = open_parquet(path).schema_arrow.names
    missing = [c for c in cols if c not in names]
    if missing:
        raise bad_value("columns", missing, f"columns present in {path.name}: {names}")
    accepted = "an integer id >= 0" + (f" and < {num_nodes}" if num_nodes else " and < 2**63")

    def chunks():
        row0 = 1
        for batch in _arrow_errors(path, lambda: open_parquet(path).iter_batches(batch_size=batch_rows,
                                                                                 columns=cols)):
            out = []
            for name in cols:
                a = batch.column(name)
                kind = "a number" if name == weight else "an integer id"
                if a.null_count:
                    i = int(np.flatnonzero(a.is_null().to_numpy(zero_copy_only=False))[0])
                    raise BadInput(f"{path.name} row {row0 + i}: {name} is null; expected {kind}")
                a = a.to_numpy(zero_copy_only=False)
                if name == weight:
                    if a.dtype.kind not in "iuf":
                        raise bad_value(name, a.dtype, "a numeric column of edge weights")
                    a = a if a.dtype.kind == "f" else a.astype(np.float64)
                    bad, what = ~np.isfinite(a) | (a < 0), None  # what: set for the bad row below
                else:
                    if a.dtype.kind not in "iu":
                        raise bad_value(name, a.dtype, "an integer column of node ids")
                    bad, what = a < 0, accepted
                    if num_nodes is not None:
                        bad |= a >= num_nodes
                    elif a.dtype == np.uint64:
                        bad |= a > np.iinfo(np.int64).max
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    if what is None:
                        what = "a finite number" if not np.isfinite(a[i]) else "a finite number >= 0"
                    raise BadInput(f"{path.name} row {row0 + i}: {name}={a[i].item()!r} is not accepted; "
                                     f"expected {what}")
                out.append(a)
            row0 += batch.num_rows
            yield tuple(out)
    return chunks


#: What pyarrow raises, past its own ArrowException, on a corrupt file: a damaged footer can hold
#: column names that are not UTF-8, or offsets past the end of the file.
_PARQUET_ERRORS = (OSError, UnicodeDecodeError, EOFError)


def _arrow_errors(path: Path, open_batches: Callable[[], Iterator]):
    """Yield the batches of ``open_batches()``, naming the file if pyarrow cannot read one."""
    import pyarrow as pa

    return _named_errors(open_batches, _PARQUET_ERRORS + (pa.ArrowException,), lambda exc: not_parquet(path, exc))


#: Types :func:`read_edge_attributes` reads a column as.
ATTR_TYPES = ("int32", "int64", "float32", "float64", "str")


def read_edge_attributes(path: str | Path, columns: dict[str, str]) -> dict[str, np.ndarray]:
    """Return {column: array of its declared type} for typed edge attribute columns of a .csv or .parquet file.

    `columns` maps column names to one of :data:`ATTR_TYPES`. Row i of every array belongs to edge
    id i, as the builders number edges (``CSR.eid``, ``Graph.add_edges(..., attrs=)``), so the
    attributes are held apart from the topology and looked up by edge id. A value that is missing
    or does not parse as its type (``"x"`` as an int, ``2.5`` as an int, an int past the type's
    range) raises ValueError naming the file, the row (1 = first data row), the column and the value.
    """
    path = Path(path)
    if not isinstance(columns, dict) or not columns:
        raise bad_value("columns", columns, "a non-empty dict of column name -> " + " / ".join(ATTR_TYPES))
    for name, kind in columns.items():
        if kind not in ATTR_TYPES:
            raise bad_value(f"columns[{name!r}]", kind, "one of " + ", ".join(ATTR_TYPES))
    cols = list(columns)
    if path.suffix == ".csv":
        import pandas as pd
        path = check_file(path, "CSV")
        names = _csv_names(path, cols)
        df = next(_decoded(lambda: iter([pd.read_csv(path, header=0, names=names, usecols=cols, dtype=str,
                                                     keep_default_na=False, index_col=False,
                                                     encoding="utf-8-sig")]), path))
        return {c: _typed(path, c, columns[c], df[c].to_numpy(object), text=True) for c in cols}
    if path.suffix in (".parquet", ".pq"):
        path = check_file(path, "Parquet")
        have = open_parquet(path).schema_arrow.names
        missing = [c for c in cols if c not in have]
        if missing:
            raise bad_value("columns", missing, f"columns present in {path.name}: {have}")
        table = next(_arrow_errors(path, lambda: iter([open_parquet(path).read(columns=cols)])))
        out = {}
        for c in cols:
            a = table.column(c)
            if a.null_count:
                i = int(np.flatnonzero(a.is_null().to_numpy(zero_copy_only=False))[0])
                raise BadInput(f"{path.name} row {i + 1}: {c} is null; expected a value of type {columns[c]}")
            out[c] = _typed(path, c, columns[c], a.to_numpy(zero_copy_only=False), text=False)
        return out
    raise bad_value("path", str(path), "a .csv or .parquet file")


def _typed(path: Path, col: str, kind: str, raw: np.ndarray, *, text: bool) -> np.ndarray:
    """Return `raw` (a CSV column's strings when `text`, else a Parquet column) as `kind`; raise at a bad row."""
    import pandas as pd

    if kind == "str":
        if not text and raw.dtype.kind not in "OUS":
            raise bad_value(col, f"a column of dtype {raw.dtype}", "a string column for type str")
        return raw.astype(str)
    if text:
        vals = pd.to_numeric(pd.Series(raw).str.strip(), errors="coerce").to_numpy(np.float64)
        bad = np.isnan(vals)
    else:
        if raw.dtype.kind not in "iuf":
            raise bad_value(col, f"a column of dtype {raw.dtype}", f"a numeric column for type {kind}")
        vals, bad = raw, np.zeros(len(raw), bool)
    dtype = np.dtype(kind)
    if dtype.kind == "i":
        lim = np.iinfo(dtype)
        with np.errstate(invalid="ignore"):
            bad = bad | ~np.isfinite(vals) | (vals % 1 != 0) | (vals < lim.min) | (vals > lim.max)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        shown = raw[i] if text else raw[i].item()
        raise BadInput(f"{path.name} row {i + 1}: {col}={shown!r} is not accepted; expected a value of type {kind}")
    if text and dtype.kind == "i" and len(vals) and np.abs(vals).max() >= 2**53:
        # float64 holds integers past 2**53 inexactly: parse those columns from the text itself.
        try:
            return pd.Series(raw).str.strip().astype(dtype).to_numpy()
        except ValueError as exc:
            raise bad_value(col, "integers past 2**53 not written as plain digits",
                            f"plain integer digits for a {kind} column ({path.name}: {exc})") from None
    return vals.astype(dtype)


def count_nodes(chunks: Chunks) -> int:
    """Return max id + 1 over a chunk source (one extra pass, for files without a node count)."""
    top = -1
    for s, d, *_ in chunks():
        if len(s):
            top = max(top, int(s.max()), int(d.max()))
    return top + 1


def build_from_file(path: str | Path, num_nodes: int | None = None, *, reverse: bool = False,
                    weight: str | None = None, **build_kw) -> CSR:
    """Return the CSR (or with `reverse`, the CSC) of the edges in a .csv or .parquet file, out of core.

    `weight` names a column of edge weights: the result then has ``weights`` (and ``eid``) as
    ``build_csr(..., weights=)`` gives them, each weight following its edge under `reverse`.
    """
    path = Path(path)
    if num_nodes is not None:
        num_nodes = check_num_nodes(num_nodes, 1)
    if path.suffix == ".csv":
        reader = csv_edge_chunks
    elif path.suffix in (".parquet", ".pq"):
        reader = parquet_edge_chunks
    else:
        raise bad_value("path", str(path), "a .csv or .parquet file")
    chunks = reader(path, num_nodes=num_nodes, weight=weight)
    if reverse:
        fwd = chunks
        chunks = lambda: ((c[1], c[0], *c[2:]) for c in fwd())  # noqa: E731
    if num_nodes is None:  # counted over the ids alone: the weights are read (and checked) by the build
        n = count_nodes(reader(path) if weight is not None else chunks)
        why = _too_big(n)
        if why is not None:
            raise BadInput(f"{path.name}: node id {n - 1} is not accepted; expected node ids a CSR can hold in "
                             f"memory: that id implies {why} (relabel ids to 0..n-1)")
    else:
        n = num_nodes
    return build_csr_chunked(chunks, max(n, 1), weighted=weight is not None, **build_kw)
