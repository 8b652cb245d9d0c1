"""Issue 33 (graph): one regression test per reproduction; each fails on the code before the fix."""

import numpy as np
import pytest
import torch

from labkit.core.errors import LabkitError
from labkit.core.memory import BudgetExceeded, MemoryBudget
from labkit.graph.csr import build_csr
from labkit.graph.negative import negative_sample
from labkit.graph.partition import partition
from labkit.graph.query import Graph, Ragged
from labkit.graph.rmat import RMatParams, rmat_edges
from labkit.graph.store import LocalStore, PartitionedStore


def _true_neighbours(csr, seeds, negs):
    """Return how many entries of negs[i] are out-neighbours of seeds[i]."""
    return sum(len(set(csr.neighbors(int(u)).tolist()) & set(row.tolist())) for u, row in zip(seeds, negs))


@pytest.fixture(scope="module")
def blog():
    """A seeded 1,490-node directed graph with skewed degrees (the size of the political-blogs graph)."""
    s, d = rmat_edges(RMatParams(scale=11, edge_factor=10, seed=4))
    keep = (s < 1490) & (d < 1490)
    return Graph().add_nodes("blog", 1490).add_edges("links", "blog", "blog", s[keep], d[keep])


@pytest.fixture(scope="module")
def user_item():
    """Users linked to a few of 60 items each, some to most of them (where negatives are scarce)."""
    rng = np.random.default_rng(7)
    src = np.concatenate([rng.integers(0, 400, 3000), np.repeat([0, 1], 55)])
    dst = np.concatenate([rng.integers(0, 60, 3000), np.tile(np.arange(55), 2)])
    return Graph().add_nodes("user", 400).add_nodes("item", 60).add_edges("u2i", "user", "item", src, dst)


@pytest.mark.parametrize("by", ["random", "in_degree"])
def test_out_neg_random_returned_true_out_neighbours(blog, user_item, by):
    for g, vt, et in ((blog, "blog", "links"), (user_item, "user", "u2i")):
        csr = g.edge_type(et).csr
        n = g.node_types[vt]
        res = g.V(vt).batch(n).outNeg(et).sample(5).by(by).values().next()
        seeds, negs = res[0], res[1]
        assert negs.shape == (n, 5)
        assert _true_neighbours(csr, seeds, negs) == 0
        assert res.capped_negatives == int((negs == -1).sum())
        if by == "random":
            assert res.capped_negatives == 0  # every vertex has a non-neighbour: the exact fallback finds it


def test_out_neg_on_a_vertex_linked_to_every_candidate_ends_and_marks_the_slots():
    g = Graph().add_nodes("u", 2).add_nodes("i", 4)
    g.add_edges("u2i", "u", "i", np.zeros(4, np.int64), np.arange(4))
    for by in ("random", "in_degree"):
        res = g.V("u").batch(2).outNeg("u2i").sample(3).by(by).values().next()
        assert res[1][0].tolist() == [-1, -1, -1] and res.capped_negatives == 3  # vertex 0: no negative exists
        assert (res[1][1] >= 0).all()


@pytest.fixture(scope="module")
def hubs():
    """A skewed graph: 4 hubs with 2,000 out-edges each, and 6,000 edges into the hubs."""
    rng = np.random.default_rng(11)
    n = 5000
    src = np.concatenate([np.repeat(np.arange(4), 2000), rng.integers(0, n, 6000)])
    dst = np.concatenate([rng.integers(0, n, 8000), rng.integers(0, 4, 6000)])
    return Graph().add_nodes("v", n).add_edges("e", "v", "v", src, dst)


def test_two_hop_full_padded_each_hop_and_fed_the_padding_forward(hubs):
    csr = hubs.edge_type("e").csr
    seeds = np.arange(300)
    res = hubs.V("v").outV("e").by("full").outV("e").by("full").run(seeds)
    one, two = res[1], res[2]
    assert isinstance(one, Ragged) and isinstance(two, Ragged)
    assert len(one) == len(seeds) and len(two) == len(one.values)  # hop 2 expands hop 1's real ids only
    per_seed = res.per_seed(2)
    for v in seeds:
        want = np.concatenate([csr.neighbors(u) for u in csr.neighbors(v)] + [np.empty(0, csr.indices.dtype)])
        assert sorted(per_seed[v].tolist()) == sorted(want.tolist()), v
    real = sum(len(p) for p in per_seed)
    # memory follows the real ids (+ one offset per row), not batch x max-degree^2
    assert two.values.nbytes == real * 8
    assert two.nbytes <= (real + len(one.values) + 1) * 8
    assert res.nbytes < 2 * (real + len(one.values) + 2 * len(seeds) + 2) * 8
    deg = csr.degree()
    assert res.nbytes < len(seeds) * int(deg.max()) ** 2 * 8 / 100
    # a padded view is there on request, with -1 past each row's end
    dense = one.padded()
    assert dense.shape == (len(seeds), int(one.counts.max())) and (dense[0, :deg[0]] == csr.neighbors(0)).all()


