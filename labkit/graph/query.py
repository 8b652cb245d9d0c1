"""A GSL-style query API (after graph-learn) over typed nodes and edges, running the numba operators.

    g.V("user").batch(512).shuffle().outV("u2i").sample(10).by("edge_weight") \\
     .outV("i2i").sample(5).by("random").values()

    g.E("u2i").batch(512).shuffle().outV("i2i").sample(5).by("random").values()

``values()`` returns an iterable over one epoch of batches; each batch is a
:class:`QueryResult` with one id array per step: the seeds (shape [b]), then each hop's
neighbours (shape [previous size, k], padded with -1 where a vertex has fewer than k) and
negatives from ``outNeg(...)`` (-1 where a vertex links to every candidate, counted in
``capped_negatives``). Steps apply to the output of the previous step, as in GSL; a -1 slot
is no vertex and is not expanded.

``by("full")`` returns every neighbour: a :class:`Ragged` (``offsets`` and ``values``, as PyG
and DGL return full neighbourhoods), one row per entry of the previous step, never a dense array
padded to the largest row; the next step expands only its real ids (``values``). Every step's
output is sized before it is allocated: a result past the query's limit (:data:`RESULT_LIMIT`,
or :meth:`Query.limit`) is refused with :class:`~labkit.core.memory.BudgetExceeded` naming the
size.
An ``E()`` batch is b edges: sources and destinations (both shape [b]) then the steps, which
walk on from the destinations; its ``edge_ids`` and ``weights`` give each edge's id and weight,
``edge_attrs`` its typed attributes.

Attributes are stored apart from topology, as in AliGraph: each node type and edge type may carry
named, typed columns (``attrs={"age": int32 array, "city": str array}``, one row per node, or per
edge in ``add_edges`` input order), looked up by id with :meth:`Graph.node_attributes` /
:meth:`Graph.edge_attributes`; :func:`labkit.graph.build.read_edge_attributes` reads typed
edge columns from the same CSV or Parquet file the topology was built from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from labkit.core.errors import BadInput, bad_value, check_range, check_seed
from labkit.core.memory import BudgetExceeded, MemoryBudget, fmt_bytes, parse_bytes
from labkit.graph.checks import check_features
from labkit.graph.csr import CSR, build_csr, check_node_ids
from labkit.graph.negative import negative_sample
from labkit.graph.sampling import AliasTable, sample_neighbors, sample_weighted, topk_neighbors
from labkit.graph.traverse import batch_stream, check_epoch, edge_batches, node_batches

#: Strategies accepted by ``.by(...)`` after ``outV``/``inV``, and after ``outNeg``.
HOP_STRATEGIES = ("random", "random_without_replacement", "edge_weight", "topk", "in_degree", "full")
NEG_STRATEGIES = ("random", "in_degree")


#: The most bytes one query's result (all its steps' arrays) may take unless Query.limit() says
#: otherwise: a two-hop full neighbourhood of a batch with hubs can reach billions of ids.
RESULT_LIMIT = 1 << 30


@dataclass
class Ragged:
    """Rows of different lengths: row i is ``values[offsets[i]:offsets[i + 1]]`` (int64 ids).

    The result type of ``by("full")``: memory is one id per real neighbour plus one offset per
    row, however skewed the degrees are. :meth:`lists` gives one array per row, :meth:`padded` a
    dense [rows, longest row] view filled with -1 (sized and refused past `limit` first).
    """

    offsets: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def counts(self) -> np.ndarray:
        """Return each row's length (int64)."""
        return np.diff(self.offsets)

    @property
    def nbytes(self) -> int:
        """Return the bytes held (offsets and values)."""
        return self.offsets.nbytes + self.values.nbytes

    def row(self, i: int) -> np.ndarray:
        """Return row `i`'s ids (a view)."""
        check_range("i", i, 0, len(self) - 1, integer=True)
        return self.values[self.offsets[i]:self.offsets[i + 1]]

    def lists(self) -> list[np.ndarray]:
        """Return one array of ids per row (views into ``values``)."""
        return np.split(self.values, self.offsets[1:-1]) if len(self) else []

    def padded(self, fill: int = -1, *, limit: int | str = RESULT_LIMIT) -> np.ndarray:
        """Return a dense [rows, longest row] int64 copy, short rows filled with `fill`; refused past `limit` bytes."""
        counts = self.counts
        width = int(counts.max()) if len(counts) else 0
        need = len(self) * width * 8
        cap = parse_bytes(limit, "limit")
        if need > cap:
            raise BudgetExceeded(f"padded={fmt_bytes(need)} ({len(self):,} rows x {width:,}) is not accepted; "
                                 f"expected at most limit={fmt_bytes(cap)} (use lists() or offsets/values, "
                                 "which hold only the real ids)")
        out = np.full((len(self), width), fill, np.int64)
        r = np.repeat(np.arange(len(self)), counts)
        out[r, np.arange(len(self.values)) - np.repeat(self.offsets[:-1], counts)] = self.values
        return out


