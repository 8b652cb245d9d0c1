"""Embedding tables and their layout: which table reads which field, and in what order outputs sit.

Per-field and packed embedding stages share this layout, so their outputs are the same tensor
(``[B, sum of dims]``, tables in canonical order) and one dense network sits on either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from labkit.core.errors import check_choice
from labkit.recsys.data import FieldSpec

GROUP_BY = ("dim", "field")


@dataclass(frozen=True)
class Table:
    """One embedding table: it reads field `feature` of the batch and pools `dim`-wide rows."""

    name: str
    feature: int
    cardinality: int
    dim: int
    pooling: str
    wide: bool = False

    @property
    def key(self) -> tuple:
        """Packing key: tables with equal keys go into one packed table."""
        return (not self.wide, self.dim, self.pooling)


def tables_for(specs: Sequence[FieldSpec], *, wide: bool = False, deep: bool = True) -> list[Table]:
    """Return the tables a model over `specs` needs: dim-1 'wide' tables and/or 'deep' tables."""
    out = []
    if wide:
        out += [Table(f"wide:{s.name}", i, s.cardinality, 1, "sum", True) for i, s in enumerate(specs)]
    if deep:
        out += [Table(s.name, i, s.cardinality, s.dim, s.pooling) for i, s in enumerate(specs)]
    return out


def canonical_order(tables: Sequence[Table]) -> list[int]:
    """Table indices sorted by packing key (wide first, then by dim), stable within a key."""
    return sorted(range(len(tables)), key=lambda i: tables[i].key)


def plan_groups(tables: Sequence[Table], group_by: str = "dim") -> list[list[int]]:
    """Return groups of table indices in canonical order: one group per key ('dim') or per table."""
    check_choice("group_by", group_by, GROUP_BY)
    order = canonical_order(tables)
    if group_by == "field":
        return [[i] for i in order]
    groups: list[list[int]] = []
    for i in order:
        if groups and tables[groups[-1][0]].key == tables[i].key:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def column_offsets(tables: Sequence[Table]) -> dict[int, int]:
    """Map table index -> first output column, in canonical order."""
    col, out = 0, {}
    for i in canonical_order(tables):
        out[i] = col
        col += tables[i].dim
    return out


def init_blocks(table_index: int, table: Table, seed: int = 0, block_rows: int | None = None):
    """Yield the seeded initial rows of one table (uniform in +-0.05) in order, `block_rows` rows at a
    time (all at once if None): one generator, so the values do not depend on the block size."""
    rng = np.random.default_rng([seed, 2000 + table_index])
    n = int(table.cardinality)
    step = n if block_rows is None else max(1, int(block_rows))
    for a in range(0, n, step):
        w = rng.random((min(step, n - a), table.dim), dtype=np.float32)
        w -= 0.5
        w *= 0.1
        yield w


def init_table(table_index: int, table: Table, seed: int = 0) -> np.ndarray:
    """Return the seeded initial rows of one table (uniform in +-0.05), the same for every stage."""
    return next(init_blocks(table_index, table, seed))
