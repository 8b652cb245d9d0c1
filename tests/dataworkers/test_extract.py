"""The automatic cut: traced prefix, Dataset-only cut, refusals, and equivalence."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.data import default_collate

from labkit.dataworkers.extract import ExtractionError, check_equivalence, extract
from labkit.dataworkers.workloads import Program


def test_image_program_cut_is_a_traced_prefix(image_prog):
    split = extract(image_prog)
    cut = split.cut
    assert cut.kind == "traced prefix"
    assert cut.prefix_nodes == ["permute", "float_1", "sub", "truediv"]
    assert cut.frontier == ["truediv"]
    assert "reads parameters" in cut.stopped["body_0"]
    assert check_equivalence(image_prog, split, batches=3)["max_loss_diff"] == 0.0
    # zero batches would "prove" any split equivalent
    with pytest.raises(ValueError, match=r"^batches=0 is not accepted; expected an integer in \[1, inf\]"):
        check_equivalence(image_prog, split, batches=0)
    with pytest.raises(ValueError, match=r"^epoch=-1 is not accepted"):
        check_equivalence(image_prog, split, epoch=-1)
    # The worker output is already the normalised float tensor; the trainer part starts at the conv.
    x, y = split.stateless(image_prog.batches(0)[0])
    assert x.dtype == torch.float32 and x.shape == (8, 3, 64, 64) and y.dtype == torch.int64


def test_ctr_program_cut_stops_at_a_buffer(ctr_prog):
    split = extract(ctr_prog)
    assert split.cut.prefix_nodes == ["clamp", "log1p"]
    assert split.cut.stopped["field_salt"] == "reads buffer 'field_salt'"
    assert set(split.cut.frontier) == {"ids", "log1p"}
    assert check_equivalence(ctr_prog, split)["max_loss_diff"] == 0.0


def test_trainer_part_holds_the_users_parameters(image_prog):
    split = extract(image_prog)
    mine = {id(p) for p in image_prog.model.parameters()}
    assert {id(p) for p in split.trainer_model.parameters()} == mine


class Rows(torch.utils.data.Dataset):
    def __init__(self, n=32, d=6):
        self.x = np.random.default_rng(0).normal(size=(n, d)).astype(np.float32)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, k):
        return self.x[k % len(self.x)], int(k % 3)


class Counting(Rows):
    def __init__(self):
        super().__init__()
        self.seen = 0

    def __getitem__(self, k):
        self.seen += 1
        return super().__getitem__(k)


class Noisy(Rows):
    def __getitem__(self, k):
        x, y = super().__getitem__(k)
        return x + np.random.random(x.shape).astype(np.float32), y


class Unpicklable(Rows):
    def __init__(self):
        super().__init__()
        self.fn = lambda v: v


class LinearFirst(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(x) * 2.0


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: fx cannot trace this
            x = x * 2
        return self.fc(x)


class NoiseThenLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        x = x.abs() + 1.0
        x = x + torch.randn_like(x) * 0.0  # draws from the global RNG: must stay in the trainer
        return self.fc(x)


class InPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        x = x * 3.0
        x.mul_(0.5)
        return self.fc(x)


def prog(ds, model, name="toy"):
    torch.manual_seed(0)
    return Program(name, ds, default_collate, model, nn.functional.cross_entropy, batch_size=8)


def test_dataset_only_cut_when_the_first_op_reads_parameters():
    split = extract(prog(Rows(), LinearFirst()))
    assert split.cut.kind == "dataset only"
    assert split.stateless.prefix is None
    assert "reads parameters" in split.cut.stopped["fc"]


def test_dataset_only_cut_on_request(image_prog):
    split = extract(image_prog, model_cut=False)
    assert split.cut.kind == "dataset only" and not split.cut.traced
    x, _ = split.stateless(image_prog.batches(0)[0])
    assert x.dtype == torch.uint8


def test_stateful_dataset_is_refused():
    with pytest.raises(ExtractionError, match=r"stateful: it changes attribute\(s\) seen"):
        extract(prog(Counting(), LinearFirst()))


def test_unseeded_randomness_is_refused():
    with pytest.raises(ExtractionError, match="different values on two calls"):
        extract(prog(Noisy(), LinearFirst()))


def test_unpicklable_dataset_is_refused():
    with pytest.raises(ExtractionError, match="cannot be sent to a data worker"):
        extract(prog(Unpicklable(), LinearFirst()))


def test_untraceable_model_is_refused_with_where():
    with pytest.raises(ExtractionError, match=r"cannot trace Branchy.forward at test_extract.py:\d+"):
        extract(prog(Rows(), Branchy()))
    # ...but its Dataset can still move.
    assert extract(prog(Rows(), Branchy()), model_cut=False).cut.kind == "dataset only"


def test_rng_op_ends_the_prefix():
    split = extract(prog(Rows(), NoiseThenLinear()))
    assert split.cut.prefix_nodes == ["abs_1", "add"]
    assert any("global RNG" in r for r in split.cut.stopped.values())


def test_in_place_op_ends_the_prefix():
    split = extract(prog(Rows(), InPlace()))
    assert split.cut.prefix_nodes == ["mul"]
    assert "in-place" in split.cut.stopped["mul_"]


PURE = [lambda x: x * 2.0, lambda x: x.abs(), lambda x: torch.tanh(x), lambda x: x.clamp(min=-1.0),
        lambda x: x.transpose(0, 1).transpose(0, 1), lambda x: (x - 0.5) / 2.0]


class Composed(nn.Module):
    def __init__(self, ops, with_param_mid):
        super().__init__()
        self.ops, self.with_param_mid = ops, with_param_mid
        self.fc = nn.Linear(6, 6)
        self.out = nn.Linear(6, 3)

    def forward(self, x):
        for i, op in enumerate(self.ops):
            x = PURE[op](x)
            if i == self.with_param_mid:
                x = self.fc(x)
        return self.out(x)


@settings(max_examples=15, deadline=None)
@given(ops=st.lists(st.integers(0, len(PURE) - 1), min_size=0, max_size=5), mid=st.integers(-1, 4))
def test_any_cut_is_equivalent_and_moves_no_parameters(ops, mid):
    p = prog(Rows(), Composed(ops, mid))
    split = extract(p, check_batches=1)
    assert check_equivalence(p, split, batches=2)["max_loss_diff"] <= 1e-6
    if split.stateless.prefix is not None:
        assert not list(split.stateless.prefix.parameters())
    expected_moved = len(ops) if mid < 0 or mid >= len(ops) else mid + 1
    assert split.cut.kind == ("traced prefix" if expected_moved else "dataset only")
