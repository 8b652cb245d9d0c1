"""More bad input at the Flash-LLM entry points: one-line ValueErrors naming the argument and value."""

import re

import numpy as np
import pytest
import torch

from labkit.spmm import lab
from labkit.spmm.decoder import Decoder, DecoderConfig, random_weights, tokens_per_second
from labkit.spmm.kernels_cpu import spmm
from labkit.spmm.prune import random_sparse
from labkit.spmm.tiled_csl import byte_bound_speedup, encode

SMALL = dict(d_model=16, n_heads=2, ffn_dim=32, n_layers=1, vocab=50, max_len=8)


@pytest.fixture(scope="module")
def dec():
    return Decoder(random_weights(DecoderConfig(**SMALL), 0.5))


@pytest.fixture(scope="module")
def case():
    return lab.sparse_case((64, 64), 0.8)


@pytest.mark.parametrize("field, value", [("d_model", 16.0), ("max_len", 8.0), ("vocab", True), ("n_layers", "1")])
def test_decoder_config_sizes_must_be_integers(field, value):
    # d_model=16.0 used to be accepted, then random_weights failed on shape=(16.0, 16.0).
    with pytest.raises(ValueError, match=rf"^{field}={value!r} is not accepted; expected an integer >= 1"):
        DecoderConfig(**{**SMALL, field: value})


def test_decoder_config_takes_numpy_integers_as_ints():
    cfg = DecoderConfig(**{**SMALL, "d_model": np.int64(16)})
    assert type(cfg.d_model) is int and cfg == DecoderConfig(**SMALL)


@pytest.mark.parametrize("length", [8, 10])
def test_generate_says_the_prompt_leaves_no_room(dec, length):
    # Used to say "new_tokens=1 ... expected an integer in [1, 0]".
    with pytest.raises(ValueError, match=rf"^prompt.shape\[1\]={length} is not accepted; .*< max_len=8"):
        dec.generate(torch.ones(1, length, dtype=torch.long), 1)


def test_generate_new_tokens_names_max_len(dec):
    with pytest.raises(ValueError, match=r"^new_tokens=7 .*\[1, 6\] \(max_len=8 minus the prompt length 2\)"):
        dec.generate(torch.ones(1, 2, dtype=torch.long), 7)
    assert dec.generate(torch.ones(1, 2, dtype=torch.long), 2.0).shape == (1, 4)  # a whole float is fine


@pytest.mark.parametrize("batch", [-1, 1.5, True])
def test_tokens_per_second_checks_batch(dec, batch):
    # batch=-1 used to raise torch's "negative dimension" RuntimeError; 1.5 a randint TypeError.
    with pytest.raises(ValueError, match=rf"^batch={batch!r} is not accepted; expected an integer in \[1, 64\]"):
        tokens_per_second(dec, batch, 2)


def test_tokens_per_second_checks_model_and_seed(dec):
    with pytest.raises(ValueError, match=r"^model='str' is not accepted; expected a Decoder"):
        tokens_per_second("dec", 1, 2)
    with pytest.raises(ValueError, match=r"^seed=-1 is not accepted"):
        tokens_per_second(dec, 1, 2, seed=-1)
    with pytest.raises(ValueError, match=r"^new_tokens=8 .*max_len=8"):
        tokens_per_second(dec, 1, 8)


def test_encode_pad_takes_numpy_integers_and_refuses_bools():
    w = random_sparse((16, 32), 0.5, seed=1)
    e = encode(w, pad=np.int64(16))  # used to fail with "pad=16 ... expected a power of two"
    assert type(e.pad) is int and np.array_equal(e.words, encode(w, pad=16).words)
    with pytest.raises(ValueError, match=r"^pad=True is not accepted; expected a power of two"):
        encode(w, pad=True)  # used to be taken as pad=1


def test_max_rel_error_blames_n(case):
    w, enc = case
    for n in (0, 65, 2.5):
        # n=0 used to be reported as "x.shape=(64, 0)".
        with pytest.raises(ValueError, match=rf"^n={n!r} is not accepted; expected an integer in \[1, 64\]"):
            lab.max_rel_error(enc, w, n=n)


def test_mismatched_weight_and_encoding_blame_the_weight(case):
    w, enc = case
    w2 = random_sparse((64, 32), 0.8)
    match = r"^weight.shape=\(64, 32\) is not accepted; expected enc.shape=\(64, 64\)"
    with pytest.raises(ValueError, match=match):
        lab.max_rel_error(enc, w2)
    with pytest.raises(ValueError, match=match):
        lab.compare_once(w2, enc, 1, repeats=1)
    with pytest.raises(ValueError, match=match):
        lab.roofline_points(w2, enc, ns=(1,), repeats=1)
    with pytest.raises(ValueError, match=r"^enc='Tensor' is not accepted; expected a TiledCSL"):
        lab.max_rel_error(w, w)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), 0.0, -1.0, "1", True, 1e-40])
def test_random_sparse_refuses_bad_scale(scale):
    # nan/inf/0/-1 used to be accepted (NaN or all-zero "sparse" weights; -1 silently flips signs).
    with pytest.raises(ValueError, match=rf"^scale={scale!r} is not accepted; expected None or a finite number"):
        random_sparse((4, 4), 0.5, scale=scale)


