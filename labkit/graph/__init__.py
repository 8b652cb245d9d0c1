"""AliGraph (VLDB 2019) at lab scale, and the one graph core the other systems build on.

Graph core (stable signatures; CaliEX reuses them):
- :mod:`labkit.graph.rmat`        seeded R-MAT edges (Graph500 a, b, c) with planted communities, streamed in chunks
- :mod:`labkit.graph.csr`         CSR / CSC topology and the parallel, optionally out-of-core builder
- :mod:`labkit.graph.build`       CSV / Parquet edge readers (row-numbered errors) feeding the chunked builder,
                                  and typed edge attribute columns read apart from topology
- :mod:`labkit.graph.sampling`    numba NEIGHBORHOOD kernels over any (indptr, indices): uniform with and
                                  without replacement (O(k) per row), alias (edge-weight), top-k, multi-hop

AliGraph's parts:
- :mod:`labkit.graph.partition`   hash, LDG and Fennel partitioning, edge cut and balance
- :mod:`labkit.graph.importance`  Imp_k = D_in^k / D_out^k, the cache plan and the neighbour cache
- :mod:`labkit.graph.store`       in-process and partitioned stores (embedded or Dask actors), store sampler
- :mod:`labkit.graph.traverse`, :mod:`labkit.graph.negative`  TRAVERSE and NEGATIVE operators
- :mod:`labkit.graph.query`       GSL-style queries: g.V("user").batch(512).outV("u2i").sample(10).by(...)
- :mod:`labkit.graph.pyg`         PyG FeatureStore / GraphStore / BaseSampler adapters
- :mod:`labkit.graph.train`       GraphSAGE (PyG SAGEConv) training with the epoch split by stage
- :mod:`labkit.graph.datasets`, :mod:`labkit.graph.experiments`, :mod:`labkit.graph.bench`
"""
