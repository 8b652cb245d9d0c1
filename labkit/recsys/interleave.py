"""PICASSO interleaving: overlap memory-bound embedding work with compute-bound MLP work.

A batch is split into micro-batches. One worker thread looks up the embeddings of every
micro-batch in turn while the main thread runs the dense network forward and backward on the
micro-batches already looked up; the embedding backward of micro-batch i then runs on the
worker while the dense network works on micro-batch i+1 (threads on a CPU: numba kernels and
torch ops release the GIL; CUDA streams would play the worker's part on a GPU).

Semantics are those of one step on the whole batch: all lookups read the weights of before the
step, dense gradients accumulate over micro-batches (each loss scaled by its share of the
batch), and embedding updates add up to the full-batch update (exactly for SGD; for the Adagrad
variants the packed stage applies one fused update on the whole batch at the end).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import torch

from labkit.core.errors import check_range
from labkit.recsys.data import JaggedBatch


def _one_numba_thread() -> None:
    import numba
    numba.set_num_threads(1)  # thread-local in numba: only the worker's kernels are affected


class Interleaver:
    """Runs training steps with micro-batches overlapped on one worker thread."""

    def __init__(self, micro_batches: int = 4, *, pipeline_threads: bool = True) -> None:
        self.micro_batches = check_range("micro_batches", micro_batches, 1, 1024, integer=True)
        self.pipeline_threads = pipeline_threads
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="picasso-emb",
                                        initializer=_one_numba_thread if pipeline_threads else None)

    def step(self, model, batch: JaggedBatch) -> float:
        """One interleaved training step of `model` (a :class:`RecModel`) on `batch`; returns the loss."""
        stage, n = model.embeddings, min(self.micro_batches, batch.batch_size)
        # The two pipeline threads are the parallelism now: intra-op threads on top of them
        # would only oversubscribe the cores (and OpenMP barriers then wait on descheduled threads).
        saved = torch.get_num_threads()
        if self.pipeline_threads:
            torch.set_num_threads(1)
        try:
            return self._step(model, stage, batch, n)
        finally:
            if self.pipeline_threads:
                torch.set_num_threads(saved)

    def _step(self, model, stage, batch: JaggedBatch, n: int) -> float:
        micro = batch.split(n)
        lookups: list[Future] = [self._pool.submit(stage.lookup, mb) for mb in micro]
        per_micro_update = not stage.packed or stage.optimizer == "sgd"
        backs: list[Future] = []
        grads, embs = [], []
        total = 0.0
        for mb, fut in zip(micro, lookups):
            emb = fut.result()
            e = emb.detach().requires_grad_()
            loss = model.loss(e, mb) * (mb.batch_size / batch.batch_size)
            loss.backward()
            total += float(loss.detach())
            if not stage.packed:
                backs.append(self._pool.submit(stage.backward_only, emb, e.grad))
            elif per_micro_update:
                # Queued behind every lookup, so no lookup of this step sees the update.
                backs.append(self._pool.submit(stage.apply, mb, None, e.grad))
            else:
                grads.append(e.grad)
                embs.append(emb)
        for f in backs:
            f.result()
        if not stage.packed:
            stage.step()
        elif not per_micro_update:
            stage.apply(batch, None, torch.cat(grads))
        model.dense_step()
        return total

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> "Interleaver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