def test_two_hop_full_past_the_limit_is_refused_before_it_allocates(hubs):
    q = hubs.V("v").outV("e").by("full").outV("e").by("full")
    with pytest.raises(BudgetExceeded, match=r"^step 2=outV\('e'\)\.by\('full'\) is not accepted; .*1\.0 MiB.*"
                                             r"would return [0-9.]+ MiB") as err:
        q.limit("1MiB").run(np.arange(300))
    assert isinstance(err.value, MemoryError) and "\n" not in str(err.value)
    budget = MemoryBudget("128KiB")
    q1 = hubs.V("v").outV("e").by("full").limit(budget)
    assert q1.run(np.arange(4))[1].values.size > 8000  # the 4 hubs' lists fit in 128 KiB
    held = budget.reserve("a cache", "100KiB")  # a budget's free bytes are the limit, at run time
    with pytest.raises(BudgetExceeded, match=r"query limit of 28\.0 KiB"):
        q1.run(np.arange(4))
    held.release()
    with pytest.raises(BudgetExceeded, match=r"padded=.* is not accepted; expected at most limit="):
        q.limit("1GiB").run(np.arange(300))[2].padded(limit=1000)


@pytest.fixture(scope="module")
def small():
    """A seeded 512-node graph with 16-d features and 4 classes."""
    s, d = rmat_edges(RMatParams(scale=9, seed=2))
    csr = build_csr(s, d, 512, dedup=True)
    rng = np.random.default_rng(0)
    return csr, rng.standard_normal((512, 16)).astype(np.float32), rng.integers(0, 4, 512)


class _NoCluster:
    """A Dask client stand-in that fails if anything is asked of it (nothing must be shipped)."""

    def __getattr__(self, name):
        raise AssertionError(f"the store used its client ({name}) before checking its features")


def test_one_nan_feature_turned_every_parameter_nan(small):
    csr, x, y = small
    bad = x.copy()
    bad[300, 7] = np.nan
    bad[400, 2] = np.inf
    msg = r"^features\[300, 7\]=nan is not accepted; expected finite numbers \(2 of the 8,192 values"
    with pytest.raises(LabkitError, match=msg):
        LocalStore(csr, bad)
    with pytest.raises(ValueError, match=msg):
        PartitionedStore(csr, partition(csr, 2), bad)
    with pytest.raises(ValueError, match=msg):
        PartitionedStore(csr, partition(csr, 2), bad, backend="dask", client=_NoCluster())
    with pytest.raises(ValueError, match=msg):
        Graph().add_nodes("v", 512, bad)


def test_1d_and_object_features_were_accepted(small):
    csr, x, _ = small
    with pytest.raises(ValueError, match=r"features='array of shape \(512,\)' is not accepted; expected 512 rows"):
        LocalStore(csr, x[:, 0])
    with pytest.raises(ValueError, match=r"features='array of dtype object' is not accepted"):
        LocalStore(csr, x.astype(object))
    ints = LocalStore(csr, np.ones((512, 3), np.int64))  # ints are cast, as documented
    assert ints.features(np.array([5])).dtype == np.float32


def test_label_minus_one_raised_a_raw_torch_index_error(small):
    from labkit.graph.sampling import NeighborSampler
    from labkit.graph.train import SAGE, evaluate, train_epoch

    csr, x, y = small
    bad = y.copy()
    bad[40] = -1
    with pytest.raises(ValueError, match=r"^labels\[40\]=-1 is not accepted; expected a class id in \[0, 4\)$"):
        LocalStore(csr, x, bad, num_classes=4)
    store = LocalStore(csr, x)
    torch.manual_seed(0)
    model = SAGE(16, 8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    sampler = NeighborSampler(csr.indptr, csr.indices)
    with pytest.raises(LabkitError, match=r"^labels\[40\]=-1 is not accepted; expected a class id in \[0, 4\)$"):
        train_epoch(model, opt, sampler, store, np.arange(100), bad, [3], 32)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # refused before any step
    past = y.copy()
    past[7] = 4
    with pytest.raises(ValueError, match=r"labels\[7\]=4 is not accepted; expected a class id in \[0, 4\)"):
        evaluate(model, sampler, store, np.arange(20), past, [3])
    # a node left out of the training ids may carry any label: only the ids read are checked
    r = train_epoch(model, opt, sampler, store, np.arange(41, 100), bad, [3], 32)
    assert r.batches == 2 and np.isfinite(r.loss)
