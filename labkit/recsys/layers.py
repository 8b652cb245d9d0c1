"""The layers a recommender is built from: Wide & Deep, DLRM and DeepFM dense networks over an embedding
stage, and the per-field embedding baseline (:mod:`labkit.recsys.model` assembles them into one model).

The baseline is written the way such models usually are in PyTorch: one ``nn.EmbeddingBag``
per field with sparse gradients, outputs concatenated, a stock ``torch.optim`` optimizer
stepping every table. The dense part (:class:`DenseArch`) is shared, so a packed stage can be
swapped in under the very same network.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from labkit.core.errors import bad_value, check_choice, check_range, check_seed
from labkit.recsys.data import N_DENSE_CRITEO, FieldSpec, JaggedBatch, check_fits, check_lr, check_specs
from labkit.recsys.tables import Table, canonical_order, init_table, tables_for

MODELS = ("wide_deep", "dlrm", "deepfm")
EMB_OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad")


class RowWiseAdagrad(torch.optim.Optimizer):
    """Row-wise Adagrad for sparse embedding gradients: one accumulator per row (mean of g^2)."""

    def __init__(self, params, lr: float = 0.05, eps: float = 1e-10) -> None:
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        for grp in self.param_groups:
            for p in grp["params"]:
                if p.grad is None:
                    continue
                g = p.grad.coalesce()
                idx, val = g.indices()[0], g.values()
                st = self.state[p]
                if "sum" not in st:
                    st["sum"] = torch.zeros(p.shape[0], dtype=p.dtype)
                s = st["sum"]
                s.index_add_(0, idx, val.pow(2).mean(1))
                den = s.index_select(0, idx).sqrt_().add_(grp["eps"])
                p.index_add_(0, idx, val / den[:, None], alpha=-grp["lr"])


class PerFieldEmbeddings(nn.Module):
    """The baseline embedding stage: one ``nn.EmbeddingBag`` (sparse grads) per table, one torch optimizer."""

    packed = False

    def __init__(self, tables: Sequence[Table], *, optimizer: str = "sgd", lr: float = 0.05,
                 eps: float = 1e-10, seed: int = 0) -> None:
        super().__init__()
        check_choice("optimizer", optimizer, EMB_OPTIMIZERS)
        lr, seed = check_lr("lr", lr), check_seed(seed, bits=64)
        self.tables = list(tables)
        if not self.tables:
            raise bad_value("tables", self.tables, "at least one Table")
        self.order = canonical_order(self.tables)
        self.width = sum(t.dim for t in self.tables)
        self.bags = nn.ModuleList()
        for i, t in enumerate(self.tables):
            bag = nn.EmbeddingBag(t.cardinality, t.dim, mode=t.pooling, sparse=True, include_last_offset=True,
                                  _weight=torch.from_numpy(init_table(i, t, seed)))
            self.bags.append(bag)
        params = list(self.bags.parameters())
        if optimizer == "sgd":
            self.opt = torch.optim.SGD(params, lr=lr)
        elif optimizer == "adagrad":
            self.opt = torch.optim.Adagrad(params, lr=lr, eps=eps)
        else:
            self.opt = RowWiseAdagrad(params, lr=lr, eps=eps)
        self.hits = self.lookups = np.zeros(1, np.int64)
        n_feat = max(t.feature for t in self.tables) + 1
        self._cards = [min((t.cardinality for t in self.tables if t.feature == f), default=2**62)
                       for f in range(n_feat)]

    def lookup(self, batch: JaggedBatch) -> torch.Tensor:
        """Return pooled embeddings ``[B, width]``: one EmbeddingBag call per table, then one cat."""
        check_fits(batch, self._cards)  # torch's IndexError would not name the field
        outs = []
        for i in self.order:
            ids, off = batch.field_ids(self.tables[i].feature)
            outs.append(self.bags[i](torch.from_numpy(ids), torch.from_numpy(off)))
        return torch.cat(outs, dim=1)

    forward = lookup

    def apply(self, batch: JaggedBatch, emb, grad) -> None:
        """Backpropagate `grad` into the tables (sparse grads) and step the optimizer."""
        if isinstance(emb, (list, tuple)):
            torch.autograd.backward(list(emb), list(grad))
        else:
            emb.backward(grad)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def backward_only(self, emb, grad) -> None:
        """Accumulate sparse grads for one micro-batch (the optimizer steps in :meth:`step`)."""
        emb.backward(grad)

    def step(self) -> None:
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def table_weights(self, i: int) -> np.ndarray:
        return self.bags[i].weight.detach().numpy().copy()

    def load_table(self, i: int, w: np.ndarray) -> None:
        with torch.no_grad():
            self.bags[i].weight.copy_(torch.from_numpy(w))

    @property
    def n_lookups(self) -> int:
        return len(self.tables)

    @property
    def hit_rate(self) -> float:
        return 0.0

    def close(self) -> None:
        pass


def mlp(sizes: Sequence[int], last_act: bool = False) -> nn.Sequential:
    """Return Linear+ReLU layers through `sizes` (no ReLU after the last unless `last_act`)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2 or last_act:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DenseArch(nn.Module):
    """The dense network of Wide & Deep, DLRM or DeepFM over pooled embeddings and dense features.

    Input embeddings come in canonical order: the F wide (dim-1) columns first when the model has
    a wide part, then the deep tables.
    """

    def __init__(self, kind: str, specs: Sequence[FieldSpec], *, n_dense: int = N_DENSE_CRITEO,
                 hidden: Sequence[int] = (128, 64), seed: int = 0) -> None:
        super().__init__()
        self.kind = check_choice("kind", kind, MODELS)
        specs = check_specs(specs)
        hidden = check_hidden(hidden)
        n_dense = int(check_range("n_dense", n_dense, 0, 1000, integer=True))
        seed = check_seed(seed, bits=64)
        self.n_fields, self.n_dense = len(specs), n_dense
        self.n_wide = self.n_fields if kind in ("wide_deep", "deepfm") else 0
        dims = [s.dim for s in specs]
        if kind in ("dlrm", "deepfm") and len(set(dims)) != 1:
            odd = next(s for s in specs if s.dim != dims[0])
            raise ValueError(f"field {odd.name!r}: dim={odd.dim} is not accepted; {kind} needs one embedding "
                             f"dim for all fields (got {sorted(set(dims))})")
        self.deep_width = sum(dims)
        self.dim = dims[0]
        g = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=g)))
            if kind in ("wide_deep", "deepfm"):
                self.wide_dense = nn.Linear(n_dense, 1)
                # The deep MLP's first layer on [embeddings, dense] is split in two Linears summed:
                # the same function without materialising the concatenation (forward or backward).
                self.deep_in = nn.Linear(self.deep_width, hidden[0])
                self.dense_in = nn.Linear(n_dense, hidden[0], bias=False)
                self.deep = mlp([hidden[0], *hidden[1:], 1])
            else:
                self.bottom = mlp([n_dense, 64, self.dim], last_act=True)
                f1 = self.n_fields + 1
                self.register_buffer("tri", torch.triu_indices(f1, f1, offset=1), persistent=False)
                self.top = mlp([self.dim + f1 * (f1 - 1) // 2, *hidden, 1])

    def forward(self, emb: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        """Return logits ``[B]``."""
        w = self.n_wide
        if w:
            # one split (its backward is one cat) rather than two slices (two zero-filled grads)
            wide, deep = torch.split(emb, [w, emb.shape[1] - w], 1)
            h = torch.relu(self.deep_in(deep) + self.dense_in(dense))
            logit = wide.sum(1) + self.wide_dense(dense).squeeze(1) + self.deep(h).squeeze(1)
            if self.kind == "deepfm":
                e = deep.reshape(emb.shape[0], self.n_fields, self.dim)
                s = e.sum(1)
                logit = logit + 0.5 * (s * s - (e * e).sum(1)).sum(1)
            return logit
        x = self.bottom(dense)
        z = torch.cat([x[:, None, :], emb.reshape(emb.shape[0], self.n_fields, self.dim)], 1)
        dots = torch.bmm(z, z.transpose(1, 2))[:, self.tri[0], self.tri[1]]
        return self.top(torch.cat([x, dots], 1)).squeeze(1)


def model_tables(kind: str, specs: Sequence[FieldSpec]) -> list[Table]:
    """The embedding tables model `kind` needs over `specs` (wide dim-1 tables for W&D and DeepFM)."""
    check_choice("kind", kind, MODELS)
    return tables_for(specs, wide=kind in ("wide_deep", "deepfm"))


def check_hidden(hidden: Sequence[int]) -> tuple[int, ...]:
    """Return the dense network's hidden layer widths as ints: at least one layer, each in [1, 65536]."""
    if isinstance(hidden, (str, bytes)) or not isinstance(hidden, (Sequence, np.ndarray)) or len(hidden) == 0:
        raise bad_value("hidden", hidden, "a non-empty sequence of layer widths, e.g. (128, 64)")
    for h in hidden:
        check_range("hidden", h, 1, 1 << 16, integer=True)
    return tuple(int(h) for h in hidden)


def weights_equal(a, b, atol: float = 0.0) -> bool:
    """True when two embedding stages hold the same table rows (within `atol`)."""
    if len(a.tables) != len(b.tables):
        return False
    return all(np.allclose(a.table_weights(i), b.table_weights(i), atol=atol, rtol=0)
               for i in range(len(a.tables)))


