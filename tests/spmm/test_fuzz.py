"""Issue 33: a seeded fuzz pass over the Flash-LLM (spmm) entry points that take user data.

Every case either returns the right result (checked against a dense reference) or is refused
with a one-line LabkitError naming the argument (see tests/fuzz.py).
"""

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.core.errors import LabkitError
from labkit.spmm import kernels_gpu
from labkit.spmm.baselines import BF16CSR, DenseTorch, ScipyCSR, TiledCSLMatmul, TorchCSR, roofline_bytes
from labkit.spmm.decoder import Decoder, DecoderConfig, random_weights
from labkit.spmm.kernels_cpu import MAX_N, bucket, spmm
from labkit.spmm.lab import max_rel_error, sparse_case
from labkit.spmm.prune import magnitude_prune, random_mask, random_sparse
from labkit.spmm.tiled_csl import TiledCSL, byte_bound_speedup, decode, encode
from tests.fuzz import FUZZ_SETTINGS, Refused, fuzz_call

# casting a drawn NaN activation to an integer dtype warns; that case is refused anyway
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered")

FLOATS = [torch.bfloat16, torch.float16, torch.float32, torch.float64]
# the encoder's two value types drawn as often as all the others together
DTYPES = [torch.bfloat16, torch.float16] * 3 + [torch.float32, torch.float64, torch.int32, torch.int8, torch.bool]
SPECIALS = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e30, -1e-30]


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy()


@st.composite
def weights(draw, max_m=24, max_k=70, dtypes=DTYPES, specials=True):
    """A (M, K) tensor (0-sized sometimes) of a drawn dtype, sparse, with NaN/inf/-0.0 sprinkled in,
    sometimes non-contiguous (a transposed or strided view)."""
    m, k = draw(st.integers(0, max_m)), draw(st.integers(0, max_k))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(m, k, generator=g) * draw(st.sampled_from([1.0, 0.01, 100.0]))
    w[torch.rand(m, k, generator=g) < draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]))] = 0.0
    if specials and m * k and draw(st.booleans()):
        for _ in range(draw(st.integers(1, 4))):
            w[draw(st.integers(0, m - 1)), draw(st.integers(0, k - 1))] = draw(st.sampled_from(SPECIALS))
    dtype = draw(st.sampled_from(dtypes))
    w = w.to(dtype)
    layout = draw(st.sampled_from(["plain", "transposed", "strided"]))
    if layout == "transposed":
        w = w.T.contiguous().T
    elif layout == "strided":
        w = torch.repeat_interleave(w, 2, dim=1)[:, ::2]
    return w


GOOD_TILES = st.one_of(st.none(), st.tuples(st.integers(1, 40), st.integers(1, 200)),
                       st.sampled_from([(1, 65520), (256, 256), (np.int64(4), np.int32(16))]))
BAD_TILES = st.sampled_from([(0, 8), (8, 0), (1, 65536), (2, 32768), (1, 65521), (256, 512), (8.0, 16),
                             (True, 16), (8,), "8x16", (-1, 4), None])
GOOD_PADS = st.sampled_from([1, 2, 4, 16, 64, np.int64(8)])
BAD_PADS = st.sampled_from([0, 3, 128, True, 4.0, None])
#: Most cases are valid (their results are checked); the rest break one thing at a time.
FAULTS = st.sampled_from([None] * 6 + ["dtype", "tile", "pad", "numpy", "empty"])


@FUZZ_SETTINGS
@given(FAULTS, st.data())
def test_fuzz_encode_decode(fault, data):
    w = data.draw(weights(dtypes=DTYPES if fault == "dtype" else [torch.bfloat16, torch.float16]))
    if fault == "empty":
        w = w[:0] if data.draw(st.booleans()) else w[:, :0]
    tile = data.draw(BAD_TILES if fault == "tile" else GOOD_TILES)
    pad = data.draw(BAD_PADS if fault == "pad" else GOOD_PADS)
    arg = w.float().numpy() if fault == "numpy" else w
    try:
        enc = fuzz_call("spmm.encode", encode, arg, tile=tile, pad=pad)
    except Refused:
        return
    assert w.dtype in (torch.bfloat16, torch.float16) and isinstance(arg, torch.Tensor)
    back = fuzz_call("spmm.decode", decode, enc, refuse_ok=False)
    assert back.dtype == w.dtype and back.shape == w.shape
    nz = (_bits(w) & 0x7FFF) != 0
    # every non-zero (NaN and inf included) bit-exact; every zero (+0.0 or -0.0) back as +0.0
    assert np.array_equal(_bits(back)[nz], _bits(w)[nz]) and np.all(_bits(back)[~nz] == 0)
    assert enc.nnz == int(nz.sum()) == int(enc.tile_counts().sum())


