"""AliGraph (VLDB 2019) at lab scale, and the one graph core the other systems build on.

- :mod:`labkit.graph.rmat`      seeded R-MAT edges with planted communities, streamed in chunks
- :mod:`labkit.graph.csr`       CSR / CSC topology and the parallel (and out-of-core) builder
- :mod:`labkit.graph.sampling`  numba NEIGHBORHOOD kernels: uniform, weighted, top-k, multi-hop
"""
