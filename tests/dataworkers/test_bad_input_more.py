"""More bad input to the GoldMiner programs and simulator: sizes, seeds, and a batch larger than the data."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import default_collate

from labkit.dataworkers.simulator import synthetic_trace
from labkit.dataworkers.workloads import ImageClassifier, JpegDataset, Program, ctr_program, image_program

SEED_MSG = r"seed={} is not accepted; expected an integer in \[0, 2\*\*63\)"


class Rows(torch.utils.data.Dataset):
    def __init__(self, n=20):
        self.x = np.random.default_rng(0).normal(size=(n, 4)).astype(np.float32)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, k):
        return self.x[k % len(self.x)], int(k % 3)


def toy(batch_size=4, seed=0):
    return Program("toy", Rows(), default_collate, nn.Linear(4, 3), nn.functional.cross_entropy, batch_size, seed)


@pytest.mark.parametrize("kw, match", [
    ({"width": 0}, r"width=0 is not accepted; expected an integer in \[1, 1024\]"),
    ({"width": -3}, r"width=-3 is not accepted"),
    ({"width": 10**6}, r"width=1000000 is not accepted"),
    ({"crop": 10**6}, r"crop=1000000 is not accepted; expected an integer in \[8, 1024\]"),
    ({"seed": -1}, SEED_MSG.format(-1)),
    ({"seed": 1.5}, SEED_MSG.format(r"1\.5")),
])
def test_image_program_checks_sizes_and_seed_before_opening_the_data(tmp_path, kw, match):
    root = tmp_path / "never-built"
    with pytest.raises(ValueError, match=match):
        image_program("ci", root=str(root), **kw)
    assert not root.exists()  # refused before any data set was built


def test_ctr_program_checks_its_seed_first(tmp_path):
    with pytest.raises(ValueError, match=SEED_MSG.format(-1)):
        ctr_program("ci", seed=-1, root=str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()


def test_the_parts_check_their_own_arguments():
    with pytest.raises(ValueError, match=r"width=0 is not accepted"):
        ImageClassifier(width=0)
    with pytest.raises(ValueError, match=r"classes=0 is not accepted"):
        ImageClassifier(classes=0)
    with pytest.raises(ValueError, match=SEED_MSG.format(-1)):
        JpegDataset("x", np.zeros(2, np.int64), np.zeros(1, np.int64), seed=-1)
    with pytest.raises(ValueError, match=SEED_MSG.format(-1)):
        toy(seed=-1)


def test_a_batch_larger_than_the_dataset_is_refused_not_zero_batches():
    with pytest.raises(ValueError, match=r"batch_size=21 is not accepted; expected at most 20, the number of "
                                         r"samples in the toy dataset \(batches\(\) drops the last partial batch"):
        toy(batch_size=21)
    p = toy(batch_size=20)
    assert len(p.batches(0)) == 1 and len(p.batches(0)[0]) == 20
    assert len(toy(batch_size=6).batches(0)) == 3  # the partial batch of 2 is still dropped, as documented


def test_image_program_refuses_a_batch_larger_than_its_data(dw_root):
    n = len(image_program("ci", batch_size=8, root=dw_root).dataset)
    with pytest.raises(ValueError, match=rf"batch_size=1000000 is not accepted; expected at most {n}, the number "
                                         r"of samples in the images dataset"):
        image_program("ci", batch_size=10**6, root=dw_root)


def test_synthetic_trace_names_a_bad_seed():
    with pytest.raises(ValueError, match=SEED_MSG.format(-1)):
        synthetic_trace(5, seed=-1)
    assert len(synthetic_trace(5, seed=np.int64(3))) == 5


# ---- ProcessWorkerPool: max_workers checked as passed, each argument blamed by name ----------

def _never_called(keys):
    raise AssertionError("no worker may start for a refused pool")


@pytest.mark.parametrize("kw, match", [
    ({"workers": 5, "max_workers": 2.5}, r"^max_workers=2\.5 is not accepted; expected an integer in \[1, 256\]$"),
    ({"workers": 1, "max_workers": "abc"}, r"^max_workers='abc' is not accepted; expected an integer in \[1, 256\]$"),
    ({"workers": 1, "max_workers": 0}, r"^max_workers=0 is not accepted"),
    ({"workers": 1, "max_workers": True}, r"^max_workers=True is not accepted"),
    ({"workers": 1000}, r"^workers=1000 is not accepted; expected an integer in \[1, 256\]$"),
    ({"workers": 2.5}, r"^workers=2\.5 is not accepted"),
    ({"workers": 3, "max_workers": 2}, r"^workers=3 is not accepted; expected an integer in \[1, 2\]$"),
])
def test_process_pool_checks_max_workers_then_workers_naming_each(kw, match, no_leaks):
    from labkit.dataworkers.workers import ProcessWorkerPool
    with pytest.raises(ValueError, match=match):
        ProcessWorkerPool(_never_called, **kw)


# ---- extract: the program and check_batches by name --------------------------------------------

@pytest.mark.parametrize("program, match", [
    ("x", r"^program='x' is not accepted; expected a labkit.dataworkers.workloads.Program"),
    (None, r"^program=None is not accepted; expected a labkit.dataworkers.workloads.Program"),
    (nn.Linear(2, 2), r"^program='Linear' is not accepted; expected a labkit.dataworkers.workloads.Program"),
])
def test_extract_names_a_program_that_is_not_one(program, match):
    from labkit.dataworkers.extract import extract
    with pytest.raises(ValueError, match=match):
        extract(program)


@pytest.mark.parametrize("n", [0, -1, 1.5, "2"])
def test_extract_names_check_batches_not_batches(n):
    from labkit.dataworkers.extract import extract
    with pytest.raises(ValueError, match=rf"^check_batches={n!r} is not accepted; expected an integer in \[1, inf\]"):
        extract(toy(), check_batches=n)
    assert extract(toy(), check_batches=1.0).cut.dataset_moved  # a whole float is an integer, as everywhere
