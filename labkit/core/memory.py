"""One hard memory budget shared by everything a system holds (caches, buffers, queues)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from labkit.core.errors import LabkitError, bad_value
from labkit.core.units import fmt_bytes, parse_bytes

def machine_limit() -> tuple[int, str]:
    """Return (the most memory this machine can give one process, in bytes; what that figure is).

    Total RAM, or the process's cgroup memory limit where that is lower: a budget caps what a
    system may ever hold, so it is checked against what the machine could ever give, not against
    what happens to be free right now (that moves with other processes from second to second;
    :func:`labkit.core.machine.require_memory` checks the free memory before a big allocation).
    """
    from labkit.core.machine import cgroup_memory_limit, memory_bytes
    total, cg = memory_bytes(), cgroup_memory_limit()
    if cg is not None and cg < total:
        return cg, f"this process's cgroup memory limit, {fmt_bytes(cg)}"
    return total, f"this machine's total memory, {fmt_bytes(total)}"


def check_budget(value: Any, arg: str = "budget", *, limit: int | None = None) -> int:
    """Return `value` as a byte count if the machine could hold that much, else raise one line saying so.

    `value` is what :func:`parse_bytes` takes (1048576, '512MiB', '1.5GiB'); the line names `arg`,
    the value and the machine's figure (:func:`machine_limit`, or `limit` bytes where given).
    """
    n = parse_bytes(value, arg)
    cap, what = machine_limit() if limit is None else (int(limit), f"{fmt_bytes(limit)}")
    if n > cap:
        raise bad_value(arg, value, f"a budget no larger than {what} (this one is {fmt_bytes(n)})")
    return n


class BudgetExceeded(LabkitError, MemoryError):
    """A reservation would take the budget past its limit (or the memory it stands for could not be had)."""


class Reservation:
    """Bytes held against a budget by one owner; release() (or leaving the `with`) gives them back."""

    def __init__(self, budget: "MemoryBudget", owner: str, nbytes: int) -> None:
        self.budget, self.owner, self.nbytes = budget, owner, nbytes
        self.released = False

    def resize(self, nbytes: int | str) -> None:
        """Grow or shrink this reservation; raises BudgetExceeded (and keeps the old size) if it won't fit."""
        nbytes = parse_bytes(nbytes, "nbytes")
        if self.released:
            raise bad_value("reservation", f"{self.owner!r} (released)", "a reservation not yet released "
                            "(reserve again to hold bytes after release())")
        self.budget._change(self, nbytes - self.nbytes)
        self.nbytes = nbytes

    def release(self) -> None:
        if not self.released:
            self.budget._change(self, -self.nbytes)
            self.released = True

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Reservation({self.owner!r}, {fmt_bytes(self.nbytes)})"


class MemoryBudget:
    """A hard cap on accounted bytes; every cache, buffer and queue reserves before it allocates.

    `total` may not exceed what the machine could ever give (:func:`machine_limit`: total RAM,
    or the cgroup's limit where lower): a budget the machine cannot back is refused with one line
    naming the machine's figure, rather than accepted and ending in a swap storm or a MemoryError.
    """

    def __init__(self, total: int | str, name: str = "memory budget") -> None:
        self.total = check_budget(total, "total")
        self.name = name
        self.used = 0
        self.peak = 0
        self._owners: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def free(self) -> int:
        return self.total - self.used

    def reserve(self, owner: str, nbytes: int) -> Reservation:
        """Reserve `nbytes` for `owner`, or raise BudgetExceeded naming who asked and what is left."""
        nbytes = parse_bytes(nbytes, "nbytes")
        r = Reservation(self, owner, 0)
        self._change(r, nbytes)
        r.nbytes = nbytes
        return r

    def array(self, owner: str, shape: Any, dtype: Any = np.float32) -> tuple[np.ndarray, Reservation]:
        """Allocate a zeroed array charged to `owner`; returns (array, reservation)."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        r = self.reserve(owner, nbytes)
        try:
            return np.zeros(shape, dtype), r
        except MemoryError:
            r.release()
            raise BudgetExceeded(f"{owner} reserved {fmt_bytes(nbytes)} of the {self.name} but the machine could "
                                 "not allocate it (other processes hold the memory)") from None

    def _change(self, r: Reservation, delta: int) -> None:
        with self._lock:
            if delta > 0 and self.used + delta > self.total:
                raise BudgetExceeded(
                    f"{r.owner} asked for {fmt_bytes(delta)} but the {self.name} of "
                    f"{fmt_bytes(self.total)} has {fmt_bytes(self.free)} free "
                    f"(held: {self._held_text()})")
            self.used += delta
            self.peak = max(self.peak, self.used)
            self._owners[r.owner] = self._owners.get(r.owner, 0) + delta
            if self._owners[r.owner] == 0:
                del self._owners[r.owner]

    def _held_text(self) -> str:
        return ", ".join(f"{o} {fmt_bytes(b)}" for o, b in self._owners.items()) or "nothing"

    def report(self) -> dict:
        """Return {total, used, peak, free, owners: {owner: bytes}}."""
        with self._lock:
            return {"total": self.total, "used": self.used, "peak": self.peak, "free": self.free,
                    "owners": dict(self._owners)}

    def __repr__(self) -> str:
        return f"MemoryBudget({fmt_bytes(self.total)}, used {fmt_bytes(self.used)}, peak {fmt_bytes(self.peak)})"
