"""Seeded synthetic CTR logs for PICASSO, registered with the core dataset registry.

``recsys-ctr`` stores N batches of the Zipf generator as a jagged log (values, lengths per
field and sample, dense features, labels) plus its field spec file, so the notebook and users
train on the same bytes every time. :func:`load_batches` streams it back as JaggedBatches.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Iterator

import numpy as np

from labkit.core.datasets import DatasetWriter, open_dataset, register_dataset
from labkit.core.errors import check_range
from labkit.recsys.data import FieldSpec, JaggedBatch, SyntheticCTR, load_field_specs, make_fields

PROFILES = {
    "ci": {"fields": 26, "rows": 5_000, "dim": 16, "zipf": 1.05, "batch": 512, "batches": 8, "hotness": 1},
    "small": {"fields": 100, "rows": 100_000, "dim": 16, "zipf": 1.05, "batch": 2048, "batches": 32, "hotness": 1},
    # The notebook times its embedding stages side by side at the profile's sizes, up to five copies
    # of the tables at once (TorchRec's plain collection adds a dense gradient): at large 1.8 GiB each.
    "large": {"fields": 300, "rows": 100_000, "dim": 16, "zipf": 1.05, "batch": 8192, "batches": 64, "hotness": 1},
}


def specs_for(params: dict) -> list[FieldSpec]:
    """Field specs of a ``recsys-ctr`` profile."""
    return make_fields(int(params["fields"]), cardinality=int(params["rows"]), dims=int(params["dim"]),
                       hotness=int(params.get("hotness", 1)), zipf=float(params["zipf"]))


@register_dataset("recsys-ctr", description="Synthetic CTR log: Zipf ids per field (jagged), 13 dense features, "
                  "labels from a hidden logistic model", profiles=PROFILES, seed=0, system="recsys")
def build_ctr(w: DatasetWriter, p: dict) -> None:
    specs = specs_for(p)
    gen = SyntheticCTR(specs, seed=w.seed)
    n_f, bsz, nb = len(specs), int(p["batch"]), int(p["batches"])
    with w.stream("values", np.int64) as sv, w.stream("lengths", np.int64, (n_f,)) as sl, \
            w.stream("dense", np.float32, (13,)) as sd, w.stream("labels", np.float32) as sy:
        for i in range(nb):
            b = gen.batch(bsz, i)
            sv.append(b.values)
            sl.append(b.lengths.reshape(n_f, bsz).T)
            sd.append(b.dense)
            sy.append(b.labels)
    import json
    with open(w.path("fields", ".json"), "w") as fh:
        json.dump({"fields": [asdict(s) for s in specs]}, fh)
    w.meta.update(batch=bsz, batches=nb, fields=n_f)


def load_batches(profile: str = "ci", *, batch_size: int | None = None) -> tuple[list[FieldSpec], Iterator[JaggedBatch]]:
    """Return (field specs, iterator of JaggedBatches) over the ``recsys-ctr`` dataset at `profile`.

    `batch_size` defaults to the stored batch size; any positive size re-slices the stored samples.
    """
    if batch_size is not None:
        check_range("batch_size", batch_size, 1, integer=True)
    ds = open_dataset("recsys-ctr", profile)
    specs = load_field_specs(ds.path("fields"))
    values = ds.array("values")
    lengths = ds.array("lengths")  # [samples, fields]
    dense, labels = ds.array("dense"), ds.array("labels")
    bsz = int(batch_size) if batch_size is not None else int(ds.meta["batch"])
    n = labels.shape[0]
    ends = np.concatenate([[0], np.cumsum(lengths.sum(1))])  # ids of sample i: stored per stored batch

    def it() -> Iterator[JaggedBatch]:
        # Stored batches are field-major within each stored batch; rebuild per-sample id lists.
        stored = int(ds.meta["batch"])
        for s0 in range(0, n, bsz):
            s1 = min(n, s0 + bsz)
            per_field: list[list[np.ndarray]] = [[] for _ in specs]
            for c0 in range((s0 // stored) * stored, s1, stored):
                c1 = min(n, c0 + stored)
                lo, hi = max(s0, c0), min(s1, c1)
                ln = np.asarray(lengths[c0:c1])  # [stored, F]
                base = int(ends[c0])
                fo = np.concatenate([[0], np.cumsum(ln.sum(0))])  # field starts within the stored batch
                for f in range(len(specs)):
                    so = np.concatenate([[0], np.cumsum(ln[:, f])])
                    a = base + fo[f] + so[lo - c0]
                    z = base + fo[f] + so[hi - c0]
                    per_field[f].append(np.asarray(values[a:z]))
            lens = np.asarray(lengths[s0:s1]).T.reshape(-1)
            vals = np.concatenate([np.concatenate(p) for p in per_field])
            # dense and labels are copied out of the read-only memory map: torch.from_numpy warns
            # on (and must not write through) a non-writable array.
            yield JaggedBatch([s.name for s in specs], vals, lens, np.array(dense[s0:s1]), np.array(labels[s0:s1]))
    return specs, it()
