"""PICASSO's hybrid-parallel setting: Wide & Deep across ranks, tables sharded, dense part replicated.

Each rank (a process; ``torch.distributed`` over gloo) owns the embedding tables of the fields
:func:`field_owner` gives it (model parallel: table-wise sharding) and a copy of the dense network
(data parallel). A step on a global batch of ``batch`` samples, each rank holding its own
contiguous share of the samples (its reader's output):

1. input dist: every rank sends the ids of its samples to the owner of each field (lengths, then values);
2. the owner looks up its tables for the whole global batch (a packed stage,
   :class:`~labkit.recsys.packing.PackedEmbeddings`);
3. output dist: the owner sends every rank the pooled rows of that rank's samples;
4. each rank runs the dense network forward and backward on its samples;
5. grad dist: each rank sends the gradient of those rows back to their owner, which runs the fused
   backward + SGD update of its tables on the whole batch;
6. the dense gradients (and the loss) are summed by one allreduce and every rank steps its copy.

``mode="per_field"`` runs one all-to-all per field in each of the exchanges 1, 3 and 5 (what a
trainer that loops over its features issues); ``mode="packed"`` packs every field into one
all-to-all per exchange (PICASSO's data packing). Both issue their all-to-alls asynchronously and
use the same lookup and update kernels, so the two modes differ only in how the bytes are
grouped into messages. ``interleave=m`` splits each rank's samples into `m` micro-batches: the
next micro-batch's output dist is posted as soon as this one's rows have arrived, and each
micro-batch's gradient is sent back as soon as its dense backward ends, so one micro-batch's
all-to-all overlaps another's dense compute. Every mode
trains the model single-process training trains on the same data (:func:`reference_losses`), up
to float rounding.

:class:`RankGroup` starts the ranks as subprocesses (on the hosts of a
:mod:`labkit.core.cluster` cluster, or locally on 127.0.0.1) and drives them over pipes; a rank
that dies or stops answering raises :class:`HybridError`. TorchRec's ``DistributedModelParallel``
(table-wise sharding, fused SGD) can be set up beside the hybrid trainers as an anchor.
"""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from labkit.core.errors import LabkitError, bad_value, check_choice, check_range, check_seed
from labkit.recsys.data import JaggedBatch, SyntheticCTR, make_fields
from labkit.recsys.layers import DenseArch, check_hidden, model_tables
from labkit.recsys.model import RecModel
from labkit.recsys.packing import PackedEmbeddings
from labkit.recsys.tables import Table, canonical_order, column_offsets, init_table

MODES = ("per_field", "packed")
#: The contender name that builds TorchRec's DistributedModelParallel instead of a hybrid trainer.
TORCHREC = "torchrec_dmp"


class HybridError(LabkitError, RuntimeError):
    """A rank of a :class:`RankGroup` died, failed or stopped answering (one line, names the rank)."""


@dataclass(frozen=True)
class HybridConfig:
    """The Wide & Deep model and data every rank (and the single-process reference) builds.

    `fields` categorical fields of `rows` rows each (a dim-1 wide and a `dim` deep table per
    field), Zipf(`zipf`) ids, `n_dense` dense features, a global batch of `batch` samples,
    `n_batches` distinct batches cycled, SGD at `lr` for tables and dense network alike.
    """

    fields: int = 100
    rows: int = 1000
    dim: int = 16
    batch: int = 1024
    n_dense: int = 13
    hidden: tuple = (128, 64)
    seed: int = 0
    lr: float = 0.05
    zipf: float = 1.05
    n_batches: int = 4

    def __post_init__(self) -> None:
        check_range("fields", self.fields, 1, 100_000, integer=True)
        check_range("rows", self.rows, 1, 1 << 31, integer=True)
        check_range("dim", self.dim, 1, 1024, integer=True)
        check_range("batch", self.batch, 1, 10_000_000, integer=True)
        check_range("n_dense", self.n_dense, 0, 1000, integer=True)
        object.__setattr__(self, "hidden", check_hidden(self.hidden))
        check_seed(self.seed, bits=64)
        check_range("lr", self.lr, 0.0, 1e6, lo_open=True)
        check_range("zipf", self.zipf, 0.0, 10.0)
        check_range("n_batches", self.n_batches, 1, 10_000, integer=True)

    def specs(self):
        return make_fields(self.fields, cardinality=self.rows, dims=self.dim, zipf=self.zipf)

    def generator(self) -> SyntheticCTR:
        return SyntheticCTR(self.specs(), n_dense=self.n_dense, seed=self.seed)

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["hidden"] = list(self.hidden)
        return d


