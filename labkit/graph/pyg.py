"""PyG interop: labkit stores as `FeatureStore` / `GraphStore`, the numba sampler as a `BaseSampler`.

Every adapter takes any store of the graph core's protocols (:mod:`labkit.graph.storage`): the
in-memory CSR, a :class:`~labkit.graph.store.PartitionedStore` (partitions on Dask workers) or
CaliEX's disk stores (:mod:`labkit.disk.store`), so PyG's own ``NodeLoader`` trains from any of
them unchanged:

    loader = NodeLoader((feature_store, graph_store), node_sampler=LabkitNeighborSampler(csc, [10, 5]),
                        input_nodes=torch.from_numpy(train), batch_size=512, shuffle=True)

Messages flow from sampled in-neighbour (``row``) to the expanded node (``col``), as in PyG.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch_geometric.data import EdgeAttr, FeatureStore, GraphStore, TensorAttr
from torch_geometric.sampler import BaseSampler, NodeSamplerInput, SamplerOutput
from torch_geometric.typing import EdgeTensorType

from labkit.core.errors import bad_value, check_range, check_seed
from labkit.graph.checks import check_labels
from labkit.graph.csr import CSR, build_csr
from labkit.graph.sampling import NeighborSampler, check_fanouts
from labkit.graph.storage import FeatureStore as LabkitFeatureStore
from labkit.graph.storage import GraphStore as LabkitGraphStore


class StoreFeatureStore(FeatureStore):
    """Read-only FeatureStore over any labkit FeatureStore's rows ("x") and a label array ("y").

    The labels are checked once here: class ids >= 0 (and < `num_classes` when given), one per node.
    """

    def __init__(self, store, labels: np.ndarray | None = None, *, num_classes: int | None = None) -> None:
        super().__init__()
        if not isinstance(store, LabkitFeatureStore):
            raise bad_value("store", type(store).__name__, "a labkit FeatureStore (features(ids), dim, num_nodes): "
                            "LocalStore, PartitionedStore, MemoryFeatures or DiskFeatures")
        if labels is not None:
            labels = check_labels(labels, store.num_nodes, num_classes)
        self.store, self.labels = store, labels
        self.num_nodes = store.num_nodes

    def _put_tensor(self, tensor, attr: TensorAttr) -> bool:
        raise bad_value("attr", attr.attr_name, "no writes: this FeatureStore reads a labkit store")

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        return False

    def _get_tensor(self, attr: TensorAttr):
        idx = attr.index
        if idx is None or isinstance(idx, slice):
            idx = np.arange(self.num_nodes)[idx if isinstance(idx, slice) else slice(None)]
        idx = np.asarray(idx.numpy() if isinstance(idx, torch.Tensor) else idx, np.int64)
        if attr.attr_name == "x":
            return torch.from_numpy(np.ascontiguousarray(self.store.features(idx)))
        if attr.attr_name == "y" and self.labels is not None:
            return torch.from_numpy(np.asarray(self.labels)[idx])
        raise bad_value("attr_name", attr.attr_name, "x" + (" or y" if self.labels is not None else ""))

    def _get_tensor_size(self, attr: TensorAttr):
        if attr.attr_name == "x":
            return (self.num_nodes, self.store.dim)
        return (self.num_nodes,)

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        names = ["x"] + (["y"] if self.labels is not None else [])
        return [TensorAttr(group_name=None, attr_name=n) for n in names]


class CSRGraphStore(GraphStore):
    """GraphStore keeping one homogeneous edge set as a labkit CSC (in-edges), returned as COO on request.

    `csc` may also be any labkit GraphStore holding in-neighbour lists (in memory, partitioned, on
    disk): its lists are read whole only if PyG asks for the edge index (sampling never does).
    """

    def __init__(self, csc=None) -> None:
        super().__init__()
        if csc is not None and not isinstance(csc, (CSR, LabkitGraphStore)):
            raise bad_value("csc", type(csc).__name__, "None, a labkit CSR of in-edges, or a labkit GraphStore")
        self.csc = csc

    def _put_edge_index(self, edge_index: EdgeTensorType, edge_attr: EdgeAttr) -> bool:
        row, col = edge_index
        n = edge_attr.size[0] if edge_attr.size else None
        self.csc = build_csr(col.numpy(), row.numpy(), n, return_eid=True)
        return True

    def _get_edge_index(self, edge_attr: EdgeAttr):
        if self.csc is None:
            return None
        n = self.csc.num_nodes
        if isinstance(self.csc, CSR):
            deg, row = self.csc.degree(), self.csc.indices
        else:
            ptr, row = self.csc.neighbors(np.arange(n, dtype=np.int64))
            deg = np.diff(ptr)
        col = np.repeat(np.arange(n), deg)
        return torch.from_numpy(np.asarray(row, np.int64)), torch.from_numpy(col)

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        self.csc = None
        return True

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        if self.csc is None:
            return []
        n = self.csc.num_nodes
        return [EdgeAttr(edge_type=None, layout="coo", is_sorted=False, size=(n, n))]


class LabkitNeighborSampler(BaseSampler):
    """A PyG BaseSampler running labkit's numba multi-hop sampler over in-edges.

    `graph` is a CSC (in-edges, sampled in memory) or any labkit GraphStore of in-neighbour lists
    (:class:`~labkit.graph.store.LocalStore`, a :class:`~labkit.graph.store.PartitionedStore` whose
    partitions may live in Dask worker processes, CaliEX's :class:`~labkit.disk.store.DiskTopology`):
    the one :class:`~labkit.graph.sampling.NeighborSampler` draws from the lists' lengths and reads
    the sampled entries through the store, so a seed gives the same batch from every store.
    Sampled edges carry the CSC's edge ids when it has them, else their positions in the store's
    edge order (-1 from a store without global offsets).
    """

    def __init__(self, graph, fanouts: list[int], *, replace: bool = False, seed: int = 0) -> None:
        self.fanouts, self.replace, self.seed = list(fanouts), replace, check_seed(seed)
        if isinstance(graph, CSR):
            self.csc, self.store = graph, None
            self._sampler = NeighborSampler(graph.indptr, graph.indices, frontier="new")
        elif isinstance(graph, LabkitGraphStore):
            self.csc, self.store = None, graph
            self._sampler = NeighborSampler(graph, frontier="new")
        else:
            raise bad_value("graph", type(graph).__name__, "a labkit CSR of in-edges (CSC) or a labkit GraphStore "
                            "over one (LocalStore, PartitionedStore, DiskTopology)")
        self._calls = 0

    def sample_from_nodes(self, index: NodeSamplerInput, **kwargs) -> SamplerOutput:
        """Return the relabelled sample of the seed nodes in `index` (PyG's SamplerOutput)."""
        self._calls += 1
        seeds = index.node.numpy().astype(np.int64)
        s = self._sampler.sample(seeds, self.fanouts, replace=self.replace, seed=self.seed, stream=self._calls)
        eid = np.concatenate(s.eids)
        if self.csc is not None and self.csc.eid is not None:
            eid = self.csc.eid[eid]
        hops = np.diff(s.num_nodes_per_hop).tolist()
        return SamplerOutput(
            node=torch.from_numpy(s.nodes),
            row=torch.from_numpy(np.concatenate(s.cols)),
            col=torch.from_numpy(np.concatenate(s.rows)),
            edge=torch.from_numpy(eid),
            num_sampled_nodes=[len(seeds)] + hops,
            num_sampled_edges=[len(r) for r in s.rows],
            metadata=(index.input_id, index.time),
        )

    def sample_from_edges(self, index, neg_sampling=None):
        raise NotImplementedError("LabkitNeighborSampler samples from nodes only; use sample_from_nodes")

    @property
    def edge_permutation(self):
        return None


@dataclass
class NodeLoaderRun:
    """What :func:`train_sage_nodeloader` returns: the trained model, its test accuracy, and the losses."""

    model: torch.nn.Module
    accuracy: float
    batches: int
    losses: list[float] = field(default_factory=list)


def train_sage_nodeloader(g, epochs: int = 2, fanouts=(10, 5), batch_size: int = 512, *, hidden: int = 64,
                          lr: float = 0.01, seed: int = 0, eval_batch_size: int = 2048,
                          on_batch: Callable[[int, float], None] | None = None,
                          progress: bool = False, store=None) -> NodeLoaderRun:
    """Train GraphSAGE node classification with PyG's own ``NodeLoader`` on labkit's storage and sampler.

    `g` is a :class:`labkit.graph.datasets.GraphData`: features come through a
    :class:`StoreFeatureStore` over a :class:`labkit.graph.store.LocalStore`, the topology
    through a :class:`CSRGraphStore` of ``g.csc``, and each mini-batch's in-neighbourhood from
    :class:`LabkitNeighborSampler` with `fanouts`. Trains `epochs` shuffled passes over
    ``g.train`` with Adam, then returns the accuracy on ``g.test``. `on_batch(batches_done, loss)`
    runs after every training step (e.g. to feed a dashboard); `progress` shows a tqdm bar over
    the training batches (off by default). With `store` (a labkit store over ``g.csc`` with
    ``g.features``, e.g. a :class:`~labkit.graph.store.PartitionedStore` served by Dask workers),
    features and every hop's neighbour lists come through that store instead.
    """
    from torch_geometric.loader import NodeLoader

    from labkit.core.progress import progress_bar
    from labkit.graph.store import LocalStore
    from labkit.graph.train import SAGE

    check_range("epochs", epochs, 1, integer=True)
    check_range("batch_size", batch_size, 1, integer=True)
    check_range("eval_batch_size", eval_batch_size, 1, integer=True)
    check_range("hidden", hidden, 1, integer=True)
    check_range("lr", lr, 0.0, lo_open=True)
    fanouts = check_fanouts(fanouts)
    if store is not None and (not isinstance(store, LabkitGraphStore) or not isinstance(store, LabkitFeatureStore)
                              or getattr(store, "num_nodes", None) != g.csc.num_nodes):
        raise bad_value("store", type(store).__name__, f"None or a labkit store over g.csc ({g.csc.num_nodes} "
                        "nodes, with g.features), e.g. PartitionedStore(g.csc, partition(g.csc, 4), g.features)")
    fs = StoreFeatureStore(LocalStore(g.csr, g.features) if store is None else store, g.labels,
                           num_classes=g.num_classes)
    gs = CSRGraphStore(g.csc)  # the loader's GraphStore; sampling below does not read it
    graph = g.csc if store is None else store
    loader = NodeLoader((fs, gs), node_sampler=LabkitNeighborSampler(graph, fanouts, seed=seed),
                        input_nodes=torch.from_numpy(np.asarray(g.train)), batch_size=int(batch_size), shuffle=True)
    torch.manual_seed(seed)
    model = SAGE(g.features.shape[1], int(hidden), g.num_classes, num_layers=len(fanouts))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses: list[float] = []
    with progress_bar(int(epochs) * len(loader), "GraphSAGE (NodeLoader)", progress, unit="batch") as bar:
        for _ in range(int(epochs)):
            model.train()
            for b in loader:
                opt.zero_grad()
                out = model(b.x, b.edge_index)[:b.batch_size]
                loss = torch.nn.functional.cross_entropy(out, b.y[:b.batch_size])
                loss.backward()
                opt.step()
                losses.append(loss.item())
                bar.update(1)
                if on_batch is not None:
                    on_batch(len(losses), losses[-1])
    model.eval()
    test_loader = NodeLoader((fs, gs), node_sampler=LabkitNeighborSampler(graph, fanouts, seed=seed),
                             input_nodes=torch.from_numpy(np.asarray(g.test)), batch_size=int(eval_batch_size))
    correct = 0
    with torch.no_grad():
        for b in test_loader:
            pred = model(b.x, b.edge_index)[:b.batch_size].argmax(1)
            correct += int((pred == b.y[:b.batch_size]).sum())
    return NodeLoaderRun(model, correct / max(1, len(g.test)), len(losses), losses)
