"""Synthetic CTR data: Zipf-distributed ids per field and labels from a hidden logistic model."""

from __future__ import annotations

import math
from typing import Iterator, Sequence

import numpy as np

from labkit.core.errors import check_range, check_seed
from labkit.recsys.data.batch import JaggedBatch
from labkit.recsys.data.specs import N_DENSE_CRITEO, FieldSpec, check_specs


class ZipfSampler:
    """Draws Zipf-skewed ids for one field by inverse-CDF sampling over its finite id range.

    Rank k (0-based) has probability proportional to (k+1)^-s. Ranks map to ids through a seeded
    permutation, so hot ids are scattered over the table as in real logs.
    """

    def __init__(self, cardinality: int, s: float, seed: int | Sequence[int] = 0) -> None:
        check_range("cardinality", cardinality, 1, integer=True)
        check_range("s", s, 0.0, 10.0)
        if isinstance(seed, (list, tuple, np.ndarray)):
            seed = [check_seed(x, f"seed[{i}]", bits=64) for i, x in enumerate(seed)]
        else:
            seed = check_seed(seed, bits=64)
        self.cardinality, self.s = int(cardinality), float(s)
        w = np.arange(1, self.cardinality + 1, dtype=np.float64) ** -self.s
        self.cdf = np.cumsum(w)
        self.cdf /= self.cdf[-1]
        self.perm = np.random.default_rng(seed).permutation(self.cardinality).astype(np.int64)

    def ranks(self, rng: np.random.Generator, n: int) -> np.ndarray:
        r = np.searchsorted(self.cdf, rng.random(n), side="right")
        return np.minimum(r, self.cardinality - 1)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Return `n` ids."""
        return self.perm[self.ranks(rng, n)]

    def top_mass(self, k: int) -> float:
        """Probability mass of the `k` most frequent ids (the ideal hit rate of a k-row cache)."""
        return float(self.cdf[min(max(k, 1), self.cardinality) - 1]) if k > 0 else 0.0


class SyntheticCTR:
    """A seeded stream of CTR batches over `specs`: Zipf ids, Gaussian dense features, learnable labels.

    Labels follow a fixed hidden logistic model of the ids and dense features, so a model's loss
    falls as it trains.
    """

    def __init__(self, specs: Sequence[FieldSpec], *, n_dense: int = N_DENSE_CRITEO, seed: int = 0) -> None:
        self.specs = specs = check_specs(specs)
        self.n_dense = int(check_range("n_dense", n_dense, 0, 1000, integer=True))
        self.seed = seed = check_seed(seed, bits=64)
        self.samplers = [ZipfSampler(s.cardinality, s.zipf, [seed, 1000 + i]) for i, s in enumerate(specs)]
        self.dense_w = np.random.default_rng([seed, 3]).normal(0, 0.3, n_dense).astype(np.float32)
        self._step = 0

    def batch(self, batch_size: int, index: int | None = None) -> JaggedBatch:
        """Return batch number `index` (the next one if None); the same index gives the same batch."""
        batch_size = int(check_range("batch_size", batch_size, 1, 10_000_000, integer=True))
        if index is None:
            index, self._step = self._step, self._step + 1
        index = check_seed(index, "index", bits=64)
        rng = np.random.default_rng([self.seed, 11, index])
        keys = [s.name for s in self.specs]
        lengths, values = [], []
        logit = np.zeros(batch_size, np.float64)
        for f, (s, smp) in enumerate(zip(self.specs, self.samplers)):
            if s.hotness == 1:
                ln = np.ones(batch_size, np.int64)
            else:
                ln = rng.integers(1, 2 * s.hotness, batch_size)  # mean = hotness
            ranks = smp.ranks(rng, int(ln.sum()))
            values.append(smp.perm[ranks])
            # hidden effect: hot ranks carry signal, cold ones are noise-like
            eff = np.cos(ranks * 2.399963 + f) * (0.6 / math.sqrt(len(self.specs) / 8 + 1))
            seg = np.repeat(np.arange(batch_size), ln)
            logit += np.bincount(seg, weights=eff, minlength=batch_size) / ln
            lengths.append(ln)
        dense = rng.normal(0, 1, (batch_size, self.n_dense)).astype(np.float32)
        logit += dense @ self.dense_w - 0.5
        labels = (rng.random(batch_size) < 1 / (1 + np.exp(-logit))).astype(np.float32)
        return JaggedBatch(keys, np.concatenate(values), np.concatenate(lengths), dense, labels)

    def batches(self, batch_size: int, n: int) -> Iterator[JaggedBatch]:
        for i in range(int(check_range("n", n, 0, integer=True))):
            yield self.batch(batch_size, i)