@settings(parent=FUZZ_SETTINGS, max_examples=60)
@given(weights(dtypes=[torch.bfloat16]), st.data())
def test_fuzz_corrupted_tiled_csl(w, data):
    """A hand-altered TiledCSL (flipped bits, truncated or swapped arrays) is refused when built,
    or, if it is still consistent, decodes and multiplies like the dense matrix it now holds."""
    try:
        enc = encode(w, tile=(4, 16), pad=4)
    except LabkitError:
        return
    what = data.draw(st.sampled_from(["flip", "truncate", "offsets", "row_nnz", "nnz", "shape", "dtype"]))
    change = {}
    if what == "flip" and enc.words.size:
        words = enc.words.copy()
        i = data.draw(st.integers(0, words.size - 1))
        words[i] ^= np.uint32(1 << data.draw(st.integers(0, 31)))
        change["words"] = words
    elif what == "truncate":
        change["words"] = enc.words[:data.draw(st.integers(0, enc.words.size))]
    elif what == "offsets":
        toff = enc.tile_offsets.copy()
        toff[data.draw(st.integers(0, toff.size - 1))] += data.draw(st.sampled_from([-4, 4, 2**40]))
        change["tile_offsets"] = toff
    elif what == "row_nnz":
        change["row_nnz"] = data.draw(st.sampled_from([enc.row_nnz[:-1], enc.row_nnz.astype(np.int32),
                                                       enc.row_nnz[:, ::-1].copy(), enc.row_nnz.T]))
    elif what == "nnz":
        change["nnz"] = data.draw(st.sampled_from([enc.nnz + 1, -1, float(enc.nnz), None]))
    elif what == "shape":
        change["shape"] = data.draw(st.sampled_from([(w.shape[0] + 8, w.shape[1]), (w.shape[0], w.shape[1] + 16),
                                                     (0, 1), [w.shape[0], w.shape[1]], (w.shape[0],)]))
    else:
        change["dtype"] = data.draw(st.sampled_from(["fp16", "fp32", None]))
    try:
        bad = fuzz_call("spmm.TiledCSL", dataclasses.replace, enc, **change)
    except Refused:
        return
    dense = fuzz_call("spmm.decode", decode, bad, refuse_ok=False)
    assert dense.shape == bad.shape
    if bad.dtype == "bf16":
        x = torch.randn(bad.shape[1], 3)
        got = fuzz_call("spmm.spmm", spmm, bad, x, refuse_ok=False)
        _assert_matches_dense(got, dense, x)


def _assert_matches_dense(got: np.ndarray, w: torch.Tensor, x) -> None:
    """got == w @ x: the same NaN and inf entries, the finite ones within fp32 accumulation error."""
    xf = torch.as_tensor(np.asarray(x, np.float32) if isinstance(x, np.ndarray) else x.float()).double()
    ref = (w.double() @ xf).numpy()
    assert got.shape == ref.shape and got.dtype == np.float32
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    inf = np.isinf(ref)
    assert np.array_equal(got[inf], ref[inf])
    fin = np.isfinite(ref)
    scale = (w.double().abs().nan_to_num(posinf=0) @ xf.abs()).numpy()
    assert np.all(np.abs(got[fin] - ref[fin]) <= 1e-5 * scale[fin] + 1e-30), np.abs(got - ref).max()


@st.composite
def activations(draw, k, fault=None):
    """x for a K-column weight: (K,) or (K, N), 1 <= N <= 64, a float dtype, numpy or torch,
    sometimes non-contiguous; `fault` breaks one thing: "k", "n", "kind" or "nan"."""
    kk = draw(st.sampled_from([k + 1, max(0, k - 1)])) if fault == "k" else k
    n = draw(st.sampled_from([0, 65, 200]) if fault == "n" else st.sampled_from([None, 1, 2, 7, 8, 9, 16, 33, 64]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 999)))
    x = torch.randn(kk if n is None else (kk, n), generator=g)
    if x.numel() and fault == "nan":
        x.view(-1)[draw(st.integers(0, x.numel() - 1))] = draw(st.sampled_from(SPECIALS[:3]))
    if n is not None and draw(st.booleans()):
        x = x.T.contiguous().T  # column-major
    kind = draw(st.sampled_from(["int", "npint", "bool", "list"] if fault == "kind" else
                                ["bf16", "fp32", "fp16", "np32", "np64", "np16"]))
    return {"bf16": lambda: x.bfloat16(), "fp32": lambda: x, "fp16": lambda: x.half(),
            "np32": lambda: x.numpy(), "np64": lambda: x.double().numpy(), "np16": lambda: x.numpy().astype(np.float16),
            "int": lambda: x.int(), "npint": lambda: x.numpy().astype(np.int64), "bool": lambda: x > 0,
            "list": lambda: x.tolist()}[kind]()


