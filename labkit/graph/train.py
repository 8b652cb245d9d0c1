"""GraphSAGE node classification over any store + sampler, with the epoch split into sample / gather / train."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from labkit.core.errors import check_range
from labkit.graph.checks import check_labels
from labkit.graph.sampling import MultiHopSample
from labkit.graph.traverse import batch_stream, check_epoch, node_batches


class SAGE(torch.nn.Module):
    """A GraphSAGE model of PyG SAGEConv layers (mean aggregation), one per hop."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int = 2, dropout: float = 0.2) -> None:
        super().__init__()
        from labkit.graph.pyglayers import layer
        SAGEConv = layer("SAGEConv")
        check_range("num_layers", num_layers, 1, integer=True)
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = torch.nn.functional.dropout(x.relu(), self.dropout, self.training)
        return x


def edge_index(sample: MultiHopSample) -> torch.Tensor:
    """Return the [2, E] message-passing edges of `sample`: sampled neighbour (source) -> expanded node."""
    src = np.concatenate(sample.cols) if sample.cols else np.empty(0, np.int64)
    dst = np.concatenate(sample.rows) if sample.rows else np.empty(0, np.int64)
    return torch.from_numpy(np.stack([src, dst]))


def _out_dim(model: torch.nn.Module) -> int | None:
    """Return the number of classes `model` scores (its last layer's width), or None if it cannot be told."""
    convs = getattr(model, "convs", None)
    last = convs[-1] if isinstance(convs, torch.nn.ModuleList) and len(convs) else None
    width = getattr(last, "out_channels", None)
    return int(width) if isinstance(width, int) else None


def _checked_labels(model: torch.nn.Module, labels, ids, arg_ids: str) -> np.ndarray:
    """Return `labels` after checking the entries `ids` reads are class ids the model scores, else raise.

    One vectorised pass over those ids, before any step: a label of -1 or past the model's
    classes would otherwise fail inside torch (or, unchecked, train on garbage).
    """
    return check_labels(labels, None, _out_dim(model), ids=ids, ids_arg=arg_ids)


@dataclass
class EpochResult:
    """One epoch: seconds in each stage, mean loss, and batches."""

    seconds: float
    sample_s: float
    gather_s: float
    train_s: float
    loss: float
    batches: int


def train_epoch(model: torch.nn.Module, opt: torch.optim.Optimizer, sampler, store, train_ids: np.ndarray,
                labels: np.ndarray, fanouts: list[int], batch_size: int, *, epoch: int = 0,
                seed: int = 0, max_batches: int | None = None) -> EpochResult:
    """Train one epoch of shuffled mini-batches: sample through `sampler`, gather features from `store`.

    `labels` must hold a class id in [0, classes of the model) for every id of `train_ids` (checked
    before the first step); leave unlabelled nodes out of `train_ids`.
    """
    epoch = check_epoch(epoch)  # batch b draws stream batch_stream(epoch, b)
    labels = _checked_labels(model, labels, train_ids, "train_ids")
    model.train()
    t_s = t_g = t_t = 0.0
    losses = []
    t0 = time.perf_counter()
    y_all = torch.from_numpy(np.asarray(labels))
    for b, seeds in enumerate(node_batches(train_ids, batch_size, shuffle=True, seed=seed, epoch=epoch)):
        if max_batches is not None and b >= max_batches:
            break
        a = time.perf_counter()
        s = sampler.sample(seeds, fanouts, seed=seed, stream=batch_stream(epoch, b))
        c = time.perf_counter()
        x = torch.from_numpy(store.features(s.nodes))
        d = time.perf_counter()
        opt.zero_grad()
        out = model(x, edge_index(s))[:len(seeds)]
        loss = torch.nn.functional.cross_entropy(out, y_all[torch.from_numpy(seeds)])
        loss.backward()
        opt.step()
        e = time.perf_counter()
        t_s, t_g, t_t = t_s + c - a, t_g + d - c, t_t + e - d
        losses.append(loss.item())
    return EpochResult(time.perf_counter() - t0, t_s, t_g, t_t, float(np.mean(losses)) if losses else float("nan"),
                       len(losses))


@torch.no_grad()
def evaluate(model: torch.nn.Module, sampler, store, ids: np.ndarray, labels: np.ndarray, fanouts: list[int],
             batch_size: int = 1024, *, seed: int = 1) -> float:
    """Return the accuracy of `model` on `ids` (sampled neighbourhoods, fixed seed); labels checked as in train_epoch."""
    labels = _checked_labels(model, labels, ids, "ids")
    model.eval()
    correct = 0
    for b, seeds in enumerate(node_batches(ids, batch_size, shuffle=False)):
        s = sampler.sample(seeds, fanouts, seed=seed, stream=b)
        out = model(torch.from_numpy(store.features(s.nodes)), edge_index(s))[:len(seeds)]
        correct += int((out.argmax(1).numpy() == np.asarray(labels)[seeds]).sum())
    return correct / max(1, len(ids))
