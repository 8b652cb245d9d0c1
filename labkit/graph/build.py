"""Edge-list readers (CSV, Parquet) that stream chunks into the out-of-core CSR builder.

Each reader returns a *replayable* chunk source (call it again for the second pass), checks
every chunk as it goes and names the file row of the first bad one, so a malformed line fails
with ``edges.csv row 1207: ...`` rather than a NumPy traceback. Edge weights, when a column
holds them, are returned apart from the topology (as AliGraph stores attributes apart).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from labkit.core.errors import bad_value, check_range
from labkit.graph.csr import CSR, build_csr_chunked, check_num_nodes

Chunks = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]


def csv_edge_chunks(path: str | Path, *, chunk_rows: int = 1 << 20, src: str = "src", dst: str = "dst",
                    num_nodes: int | None = None) -> Chunks:
    """Return a replayable source of (src, dst) int64 chunks read from a CSV with a header row.

    A row whose ids are missing, not integers, negative or >= num_nodes raises ValueError
    naming the file, the row number (1 = first data row) and the value.
    """
    import pandas as pd

    path = _existing_file(path, "CSV")
    check_range("chunk_rows", chunk_rows, 1, integer=True)
    if num_nodes is not None:
        num_nodes = check_num_nodes(num_nodes, 1)

    def chunks():
        row0 = 1
        reader = pd.read_csv(path, usecols=[src, dst], dtype=str, chunksize=chunk_rows,
                             keep_default_na=False)
        for df in reader:
            out = []
            for col in (src, dst):
                vals = pd.to_numeric(df[col].str.strip(), errors="coerce")
                # Ids past int64 (e.g. "1e20") would wrap to negatives in the cast below.
                bad = vals.isna() | (vals % 1 != 0) | (vals < 0) | (vals >= _ID_LIMIT)
                if num_nodes is not None:
                    bad |= vals >= num_nodes
                if bad.any():
                    i = int(np.flatnonzero(bad.to_numpy())[0])
                    accepted = "an integer id >= 0" + (f" and < {num_nodes}" if num_nodes else " and < 2**63")
                    raise ValueError(f"{path.name} row {row0 + i}: {col}={df[col].iloc[i]!r} is not accepted; "
                                     f"expected {accepted}")
                out.append(vals.to_numpy(np.int64))
            row0 += len(df)
            yield out[0], out[1]
    return _checked_header(path, [src, dst], chunks)


#: Ids at or past this do not fit an int64 node id.
_ID_LIMIT = float(2**63)


def _existing_file(path: str | Path, kind: str) -> Path:
    """Return `path` as a Path if it names an existing regular file, else raise naming it."""
    path = Path(path)
    if not path.exists():
        raise bad_value("path", str(path), f"an existing {kind} file")
    if not path.is_file():
        raise bad_value("path", str(path), f"a {kind} file, not a folder" if path.is_dir() else f"a {kind} file")
    return path


def _checked_header(path: Path, cols: list[str], chunks: Chunks) -> Chunks:
    with open(path) as fh:
        header = [h.strip() for h in fh.readline().rstrip("\n").split(",")]
    missing = [c for c in cols if c not in header]
    if missing:
        raise bad_value("columns", missing, f"columns present in {path.name}'s header {header}")
    return chunks


def parquet_edge_chunks(path: str | Path, *, batch_rows: int = 1 << 20, src: str = "src",
                        dst: str = "dst") -> Chunks:
    """Return a replayable source of (src, dst) chunks read batch by batch from a Parquet file."""
    import pyarrow.parquet as pq

    path = _existing_file(path, "Parquet")
    check_range("batch_rows", batch_rows, 1, integer=True)
    names = pq.ParquetFile(path).schema_arrow.names
    missing = [c for c in (src, dst) if c not in names]
    if missing:
        raise bad_value("columns", missing, f"columns present in {path.name}: {names}")

    def chunks():
        row0 = 1
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=[src, dst]):
            cols = []
            for name in (src, dst):
                a = batch.column(name)
                if a.null_count:
                    i = int(np.flatnonzero(a.is_null().to_numpy(zero_copy_only=False))[0])
                    raise ValueError(f"{path.name} row {row0 + i}: {name} is null; expected an integer id")
                cols.append(a.to_numpy(zero_copy_only=False))
            for name, a in zip((src, dst), cols):
                if a.dtype.kind not in "iu":
                    raise bad_value(name, a.dtype, "an integer column of node ids")
            row0 += batch.num_rows
            yield cols[0], cols[1]
    return chunks


def count_nodes(chunks: Chunks) -> int:
    """Return max id + 1 over a chunk source (one extra pass, for files without a node count)."""
    top = -1
    for s, d in chunks():
        if len(s):
            top = max(top, int(s.max()), int(d.max()))
    return top + 1


def build_from_file(path: str | Path, num_nodes: int | None = None, *, reverse: bool = False,
                    **build_kw) -> CSR:
    """Return the CSR (or with `reverse`, the CSC) of the edges in a .csv or .parquet file, out of core."""
    path = Path(path)
    if num_nodes is not None:
        num_nodes = check_num_nodes(num_nodes, 1)
    if path.suffix == ".csv":
        chunks = csv_edge_chunks(path, num_nodes=num_nodes)
    elif path.suffix in (".parquet", ".pq"):
        chunks = parquet_edge_chunks(path)
    else:
        raise bad_value("path", str(path), "a .csv or .parquet file")
    if reverse:
        fwd = chunks
        chunks = lambda: ((d, s) for s, d in fwd())  # noqa: E731
    n = count_nodes(chunks) if num_nodes is None else num_nodes
    return build_csr_chunked(chunks, max(n, 1), **build_kw)
