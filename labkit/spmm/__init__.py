"""Flash-LLM (VLDB 2024) at lab scale: Tiled-CSL weights and load-as-sparse SpMM for decoding.

Modules: ``prune`` (magnitude pruning, seeded sparse weights), ``tiled_csl`` (the format),
``kernels_cpu`` (numba kernels), ``kernels_gpu`` + ``flash_llm.cu`` (tensor-core kernel, lazy
cupy), ``baselines`` (dense torch, torch/scipy CSR, one operator interface), ``decoder``
(OPT-style sparse decoder), ``lab`` (notebook measurements), ``bench`` (`labkit bench spmm`).
"""
