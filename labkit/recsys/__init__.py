"""PICASSO (ICDE 2022): packed, interleaved and cached training of wide-and-deep recommenders.

Modules: :mod:`data` (field specs, jagged batches, Zipf generator, Criteo readers),
:mod:`tables` (table layout), :mod:`layers` (per-field baseline, dense networks),
:mod:`packing` + :mod:`kernels` (packed tables, fused backward + optimizer), :mod:`interleave`,
:mod:`cache` (hot-row cache over a memory-mapped slow tier), :mod:`model` (one interface with
the three techniques switchable), :mod:`baselines.torchrec` (optional TorchRec anchors).
"""