@settings(parent=FUZZ_SETTINGS, max_examples=100)
@given(st.sampled_from([None] * 6 + ["k", "n", "kind", "nan", "kernel", "fp16", "out"]), st.data())
def test_fuzz_spmm(fault, data):
    w = data.draw(weights(max_m=40, max_k=100, dtypes=[torch.float16 if fault == "fp16" else torch.bfloat16]))
    try:
        enc = encode(w, tile=data.draw(st.sampled_from([None, (4, 16), (8, 24), (1, 7), (16, 128)])))
    except LabkitError:
        return
    x = data.draw(activations(w.shape[1], fault))
    kernel = data.draw(st.sampled_from(["gpu", "Sparse", None] if fault == "kernel" else ["auto", "sparse", "dense_tile"]))
    out = None
    if fault == "out" or data.draw(st.integers(0, 4)) == 0:
        n = x.shape[1] if getattr(x, "ndim", 1) == 2 and 1 <= x.shape[1] <= MAX_N else 1
        good = np.full((w.shape[0], bucket(n)), np.nan, np.float32)  # every element must be written
        out = data.draw(st.sampled_from([np.empty((1, 1), np.float32), good.astype(np.float64), good.T, "out"])
                        if fault == "out" else st.just(good))
    try:
        got = fuzz_call("spmm.spmm", spmm, enc, x, kernel=kernel, out=out)
    except Refused:
        return
    assert enc.dtype == "bf16"
    if x.ndim == 1:
        assert got.shape == (w.shape[0],)
        _assert_matches_dense(got[:, None], w, x[:, None])
    else:
        _assert_matches_dense(got, w, x)


OPERATORS = {"dense": DenseTorch, "dense_fp32_linear": lambda w: DenseTorch(w, torch.float32, call="linear"),
             "torch_csr": TorchCSR, "scipy_csr": ScipyCSR, "csr_bf16": BF16CSR,
             "tiled_csl": TiledCSLMatmul, "tiled_csl_dense_tile": lambda w: TiledCSLMatmul(w, kernel="dense_tile")}


@settings(parent=FUZZ_SETTINGS, max_examples=100)
@given(weights(max_m=30, max_k=60, specials=False), st.sampled_from(sorted(OPERATORS)), st.data())
def test_fuzz_operators(w, name, data):
    """The bench's operators: built from any weight, called with finite activations, give W @ x
    at their precision (bf16 or fp32 weights)."""
    try:
        op = fuzz_call(f"spmm.{name}", OPERATORS[name], w)
    except Refused:
        return
    x = data.draw(activations(w.shape[1], data.draw(st.sampled_from([None] * 4 + ["k", "n", "kind"]))))
    try:
        y = fuzz_call(f"spmm.{name}()", op, x)
    except Refused:
        return
    assert isinstance(y, torch.Tensor)
    x = torch.as_tensor(x)  # the lab's own kernels take numpy activations too
    wq = w.to(torch.float32 if "fp32" in name or name in ("torch_csr", "scipy_csr") else torch.bfloat16)
    xq = x.to(torch.bfloat16 if name == "dense" else torch.float32).double()
    ref = wq.double() @ xq
    assert tuple(y.shape) == tuple(ref.shape)
    scale = wq.double().abs() @ xq.abs()
    # bf16 outputs (dense bf16) carry bf16 rounding; the rest fp32 accumulation
    tol = 1e-2 if y.dtype == torch.bfloat16 else 1e-5
    assert torch.all((y.double() - ref).abs() <= tol * scale + 1e-30)


@FUZZ_SETTINGS
@given(weights(dtypes=DTYPES + [torch.complex64], max_k=40),
       st.one_of(st.floats(-0.5, 1.5), st.sampled_from([float("nan"), 1.0, "0.5", None, True])),
       st.sampled_from(["matrix", "row", "col"]))
