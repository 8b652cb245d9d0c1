"""The bytes CaliEX's cache plans hold while its caches fill (the plans themselves are core's).

CaliEX ranks neighbour lists by the disk pages their caching spares
(:func:`labkit.core.cacheplan.lists_by_access`) and feature rows by pre-sampled gathers smoothed
by out-degree (:func:`labkit.core.cacheplan.rows_by_access`); Ginex ranks lists by out/in degree
(:func:`~labkit.core.cacheplan.lists_by_degree`) and keeps its feature cache by Belady's
replacement over a superbatch (:class:`labkit.disk.iocache.BeladyFeatureCache`).
"""

from __future__ import annotations

from labkit.core.errors import check_range


def caliex_plans_nbytes(num_nodes: int) -> int:
    """The most bytes CaliEX's two plans (``lists_by_access``, ``rows_by_access``) hold.

    Stated from the dtypes of :mod:`labkit.core.cacheplan` with every node ranked: order 4 bytes
    per node (8 past 2**31 nodes) and score 4 in each plan, and topology's cost counted at 8 (it
    is 4 unless a list's bytes pass 2**30); feature rows' cost is one broadcast value. A system
    keeps both plans while its caches fill, outside the memory budget, so :mod:`labkit.disk.rss`
    states them.
    """
    check_range("num_nodes", num_nodes, 0, integer=True)
    index = 4 if num_nodes < 2**31 else 8
    return int(num_nodes) * (2 * index + 2 * 4 + 8) + 8