def check_config(cfg: Any) -> HybridConfig:
    if not isinstance(cfg, HybridConfig):
        raise bad_value("cfg", type(cfg).__name__, "a HybridConfig", exc=TypeError)
    return cfg


def field_owner(f: int, world: int) -> int:
    """The rank that holds field `f`'s tables (round robin, so every rank owns a near-equal share)."""
    return int(f) % int(world)


def sample_edges(n: int, parts: int) -> np.ndarray:
    """Return the parts + 1 boundaries of `n` samples cut into `parts` contiguous near-equal shares."""
    return np.linspace(0, n, parts + 1).round().astype(np.int64)


def reference_losses(cfg: HybridConfig, steps: int) -> list[float]:
    """Losses of `steps` single-process training steps of the same model on the same global batches."""
    cfg = check_config(cfg)
    check_range("steps", steps, 1, 1_000_000, integer=True)
    gen = cfg.generator()
    with RecModel("wide_deep", gen.specs, packing=True, lr=cfg.lr, dense_lr=cfg.lr, hidden=cfg.hidden,
                  n_dense=cfg.n_dense, seed=cfg.seed) as m:
        return [m.train_step(gen.batch(cfg.batch, i % cfg.n_batches)) for i in range(int(steps))]


# ---- one rank ---------------------------------------------------------------------------------------

@dataclass
class _Exchange:
    """One all-to-all: the owners that send in it, and per owner its fields and columns."""

    fields: dict  # owner -> global field indices (in owner-local order)
    local_cols: dict  # owner -> LongTensor of columns of the owner's stage output
    global_cols: dict  # owner -> LongTensor of columns of the full embedding row
    all_local: dict  # owner -> True when local_cols is every column of the owner's output, in order


class _Layout:
    """Who owns what, and where each table's columns sit, for one rank of `world`."""

    def __init__(self, cfg: HybridConfig, rank: int, world: int) -> None:
        self.cfg, self.rank, self.world = cfg, rank, world
        self.specs = cfg.specs()
        self.tables = model_tables("wide_deep", self.specs)
        self.width = sum(t.dim for t in self.tables)
        gcol = column_offsets(self.tables)
        self.owned: dict[int, list[int]] = {}  # owner -> its global table indices (canonical order)
        self.fields_of: dict[int, list[int]] = {}  # owner -> its fields
        self.local_tables: dict[int, list[Table]] = {}
        lcol: dict[int, dict[int, int]] = {}  # owner -> global table index -> first column in its output
        for o in range(world):
            self.fields_of[o] = [f for f in range(cfg.fields) if field_owner(f, world) == o]
            local_f = {f: k for k, f in enumerate(self.fields_of[o])}
            idx = [i for i in canonical_order(self.tables) if field_owner(self.tables[i].feature, world) == o]
            self.owned[o] = idx
            self.local_tables[o] = [dataclasses.replace(self.tables[i], feature=local_f[self.tables[i].feature])
                                    for i in idx]
            lc = column_offsets(self.local_tables[o])
            lcol[o] = {i: lc[j] for j, i in enumerate(idx)}
        self.local_width = {o: sum(t.dim for t in self.local_tables[o]) for o in range(world)}

        def exchange(fields_by_owner: dict) -> _Exchange:
            lc_, gc_, alll = {}, {}, {}
            for o, fs in fields_by_owner.items():
                ts = [i for i in self.owned[o] if self.tables[i].feature in set(fs)]
                lc_[o] = torch.cat([torch.arange(lcol[o][i], lcol[o][i] + self.tables[i].dim) for i in ts])
                gc_[o] = torch.cat([torch.arange(gcol[i], gcol[i] + self.tables[i].dim) for i in ts])
                alll[o] = bool(lc_[o].numel() == self.local_width[o]
                               and torch.equal(lc_[o], torch.arange(self.local_width[o])))
            return _Exchange(dict(fields_by_owner), lc_, gc_, alll)

        self.exchanges = {
            "packed": [exchange({o: self.fields_of[o] for o in range(world)})],
            "per_field": [exchange({field_owner(f, world): [f]}) for f in range(cfg.fields)],
        }
        self.edges = sample_edges(cfg.batch, world)  # rank r holds global samples [edges[r], edges[r + 1])
        self.n_local = [int(self.edges[r + 1] - self.edges[r]) for r in range(world)]


