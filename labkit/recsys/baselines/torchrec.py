"""TorchRec anchors: ``EmbeddingBagCollection`` (one lookup per table) and ``FusedEmbeddingBagCollection``.

FusedEmbeddingBagCollection is FBGEMM's table-batched embedding: one kernel for all tables of a
pooling type and the optimizer fused into the backward (no gradient tensor at all). The plain
``EmbeddingBagCollection`` is trained as its users train embedding tables outside a sharder: with
sparse gradients (each table's ``nn.EmbeddingBag`` in sparse mode, so a step's gradient holds only
the rows it looked up) and a sparse-capable ``torch.optim`` optimizer (SGD or Adagrad). TorchRec's
``EmbeddingBagConfig`` has no sparse switch, so the anchor sets ``sparse=True`` on the bags the
collection builds; a dense gradient would make it write every row of every table each step. Both take the same :class:`JaggedBatch`
and the same seeded initial rows as labkit's stages, and expose the same ``lookup`` / ``apply``
pair, so the bench times them side by side. TorchRec is optional: :func:`available` says whether
it imports (install with ``pip install --no-deps -r requirements-nodeps.txt``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from labkit.core.errors import bad_value, check_choice
from labkit.recsys.data import JaggedBatch
from labkit.recsys.tables import Table, canonical_order, init_table

KINDS = ("ebc", "fused")


def _not_fx_tracing_notice(record) -> bool:
    return not record.getMessage().startswith("is_fx_tracing will return true")


def _quiet_fx_tracing_notice() -> None:
    """TorchRec's modules ask torch.fx ``is_fx_tracing()`` on every call, and torch 2.13 logs a one-off
    deprecation notice about that function to stderr (into notebooks): a notice for TorchRec's
    authors, not for users of the anchor. Drop that one message; every other log record passes.
    (The same filter function each time: ``addFilter`` keeps one copy however many stages are built.)"""
    import logging
    logging.getLogger("torch.fx._symbolic_trace").addFilter(_not_fx_tracing_notice)


def available() -> bool:
    """True when torchrec (and its fbgemm CPU ops) import in this environment."""
    try:
        import torchrec  # noqa: F401
        from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection  # noqa: F401
    except Exception:  # torchrec raises more than ImportError when fbgemm does not match torch
        return False
    return True


def why_unavailable() -> str:
    try:
        import torchrec  # noqa: F401
        from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return ""


class TorchRecEmbeddings:
    """A TorchRec embedding stage over labkit tables: ``kind="ebc"`` or ``kind="fused"``."""

    packed = True  # the interleaver treats it like a stage with its own fused update

    def __init__(self, tables: Sequence[Table], *, kind: str = "fused", optimizer: str = "sgd",
                 lr: float = 0.05, eps: float = 1e-10, seed: int = 0) -> None:
        check_choice("kind", kind, KINDS)
        _quiet_fx_tracing_notice()
        check_choice("optimizer", optimizer, ("sgd", "adagrad", "rowwise_adagrad"))
        if kind == "ebc" and optimizer == "rowwise_adagrad":
            raise bad_value("optimizer", optimizer, "'sgd' or 'adagrad' for kind='ebc' (TorchRec has row-wise "
                            "Adagrad only fused into the backward: kind='fused')")
        from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
        from torchrec.modules.embedding_modules import EmbeddingBagCollection
        from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection
        from torchrec.optim import RowWiseAdagrad as TRRowWise
        self.kind, self.optimizer = kind, optimizer
        self.tables = list(tables)
        if len({t.feature for t in self.tables}) != len(self.tables):
            raise ValueError("tables=... is not accepted for TorchRec; expected one table per feature "
                             "(wide+deep tables on one field need labkit's stages)")
        self.order = canonical_order(self.tables)
        self.width = sum(t.dim for t in self.tables)
        self._keys = None
        cfgs = [EmbeddingBagConfig(name=self.tables[i].name, embedding_dim=self.tables[i].dim,
                                   num_embeddings=self.tables[i].cardinality,
                                   feature_names=[f"f{self.tables[i].feature}"],
                                   pooling=PoolingType.SUM if self.tables[i].pooling == "sum" else PoolingType.MEAN)
                for i in self.order]
        opt_cls = {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad, "rowwise_adagrad": TRRowWise}[optimizer]
        kw = {"lr": lr} if optimizer == "sgd" else {"lr": lr, "eps": eps}
        if kind == "fused":
            self.module = FusedEmbeddingBagCollection(tables=cfgs, optimizer_type=opt_cls, optimizer_kwargs=kw,
                                                      device=torch.device("cpu"))
            self.opt = None
        else:
            self.module = EmbeddingBagCollection(tables=cfgs, device=torch.device("cpu"))
            for bag in self.module.embedding_bags.values():
                bag.sparse = True  # what nn.EmbeddingBag(..., sparse=True) sets; read on every forward
            self.opt = (torch.optim.SGD(self.module.parameters(), lr=lr) if optimizer == "sgd" else
                        torch.optim.Adagrad(self.module.parameters(), lr=lr, eps=eps))
        with torch.no_grad():
            for i in self.order:
                self.module.embedding_bags[self.tables[i].name].weight.copy_(
                    torch.from_numpy(init_table(i, self.tables[i], seed)))

    def _kjt(self, batch: JaggedBatch):
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
        feats = [self.tables[i].feature for i in self.order]
        b = batch.batch_size
        if feats == list(range(batch.n_fields)):
            values, lengths = batch.values, batch.lengths
        else:
            values = np.concatenate([batch.field_ids(f)[0] for f in feats])
            lengths = np.concatenate([batch.lengths[f * b:(f + 1) * b] for f in feats])
        return KeyedJaggedTensor(keys=[f"f{f}" for f in feats], values=torch.from_numpy(values),
                                 lengths=torch.from_numpy(lengths))

    def lookup(self, batch: JaggedBatch) -> torch.Tensor:
        """Return pooled embeddings ``[B, width]`` in canonical table order."""
        return self.module(self._kjt(batch)).values()

    def apply(self, batch: JaggedBatch, emb, grad) -> None:
        """Backward through TorchRec (the fused module updates inside its backward)."""
        emb.backward(grad)
        if self.opt is not None:
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)

    def table_weights(self, i: int) -> np.ndarray:
        return self.module.embedding_bags[self.tables[i].name].weight.detach().numpy().copy()

    @property
    def n_lookups(self) -> int:
        return len(self.tables) if self.kind == "ebc" else 1

    def close(self) -> None:
        pass
