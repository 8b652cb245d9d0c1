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