class _Model:
    """One contender's weights on one rank: its tables' shard (packed stage) and its dense copy."""

    def __init__(self, lay: _Layout) -> None:
        cfg = lay.cfg
        self.stage = PackedEmbeddings(lay.local_tables[lay.rank], optimizer="sgd", lr=cfg.lr, seed=cfg.seed)
        for j, i in enumerate(lay.owned[lay.rank]):  # the rows single-process training starts from
            self.stage.load_table(j, init_table(i, lay.tables[i], cfg.seed))
        self.dense = DenseArch("wide_deep", lay.specs, n_dense=cfg.n_dense, hidden=cfg.hidden, seed=cfg.seed)
        self.params = [p for p in self.dense.parameters() if p.requires_grad]
        self.opt = torch.optim.SGD(self.params, lr=cfg.lr)
        self.loss_fn = torch.nn.BCEWithLogitsLoss()
        self.steps = 0


class HybridTrainer:
    """The ranks' side of the hybrid-parallel step (see the module doc); one per rank process."""

    def __init__(self, cfg: HybridConfig, rank: int, world: int) -> None:
        import torch.distributed as dist
        self.dist = dist
        self.cfg = check_config(cfg)
        if cfg.fields < world:
            raise bad_value("fields", cfg.fields, f"at least one field per rank (>= {world})")
        if cfg.batch < world:
            raise bad_value("batch", cfg.batch, f"at least one sample per rank (>= {world})")
        self.lay = _Layout(cfg, rank, world)
        self.rank, self.world = rank, world
        gen = cfg.generator()
        a, b = int(self.lay.edges[rank]), int(self.lay.edges[rank + 1])
        # This rank's reader: its share of each global batch, all fields.
        self.local = [gen.batch(cfg.batch, i).slice(a, b) for i in range(cfg.n_batches)]
        self.models: dict[str, _Model] = {}
        self._no_dense = np.zeros((cfg.batch, 0), np.float32)
        self._no_labels = np.zeros(cfg.batch, np.float32)

    def add(self, name: str) -> None:
        """Build contender `name` from the initial weights: TorchRec's DMP for :data:`TORCHREC`, else a hybrid model."""
        self.models[name] = _TorchRecModel(self) if name == TORCHREC else _Model(self.lay)

    # ---- exchanges ---------------------------------------------------------------------------
    def _a2a(self, out: torch.Tensor, inp: torch.Tensor, out_splits, in_splits):
        return self.dist.all_to_all_single(out, inp, [int(x) for x in out_splits], [int(x) for x in in_splits],
                                           async_op=True)

    def _input_dist(self, local: JaggedBatch, exchanges: list[_Exchange]) -> JaggedBatch:
        """Return the global batch of this rank's fields (ids from every rank's samples)."""
        me, W, nl = self.rank, self.world, self.lay.n_local
        B_me = local.batch_size
        lens_in: list = []
        for ex in exchanges:  # lengths first: the receiver sizes the values from them
            send = [local.lengths[f * B_me:(f + 1) * B_me] for o in range(W) for f in ex.fields.get(o, ())]
            in_splits = [len(ex.fields.get(o, ())) * B_me for o in range(W)]
            out_splits = [len(ex.fields.get(me, ())) * nl[r] for r in range(W)]
            recv = torch.empty(sum(out_splits), dtype=torch.int64)
            inp = torch.from_numpy(np.concatenate(send)) if send else torch.empty(0, dtype=torch.int64)
            lens_in.append((recv, out_splits, self._a2a(recv, inp, out_splits, in_splits)))
        vals_in = []
        for ex, (recv_len, out_splits, work) in zip(exchanges, lens_in):
            work.wait()
            mine = ex.fields.get(me, ())
            # per sending rank r: its lengths of my fields in this exchange, [fields, n_local[r]]
            per_r = torch.split(recv_len, out_splits)
            val_splits = [int(x.sum()) for x in per_r]
            send = [local.field_ids(f)[0] for o in range(W) for f in ex.fields.get(o, ())]
            in_splits = [sum(int(local.offsets[(f + 1) * B_me] - local.offsets[f * B_me]) for f in ex.fields.get(o, ()))
                         for o in range(W)]
            recv = torch.empty(sum(val_splits), dtype=torch.int64)
            inp = torch.from_numpy(np.concatenate(send)) if send else torch.empty(0, dtype=torch.int64)
            vals_in.append((mine, per_r, recv, val_splits, self._a2a(recv, inp, val_splits, in_splits)))
        lengths: dict = {}
        values: dict = {}
        for mine, per_r, recv, val_splits, work in vals_in:
            work.wait()
            for r, (ln, vs) in enumerate(zip(per_r, torch.split(recv, val_splits))):
                ln = ln.numpy().reshape(len(mine), nl[r])
                cut = np.concatenate([[0], np.cumsum(ln.sum(1))])
                for k, f in enumerate(mine):
                    lengths[f, r] = ln[k]
                    values[f, r] = vs.numpy()[cut[k]:cut[k + 1]]
        mine = self.lay.fields_of[me]
        keys = [self.lay.specs[f].name for f in mine]
        return JaggedBatch(keys, np.concatenate([values[f, r] for f in mine for r in range(W)]),
                           np.concatenate([lengths[f, r] for f in mine for r in range(W)]),
                           self._no_dense, self._no_labels)

    def _rows(self, micro: list[np.ndarray], i: int) -> list[torch.Tensor]:
        """Global sample indices of micro-batch `i` of every rank."""
        return [torch.arange(int(self.lay.edges[r] + micro[r][i]), int(self.lay.edges[r] + micro[r][i + 1]))
                for r in range(self.world)]

    def _fwd_post(self, emb: torch.Tensor, exchanges, rows: list[torch.Tensor]) -> list:
        """Post the output dist of the samples `rows` (per rank): owners send pooled rows, all receive."""
        me, W = self.rank, self.world
        n_me = len(rows[me])
        everyone = torch.cat(rows)
        contiguous = int(everyone[0]) == 0 and len(everyone) == emb.shape[0] if len(everyone) else True
        posted = []
        for ex in exchanges:
            if me in ex.fields:
                k = len(ex.local_cols[me])
                part = emb if contiguous else emb.index_select(0, everyone)
                if not ex.all_local[me]:
                    part = part.index_select(1, ex.local_cols[me])
                send = part.reshape(-1)
                in_splits = [len(rows[r]) * k for r in range(W)]
            else:
                send, in_splits = torch.empty(0), [0] * W
            out_splits = [n_me * len(ex.local_cols[o]) if o in ex.fields else 0 for o in range(W)]
            recv = torch.empty(sum(out_splits))
            posted.append((ex, recv, out_splits, self._a2a(recv, send, out_splits, in_splits)))
        return posted

    def _fwd_take(self, posted, n_me: int) -> torch.Tensor:
        out = torch.empty(n_me, self.lay.width)
        for ex, recv, out_splits, work in posted:
            work.wait()
            for o, chunk in enumerate(torch.split(recv, out_splits)):
                if o in ex.fields:
                    out.index_copy_(1, ex.global_cols[o], chunk.view(n_me, -1))
        return out

    def _bwd_post(self, grad: torch.Tensor, exchanges, rows: list[torch.Tensor]) -> list:
        """Post the grad dist of `grad` (this rank's rows `rows[me]`) to the owners."""
        me, W = self.rank, self.world
        n_me = grad.shape[0]
        posted = []
        for ex in exchanges:
            send = torch.cat([grad.index_select(1, ex.global_cols[o]).reshape(-1) for o in range(W) if o in ex.fields])
            in_splits = [n_me * len(ex.local_cols[o]) if o in ex.fields else 0 for o in range(W)]
            k = len(ex.local_cols[me]) if me in ex.fields else 0
            out_splits = [len(rows[r]) * k for r in range(W)]
            recv = torch.empty(sum(out_splits))
            posted.append((ex, recv, out_splits, rows, self._a2a(recv, send, out_splits, in_splits)))
        return posted

    def _bwd_take(self, posted, gemb: torch.Tensor) -> None:
        me = self.rank
        for ex, recv, out_splits, rows, work in posted:
            work.wait()
            if me not in ex.fields:
                continue
            cols = ex.local_cols[me]
            for r, chunk in enumerate(torch.split(recv, out_splits)):
                if len(rows[r]) == 0:
                    continue
                chunk = chunk.view(len(rows[r]), len(cols))
                if ex.all_local[me]:
                    gemb[rows[r]] = chunk
                else:
                    gemb[rows[r].unsqueeze(1), cols.unsqueeze(0)] = chunk

    # ---- the step ----------------------------------------------------------------------------
    def step(self, name: str, mode: str, interleave: int = 1) -> float:
        """One training step of contender `name`; returns the global batch's loss (before the update)."""
        m = self.models[name]
        if isinstance(m, _TorchRecModel):
            if mode != "torchrec" or interleave != 1:
                raise bad_value("mode", (mode, interleave), f"mode='torchrec', interleave=1 for {TORCHREC!r}")
            return m.step()
        exchanges = self.lay.exchanges[check_choice("mode", mode, MODES)]
        me, B = self.rank, self.cfg.batch
        local = self.local[m.steps % len(self.local)]
        m.steps += 1
        owned = self._input_dist(local, exchanges)
        emb = m.stage.lookup(owned)  # [B, my columns]: every rank's samples, my tables
        micro = [sample_edges(self.lay.n_local[r], interleave) for r in range(self.world)]
        rows = [self._rows(micro, i) for i in range(interleave)]
        dense, labels = torch.from_numpy(local.dense), torch.from_numpy(local.labels)
        bwd, loss_sum = [], torch.zeros(())
        fwd = self._fwd_post(emb, exchanges, rows[0])
        for i in range(interleave):
            a, b = int(micro[me][i]), int(micro[me][i + 1])
            e = self._fwd_take(fwd, b - a).requires_grad_()
            # The next micro-batch's rows travel while this one computes (posted only now, so they do
            # not share the links with this one's rows and delay them).
            if i + 1 < interleave:
                fwd = self._fwd_post(emb, exchanges, rows[i + 1])
            loss = m.loss_fn(m.dense(e, dense[a:b]), labels[a:b]) * ((b - a) / B)
            loss.backward()  # dense grads add up over the micro-batches
            loss_sum += loss.detach()
            bwd.append(self._bwd_post(e.grad, exchanges, rows[i]))
        flat = torch.cat([p.grad.reshape(-1) for p in m.params] + [loss_sum.reshape(1)])
        reduced = self.dist.all_reduce(flat, async_op=True)  # overlaps the gradient exchange and update
        gemb = torch.empty(B, self.lay.local_width[me])
        for posted in bwd:
            self._bwd_take(posted, gemb)
        m.stage.apply(owned, None, gemb)  # one fused update on the whole batch, as single-process training
        reduced.wait()
        k = 0
        for p in m.params:
            p.grad.copy_(flat[k:k + p.numel()].view_as(p))
            k += p.numel()
        m.opt.step()
        m.opt.zero_grad(set_to_none=True)
        return float(flat[-1])

    def close(self) -> None:
        for m in self.models.values():
            if isinstance(m, _Model):
                m.stage.close()
        self.models.clear()