def _flat(ids) -> np.ndarray:
    """Return the entries a step's output hands to the next step: a Ragged's values, else the array flattened."""
    return ids.values if isinstance(ids, Ragged) else ids.reshape(-1)


@dataclass
class EdgeType:
    """One edge type: its endpoint node types, out-edge CSR, in-edge CSC and per-edge weights."""

    name: str
    src_type: str
    dst_type: str
    csr: CSR
    csc: CSR
    weights: np.ndarray | None  # aligned with csr positions
    _alias: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)  # name -> one row per edge, in add_edges input order (edge id)
    _positions: np.ndarray | None = None  # inverse of csr.eid, built on first use

    def alias(self, kind: str, in_degree_of_dst: np.ndarray | None = None) -> AliasTable:
        """Return (building once) the alias tables for "edge_weight" or "in_degree" draws."""
        if kind not in self._alias:
            if kind == "edge_weight":
                if self.weights is None:
                    raise bad_value("by", "edge_weight", f"a strategy other than edge_weight: edge type "
                                    f"{self.name!r} has no weights")
                w = self.weights
            else:
                w = in_degree_of_dst[self.csr.indices].astype(np.float64)
            self._alias[kind] = AliasTable.build(self.csr.indptr, w)
        return self._alias[kind]

    def positions(self, edge_ids: np.ndarray) -> np.ndarray:
        """Return the CSR positions of edges `edge_ids` (positions in the add_edges input)."""
        if self._positions is None:
            self._positions = np.empty(self.csr.num_edges, np.int64)
            self._positions[self.csr.eid] = np.arange(self.csr.num_edges)
        return self._positions[edge_ids]


def _check_attrs(attrs, n: int, what: str) -> dict[str, np.ndarray]:
    """Return `attrs` as {name: array} if each is an array of `n` rows (one per `what`), else raise naming it."""
    if attrs is None:
        return {}
    if not isinstance(attrs, dict):
        raise bad_value("attrs", type(attrs).__name__, f"None or a dict of name -> array of {n} rows (one per {what})")
    out = {}
    for name, a in attrs.items():
        if not isinstance(name, str) or not name:
            raise bad_value("attrs", f"a key {name!r}", "attribute names that are non-empty strings")
        a = np.asarray(a)
        if a.ndim == 0 or len(a) != n:
            raise bad_value(f"attrs[{name!r}]", f"array of shape {a.shape}", f"{n} rows (one per {what})")
        out[name] = a
    return out


def _lookup(attrs: dict[str, np.ndarray], ids: np.ndarray, names, what: str) -> dict[str, np.ndarray]:
    if names is None:
        names = list(attrs)
    elif isinstance(names, str) or not all(isinstance(x, str) for x in names):
        raise bad_value("names", names, "None or a list of attribute names")
    missing = [x for x in names if x not in attrs]
    if missing:
        raise bad_value("names", missing, f"attributes of {what}: " + (", ".join(attrs) or "(none added)"))
    return {x: attrs[x][ids] for x in names}


