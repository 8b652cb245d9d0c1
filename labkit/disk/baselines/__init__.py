"""The contenders CaliEX is measured against: same GNN, same graph, same budget, same mini-batches.

- :mod:`~labkit.disk.baselines.naive`: topology and features on disk, no caches, random page
  reads, stages one after another;
- :mod:`~labkit.disk.baselines.ginex`: Ginex, a neighbour cache ranked by out/in degree and a
  Belady feature cache over a superbatch sampled ahead and spilled to disk
  (:mod:`~labkit.disk.baselines.spill`), an even split of the cache budget, the superbatch schedule;
- :mod:`~labkit.disk.baselines.memory`: everything in RAM, the upper bound.

:func:`labkit.disk.system.open_system` builds any of them, or CaliEX itself, by name.
"""
