"""GPU kernel: the CUDA source compiles with nvcc here; on a GPU it matches cuBLAS."""

import shutil
import subprocess
from pathlib import Path

import pytest

from labkit.spmm import kernels_gpu

CU = Path(kernels_gpu.__file__).with_name("flash_llm.cu")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_source_compiles(tmp_path):
    r = subprocess.run(["nvcc", "-arch=sm_80", "-c", str(CU), "-o", str(tmp_path / "f.o")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def test_split_k_heuristic():
    assert kernels_gpu.split_k(288, 144, 132) == 1
    assert kernels_gpu.split_k(72, 144, 132) == 4
    assert kernels_gpu.split_k(72, 8, 132) == 2


@pytest.mark.gpu
@pytest.mark.skipif(not kernels_gpu.available(), reason="no CUDA GPU / cupy")
def test_gpu_matches_cublas():
    r = kernels_gpu.time_vs_cublas((1024, 2048), 0.8, 16, repeats=3)
    assert r["ok"], r