class Graph:
    """A heterogeneous graph: typed node sets and typed edge sets, queried GSL-style with V() / E()."""

    def __init__(self) -> None:
        self.node_types: dict[str, int] = {}
        self.node_features: dict[str, np.ndarray | None] = {}
        self.node_attrs: dict[str, dict[str, np.ndarray]] = {}
        self.edge_types: dict[str, EdgeType] = {}

    def add_nodes(self, node_type: str, num_nodes: int, features: np.ndarray | None = None, *,
                  attrs: dict | None = None) -> "Graph":
        """Declare `num_nodes` nodes of `node_type` (ids 0..num_nodes-1), with optional features and attributes.

        `features` must be a 2-d array of finite numbers, one row per node (ints cast to float32).

        `attrs` maps attribute names to arrays of any dtype (ints, floats, strings) with one row per
        node; they are kept apart from the topology and read with :meth:`node_attributes`.

        A type is declared once: edges are built against its node count, so declaring it again
        is refused (build a new Graph to change it).
        """
        if node_type in self.node_types:
            raise bad_value("node_type", node_type, f"a node type not declared yet ({node_type!r} already has "
                            f"{self.node_types[node_type]} nodes; build a new Graph to change it)")
        check_range("num_nodes", num_nodes, 1, integer=True)
        if features is not None:  # 2-d, numeric, finite (labkit.graph.checks): they may feed training
            features = check_features(features, int(num_nodes))
        attrs = _check_attrs(attrs, int(num_nodes), f"{node_type!r} node")
        self.node_types[node_type] = int(num_nodes)
        self.node_features[node_type] = features
        self.node_attrs[node_type] = attrs
        return self

    def add_edges(self, edge_type: str, src_type: str, dst_type: str, src, dst,
                  weights: np.ndarray | None = None, *, attrs: dict | None = None) -> "Graph":
        """Add edges of `edge_type` from `src_type` to `dst_type` nodes (duplicates and self loops kept).

        Edge i (its edge id) is ``src[i] -> dst[i]``; `attrs` maps attribute names to arrays of any
        dtype with one row per edge in that order, kept apart from the topology
        (:meth:`edge_attributes`, and ``edge_attrs`` of an ``E()`` query's batches).
        """
        for arg, t in (("src_type", src_type), ("dst_type", dst_type)):
            if t not in self.node_types:
                raise bad_value(arg, t, "a declared node type: " + ", ".join(self.node_types))
        ns, nd = self.node_types[src_type], self.node_types[dst_type]
        src, dst = np.asarray(src), np.asarray(dst)
        for arg, a, n in (("src", src, ns), ("dst", dst, nd)):
            if a.ndim != 1 or (a.dtype.kind not in "iu" and a.size):
                raise bad_value(arg, f"array of shape {a.shape} and dtype {a.dtype}",
                                f"a 1-d integer array of {src_type if arg == 'src' else dst_type!r} node ids")
            if len(a) and (a.min() < 0 or a.max() >= n):
                pos = int(np.flatnonzero((a < 0) | (a >= n))[0])
                raise BadInput(f"{arg}[{pos}]={int(a[pos])} is not accepted; expected ids in [0, {n})")
        if len(src) != len(dst):
            raise bad_value("dst", f"{len(dst)} ids", f"{len(src)} ids, one per edge as in src")
        attrs = _check_attrs(attrs, len(src), f"{edge_type!r} edge")
        n = max(ns, nd)
        csr = build_csr(src, dst, n, weights=weights, return_eid=True)
        csc = build_csr(dst, src, n, return_eid=True)
        self.edge_types[edge_type] = EdgeType(edge_type, src_type, dst_type, csr, csc, csr.weights, attrs=attrs)
        return self

    def node_attributes(self, node_type: str, ids, names: list[str] | None = None) -> dict[str, np.ndarray]:
        """Return {name: rows of `ids`} for the attributes of `node_type` (all of them, or `names`)."""
        if node_type not in self.node_types:
            raise bad_value("node_type", node_type, "one of " + (", ".join(self.node_types) or "(none added)"))
        ids = check_node_ids("ids", ids, self.node_types[node_type], f"{node_type!r} node ids")
        return _lookup(self.node_attrs[node_type], ids, names, f"{node_type!r} nodes")

    def edge_attributes(self, edge_type: str, edge_ids, names: list[str] | None = None) -> dict[str, np.ndarray]:
        """Return {name: rows of `edge_ids`} for the attributes of `edge_type` (ids as in its add_edges input)."""
        e = self.edge_type(edge_type)
        edge_ids = check_node_ids("edge_ids", edge_ids, e.csr.num_edges, f"{edge_type!r} edge ids")
        return _lookup(e.attrs, edge_ids, names, f"{edge_type!r} edges")

    def edge_type(self, name: str) -> EdgeType:
        if name not in self.edge_types:
            raise bad_value("edge_type", name, "one of " + (", ".join(self.edge_types) or "(none added)"))
        return self.edge_types[name]

    def in_degree(self, node_type: str) -> np.ndarray:
        """Return in-degrees of `node_type` nodes over all edge types ending there (one per node of the type)."""
        if node_type not in self.node_types:
            raise bad_value("node_type", node_type, "one of " + (", ".join(self.node_types) or "(none added)"))
        n = self.node_types[node_type]
        deg = np.zeros(n, np.int64)
        for e in self.edge_types.values():
            if e.dst_type == node_type:
                # An edge type's CSC has max(src, dst) type's count of rows; those past n have no in-edges.
                deg += e.csc.degree()[:n]
        return deg

    def V(self, node_type: str) -> "Query":
        """Start a query over the nodes of `node_type` (TRAVERSE)."""
        if node_type not in self.node_types:
            raise bad_value("node_type", node_type, "one of " + ", ".join(self.node_types))
        return Query(self, node_type)

    def E(self, edge_type: str) -> "Query":
        """Start a query over the edges of `edge_type` (TRAVERSE); later steps start at their destinations."""
        return Query(self, self.edge_type(edge_type).src_type, edge_type)


