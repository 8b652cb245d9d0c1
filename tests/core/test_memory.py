import threading

import pytest

from labkit.core.memory import BudgetExceeded, MemoryBudget, fmt_bytes, parse_bytes


def test_parse_bytes():
    assert parse_bytes("1.5GiB") == 3 << 29
    assert parse_bytes("512 MiB") == 512 << 20
    assert parse_bytes(10) == 10
    with pytest.raises(ValueError, match="total='lots'"):
        MemoryBudget("lots")
    with pytest.raises(ValueError, match="size=-1"):
        parse_bytes(-1)


def test_budget_never_exceeded_and_names_owner():
    b = MemoryBudget("1MiB")
    r1 = b.reserve("feature cache", 600 << 10)
    with pytest.raises(BudgetExceeded, match="topology cache asked for 500.0 KiB.*424.0 KiB free.*feature cache"):
        b.reserve("topology cache", 500 << 10)
    assert b.used == 600 << 10
    with pytest.raises(BudgetExceeded):
        r1.resize(2 << 20)
    assert r1.nbytes == 600 << 10 and b.used == 600 << 10
    r1.resize(100 << 10)
    with b.reserve("staging", 900 << 10):
        assert b.free == (1 << 20) - (1000 << 10)
    assert b.used == 100 << 10
    r1.release()
    r1.release()  # idempotent
    assert b.used == 0 and b.peak == 1000 << 10
    assert b.report()["owners"] == {}


def test_budget_array_and_threads():
    b = MemoryBudget(10_000_000)
    a, r = b.array("buf", (1000, 10), "float32")
    assert a.nbytes == 40_000 and b.used == 40_000
    r.release()

    def worker():
        for _ in range(200):
            with b.reserve("t", 1000):
                pass
    ts = [threading.Thread(target=worker) for _ in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert b.used == 0


def test_fmt_bytes():
    assert fmt_bytes(1536) == "1.5 KiB"


def test_parse_bytes_takes_numpy_numbers_and_refuses_inf_nan_and_bools():
    import numpy as np

    from labkit.core.memory import parse_bytes
    assert parse_bytes(np.float32(1048576)) == 1048576 and parse_bytes(np.int64(7)) == 7
    assert parse_bytes("1.5KiB") == 1536
    for bad in (float("inf"), float("nan"), -1, True, np.bool_(True), "12 parsecs"):
        with pytest.raises(ValueError, match=r"size=.* is not accepted; expected a non-negative byte count"):
            parse_bytes(bad)


def test_resize_cannot_break_the_cap_or_charge_a_released_reservation():
    b = MemoryBudget(1000)
    r = b.reserve("c", 100)
    with pytest.raises(ValueError, match=r"nbytes=-500 is not accepted; expected a non-negative byte count"):
        r.resize(-500)  # a negative size would leave room past the cap
    assert (b.used, r.nbytes) == (100, 100)
    with pytest.raises(BudgetExceeded):
        b.reserve("o", 901)
    r.resize("200B")  # strings, as reserve() takes them
    assert (b.used, r.nbytes) == (200, 200)
    r.release()
    with pytest.raises(ValueError, match=r"reservation=\"'c' \(released\)\" is not accepted"):
        r.resize(300)
    assert b.used == 0 and b.report()["owners"] == {}


def test_parse_bytes_takes_decimal_terabytes():
    assert parse_bytes("1TB") == 10**12 and parse_bytes("1tb") == 10**12 and parse_bytes("1TiB") == 1 << 40


def test_a_40gib_budget_on_a_smaller_machine_is_refused():
    """Reproduction: a 40 GiB budget on a 24 GiB machine was accepted. "Too big" is twice this machine's figure."""
    from labkit.core.machine import memory_bytes
    from labkit.core.memory import machine_limit

    cap, what = machine_limit()
    assert 0 < cap <= memory_bytes() and fmt_bytes(cap) in what
    too_big = 2 * memory_bytes()
    for value in (too_big, f"{too_big / 2**30:.1f}GiB"):
        with pytest.raises(ValueError, match=r"^total=.* is not accepted; expected a budget no larger than this "
                           r"(machine's total memory|process's cgroup memory limit), ") as e:
            MemoryBudget(value)
        assert "\n" not in str(e.value) and fmt_bytes(cap) in str(e.value)
    assert MemoryBudget(cap).total == cap  # the machine's own figure is accepted


def test_a_1tib_budget_ends_in_one_line_not_a_raw_memory_error():
    """Reproduction: a 1 TiB budget ended in a raw MemoryError."""
    from labkit.core.errors import LabkitError
    from labkit.core.machine import memory_bytes
    from labkit.disk.system import as_budget

    value = "1TiB" if memory_bytes() < 1 << 40 else f"{2 * memory_bytes()}"
    for make, arg in ((MemoryBudget, "total"), (as_budget, "budget")):
        with pytest.raises(LabkitError, match=rf"^{arg}='{value}' is not accepted; expected a budget no larger") as e:
            make(value)
        assert "\n" not in str(e.value)


def test_check_budget_honours_a_cgroup_limit(tmp_path, monkeypatch):
    from labkit.core import machine
    from labkit.core.memory import check_budget, machine_limit

    (tmp_path / "memory" / "grp").mkdir(parents=True)
    (tmp_path / "memory" / "grp" / "memory.limit_in_bytes").write_text(f"{1 << 30}\n")
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "memory.max").write_text(f"{3 << 29}\n")
    (tmp_path / "a" / "b" / "memory.max").write_text("max\n")
    cg = tmp_path / "cgroup"
    cg.write_text("4:memory:/grp\n0::/a/b\n")
    assert machine.cgroup_memory_limit(str(tmp_path), str(cg)) == 1 << 30
    cg.write_text("0::/a/b\n")
    assert machine.cgroup_memory_limit(str(tmp_path), str(cg)) == 3 << 29
    assert machine.cgroup_memory_limit(str(tmp_path), str(tmp_path / "missing")) is None
    monkeypatch.setattr(machine, "cgroup_memory_limit", lambda: 1 << 30)
    assert machine_limit() == (1 << 30, "this process's cgroup memory limit, 1.0 GiB")
    assert check_budget("1GiB") == 1 << 30
    with pytest.raises(ValueError, match=r"^budget='2GiB' is not accepted; expected a budget no larger than this "
                       r"process's cgroup memory limit, 1.0 GiB \(this one is 2.0 GiB\)$"):
        check_budget("2GiB")
    with pytest.raises(ValueError, match=r"^cap=2048 is not accepted; expected a budget no larger than 1.0 KiB"):
        check_budget(2048, "cap", limit=1024)


def test_budget_array_turns_an_allocation_failure_into_budget_exceeded(monkeypatch):
    import numpy as np

    import labkit.core.memory as memory

    b = MemoryBudget("1MiB")

    def no_memory(*a, **k):
        raise MemoryError

    monkeypatch.setattr(memory.np, "zeros", no_memory)
    with pytest.raises(BudgetExceeded, match=r"^buf reserved 39.1 KiB of the memory budget but the machine could not"):
        b.array("buf", (1000, 10), np.float32)
    assert b.used == 0