def test_random_sparse_scale_must_fit_the_dtype():
    with pytest.raises(ValueError, match=r"^scale=100000.0 .*torch.float16"):
        random_sparse((4, 4), 0.5, dtype=torch.float16, scale=1e5)  # would be inf in fp16
    w = random_sparse((8, 8), 0.5, dtype=torch.float16, scale=2.0)
    assert torch.isfinite(w).all() and float(w.abs().max()) < 2.0
    assert torch.equal(random_sparse((8, 8), 0.5, scale=np.float32(0.5)), random_sparse((8, 8), 0.5, scale=0.5))


@pytest.mark.parametrize("s", [1.0, -0.5, 2.0, float("nan"), "0.5"])
def test_byte_bound_speedup_takes_sparsity_in_0_1(s):
    # 1.0 used to raise ZeroDivisionError; -0.5 and 2.0 returned nonsense bounds.
    with pytest.raises(ValueError, match=r"^sparsity=.* is not accepted; expected a number in \[0.0, 1.0\)"):
        byte_bound_speedup(s)
    assert byte_bound_speedup(0.0) == 0.5 and byte_bound_speedup(np.float64(0.75)) == 2.0


@pytest.mark.parametrize("row, col", [(0.5, 0), (True, 0), ("0", 0), (0, -1), (8, 0)])
def test_tile_dense_wants_integer_indices_in_range(case, row, col):
    # (0.5, 0) used to raise numpy's IndexError; (True, 0) was read as tile 1.
    _, enc = case
    with pytest.raises(ValueError, match=rf"^tile_row, tile_col=\({row!r}, {col!r}\) is not accepted; expected integers"):
        enc.tile_dense(row, col)
    assert np.array_equal(enc.tile_dense(np.int64(1), 0), enc.tile_dense(1, 0))


@pytest.mark.parametrize("out, shown", [([0.0] * 64, "'list'"), (torch.zeros(64, 1), "'Tensor'")])
def test_spmm_out_must_be_a_numpy_array(case, out, shown):
    # A list used to fail with AttributeError: 'list' object has no attribute 'shape'.
    _, enc = case
    with pytest.raises(ValueError, match=rf"^out={shown} is not accepted; expected None or a C-contiguous float32 "
                                         r"numpy array of shape \(64, 1\)"):
        spmm(enc, torch.ones(64), out=out)
    buf = np.empty((64, 1), np.float32)
    assert spmm(enc, torch.ones(64), out=buf).shape == (64,)


# ---- the baselines check x's shape as the lab's spmm does; roofline_bytes checks its sizes -----

def _baselines(w):
    from labkit.spmm.baselines import BF16CSR, DenseTorch, ScipyCSR, TorchCSR
    return [DenseTorch(w), DenseTorch(w, call="linear"), TorchCSR(w), ScipyCSR(w), BF16CSR(w)]


@pytest.mark.parametrize("shape", [(64, 1), (64,), (16, 2)])
def test_baselines_refuse_activations_of_the_wrong_k(shape):
    w = torch.randn(32, 128)
    for op in _baselines(w):
        with pytest.raises(ValueError, match=rf"^x.shape={re.escape(repr(shape))} is not accepted; expected "
                                             r"\(128,\) or \(128, N"):
            op(torch.randn(*shape))
        assert op(torch.randn(128, 2)).shape == (32, 2) and op(torch.randn(128)).shape == (32,)


def test_baselines_refuse_x_that_is_not_a_tensor_or_has_too_many_dims():
    from labkit.spmm.baselines import DenseTorch, ScipyCSR, TorchCSR
    w = torch.randn(8, 16)
    for op in (DenseTorch(w), TorchCSR(w), ScipyCSR(w)):
        with pytest.raises(ValueError, match=r"^x='list' is not accepted; expected a torch.Tensor of shape \(16,\)"):
            op([1.0] * 16)
        with pytest.raises(ValueError, match=r"^x.shape=\(16, 2, 1\) is not accepted"):
            op(torch.randn(16, 2, 1))


@pytest.mark.parametrize("args, match", [
    ((-1, 4, 4, 0.5), r"^m=-1 is not accepted; expected an integer in \[1, inf\]$"),
    ((4, 0, 4, 0.5), r"^k=0 is not accepted"),
    ((4, 4, 2.5, 0.5), r"^n=2.5 is not accepted"),
    ((4, 4, 4, 2), r"^sparsity=2 is not accepted; expected a number in \[0.0, 1.0\)$"),
    ((4, 4, 4, 1.0), r"^sparsity=1.0 is not accepted"),
    ((4, 4, 4, -0.1), r"^sparsity=-0.1 is not accepted"),
    ((4, 4, 4, float("nan")), r"^sparsity=nan is not accepted"),
])
def test_roofline_bytes_checks_sizes_and_sparsity(args, match):
    from labkit.spmm.baselines import roofline_bytes
    with pytest.raises(ValueError, match=match):
        roofline_bytes(*args)
    assert roofline_bytes(4, 4, 4, 0.0) == {"dense": 2.0 * 16 + 2 * 16 + 4 * 16, "tiled_csl": 4.0 * 16 + 96}
