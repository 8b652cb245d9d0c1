"""Shared-memory transport: batches travel from data workers to the trainer through named slots.

The trainer owns every slot (it creates and unlinks them, and the resource tracker reclaims them
if the trainer itself dies). A worker maps a slot through /dev/shm, writes a flattened batch
into it and sends only a small layout description over its pipe. The trainer copies the arrays
out and frees the slot at once, so a slot is never read and written at the same time.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import uuid
from multiprocessing import shared_memory
from typing import Any

import numpy as np
import torch

_ALIGN = 64


def dense_order(t: torch.Tensor) -> tuple[int, ...] | None:
    """Return the dim order in which `t`'s elements lie densely in memory, outermost first.

    ``t.permute(order)`` is then contiguous: the memory `t` covers, read in that order, holds each
    element once with no gaps. None where no such order exists (gaps, overlaps or broadcast
    strides); the identity order for a contiguous tensor.
    """
    order = tuple(sorted(range(t.dim()), key=lambda d: (-t.stride(d), -t.size(d))))
    return order if t.permute(order).is_contiguous() else None


def flatten(batch: Any) -> tuple[Any, list[np.ndarray]]:
    """Return (layout, arrays): the batch's tree shape with array leaves replaced by indices.

    A tensor whose elements lie densely in some dim order (contiguous, channels-last or any other
    permutation) travels in that physical order and comes back with the same strides, so the
    trainer sees the memory format the program produced (a convolution's speed depends on it);
    other tensors travel as contiguous copies.
    """
    arrays: list[np.ndarray] = []

    def walk(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            x = x.detach().cpu()
            order = dense_order(x)
            if order is None or order == tuple(range(x.dim())):
                arrays.append(x.contiguous().numpy())
                return ("t", len(arrays) - 1)
            arrays.append(x.permute(order).numpy())
            inverse = tuple(sorted(range(x.dim()), key=order.__getitem__))
            return ("tp", (len(arrays) - 1, inverse))
        if isinstance(x, np.ndarray):
            arrays.append(x if x.flags.c_contiguous else x.copy(order="C"))
            return ("n", len(arrays) - 1)
        if isinstance(x, tuple):
            return ("tuple", [walk(v) for v in x])
        if isinstance(x, list):
            return ("list", [walk(v) for v in x])
        if isinstance(x, dict):
            return ("dict", [(k, walk(v)) for k, v in x.items()])
        return ("obj", x)

    return walk(batch), arrays


def unflatten(layout: Any, arrays: list[np.ndarray]) -> Any:
    """Inverse of :func:`flatten` (tensor leaves come back as tensors, ndarray leaves as ndarrays)."""
    kind, v = layout
    if kind == "t":
        return torch.from_numpy(arrays[v])
    if kind == "tp":
        i, inverse = v
        return torch.from_numpy(arrays[i]).permute(inverse)
    if kind == "n":
        return arrays[v]
    if kind == "tuple":
        return tuple(unflatten(x, arrays) for x in v)
    if kind == "list":
        return [unflatten(x, arrays) for x in v]
    if kind == "dict":
        return {k: unflatten(x, arrays) for k, x in v}
    return v


def packed_size(arrays: list[np.ndarray]) -> int:
    """Bytes needed to pack `arrays` into one slot with 64-byte alignment."""
    off = 0
    for a in arrays:
        off = -(-off // _ALIGN) * _ALIGN + a.nbytes
    return off


def pack(buf: memoryview, arrays: list[np.ndarray]) -> list[tuple[str, tuple, int]]:
    """Copy `arrays` into `buf`; return their (dtype, shape, offset) list."""
    specs, off = [], 0
    for a in arrays:
        off = -(-off // _ALIGN) * _ALIGN
        dst = np.frombuffer(buf, np.uint8, a.nbytes, off)
        dst[:] = a.reshape(-1).view(np.uint8)
        specs.append((a.dtype.str, a.shape, off))
        off += a.nbytes
    return specs


def unpack(buf: memoryview | bytes, specs: list[tuple[str, tuple, int]]) -> list[np.ndarray]:
    """Copy arrays described by `specs` out of `buf` (the slot may be reused right after)."""
    out = []
    for dtype, shape, off in specs:
        dt = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64))
        out.append(np.frombuffer(buf, dt, n, off).reshape(shape).copy())
    return out


class SlotPool:
    """Named shared-memory slots owned by the trainer; `acquire` grows the pool up to `max_slots`."""

    def __init__(self, slot_bytes: int, max_slots: int, tag: str = "") -> None:
        self.slot_bytes, self.max_slots = int(slot_bytes), int(max_slots)
        self.prefix = f"lkdw{tag}{os.getpid()}_{uuid.uuid4().hex[:6]}_"
        self._slots: dict[str, shared_memory.SharedMemory] = {}
        self._free: list[str] = []
        self._n = 0

    @property
    def names(self) -> list[str]:
        return list(self._slots)

    @property
    def in_use(self) -> int:
        return len(self._slots) - len(self._free)

    def acquire(self) -> str | None:
        """Return a free slot's name (creating one if under the cap), or None when all are busy."""
        if self._free:
            return self._free.pop()
        if len(self._slots) >= self.max_slots:
            return None
        name = f"{self.prefix}{self._n}"
        self._n += 1
        self._slots[name] = shared_memory.SharedMemory(name=name, create=True, size=self.slot_bytes)
        return name

    def release(self, name: str) -> None:
        """Give slot `name` back; a slot smaller than the current slot size is destroyed instead."""
        shm = self._slots.get(name)
        if shm is None:
            return
        if shm.size < self.slot_bytes:
            self._destroy(name)
        elif name not in self._free:
            self._free.append(name)

    def buffer(self, name: str) -> memoryview:
        return self._slots[name].buf

    def grow(self, nbytes: int) -> None:
        """Make future slots at least `nbytes` (old, smaller slots are destroyed as they come back)."""
        if nbytes > self.slot_bytes:
            self.slot_bytes = int(nbytes * 1.25) + 4096
            for name in [n for n in self._free if self._slots[n].size < self.slot_bytes]:
                self._free.remove(name)
                self._destroy(name)

    def set_max(self, max_slots: int) -> None:
        self.max_slots = int(max_slots)

    def _destroy(self, name: str) -> None:
        shm = self._slots.pop(name)
        with contextlib.suppress(ValueError, BufferError):
            shm.close()
        with contextlib.suppress(FileNotFoundError):
            shm.unlink()

    def close(self) -> None:
        """Unlink every slot (idempotent)."""
        for name in list(self._slots):
            self._destroy(name)
        self._free.clear()


class SlotMapper:
    """A worker's view of the trainer's slots: maps /dev/shm/<name> without registering ownership."""

    def __init__(self) -> None:
        self._maps: dict[str, mmap.mmap] = {}

    def buffer(self, name: str) -> memoryview:
        m = self._maps.get(name)
        if m is None:
            # Opening the file directly keeps the worker out of the resource tracker: only the
            # trainer owns (and unlinks) slots.
            fd = os.open(f"/dev/shm/{name}", os.O_RDWR)
            try:
                m = mmap.mmap(fd, os.fstat(fd).st_size)
            finally:
                os.close(fd)
            if len(self._maps) > 64:
                self.close()
            self._maps[name] = m
        return memoryview(m)

    def close(self) -> None:
        for m in self._maps.values():
            with contextlib.suppress(BufferError):
                m.close()
        self._maps.clear()


def leaked_slots() -> list[str]:
    """Names of labkit data-worker slots left in /dev/shm by processes that no longer exist."""
    out = []
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir("/dev/shm"):
            if name.startswith("lkdw"):
                pid = name[4:].split("_")[0].lstrip("abcdefghijklmnopqrstuvwxyz")
                if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                    out.append(name)
    return out


def slots_of(pid: int) -> list[str]:
    """Names of data-worker slots created by process `pid` that still exist."""
    with contextlib.suppress(FileNotFoundError):
        return [n for n in os.listdir("/dev/shm") if n.startswith("lkdw") and f"{pid}_" in n]
    return []