@dataclass
class _Step:
    kind: str  # "outV", "inV", "outNeg"
    edge_type: str
    k: int = 1
    by: str = "random"


@dataclass
class QueryResult:
    """One batch: ``ids[0]`` the seeds, then one array per step; ``types[i]`` the node type of ``ids[i]``.

    From ``E()``: ``ids[0]``/``ids[1]`` the edges' sources/destinations, ``edge_ids`` their ids
    (positions in the add_edges input), ``weights`` their weights (None when unweighted) and
    ``edge_attrs`` their attributes ({name: rows}, empty when the edge type has none).
    """

    ids: list  # np.ndarray, or Ragged for a by("full") step
    types: list[str]
    capped_negatives: int = 0
    edge_ids: np.ndarray | None = None
    weights: np.ndarray | None = None
    edge_attrs: dict | None = None
    start: int = 0  # the entry the steps walk from: 0 for V(), 1 (the destinations) for E()

    def __getitem__(self, i: int):
        return self.ids[i]

    @property
    def nbytes(self) -> int:
        """Return the bytes every step's ids hold."""
        return sum(a.nbytes for a in self.ids)

    def per_seed(self, i: int) -> list[np.ndarray]:
        """Return, for each start vertex (seed, or edge destination for E()), the real ids step `i` reached from it.

        -1 slots are left out, so a seed's list is its true multiset of ids at that step
        (e.g. its full 2-hop neighbourhood after two ``by("full")`` hops).
        """
        check_range("i", i, self.start, len(self.ids) - 1, integer=True)
        owner = np.arange(len(self.ids[self.start]), dtype=np.int64)
        for j in range(self.start + 1, i + 1):
            a = self.ids[j]
            if isinstance(a, Ragged):
                owner = np.repeat(owner, a.counts)
            else:
                owner = np.repeat(owner, a.shape[1] if a.ndim == 2 else 1)
        flat = _flat(self.ids[i])
        keep = flat >= 0
        flat, owner = flat[keep], owner[keep]
        order = np.argsort(owner, kind="stable")
        bounds = np.searchsorted(owner[order], np.arange(len(self.ids[self.start]) + 1))
        vals = flat[order]
        return [vals[bounds[k]:bounds[k + 1]] for k in range(len(bounds) - 1)]


