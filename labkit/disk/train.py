"""GraphSAGE and GAT (PyG layers) trained on sampled mini-batches: node classification.

Layer ``i`` of an L-layer model runs on a prefix of the hop-ordered nodes and edges (PyG's
``trim_to_layer``), so no layer computes embeddings it will not use.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from labkit.core.errors import bad_value, check_choice, check_range
from labkit.disk.sampler import SampledBatch

MODELS = ("sage", "gat")


@dataclass(frozen=True)
class ModelConfig:
    """The disk papers' settings: GraphSAGE 3 layers [15, 10, 5] hidden 256; GAT 2 layers [10, 10] 4 heads."""

    name: str = "sage"
    fanouts: tuple[int, ...] = (15, 10, 5)
    hidden: int = 256
    heads: int = 4
    batch_size: int = 1024
    lr: float = 3e-3

    def __post_init__(self) -> None:
        check_choice("model", self.name, MODELS)
        fanouts = self.fanouts
        if isinstance(fanouts, (str, bytes)) or not hasattr(fanouts, "__len__") or len(fanouts) == 0:
            raise bad_value("fanouts", fanouts, "a non-empty sequence of neighbours per hop, e.g. (15, 10, 5)")
        for i, f in enumerate(fanouts):
            check_range(f"fanouts[{i}]", f, 1, 1000, integer=True)
        check_range("hidden", self.hidden, 1, integer=True)
        check_range("heads", self.heads, 1, integer=True)
        if self.name == "gat" and len(fanouts) > 1 and self.hidden % self.heads:
            raise bad_value("hidden", self.hidden, f"a multiple of heads={self.heads} for gat "
                            "(each head gets hidden // heads channels)")
        check_range("batch_size", self.batch_size, 1, integer=True)
        check_range("lr", self.lr, 0.0, lo_open=True)
        if not math.isfinite(self.lr):
            raise bad_value("lr", self.lr, "a finite number in (0, inf)")
        # Frozen: normalise through object.__setattr__ (numpy scalars and lists become plain values).
        object.__setattr__(self, "fanouts", tuple(int(f) for f in fanouts))
        for k in ("hidden", "heads", "batch_size"):
            object.__setattr__(self, k, int(getattr(self, k)))
        object.__setattr__(self, "lr", float(self.lr))

    @classmethod
    def paper(cls, name: str) -> "ModelConfig":
        """Return the benchmark configuration the disk papers use for `name`."""
        check_choice("model", name, MODELS)
        return cls("sage", (15, 10, 5)) if name == "sage" else cls("gat", (10, 10))


class SAGE(nn.Module):
    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int) -> None:
        super().__init__()
        from labkit.graph.pyglayers import layer
        SAGEConv = layer("SAGEConv")
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.convs = nn.ModuleList(SAGEConv(dims[i], dims[i + 1]) for i in range(layers))

    def forward(self, x, edge_index, node_hops, edge_hops):
        L = len(self.convs)
        for i, conv in enumerate(self.convs):
            n_in, n_out, e = node_hops[L - i], node_hops[L - 1 - i], edge_hops[L - 1 - i]
            x = conv((_rows(x, n_in), x[:n_out]), layer_adjacency(edge_index, n_in, n_out, e))
            if i < L - 1:
                x = F.relu(x)
        return x


def _rows(x: torch.Tensor, n: int) -> torch.Tensor:
    """x[:n], but x itself when n covers it: a slice's backward allocates a zero gradient of x's full
    size and copies into it, and past the first layer x[:n_in] is always all of x."""
    return x if n == x.shape[0] else x[:n]


def layer_adjacency(edge_index: torch.Tensor, n_in: int, n_out: int, e: int) -> torch.Tensor:
    """Return the first `e` edges as an (n_out x n_in) sparse CSR matrix (rows: message targets).

    The sampler emits edges sorted by target, so the CSR needs no sort; PyG's SAGEConv then
    aggregates with one sparse-dense product (about a third faster on CPU than scatter).
    """
    dst = edge_index[1, :e]
    crow = torch.searchsorted(dst, torch.arange(n_out + 1, dtype=dst.dtype))
    with warnings.catch_warnings():  # "sparse CSR support is in beta": known, tested here
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, edge_index[0, :e], torch.ones(e), size=(n_out, n_in),
                                       check_invariants=False)


class GAT(nn.Module):
    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int, heads: int) -> None:
        super().__init__()
        from labkit.graph.pyglayers import layer
        GATConv = layer("GATConv")
        convs = []
        d = in_dim
        for i in range(layers):
            last = i == layers - 1
            convs.append(GATConv(d, out_dim if last else hidden // heads, heads=1 if last else heads,
                                 add_self_loops=False))
            d = hidden
        self.convs = nn.ModuleList(convs)

    def forward(self, x, edge_index, node_hops, edge_hops):
        L = len(self.convs)
        for i, conv in enumerate(self.convs):
            n_in, n_out, e = node_hops[L - i], node_hops[L - 1 - i], edge_hops[L - 1 - i]
            x = conv((_rows(x, n_in), x[:n_out]), edge_index[:, :e])
            if i < L - 1:
                x = F.elu(x)
        return x


class Trainer:
    """One model and optimiser; ``step(batch, x, labels)`` trains on one gathered mini-batch."""

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.cfg = cfg
        L = len(cfg.fanouts)
        self.model = (SAGE(in_dim, cfg.hidden, num_classes, L) if cfg.name == "sage"
                      else GAT(in_dim, cfg.hidden, num_classes, L, cfg.heads))
        self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.losses: list[float] = []
        self.accs: list[float] = []

    @property
    def nbytes(self) -> int:
        """Bytes of parameters plus Adam state (what "the model" adds to memory)."""
        return 3 * sum(p.numel() * p.element_size() for p in self.model.parameters())

    def _inputs(self, batch: SampledBatch, x: np.ndarray):
        xt = torch.from_numpy(np.asarray(x, np.float32))
        ei = torch.from_numpy(np.stack([batch.edge_src, batch.edge_dst]).astype(np.int64))
        return xt, ei, [int(v) for v in batch.node_hops], [int(v) for v in batch.edge_hops]

    def step(self, batch: SampledBatch, x: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
        """Train on one mini-batch; return (loss, accuracy on its seeds)."""
        self.model.train()
        xt, ei, nh, eh = self._inputs(batch, x)
        y = torch.from_numpy(labels[batch.n_id[:batch.batch_size]].astype(np.int64))
        self.opt.zero_grad()
        out = self.model(xt, ei, nh, eh)
        loss = F.cross_entropy(out, y)
        loss.backward()
        self.opt.step()
        acc = float((out.argmax(1) == y).float().mean())
        self.losses.append(float(loss.detach()))
        self.accs.append(acc)
        return float(loss.detach()), acc

    @torch.no_grad()
    def evaluate(self, batch: SampledBatch, x: np.ndarray, labels: np.ndarray) -> float:
        """Return accuracy on `batch`'s seeds without training."""
        self.model.eval()
        xt, ei, nh, eh = self._inputs(batch, x)
        y = torch.from_numpy(labels[batch.n_id[:batch.batch_size]].astype(np.int64))
        return float((self.model(xt, ei, nh, eh).argmax(1) == y).float().mean())
