"""A dataset corrupted in place is caught (issue 33 item 10): by open_dataset and by `labkit data list`."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from labkit import cli
from labkit.core import datasets as D


@D.register_dataset("toy-integrity", description="integrity test dataset", profiles={"ci": {"n": 2000}})
def _toy(w, p):
    w.array("x", w.rng().standard_normal((p["n"], 4)).astype(np.float32))
    w.meta["n"] = p["n"]


def _flip_keeping_size_and_mtime(path) -> None:
    """Flip one byte of `path` in place (same inode, same size) and restore its mtime, as a user could."""
    st = os.stat(path)
    # ctime comes from the kernel's coarse clock: wait until it has moved past the file's ctime, so
    # the rewrite is distinguishable at all (an event, not a fixed sleep).
    coarse = getattr(time, "CLOCK_REALTIME_COARSE", time.CLOCK_REALTIME)
    while time.clock_gettime_ns(coarse) <= st.st_ctime_ns:
        time.sleep(0.001)
    with open(path, "r+b") as fh:
        fh.seek(17)
        b = fh.read(1)
        fh.seek(17)
        fh.write(bytes([b[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


def test_open_dataset_catches_a_same_size_rewrite_with_its_mtime_restored(data_root):
    """Issue 33 item 10: the in-process cache (path, mtime, size) accepted a same-size corruption."""
    ds = D.make_dataset("toy-integrity", "ci")
    D.open_dataset("toy-integrity", "ci")  # verified once: now in the in-process cache
    victim = ds.path("x")
    _flip_keeping_size_and_mtime(victim)
    with pytest.raises(D.DatasetError) as e:
        D.open_dataset("toy-integrity", "ci")
    msg = str(e.value)
    assert "\n" not in msg and str(victim) in msg and "corrupted" in msg
    assert "labkit data make toy-integrity --profile ci --force" in msg
    # Not silently rebuilt over: make refuses the damaged copy and leaves its bytes as they are.
    before = victim.read_bytes()
    with pytest.raises(D.DatasetError, match="--force"):
        D.make_dataset("toy-integrity", "ci")
    assert victim.read_bytes() == before
    D.make_dataset("toy-integrity", "ci", force=True)
    assert D.open_dataset("toy-integrity", "ci").array("x").shape == (2000, 4)


def _list_line(capsys, *flags) -> str:
    assert cli.main(["data", "list", *flags]) == 0
    out = capsys.readouterr().out.splitlines()
    i = next(i for i, ln in enumerate(out) if ln.startswith("toy-integrity "))
    return out[i + 1]


def test_data_list_does_not_report_a_byte_flipped_dataset_as_built(data_root, capsys):
    """Issue 33 item 10: `labkit data list` checked sizes only and said "built" for a flipped byte."""
    ds = D.make_dataset("toy-integrity", "ci")
    assert "built (verified): ci" in _list_line(capsys, "--verify")
    _flip_keeping_size_and_mtime(ds.path("x"))
    quick = _list_line(capsys)
    assert "built: ci" not in quick and "built (not verified): ci" in quick  # sizes only: says so
    line = _list_line(capsys, "--verify")
    assert "built (verified): none" in line
    assert "damaged (labkit data make toy-integrity --profile P --force): ci" in line


def test_a_replaced_file_of_the_same_size_is_hashed_again(data_root):
    """A file swapped for another of the same size (a new inode) is not taken from the cache."""
    ds = D.make_dataset("toy-integrity", "ci")
    D.open_dataset("toy-integrity", "ci")
    victim = ds.path("x")
    st = os.stat(victim)
    data = bytearray(victim.read_bytes())
    data[5] ^= 0x01
    tmp = victim.with_name("x.tmp")
    tmp.write_bytes(bytes(data))
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, victim)
    with pytest.raises(D.DatasetError, match="corrupted"):
        D.open_dataset("toy-integrity", "ci")