def test_fuzz_magnitude_prune(w, sparsity, granularity):
    try:
        out = fuzz_call("spmm.magnitude_prune", magnitude_prune, w, sparsity, granularity=granularity)
    except Refused:
        return
    assert out.shape == w.shape and out.dtype == w.dtype and 0 <= sparsity < 1
    zeroed = (out == 0) & (w != 0)
    kept = out != 0
    assert np.array_equal(out[kept].double().numpy(), w[kept].double().numpy(), equal_nan=True)  # kept: unchanged
    unit = w.numel() if granularity == "matrix" else w.shape[1]
    target = int(round(sparsity * unit))
    mag = w.abs().double()
    if granularity == "matrix":
        assert int((out == 0).sum()) >= target
        if zeroed.any() and kept.any():
            assert mag[zeroed].max() <= mag[kept].nan_to_num(nan=math.inf).min()
    else:
        assert bool(((out == 0).sum(dim=1) >= target).all())
        for r in range(w.shape[0]):
            z, kp = zeroed[r], kept[r]
            if z.any() and kp.any():
                assert mag[r][z].max() <= mag[r][kp].nan_to_num(nan=math.inf).min()


SHAPES = st.one_of(st.tuples(st.integers(1, 30), st.integers(1, 60)),
                   st.sampled_from([(0, 4), (4, 0), (-1, 3), (2.0, 3), (True, 3), (3,), "3x4", None, (np.int64(3), 5)]))
SPARSITIES = st.one_of(st.floats(0, 0.999), st.sampled_from([1.0, -0.1, float("nan"), float("inf"), "0.5"]))
SEEDS = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([-1, 2**64, 1.5, 3.0, True, None, "1"]))


@FUZZ_SETTINGS
@given(SHAPES, SPARSITIES, SEEDS, st.sampled_from(FLOATS + [torch.int32, "bf16"]),
       st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -1.0, 1e-40, 1e30])))
def test_fuzz_random_sparse(shape, sparsity, seed, dtype, scale):
    try:
        w = fuzz_call("spmm.random_sparse", random_sparse, shape, sparsity, seed=seed, dtype=dtype, scale=scale)
    except Refused:
        return
    assert tuple(w.shape) == tuple(shape) and w.dtype == dtype
    s = 1 / math.sqrt(shape[1]) if scale is None else scale
    v = w.float().abs()
    kept = v[v != 0]
    assert torch.isfinite(v).all() and (kept.numel() == 0 or (kept.min() >= 0.049 * s and kept.max() <= 1.01 * s))
    try:
        mask = fuzz_call("spmm.random_mask", random_mask, shape, sparsity, seed=seed)
    except Refused:
        return
    assert mask.dtype == torch.bool and tuple(mask.shape) == tuple(shape)


@settings(parent=FUZZ_SETTINGS, max_examples=40)
@given(SHAPES, SPARSITIES, st.sampled_from([1, 4, 64, 0, 65, 2.0, None]),
       st.sampled_from(["auto", "sparse", "dense_tile", "x"]), st.booleans())
def test_fuzz_lab_helpers(shape, sparsity, n, kernel, mismatch):
    try:
        w, enc = fuzz_call("spmm.sparse_case", sparse_case, shape, sparsity, seed=1)
    except Refused:
        return
    assert torch.equal(decode(enc), w)
    other = torch.zeros(w.shape[0] + 1, w.shape[1], dtype=torch.bfloat16) if mismatch else w
    try:
        err = fuzz_call("spmm.max_rel_error", max_rel_error, enc, other, n=n, kernel=kernel)
    except Refused:
        return
    assert not mismatch and 0 <= err < 1e-2 or err == 0.0


CFG_FIELDS = ("d_model", "n_heads", "ffn_dim", "n_layers", "vocab", "max_len")


@settings(parent=FUZZ_SETTINGS, max_examples=40)
@given(st.fixed_dictionaries({f: st.sampled_from([1, 2] if f == "n_heads" else [2, 4, 8, np.int64(4)])
                              for f in CFG_FIELDS}),
       st.sampled_from(CFG_FIELDS + (None,) * 12), st.sampled_from([0, -1, 2.0, True, "4", 3]),
       st.one_of(st.floats(0, 0.99), st.floats(0, 0.99), SPARSITIES),
       st.sampled_from(["dense", "sparse", "sparse", "csr"]), st.data())