class Query:
    """A chain of GSL steps; build with V().batch().shuffle().outV().sample().by()..., run with values().

    `edge_type` set (by ``E()``): the query traverses those edges, `node_type` their source type.
    """

    def __init__(self, graph: Graph, node_type: str, edge_type: str | None = None) -> None:
        self.g, self.node_type, self.edge_type = graph, node_type, edge_type
        self._batch, self._shuffle, self._seed, self._epoch = 64, False, 0, 0
        self._limit: int | MemoryBudget = RESULT_LIMIT
        self.steps: list[_Step] = []

    def limit(self, nbytes) -> "Query":
        """Cap this query's result at `nbytes` (an int, '2GiB') or a MemoryBudget's free bytes at run time."""
        self._limit = nbytes if isinstance(nbytes, MemoryBudget) else parse_bytes(nbytes, "nbytes")
        return self

    def _reserve(self, held: int, nbytes: int, h: int, s: "_Step", n: int) -> int:
        """Return `held` + `nbytes` if a step of `nbytes` fits the query's limit, else raise naming the sizes."""
        cap = self._limit.free if isinstance(self._limit, MemoryBudget) else self._limit
        if held + nbytes > cap:
            what = f"{s.kind}({s.edge_type!r}).by({s.by!r})" + ("" if s.by == "full" else f" sample({s.k})")
            raise BudgetExceeded(
                f"step {h + 1}={what} is not accepted; expected a result within the query limit of "
                f"{fmt_bytes(cap)}: on {n:,} ids it would return {fmt_bytes(nbytes)} (after {fmt_bytes(held)} "
                "held by earlier steps); use a smaller batch(), sample(k) in place of 'full', or Query.limit()")
        return held + nbytes

    def batch(self, size: int) -> "Query":
        check_range("batch", size, 1, integer=True)
        self._batch = int(size)
        return self

    def shuffle(self, seed: int = 0) -> "Query":
        self._shuffle, self._seed = True, check_seed(seed)
        return self

    def _hop(self, kind: str, edge_type: str) -> "Query":
        e = self.g.edge_type(edge_type)
        cur = self._current_type()
        want = e.src_type if kind in ("outV", "outNeg") else e.dst_type
        if cur != want:
            raise bad_value("edge_type", edge_type, f"an edge type that starts at {cur!r} nodes for {kind} "
                            f"({edge_type!r} goes {e.src_type} -> {e.dst_type})")
        self.steps.append(_Step(kind, edge_type))
        return self

    def outV(self, edge_type: str) -> "Query":
        """Hop along out-edges of `edge_type` (NEIGHBORHOOD)."""
        return self._hop("outV", edge_type)

    def inV(self, edge_type: str) -> "Query":
        """Hop along in-edges of `edge_type` (NEIGHBORHOOD)."""
        return self._hop("inV", edge_type)

    def outNeg(self, edge_type: str) -> "Query":
        """Draw negatives: `dst_type` nodes that are not out-neighbours along `edge_type` (NEGATIVE)."""
        return self._hop("outNeg", edge_type)

    def sample(self, k: int) -> "Query":
        if not self.steps:
            raise bad_value("sample", k, "a call after outV/inV/outNeg")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise bad_value("k", k, "a positive integer number of samples per vertex")
        self.steps[-1].k = int(k)
        return self

    def by(self, strategy: str) -> "Query":
        if not self.steps:
            raise bad_value("by", strategy, "a call after outV/inV/outNeg")
        allowed = NEG_STRATEGIES if self.steps[-1].kind == "outNeg" else HOP_STRATEGIES
        if strategy not in allowed:
            raise bad_value("by", strategy, "one of " + ", ".join(allowed))
        self.steps[-1].by = strategy
        return self

    def _current_type(self) -> str:
        t = self.node_type if self.edge_type is None else self.g.edge_types[self.edge_type].dst_type
        for s in self.steps:
            e = self.g.edge_types[s.edge_type]
            t = e.src_type if s.kind == "inV" else e.dst_type
        return t

    def values(self, epoch: int = 0) -> "QueryRun":
        """Return one epoch of this query's batches (iterate it, or call .next())."""
        return QueryRun(self, check_epoch(epoch))

    def run(self, seeds: np.ndarray, *, seed: int = 0, stream: int = 0) -> QueryResult:
        """Run the steps on explicit `seeds` (1-d node ids of the query's type; edge ids for E()); return the result."""
        g = self.g
        seed, stream = check_seed(seed), check_seed(stream, "stream", per=64)  # step h draws stream * 64 + h
        seeds = np.asarray(seeds)
        if seeds.ndim != 1:
            what = f"{self.node_type!r} node ids" if self.edge_type is None else f"{self.edge_type!r} edge ids"
            raise bad_value("seeds", f"array of shape {seeds.shape}", f"a 1-d array of {what}")
        if self.edge_type is not None:
            e = g.edge_types[self.edge_type]
            pos = e.positions(check_node_ids("seeds", seeds, e.csr.num_edges, "edge ids"))
            src = np.searchsorted(e.csr.indptr, pos, side="right") - 1
            return self._edges(src, e.csr.indices[pos].astype(np.int64), pos, seed, stream)
        cur = check_node_ids("seeds", seeds, g.node_types[self.node_type]).astype(np.int64, copy=False)
        return self._walk([cur], [self.node_type], seed, stream)

    def _edges(self, src: np.ndarray, dst: np.ndarray, pos: np.ndarray, seed: int, stream: int) -> QueryResult:
        """Run the steps from the destinations of the edges at CSR positions `pos`."""
        e = self.g.edge_types[self.edge_type]
        res = self._walk([src, dst], [e.src_type, e.dst_type], seed, stream)
        res.start = 1
        res.edge_ids, res.weights = e.csr.eid[pos], None if e.weights is None else e.weights[pos]
        res.edge_attrs = {k: v[res.edge_ids] for k, v in e.attrs.items()}
        return res

    def _walk(self, ids: list, types: list[str], seed: int, stream: int) -> QueryResult:
        """Run the steps from ``ids[-1]`` (of type ``types[-1]``), appending each step's output.

        Each step is sized before it allocates; padding (-1) is never expanded.
        """
        g = self.g
        cur = ids[-1]
        capped = 0
        held = sum(a.nbytes for a in ids)
        for h, s in enumerate(self.steps):
            e = g.edge_types[s.edge_type]
            flat = _flat(cur)
            valid = np.flatnonzero(flat >= 0)
            rows = flat[valid]
            if s.kind == "outNeg":
                held = self._reserve(held, len(flat) * s.k * 8, h, s, len(flat))
                # Uniform draws come from the destination type's ids, not the max of both types'.
                neg = negative_sample(e.csr, rows, s.k, by=s.by, seed=seed, stream=stream * 64 + h,
                                      num_dst=g.node_types[e.dst_type])
                out = np.full((len(flat), s.k), -1, np.int64)
                out[valid] = neg.dst.reshape(-1, s.k)
                capped += neg.capped
                t = e.dst_type
            else:
                topo = e.csr if s.kind == "outV" else e.csc
                t = e.dst_type if s.kind == "outV" else e.src_type
                if s.by == "full":
                    deg = topo.indptr[rows + 1] - topo.indptr[rows]
                    total = int(deg.sum())
                    held = self._reserve(held, (total + len(flat) + 1) * 8, h, s, len(flat))
                    counts = np.zeros(len(flat), np.int64)
                    counts[valid] = deg
                    offsets = np.zeros(len(flat) + 1, np.int64)
                    np.cumsum(counts, out=offsets[1:])
                    _, eid = self._sample(e, topo, s, rows, seed, stream * 64 + h)
                    out = Ragged(offsets, topo.indices[eid].astype(np.int64))
                else:
                    held = self._reserve(held, len(flat) * s.k * 8, h, s, len(flat))
                    ptr, eid = self._sample(e, topo, s, rows, seed, stream * 64 + h)
                    counts = np.diff(ptr)
                    out = np.full((len(flat), s.k), -1, np.int64)
                    r = np.repeat(valid, counts)
                    c = np.arange(len(eid)) - np.repeat(ptr[:-1], counts)
                    out[r, c] = topo.indices[eid]
            ids.append(out)
            types.append(t)
            cur = out
        return QueryResult(ids, types, capped)

    def _sample(self, e: EdgeType, topo: CSR, s: _Step, rows, seed, stream):
        if s.by in ("random", "random_without_replacement", "full"):
            return sample_neighbors(topo.indptr, topo.indices, rows, -1 if s.by == "full" else s.k,
                                    replace=s.by == "random", seed=seed, stream=stream)
        if topo is e.csc and s.by in ("edge_weight", "topk"):
            raise bad_value("by", s.by, "random, random_without_replacement, in_degree or full for inV")
        if s.by == "topk":
            if e.weights is None:
                raise bad_value("by", "topk", f"a strategy other than topk: edge type {e.name!r} has no weights")
            return topk_neighbors(topo.indptr, e.weights, rows, s.k)
        if s.by == "in_degree":
            table = e.alias("in_degree", self.g.in_degree(e.dst_type)) if topo is e.csr else \
                AliasTable.build(topo.indptr, self.g.in_degree(e.src_type)[topo.indices] + 0.0)
            return sample_weighted(topo.indptr, table, rows, s.k, seed=seed, stream=stream)
        return sample_weighted(topo.indptr, e.alias("edge_weight"), rows, s.k, seed=seed, stream=stream)


class QueryRun:
    """An epoch of a query: iterate for QueryResults, or call next() (raises StopIteration at the end)."""

    def __init__(self, q: Query, epoch: int) -> None:
        self.q, self.epoch = q, epoch
        kw = dict(shuffle=q._shuffle, seed=q._seed, epoch=epoch)
        if q.edge_type is None:
            n = q.g.node_types[q.node_type]
            self._it = enumerate(node_batches(np.arange(n), q._batch, **kw))
        else:
            self._it = enumerate(edge_batches(q.g.edge_types[q.edge_type].csr, q._batch, **kw))

    def __iter__(self):
        return self

    def __next__(self) -> QueryResult:
        b, batch = next(self._it)
        stream = batch_stream(self.epoch, b)
        if self.q.edge_type is None:  # ids, seed and epoch were checked already: skip run()'s checks
            return self.q._walk([batch], [self.q.node_type], self.q._seed, stream)
        return self.q._edges(*batch, seed=self.q._seed, stream=stream)

    next = __next__
