"""GPU Tiled-CSL SpMM: the Flash-LLM pipeline as a cupy RawModule over flash_llm.cu.

Imported lazily: nothing here touches cupy until a function is called, and `available()` says
whether a CUDA GPU and cupy are present. The GPU format is the paper's: 128 x 64 tiles, fp16
values, 13-bit in-tile locations, no per-row padding (the kernel expands whole tiles).
"""

from __future__ import annotations

import functools
import math
import statistics
from pathlib import Path

import torch

from labkit.core.errors import LabkitError, bad_value, check_range, check_seed
from labkit.spmm.tiled_csl import TiledCSL, encode

GPU_TILE = (128, 64)
_SOURCE = Path(__file__).with_name("flash_llm.cu")


def available() -> bool:
    """Return True when cupy imports and sees at least one CUDA device."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no cupy, no driver, no device: all mean "not available"
        return False


@functools.lru_cache(maxsize=1)
def _module():
    import cupy
    return cupy.RawModule(code=_SOURCE.read_text(), options=("-std=c++17",))


def _need_gpu() -> None:
    if not available():
        raise LabkitError("the GPU kernel needs cupy and a CUDA GPU; none is available here "
                          "(pip install 'labkit[gpu]' on a GPU machine)")


class GpuTiledCSL:
    """A Tiled-CSL matrix (128 x 64 tiles, fp16) resident on the GPU."""

    def __init__(self, w: TiledCSL) -> None:
        # Inputs are checked before cupy is imported, so bad input reads the same with or without a GPU.
        if not isinstance(w, TiledCSL):
            raise bad_value("w", type(w).__name__, "a TiledCSL (use GpuTiledCSL.from_weight)")
        if w.tile != GPU_TILE or w.dtype != "fp16":
            raise bad_value("w", f"tile={w.tile}, dtype={w.dtype}", f"tile={GPU_TILE} and dtype='fp16' "
                            "(use GpuTiledCSL.from_weight)")
        _need_gpu()
        import cupy
        self.shape = w.shape
        self.nnz = w.nnz
        self.words = cupy.asarray(w.words)
        self.tile_offsets = cupy.asarray(w.tile_offsets)
        self.tiles_k = w.grid[1]
        self.tiles_m = w.grid[0]
        self.nbytes = int(self.words.nbytes + self.tile_offsets.nbytes)

    @classmethod
    def from_weight(cls, weight: torch.Tensor) -> "GpuTiledCSL":
        """Encode a 2-D torch weight as fp16 Tiled-CSL with the GPU tile and upload it.

        A float weight is refused if fp16 would lose a value: a finite one becoming inf, or a
        non-zero one becoming zero. NaN and inf weights are kept as values.
        """
        return cls(encode(to_fp16(weight), tile=GPU_TILE, pad=1))


def to_fp16(weight: torch.Tensor) -> torch.Tensor:
    """Return a 2-D float `weight` (on the CPU) as fp16, refusing values fp16 cannot hold."""
    if not isinstance(weight, torch.Tensor):
        raise bad_value("weight", type(weight).__name__, "a 2-D torch.Tensor")
    if not weight.dtype.is_floating_point:
        raise bad_value("weight.dtype", weight.dtype, "a floating dtype (bf16, fp16 or fp32)")
    if weight.device.type != "cpu":
        raise bad_value("weight.device", str(weight.device), "a CPU tensor (it is encoded on the CPU)")
    w16 = weight.detach().to(torch.float16)
    lost = (torch.isinf(w16) & torch.isfinite(weight)) | ((w16 == 0) & (weight != 0))
    if lost.any():
        at = tuple(int(i) for i in lost.nonzero()[0])
        raise bad_value(f"weight[{', '.join(map(str, at))}]", float(weight[at]),
                        "a value fp16 holds (|w| in [6e-8, 65504] or 0): the GPU kernel's values are fp16")
    return w16


def split_k(tiles_m: int, tiles_k: int, sm_count: int) -> int:
    """Return the split-K factor: enough blocks for ~2 waves of the SMs, at least 4 tiles each."""
    want = math.ceil(2 * sm_count / max(1, tiles_m))
    return max(1, min(want, tiles_k // 4 or 1))


def spmm_gpu(w: GpuTiledCSL, x, *, splits: int | None = None):
    """Return W @ x as a float32 cupy array (M, N); x is a cupy/torch (K, N) array, 1 <= N <= 64."""
    if not isinstance(w, GpuTiledCSL):
        raise bad_value("w", type(w).__name__, "a GpuTiledCSL (GpuTiledCSL.from_weight)")
    m, k = w.shape
    shape = getattr(x, "shape", None)
    if not isinstance(shape, tuple):  # numpy, cupy and torch (torch.Size) shapes are tuples
        raise bad_value("x", type(x).__name__, f"a cupy array or torch tensor of shape ({k}, N)")
    if len(shape) != 2 or shape[0] != k or not (1 <= shape[1] <= 64):
        raise bad_value("x.shape", tuple(shape), f"({k}, N) with 1 <= N <= 64")
    if splits is not None:
        check_range("splits", splits, 1, w.tiles_k, integer=True)
    _need_gpu()
    import cupy
    x = cupy.asarray(x)
    n = x.shape[1]
    nt = 16 if n <= 16 else 32
    n_pad = -(-n // nt) * nt
    xp = cupy.zeros((k, n_pad), cupy.float16)
    xp[:, :n] = x.astype(cupy.float16)
    y = cupy.zeros((m, n_pad), cupy.float32)
    if splits is None:
        sm = cupy.cuda.Device().attributes["MultiProcessorCount"]
        splits = split_k(w.tiles_m, w.tiles_k, sm)
    check_range("splits", splits, 1, w.tiles_k, integer=True)
    fn = _module().get_function(f"tiled_csl_spmm_n{nt}")
    for c0 in range(0, n_pad, nt):
        fn((w.tiles_m, splits), (128,),
           (w.words, w.tile_offsets, xp[:, c0:c0 + nt].copy(), y[:, c0:c0 + nt],
            cupy.int32(m), cupy.int32(k), cupy.int32(nt), cupy.int32(n_pad), cupy.int32(w.tiles_k)))
    return y[:, :n]


def _time_gpu(*fns, repeats: int) -> list[list[float]]:
    """Seconds per call of each of `fns`, one per round, timed with CUDA events in interleaved rounds."""
    import cupy
    for fn in fns:
        fn()
    cupy.cuda.Device().synchronize()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, t in zip(fns, times):
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            t.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return times


def time_vs_cublas(shape: tuple[int, int], sparsity: float, n: int, *, repeats: int = 20, seed: int = 0) -> dict:
    """Check the GPU SpMM against cuBLAS fp16 at one shape and time both; return a result row."""
    from labkit.spmm.prune import check_shape, check_sparsity, random_sparse
    m, k = check_shape(shape)
    check_sparsity(sparsity)
    check_range("n", n, 1, 64, integer=True)
    check_range("repeats", repeats, 1, integer=True)
    check_seed(seed, bits=64)
    _need_gpu()
    import cupy
    w = random_sparse(shape, sparsity, seed=seed, dtype=torch.float16)
    gw = GpuTiledCSL.from_weight(w)
    wd = cupy.asarray(w.numpy())
    del w
    rs = cupy.random.RandomState(seed)
    x = rs.standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
    # correctness against a float32 product of the same fp16 inputs
    ref = wd.astype(cupy.float32) @ x.astype(cupy.float32)
    got = spmm_gpu(gw, x)
    err = float(cupy.abs(got - ref).max() / (cupy.abs(ref).max() + 1e-30))
    ts_sp, ts_cb = _time_gpu(lambda: spmm_gpu(gw, x), lambda: wd @ x, repeats=repeats)
    t_sp, t_cb = statistics.median(ts_sp), statistics.median(ts_cb)
    return {"shape": f"{m}x{k}", "sparsity": sparsity, "N": n, "rel_err": err, "ok": err < 2e-3,
            "tiled_csl_ms": t_sp * 1e3, "cublas_fp16_ms": t_cb * 1e3,
            "speedup": statistics.median(c / s for c, s in zip(ts_cb, ts_sp)),
            "tiled_csl_times_s": ts_sp, "cublas_times_s": ts_cb,
            "tiled_csl_GBps": gw.nbytes / t_sp / 1e9, "cublas_GBps": 2.0 * m * k / t_cb / 1e9}
