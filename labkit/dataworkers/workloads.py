"""Monolithic training programs with heavy, stateless input pipelines: JPEG images and CTR logs.

A :class:`Program` is what a user hands GoldMiner unmodified: a map-style Dataset, a collate
function, a model and a loss. Batches are ``(*model_inputs, target)``. Sample keys encode the
epoch (``key = epoch * len(dataset) + i``) so random augmentation depends on the key alone: the
Dataset is a pure function of its argument, which is what lets it run on any worker.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, default_collate

from labkit.core.errors import bad_value, check_range, check_seed


@dataclass
class Program:
    """One unmodified training job: Dataset -> collate_fn -> model -> loss_fn, with its batch size."""

    name: str
    dataset: Any
    collate_fn: Callable[[list], Any]
    model: nn.Module
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    batch_size: int
    seed: int = 0
    lr: float = 0.05

    def __post_init__(self) -> None:
        check_range("batch_size", self.batch_size, 1, integer=True)
        check_seed(self.seed)
        n = len(self.dataset) if hasattr(self.dataset, "__len__") else None
        if n is not None and self.batch_size > n:
            # batches() drops the last partial batch, so a batch larger than the data set gives none.
            raise bad_value("batch_size", self.batch_size, f"at most {n}, the number of samples in the "
                            f"{self.name} dataset (batches() drops the last partial batch, so a larger batch "
                            "would give none)")

    def batches(self, epoch: int, limit: int | None = None) -> list[list[int]]:
        """Return the sample keys of each batch of `epoch` (seeded shuffle, last partial batch dropped)."""
        check_range("epoch", epoch, 0, integer=True)
        n = len(self.dataset)
        perm = np.random.default_rng([self.seed, epoch]).permutation(n) + epoch * n
        count = n // self.batch_size
        if limit is not None:
            check_range("limit", limit, 0, integer=True)
            count = min(count, limit)
        return [perm[b * self.batch_size:(b + 1) * self.batch_size].tolist() for b in range(count)]

    def load(self, keys: list[int]) -> Any:
        """Return the collated batch for `keys`, exactly as the monolithic program builds it.

        `keys` are sample keys as :meth:`batches` makes them: integers >= 0 (key // len(dataset)
        is the epoch, key % len(dataset) the sample).
        """
        if not isinstance(keys, (list, tuple, np.ndarray)):
            raise bad_value("keys", type(keys).__name__, "a non-empty list of integer sample keys >= 0")
        if len(keys) == 0:
            raise bad_value("keys", keys, "a non-empty list of integer sample keys >= 0")
        a = np.asarray(keys)  # one vectorised check: the monolithic baseline calls this per batch
        if a.ndim != 1 or a.dtype.kind not in "iu" or a.min() < 0:
            bad = next((i for i, k in enumerate(keys) if isinstance(k, (bool, np.bool_))
                        or not isinstance(k, (int, np.integer)) or k < 0), None)
            if bad is None:
                raise bad_value("keys", keys, "a flat list of integer sample keys >= 0 (see Program.batches)")
            raise bad_value(f"keys[{bad}]", keys[bad], "an integer sample key >= 0 (see Program.batches)")
        return self.collate_fn([self.dataset[k] for k in keys])


# ---------------------------------------------------------------------------------------------
# Images: JPEG decode, random resized crop, flip (Dataset); uint8 -> float, normalise (model).

class JpegDataset(Dataset):
    """Decoded, randomly cropped and flipped images (uint8 HWC) with labels, from dataset dw_jpeg."""

    def __init__(self, jpegs_path: str, offsets: np.ndarray, labels: np.ndarray, crop: int = 64,
                 seed: int = 0) -> None:
        check_range("crop", crop, 8, 1024, integer=True)
        check_seed(seed)
        self.jpegs_path, self.offsets, self.labels = str(jpegs_path), offsets, labels
        self.crop, self.seed = int(crop), int(seed)
        self._blob: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)

    def __getstate__(self) -> dict:
        # The memory map is reopened in each worker instead of being pickled.
        return {k: v for k, v in self.__dict__.items() if k != "_blob"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _blob=None)

    def _bytes(self, i: int) -> bytes:
        if self._blob is None:
            self._blob = np.memmap(self.jpegs_path, np.uint8, mode="r")
        return self._blob[self.offsets[i]:self.offsets[i + 1]].tobytes()

    def __getitem__(self, key: int) -> tuple[np.ndarray, int]:
        from PIL import Image

        n = len(self)
        i, epoch = int(key) % n, int(key) // n
        rng = np.random.default_rng([self.seed, epoch, i])
        im = Image.open(io.BytesIO(self._bytes(i))).convert("RGB")
        w, h = im.size
        # RandomResizedCrop(scale=(0.3, 1), ratio=(3/4, 4/3)) as torchvision does it.
        area = w * h * rng.uniform(0.3, 1.0)
        ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        cw = int(min(w, round(np.sqrt(area * ratio))))
        ch = int(min(h, round(np.sqrt(area / ratio))))
        x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        im = im.resize((self.crop, self.crop), Image.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
        if rng.random() < 0.5:
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        return np.array(im), int(self.labels[i])


class ImageClassifier(nn.Module):
    """A small CNN whose forward starts with stateless work: HWC uint8 -> CHW float, normalise."""

    def __init__(self, classes: int = 10, width: int = 16) -> None:
        check_range("classes", classes, 1, integer=True)
        check_range("width", width, 1, 1024, integer=True)
        classes, width = int(classes), int(width)
        super().__init__()
        # Plain tensor attributes (not buffers): constants, so the cut may move them to workers.
        self.mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
        self.std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255
        self.body = nn.Sequential(
            nn.Conv2d(3, width, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(2 * width, 4 * width, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(4 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 3, 1, 2).float()
        x = (x - self.mean) / self.std
        return self.head(self.body(x))


def image_program(profile: str = "ci", *, crop: int = 64, batch_size: int = 32, seed: int = 0,
                  width: int = 16, root: str | None = None) -> Program:
    """Return the image-classification Program over dataset dw_jpeg at `profile` (built if absent)."""
    from labkit.core.datasets import open_dataset
    import labkit.dataworkers.datasets  # noqa: F401  (registers dw_jpeg)

    # Checked before the data set is opened (or built): each is otherwise only used after that.
    check_range("crop", crop, 8, 1024, integer=True)
    check_range("batch_size", batch_size, 1, integer=True)
    check_range("width", width, 1, 1024, integer=True)
    seed = check_seed(seed)
    ds = open_dataset("dw_jpeg", profile, root=root)
    torch.manual_seed(seed)
    data = JpegDataset(ds.path("jpegs"), ds.array("offsets", mmap=False), ds.array("labels", mmap=False),
                       crop=crop, seed=seed)
    return Program("images", data, default_collate, ImageClassifier(width=width), nn.functional.cross_entropy,
                   batch_size, seed)


# ---------------------------------------------------------------------------------------------
# CTR: string hashing, bucketising and cross features (collate); log1p of dense (model).

class CtrRows(Dataset):
    """Raw log rows: (string categories |S16, dense floats, click) from dataset dw_ctr."""

    def __init__(self, cats: np.ndarray, dense: np.ndarray, labels: np.ndarray) -> None:
        self.cats, self.dense, self.labels = cats, dense, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: int) -> tuple[np.ndarray, np.ndarray, float]:
        i = int(key) % len(self)
        return self.cats[i], self.dense[i], float(self.labels[i])


_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)


def fnv1a(strings: np.ndarray) -> np.ndarray:
    """Return the 64-bit FNV-1a hash of each fixed-width byte string (trailing NULs ignored)."""
    s = np.ascontiguousarray(strings)
    width = s.dtype.itemsize
    b = s.view(np.uint8).reshape(s.shape + (width,))
    h = np.full(s.shape, _FNV_OFFSET, np.uint64)
    with np.errstate(over="ignore"):
        for j in range(width):
            c = b[..., j].astype(np.uint64)
            h = np.where(c != 0, (h ^ c) * _FNV_PRIME, h)
    return h


class CtrFeatureTransform:
    """Collate raw rows into (sparse ids, dense, label): hash strings, bucketise floats, cross fields."""

    def __init__(self, hash_buckets: int = 1 << 16, dense_edges: int = 16,
                 crosses: tuple[tuple[int, int], ...] = ((0, 1), (2, 3), (0, 4))) -> None:
        check_range("hash_buckets", hash_buckets, 2, integer=True)
        self.hash_buckets, self.crosses = int(hash_buckets), tuple(crosses)
        self.edges = np.geomspace(0.01, 100.0, dense_edges).astype(np.float32)

    @property
    def n_fields(self) -> int:
        from labkit.dataworkers.datasets import CAT_FIELDS, DENSE_FIELDS
        return CAT_FIELDS + DENSE_FIELDS + len(self.crosses)

    def __call__(self, rows: list) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cats = np.stack([r[0] for r in rows])
        dense = np.stack([r[1] for r in rows]).astype(np.float32)
        label = np.array([r[2] for r in rows], np.float32)
        h = fnv1a(cats)
        cat_ids = (h % np.uint64(self.hash_buckets)).astype(np.int64)
        dense_ids = np.searchsorted(self.edges, dense).astype(np.int64)
        with np.errstate(over="ignore"):
            cross = [((h[:, a] * np.uint64(0x9E3779B97F4A7C15)) ^ h[:, b]) % np.uint64(self.hash_buckets)
                     for a, b in self.crosses]
        ids = np.concatenate([cat_ids, dense_ids, np.stack(cross, 1).astype(np.int64)], axis=1)
        return torch.from_numpy(ids), torch.from_numpy(dense), torch.from_numpy(label)


class CtrModel(nn.Module):
    """Embedding-bag-per-field + MLP click model; forward starts with a stateless log1p of dense."""

    def __init__(self, n_fields: int, buckets: int = 1 << 16, dim: int = 16, dense: int = 4) -> None:
        super().__init__()
        self.emb = nn.Embedding(buckets, dim)
        # A buffer: reading it ends the stateless prefix (the cut must stop here).
        self.register_buffer("field_salt", torch.arange(n_fields, dtype=torch.int64) * 7919)
        self.mlp = nn.Sequential(nn.Linear(n_fields * dim + dense, 64), nn.ReLU(), nn.Linear(64, 1))
        self.buckets = buckets

    def forward(self, ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        d = torch.log1p(dense.clamp(min=0))
        e = self.emb((ids + self.field_salt) % self.buckets).flatten(1)
        return self.mlp(torch.cat([e, d], dim=1)).squeeze(1)


def ctr_program(profile: str = "ci", *, batch_size: int = 256, seed: int = 0,
                root: str | None = None) -> Program:
    """Return the CTR Program over dataset dw_ctr at `profile` (built if absent)."""
    from labkit.core.datasets import open_dataset
    import labkit.dataworkers.datasets  # noqa: F401  (registers dw_ctr)

    check_range("batch_size", batch_size, 1, integer=True)
    seed = check_seed(seed)
    ds = open_dataset("dw_ctr", profile, root=root)
    torch.manual_seed(seed)
    tf = CtrFeatureTransform()
    rows = CtrRows(ds.array("cats", mmap=False), ds.array("dense", mmap=False), ds.array("labels", mmap=False))
    return Program("ctr", rows, tf, CtrModel(tf.n_fields, tf.hash_buckets),
                   nn.functional.binary_cross_entropy_with_logits, batch_size, seed)
