"""GoldMiner (SIGMOD 2023): cut the stateless pre-processing out of an unmodified training program
and run it on elastic data workers, scheduled across jobs.

Modules, one per concept:
- ``datasets``: the seeded synthetic JPEG and CTR data sets.
- ``workloads``: monolithic training programs (Dataset, collate function, model, loss).
- ``extract``: the automatic cut (Dataset + collate + torch.fx prefix), with an equivalence check.
- ``transport``: shared-memory slots that carry batches from workers to the trainer.
- ``workers``: data worker pools (local processes; Dask) with exactly-once, in-order delivery;
  ``dask_plugin`` installs the stateless part on every Dask worker.
- ``autoscale``: the elastic autoscaler (hill climbing on trainer throughput, gated by stall).
- ``scheduler``: the multi-job CPU allocation policy.
- ``simulator``: a trace-driven 64-GPU cluster simulator driven by the same policy.
- ``trainer``: the training loop that measures stall (real CPU/CUDA step, or a step labelled
  EMULATED when asked); ``baselines``: the monolithic program and PyTorch's DataLoader.
- ``bench``: ``labkit bench dataworkers``; the widgets live in ``labkit.ui.dataworkers``.
"""