def test_fuzz_decoder(cfg_kw, bad_field, bad_value, sparsity, linear, data):
    if bad_field is not None:  # one field at a time out of range, so the rest of the path is reached too
        cfg_kw[bad_field] = bad_value
    try:
        cfg = fuzz_call("spmm.DecoderConfig", DecoderConfig, **cfg_kw)
        wts = fuzz_call("spmm.random_weights", random_weights, cfg, sparsity, seed=3)
        model = fuzz_call("spmm.Decoder", Decoder, wts, linear=linear)
    except Refused:
        return
    fault = data.draw(st.sampled_from([None] * 5 + ["batch", "length", "ids", "float", "1d", "new"]))
    b = data.draw(st.sampled_from([0, 65] if fault == "batch" else [1, 2]))
    p = data.draw(st.sampled_from([0, cfg.max_len, cfg.max_len + 1]) if fault == "length"
                  else st.integers(1, cfg.max_len - 1))
    g = torch.Generator().manual_seed(p)
    prompt = (torch.randint(-1, cfg.vocab + 1, (b, p), generator=g) if fault == "ids" and b * p
              else torch.randint(0, cfg.vocab, (b, p), generator=g))
    prompt = prompt.float() if fault == "float" else prompt.reshape(-1) if fault == "1d" else prompt
    new = data.draw(st.sampled_from([0, cfg.max_len, 1.5]) if fault == "new" else st.sampled_from([1, 2]))
    try:
        out = fuzz_call("spmm.Decoder.generate", model.generate, prompt, new)
    except Refused:
        return
    assert out.shape == (prompt.shape[0], prompt.shape[1] + new)
    assert torch.equal(out[:, :prompt.shape[1]], prompt)
    assert int(out.min()) >= 0 and int(out.max()) < cfg.vocab


@settings(parent=FUZZ_SETTINGS, max_examples=60)
@given(weights(max_m=8, max_k=20), st.data())
def test_fuzz_gpu_checks_before_launch(w, data):
    """Without a GPU every call ends in a one-line LabkitError (bad input, or 'needs cupy'), never an
    ImportError from the lazy cupy import."""
    if kernels_gpu.available():
        pytest.skip("a GPU is present: the launch paths are the GPU tests'")
    enc16 = encode(torch.ones(2, 2, dtype=torch.float16), tile=kernels_gpu.GPU_TILE, pad=1)
    case = data.draw(st.sampled_from(["from_weight", "ctor", "spmm", "time"]))
    with pytest.raises(Refused):
        if case == "from_weight":
            fuzz_call("spmm.GpuTiledCSL.from_weight", kernels_gpu.GpuTiledCSL.from_weight,
                      data.draw(st.sampled_from([w, w.numpy() if w.dtype != torch.bfloat16 else None])))
        elif case == "ctor":
            fuzz_call("spmm.GpuTiledCSL", kernels_gpu.GpuTiledCSL, data.draw(st.sampled_from([enc16, None, w])))
        elif case == "spmm":
            fuzz_call("spmm.spmm_gpu", kernels_gpu.spmm_gpu, data.draw(st.sampled_from([enc16, None])), w)
        else:
            fuzz_call("spmm.time_vs_cublas", kernels_gpu.time_vs_cublas, data.draw(SHAPES), data.draw(SPARSITIES),
                      data.draw(st.sampled_from([1, 16, 0, 65])))


@FUZZ_SETTINGS
@given(st.one_of(st.integers(-2, 2**40), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([True, "3"])),
       st.integers(1, 10000), st.integers(1, 10000), SPARSITIES)
def test_fuzz_byte_models(m, k, n, sparsity):
    try:
        r = fuzz_call("spmm.roofline_bytes", roofline_bytes, m, k, n, sparsity)
        b = fuzz_call("spmm.byte_bound_speedup", byte_bound_speedup, sparsity)
    except Refused:
        return
    assert r["tiled_csl"] <= r["dense"] * 2 / (1 - sparsity) + 1 and math.isclose(b, 1 / (2 * (1 - sparsity)))


_TILE_W = random_sparse((20, 70), 0.5, seed=4)
_TILE_ENC = encode(_TILE_W, tile=(8, 32))


@settings(parent=FUZZ_SETTINGS, max_examples=60)
@given(st.one_of(st.integers(-3, 6), st.sampled_from([1.0, True, None, np.int64(1)])),
       st.one_of(st.integers(-3, 6), st.sampled_from([0.0, False, "0"])))
def test_fuzz_tile_dense(tile_row, tile_col):
    w, enc = _TILE_W, _TILE_ENC
    try:
        t = fuzz_call("spmm.TiledCSL.tile_dense", enc.tile_dense, tile_row, tile_col)
    except Refused:
        return
    r0, c0 = int(tile_row) * 8, int(tile_col) * 32
    ref = torch.zeros(8, 32)
    part = w[r0:r0 + 8, c0:c0 + 32].float()
    ref[:part.shape[0], :part.shape[1]] = part
    assert np.array_equal(t, ref.numpy())
    assert isinstance(enc, TiledCSL)
