"""One model interface with PICASSO's three techniques as independent switches.

``RecModel(kind, specs, packing=..., interleave=..., cache=...)`` builds Wide & Deep, DLRM or
DeepFM over either embedding stage; ``train_step(batch)`` runs forward, backward and both
optimizers. Every combination of the switches trains the same model on the same data from the
same initial weights.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from labkit.core.cacheplan import CachePlan, hot_fraction
from labkit.core.errors import bad_value, check_choice, check_range, check_seed
from labkit.recsys.cache import SlowTier, check_root
from labkit.recsys.data import N_DENSE_CRITEO, BadBatch, FieldSpec, JaggedBatch, check_ids
from labkit.recsys.interleave import Interleaver
from labkit.recsys.layers import (EMB_OPTIMIZERS, DenseArch, PerFieldEmbeddings, check_hidden, check_lr,
                                  check_specs, model_tables)
from labkit.recsys.packing import PackedEmbeddings

DENSE_OPTIMIZERS = ("sgd", "adagrad")


@dataclass(frozen=True)
class Techniques:
    """Which PICASSO techniques are on: packing, interleaving (micro-batches) and caching (row fraction)."""

    packing: bool = False
    interleave: int = 0
    cache: float = 0.0

    def __post_init__(self) -> None:
        check_range("interleave", self.interleave, 0, 1024, integer=True)
        check_range("cache", self.cache, 0.0, 1.0)

    @property
    def label(self) -> str:
        on = [n for n, v in (("packing", self.packing), ("interleave", self.interleave > 1),
                             ("cache", self.cache > 0)) if v]
        return "+".join(on) or "baseline"


class RecModel:
    """A CTR model (embedding stage + dense network) with PICASSO's techniques switchable.

    With ``check=True`` (the default) every batch given to :meth:`train_step`, :meth:`predict` and
    :meth:`eval_loss` is checked first (:func:`~labkit.recsys.data.check_ids`: field names and
    order, ids in range or hashed as the spec says, dense width; one vectorised pass) and a
    mismatch raises :class:`~labkit.recsys.data.BadBatch`. ``check=False`` skips that for data
    already checked (e.g. by a reader): an out-of-range id then reads or writes outside the packed
    tables, whose numba kernels do not bounds-check, and can crash the process.
    """

    def __init__(self, kind: str, specs: Sequence[FieldSpec], *, packing: bool = False, interleave: int = 0,
                 cache: float = 0.0, optimizer: str = "sgd", lr: float = 0.05, dense_optimizer: str = "sgd",
                 dense_lr: float = 0.05, hidden: Sequence[int] = (128, 64), n_dense: int = N_DENSE_CRITEO,
                 seed: int = 0, slow_tier_root=None, check: bool = True) -> None:
        # Every argument is checked before anything is built (the slow tier makes a folder).
        check_choice("optimizer", optimizer, EMB_OPTIMIZERS)
        check_choice("dense_optimizer", dense_optimizer, DENSE_OPTIMIZERS)
        check_choice("packing", packing, (False, True))
        check_range("interleave", interleave, 0, 1024, integer=True)
        check_range("cache", cache, 0.0, 1.0)
        check_choice("check", check, (False, True))
        lr, dense_lr = check_lr("lr", lr), check_lr("dense_lr", dense_lr)
        n_dense = int(check_range("n_dense", n_dense, 0, 1000, integer=True))
        seed = check_seed(seed, bits=64)
        if slow_tier_root is not None:
            check_root("slow_tier_root", slow_tier_root)
        self.kind, self.specs = kind, check_specs(specs)
        packing, interleave, cache = bool(packing), int(interleave), float(cache)
        self.techniques = Techniques(packing, interleave, cache)
        self.check = bool(check)
        tables = model_tables(kind, self.specs)
        hidden = check_hidden(hidden)
        tier = None
        if packing or cache > 0:
            # Caching without packing keeps one table per field (same kernels, F lookups).
            tier = SlowTier.create(slow_tier_root, arg="slow_tier_root") if cache > 0 else None
        try:
            if packing or cache > 0:
                self.embeddings = PackedEmbeddings(tables, optimizer=optimizer, lr=lr, seed=seed,
                                                   group_by="dim" if packing else "field", slow_tier=tier)
            else:
                self.embeddings = PerFieldEmbeddings(tables, optimizer=optimizer, lr=lr, seed=seed)
            self.dense = DenseArch(kind, self.specs, n_dense=n_dense, hidden=hidden, seed=seed)
            params = list(self.dense.parameters())
            self.dense_opt = (torch.optim.SGD(params, lr=dense_lr) if dense_optimizer == "sgd"
                              else torch.optim.Adagrad(params, lr=dense_lr))
            self.loss_fn = nn.BCEWithLogitsLoss()
            self._interleaver = Interleaver(interleave) if interleave > 1 else None
        except BaseException:
            # A half-built model is never returned, so nobody could close it: remove the slow
            # tier's files now rather than leave them in the temp dir.
            if tier is not None:
                tier.close()
            raise

    # ---- pieces the step is made of ------------------------------------------------------
    def loss(self, emb: torch.Tensor, batch: JaggedBatch) -> torch.Tensor:
        """Mean BCE loss of the dense network on pooled embeddings `emb`."""
        logits = self.dense(emb, torch.from_numpy(batch.dense))
        return self.loss_fn(logits, torch.from_numpy(batch.labels))

    def dense_step(self) -> None:
        self.dense_opt.step()
        self.dense_opt.zero_grad(set_to_none=True)

    def checked(self, batch: JaggedBatch) -> JaggedBatch:
        """Return `batch` checked against the model (ids hashed where the spec says so); see the class doc."""
        batch = check_ids(self.specs, batch)
        if batch.dense.shape[1] != self.dense.n_dense:  # JaggedBatch holds a 2-d dense
            raise bad_value("batch.dense", f"shape {batch.dense.shape}", f"shape (B, {self.dense.n_dense}) "
                            "(n_dense of the model)", exc=BadBatch)
        return batch

    def predict(self, batch: JaggedBatch) -> torch.Tensor:
        """Return click probabilities ``[B]`` (no training)."""
        if self.check:
            batch = self.checked(batch)
        with torch.no_grad():
            emb = self.embeddings.lookup(batch)
            return torch.sigmoid(self.dense(emb, torch.from_numpy(batch.dense)))

    def eval_loss(self, batch: JaggedBatch) -> float:
        """Return the mean BCE loss on `batch` (no training)."""
        if self.check:
            batch = self.checked(batch)
        with torch.no_grad():
            return float(self.loss(self.embeddings.lookup(batch), batch))

    def train_step(self, batch: JaggedBatch) -> float:
        """Forward, backward and update on `batch`; returns the loss before the update."""
        if self.check:
            batch = self.checked(batch)
        if self._interleaver is not None:
            return self._interleaver.step(self, batch)
        emb = self.embeddings.lookup(batch)
        e = emb.detach().requires_grad_()
        loss = self.loss(e, batch)
        loss.backward()
        self.embeddings.apply(batch, emb, e.grad)
        self.dense_step()
        return float(loss.detach())

    # ---- caching ---------------------------------------------------------------------------
    def warm_cache(self, batches, fraction: float | None = None) -> CachePlan:
        """Count ids over `batches`, plan a cache of `fraction` of all rows, and fill it."""
        if not isinstance(self.embeddings, PackedEmbeddings) or self.embeddings.slow_tier is None:
            raise ValueError("cache=0 is not accepted for warm_cache; build the model with cache > 0")
        frac = self.techniques.cache if fraction is None else fraction
        counts = self.embeddings.count_ids(batches)
        plan = hot_fraction(counts, frac)
        self.embeddings.plan_cache(plan)
        return plan

    @property
    def hit_rate(self) -> float:
        return self.embeddings.hit_rate

    def copy_weights_from(self, other: "RecModel") -> None:
        """Make this model's tables and dense weights equal to `other`'s."""
        for i in range(len(other.embeddings.tables)):
            self.embeddings.load_table(i, other.embeddings.table_weights(i))
        self.dense.load_state_dict(other.dense.state_dict())

    def close(self) -> None:
        if self._interleaver is not None:
            self._interleaver.close()
        self.embeddings.close()

    def __enter__(self) -> "RecModel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def count_ops(step, *, steps: int = 1) -> dict:
    """Run `step()` under torch.profiler and return operator counts per step.

    Counts every recorded ``aten::`` operator (nested ones included, as the profiler sees them)
    plus labkit's own numba kernels (``picasso::`` ranges), so packed work is not hidden. Every
    thread's operators count, so an interleaved step's lanes are counted in full: the profiler's
    default records only threads it sees start ops after it starts, and an interleaved step's
    counts then wandered from one call to the next (266 to 726 ops for the same step).
    """
    from torch.profiler import ProfilerActivity, _ExperimentalConfig, profile
    step()  # warm: first calls allocate optimizer state
    everyone = _ExperimentalConfig(profile_all_threads=True)
    with _without_profiler_banners(), profile(activities=[ProfilerActivity.CPU], experimental_config=everyone) as prof:
        for _ in range(steps):
            step()
    aten = kern = 0
    top = 0
    for ev in prof.events():
        if ev.name.startswith("aten::"):
            aten += 1
            if ev.cpu_parent is None or not ev.cpu_parent.name.startswith("aten::"):
                top += 1
        elif ev.name.startswith("picasso::"):
            kern += 1
    return {"ops": (aten + kern) / steps, "aten_ops": aten / steps, "top_level_ops": (top + kern) / steps,
            "kernels": kern / steps}


@contextlib.contextmanager
def _without_profiler_banners():
    """Keep torch's profiler start/stop banners ("USDT: ... profiler_start", "STAGE: ...", which its
    C++ side writes straight to file descriptor 2) out of notebooks and logs; anything else written
    to fd 2 meanwhile is passed on when the block ends."""
    import tempfile
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            rest = [ln for ln in tmp.read().decode(errors="replace").splitlines(keepends=True)
                    if not ln.startswith(("USDT:", "STAGE:"))]
            if rest:
                sys.stderr.write("".join(rest))
