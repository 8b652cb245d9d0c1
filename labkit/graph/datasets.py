"""Registered, seeded R-MAT graph datasets: CSR + CSC topology, labels and features, built out of core."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.core.datasets import DatasetWriter, open_dataset, register_dataset
from labkit.graph.csr import CSR, build_csr_chunked
from labkit.graph.rmat import RMatParams, rmat_edge_chunks, rmat_features, rmat_labels

#: Per profile: R-MAT scale, feature width and noise. split_roles gives independent in/out degrees.
#: 128-wide float32 attributes (512 B per vertex, as ogbn-papers100M) outweigh a vertex's
#: neighbour list, as AliGraph's attributes do; ci keeps 32 for speed.
PROFILES = {
    "ci": {"scale": 12, "edge_factor": 16, "dim": 32, "noise": 2.0, "split_roles": True, "chunk_edges": 1 << 16},
    "small": {"scale": 16, "edge_factor": 16, "dim": 128, "noise": 2.0, "split_roles": True, "chunk_edges": 1 << 20},
    "large": {"scale": 20, "edge_factor": 16, "dim": 128, "noise": 2.0, "split_roles": True, "chunk_edges": 1 << 22},
}


def rmat_params(params: dict, seed: int = 0) -> RMatParams:
    """Return the RMatParams a dataset profile describes."""
    return RMatParams(scale=params["scale"], edge_factor=params["edge_factor"], seed=seed,
                      split_roles=params.get("split_roles", False))


@register_dataset("rmat", description="R-MAT graph (Graph500 a,b,c) with 16 planted communities: "
                  "CSR, CSC, labels, noisy features", profiles=PROFILES, seed=0, version=2, system="graph")
def build_rmat(w: DatasetWriter, params: dict) -> None:
    """Stream the edges twice through the chunked builder (never holding the edge list)."""
    rp = rmat_params(params, w.seed)
    chunks = lambda: rmat_edge_chunks(rp, params["chunk_edges"])  # noqa: E731
    csr = build_csr_chunked(chunks, rp.num_nodes, drop_self_loops=True, dedup=True)
    w.array("csr_indptr", csr.indptr)
    w.array("csr_indices", csr.indices)
    csc = csr.reverse()
    w.array("csc_indptr", csc.indptr)
    w.array("csc_indices", csc.indices)
    labels = rmat_labels(rp)
    w.array("labels", labels)
    w.array("features", rmat_features(rp, params["dim"], params["noise"], labels))
    w.meta.update(num_nodes=rp.num_nodes, num_edges=csr.num_edges, num_classes=rp.num_communities,
                  scale=rp.scale, split_roles=rp.split_roles)


@dataclass
class GraphData:
    """A loaded graph: topology both ways, labels, features and a train/val/test split."""

    csr: CSR
    csc: CSR
    labels: np.ndarray
    features: np.ndarray
    num_classes: int
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray


def load_graph(profile: str = "ci", *, mmap: bool = False) -> GraphData:
    """Return the "rmat" dataset at `profile` (built on first use), split 60/20/20 by a seeded shuffle."""
    ds = open_dataset("rmat", profile)
    a = lambda k: ds.array(k, mmap=mmap)  # noqa: E731
    csr = CSR(a("csr_indptr"), a("csr_indices"))
    csc = CSR(a("csc_indptr"), a("csc_indices"))
    n = csr.num_nodes
    perm = np.random.default_rng(ds.manifest["seed"]).permutation(n)
    t, v = int(0.6 * n), int(0.8 * n)
    return GraphData(csr, csc, a("labels"), a("features"), int(ds.meta["num_classes"]),
                     np.sort(perm[:t]), np.sort(perm[t:v]), np.sort(perm[v:]))


def user_item_graph(scale: int = 12, *, seed: int = 0):
    """Return a typed Graph for GSL queries: users and items, weighted "u2i" edges and "i2i" edges, from R-MAT."""
    from labkit.graph.query import Graph
    from labkit.graph.rmat import rmat_edges

    half = 1 << (scale - 1)
    us, ui = rmat_edges(RMatParams(scale=scale, edge_factor=8, seed=seed, split_roles=True))
    is_, id_ = rmat_edges(RMatParams(scale=scale - 1, edge_factor=8, seed=seed + 1))
    w = np.random.default_rng([seed, 9]).random(len(us)).astype(np.float32)
    g = Graph().add_nodes("user", half).add_nodes("item", half)
    g.add_edges("u2i", "user", "item", us % half, ui % half, weights=w)
    g.add_edges("i2i", "item", "item", is_, id_)
    return g