class _TorchRecModel:
    """TorchRec's anchor on one rank: the same Wide & Deep tables in an ``EmbeddingBagCollection``,
    sharded table-wise by ``DistributedModelParallel`` (FBGEMM's fused SGD), under the same dense
    network (data parallel through DMP's DistributedDataParallel)."""

    def __init__(self, tr: HybridTrainer) -> None:
        import logging

        import torch.distributed as dist
        from torch import nn
        from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
        from torchrec.distributed.model_parallel import DistributedModelParallel
        from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
        from torchrec.distributed.planner.types import ParameterConstraints
        from torchrec.distributed.types import ShardingType
        from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
        from torchrec.modules.embedding_modules import EmbeddingBagCollection

        from labkit.recsys.baselines.torchrec import _quiet_fx_tracing_notice
        _quiet_fx_tracing_notice()
        for name in ("torchrec.distributed.planner", "torchrec.distributed.planner.types",
                     "torchrec.distributed.planner.storage_reservations"):
            logging.getLogger(name).setLevel(logging.ERROR)  # the planner's advice is for GPU fleets
        lay, cfg = tr.lay, tr.cfg
        if cfg.batch % tr.world:
            raise bad_value("batch", cfg.batch, f"a multiple of the ranks ({tr.world}) for {TORCHREC!r} (its "
                            "data-parallel part averages gradients over equal shares)")
        self.tr, self.world = tr, tr.world
        order = canonical_order(lay.tables)
        # A feature per table: a wide and a deep table read the same field under two names.
        self.keys = [("w" if lay.tables[i].wide else "d") + str(lay.tables[i].feature) for i in order]
        # FBGEMM's kernels need a multiple of 4 columns: a wide (dim-1) table becomes 4 wide, and the
        # model reads its first column only (the other three get no gradient and never change).
        self.dims = [max(4, -(-lay.tables[i].dim // 4) * 4) for i in order]
        cfgs = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=d,
                                   num_embeddings=lay.tables[i].cardinality, feature_names=[k],
                                   pooling=PoolingType.SUM if lay.tables[i].pooling == "sum" else PoolingType.MEAN)
                for i, k, d in zip(order, self.keys, self.dims)]
        self.names = [f"t{i}" for i in order]

        class WideDeep(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.ebc = EmbeddingBagCollection(tables=cfgs, device=torch.device("meta"))
                self.dense = DenseArch("wide_deep", lay.specs, n_dense=cfg.n_dense, hidden=cfg.hidden,
                                       seed=cfg.seed)

            def forward(self, kjt, dense):
                kt = self.ebc(kjt)
                kt = kt.wait() if hasattr(kt, "wait") else kt
                d = kt.to_dict()
                return self.dense(torch.cat([d[k][:, :w] for k, w in zip(keys, widths)], 1), dense)
        keys, widths = self.keys, [lay.tables[i].dim for i in order]
        model = WideDeep()
        # Each rank's loss is the mean over its share. DDP averages the dense gradients over the ranks,
        # and the tables' fused SGD at `lr` then makes the same step as single-process training on the
        # global batch (checked: the losses agree; lr / world did not).
        sharder = EmbeddingBagCollectionSharder(fused_params={"optimizer": _emb_opt_sgd(), "learning_rate": cfg.lr})
        constraints = {n: ParameterConstraints(sharding_types=[ShardingType.TABLE_WISE.value]) for n in self.names}
        plan = EmbeddingShardingPlanner(topology=Topology(world_size=tr.world, compute_device="cpu"),
                                        constraints=constraints).collective_plan(model, [sharder],
                                                                                 dist.GroupMember.WORLD)
        self.dmp = DistributedModelParallel(model, device=torch.device("cpu"), plan=plan, sharders=[sharder])
        state = self.dmp.state_dict()
        for i, n, d in zip(order, self.names, self.dims):  # the rows single-process training starts from, into each shard
            key = next(k for k in state if k.endswith(f"embedding_bags.{n}.weight"))
            w = torch.zeros(lay.tables[i].cardinality, d)
            w[:, :lay.tables[i].dim] = torch.from_numpy(init_table(i, lay.tables[i], cfg.seed))
            with torch.no_grad():
                for sh in state[key].local_shards():
                    (r0, c0), (nr, nc) = sh.metadata.shard_offsets, sh.metadata.shard_sizes
                    sh.tensor.copy_(w[r0:r0 + nr, c0:c0 + nc])
        self.params = [p for n, p in self.dmp.named_parameters() if ".ebc." not in n and not n.startswith("ebc.")
                       and "embedding_bags" not in n]
        self.opt = torch.optim.SGD(self.params, lr=cfg.lr)
        self.loss_fn = nn.BCEWithLogitsLoss()
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
        self.inputs = []
        for b in tr.local:
            per = {}
            for f in range(b.n_fields):
                per[f] = (b.field_ids(f)[0], b.lengths[f * b.batch_size:(f + 1) * b.batch_size])
            feats = [int(k[1:]) for k in keys]
            self.inputs.append((KeyedJaggedTensor(keys=keys, values=torch.from_numpy(np.concatenate([per[f][0] for f in feats])),
                                                  lengths=torch.from_numpy(np.concatenate([per[f][1] for f in feats]))),
                                torch.from_numpy(b.dense), torch.from_numpy(b.labels)))
        self.steps = 0

    def step(self) -> float:
        kjt, dense, labels = self.inputs[self.steps % len(self.inputs)]
        self.steps += 1
        loss = self.loss_fn(self.dmp(kjt, dense), labels)
        loss.backward()  # the fused tables update here
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        total = loss.detach() / self.world
        self.tr.dist.all_reduce(total)
        return float(total)


def _emb_opt_sgd():
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    return EmbOptimType.EXACT_SGD


# ---- the ranks as processes ---------------------------------------------------------------------------

def free_port(host: str = "") -> int:
    """A TCP port free on `host` now (bind port 0 and read what the kernel gave)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class RankGroup:
    """`world_size` training ranks as subprocesses, driven from here over pipes.

    With a `cluster` (:func:`labkit.core.cluster.start_cluster`) rank ``r`` runs in host ``r``'s
    network namespace and the ranks meet at host 0's address, so every all-to-all crosses the shaped
    links; without one they run here on 127.0.0.1. Each rank uses `threads` torch and numba threads.
    :meth:`setup` builds the contenders on every rank, :meth:`run` trains one of them; a rank that dies,
    fails or does not answer within `timeout` seconds raises :class:`HybridError` naming it, and the
    group is closed. :meth:`close` (also on leaving a ``with`` block, and at exit) ends every rank.
    """

    def __init__(self, world_size: int, cluster=None, *, timeout: float = 60.0, threads: int = 1) -> None:
        self.world = int(check_range("world_size", world_size, 1, 64, integer=True))
        self.timeout = float(check_range("timeout", timeout, 0.0, 86_400.0, lo_open=True))
        self.threads = int(check_range("threads", threads, 1, 1024, integer=True))
        if cluster is not None and len(cluster.hosts) < self.world:
            raise bad_value("world_size", world_size, f"at most the cluster's {len(cluster.hosts)} hosts")
        self.cluster = cluster
        shaped = bool(getattr(cluster, "shaped", False))
        self.addr = cluster.hosts[0].addr if cluster is not None else "127.0.0.1"
        self.port = free_port()
        self.procs: list[subprocess.Popen] = []
        self._errs: list = []
        self._bufs: list[bytes] = []
        self.contenders: list[str] = []
        self.closed = False
        import weakref
        self._finalizer = weakref.finalize(self, RankGroup._kill, self.procs, self._errs)
        try:
            for r in range(self.world):
                ifname = cluster.hosts[r].ifname if shaped else "lo"
                env = dict(os.environ, GLOO_SOCKET_IFNAME=ifname, OMP_NUM_THREADS=str(self.threads),
                           PYTHONUNBUFFERED="1")
                argv = [sys.executable, "-m", "labkit.recsys.hybrid", "--rank", str(r), "--world", str(self.world),
                        "--addr", self.addr, "--port", str(self.port), "--timeout", str(self.timeout),
                        "--threads", str(self.threads)]
                err = tempfile.TemporaryFile()
                self._errs.append(err)
                # Its own session: a Ctrl-C at the terminal reaches the driver alone, which then ends the ranks.
                kw = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env, start_new_session=True)
                p = cluster.popen(r, argv, **kw) if cluster is not None else subprocess.Popen(argv, **kw)
                self.procs.append(p)
                self._bufs.append(b"")
            self._replies("start", max(self.timeout, 120.0))
        except BaseException:
            self.close()
            raise

    # ---- talking to the ranks ----------------------------------------------------------------
    def _last_err(self, r: int) -> str:
        f = self._errs[r]
        try:
            f.seek(0)
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
        except (OSError, ValueError):
            return ""
        return lines[-1][:300] if lines else ""

    def _fail(self, msg: str) -> HybridError:
        self.close()
        return HybridError(msg)

    def _replies(self, what: str, timeout: float) -> list[dict]:
        """Wait for one reply line from every rank; raise HybridError naming a rank that failed, died or hung."""
        got: dict[int, dict] = {}
        sel = selectors.DefaultSelector()
        for r, p in enumerate(self.procs):
            os.set_blocking(p.stdout.fileno(), False)
            sel.register(p.stdout, selectors.EVENT_READ, r)
        deadline = time.monotonic() + timeout
        try:
            while len(got) < self.world:
                for key, _ in sel.select(timeout=max(0.0, min(0.2, deadline - time.monotonic()))):
                    r = key.data
                    chunk = os.read(key.fileobj.fileno(), 1 << 20)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    self._bufs[r] += chunk
                    if b"\n" in self._bufs[r]:
                        line, self._bufs[r] = self._bufs[r].split(b"\n", 1)
                        got[r] = json.loads(line)
                        sel.unregister(key.fileobj)
                failed = sorted(r for r, m in got.items() if "error" in m)
                if failed:
                    raise self._fail(f"rank {failed[0]} failed in {what}: {got[failed[0]]['error']}")
                for r, p in enumerate(self.procs):
                    if r not in got and p.poll() is not None:
                        why = self._last_err(r)
                        raise self._fail(f"rank {r} died in {what} (exit code {p.returncode})"
                                         + (f": {why}" if why else ""))
                if len(got) < self.world and time.monotonic() > deadline:
                    hung = [r for r in range(self.world) if r not in got]
                    raise self._fail(f"rank{'s' if len(hung) > 1 else ''} {', '.join(map(str, hung))} did not "
                                     f"answer {what} within {timeout:g} s (hung; all ranks killed)")
        finally:
            sel.close()
        return [got[r] for r in range(self.world)]

    def _call(self, msg: dict, timeout: float | None = None) -> list[dict]:
        if self.closed:
            raise HybridError("this RankGroup is closed; start a new one")
        line = (json.dumps(msg) + "\n").encode()
        for r, p in enumerate(self.procs):
            try:
                p.stdin.write(line)
                p.stdin.flush()
            except (BrokenPipeError, OSError):
                why = self._last_err(r)
                raise self._fail(f"rank {r} died before {msg['cmd']} (exit code {p.poll()})"
                                 + (f": {why}" if why else "")) from None
        return self._replies(msg["cmd"], self.timeout if timeout is None else timeout)

    # ---- public ------------------------------------------------------------------------------
    def setup(self, cfg: HybridConfig, contenders: Sequence[str] = ("per_field", "packed")) -> None:
        """Build one model per name in `contenders` on every rank, each from the same initial weights
        (:data:`TORCHREC` builds TorchRec's DistributedModelParallel; any other name a hybrid model)."""
        cfg = check_config(cfg)
        names = [contenders] if isinstance(contenders, str) else list(contenders)
        if not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
            raise bad_value("contenders", contenders, "a list of distinct, non-empty names")
        self._call({"cmd": "setup", "cfg": cfg.to_json(), "contenders": names}, max(self.timeout, 300.0))
        self.contenders = names
        self.cfg = cfg

    def run(self, name: str, mode: str = "packed", interleave: int = 1, steps: int = 1) -> dict:
        """Train contender `name` for `steps` steps; returns rank 0's ``{"times": [s per step], "losses": [...]}``.

        `mode` is "per_field" or "packed" ("torchrec" for the TorchRec contender); `interleave` the
        number of micro-batches (1: none).
        """
        check_choice("name", name, self.contenders)
        check_choice("mode", mode, ("torchrec",) if name == TORCHREC else MODES)
        check_range("interleave", interleave, 1, max(1, min(self.cfg.batch // self.world, 1024)), integer=True)
        check_range("steps", steps, 1, 1_000_000, integer=True)
        out = self._call({"cmd": "run", "name": name, "mode": mode, "interleave": int(interleave),
                          "steps": int(steps)}, self.timeout * max(1, int(steps)))
        return {"times": out[0]["times"], "losses": out[0]["losses"]}

    @staticmethod
    def _kill(procs, errs) -> None:
        for p in procs:
            if p.poll() is None:
                try:
                    p.stdin.write(b'{"cmd": "exit"}\n')
                    p.stdin.flush()
                except (OSError, ValueError):
                    pass
        end = time.monotonic() + 2.0
        for p in procs:
            try:
                p.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for p in procs:
            for f in (p.stdin, p.stdout):
                try:
                    f.close()
                except (OSError, ValueError):
                    pass
        for f in errs:
            f.close()

    def close(self) -> None:
        """End every rank (asked first, killed after 2 s); idempotent."""
        self.closed = True
        self._finalizer()

    def __enter__(self) -> "RankGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _rank_main(argv: Sequence[str] | None = None) -> int:
    """One rank: join the group, then answer the driver's commands (one JSON line each) until "exit"."""
    import argparse
    import datetime

    import numba
    import torch.distributed as dist
    ap = argparse.ArgumentParser(prog="python -m labkit.recsys.hybrid")
    for a, t in (("--rank", int), ("--world", int), ("--addr", str), ("--port", int), ("--timeout", float),
                 ("--threads", int)):
        ap.add_argument(a, type=t, required=True)
    a = ap.parse_args(argv)
    # Replies go to a private copy of stdout; fd 1 then points at stderr, so nothing a library
    # prints can land in the middle of a reply.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def reply(obj: dict) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()
    torch.set_num_threads(a.threads)
    numba.set_num_threads(min(a.threads, numba.config.NUMBA_NUM_THREADS))
    dist.init_process_group("gloo", init_method=f"tcp://{a.addr}:{a.port}", rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=a.timeout))
    reply({"ok": True, "pid": os.getpid()})
    trainer: HybridTrainer | None = None
    try:
        for line in sys.stdin:
            msg = json.loads(line)
            if msg["cmd"] == "exit":
                break
            try:
                if msg["cmd"] == "setup":
                    if trainer is not None:
                        trainer.close()
                    trainer = HybridTrainer(HybridConfig(**msg["cfg"]), a.rank, a.world)
                    for n in msg["contenders"]:
                        trainer.add(n)
                    dist.barrier()
                    reply({"ok": True})
                elif msg["cmd"] == "run":
                    if trainer is None:
                        raise RuntimeError("run before setup")
                    dist.barrier()  # every rank starts the timed steps together
                    times, losses = [], []
                    for _ in range(msg["steps"]):
                        t0 = time.perf_counter()
                        losses.append(trainer.step(msg["name"], msg["mode"], msg["interleave"]))
                        times.append(time.perf_counter() - t0)
                    reply({"ok": True, "times": times, "losses": losses})
                else:
                    raise ValueError(f"cmd={msg['cmd']!r} is not accepted; expected setup, run or exit")
            except Exception as exc:  # noqa: BLE001 - reported to the driver, which closes the group
                reply({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
    finally:
        if trainer is not None:
            trainer.close()
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - a peer already gone
            pass
    return 0


if __name__ == "__main__":
    sys.exit(_rank_main())
