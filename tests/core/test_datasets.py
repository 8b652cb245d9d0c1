import json
import os

import numpy as np
import pytest

from labkit.core import datasets as D


@D.register_dataset("toy-test", description="test dataset", profiles={"ci": {"n": 1000}, "small": {"n": 5000}},
                    seed=7)
def _toy(w, p):
    rng = w.rng()
    w.array("x", rng.standard_normal((p["n"], 4)).astype(np.float32))
    with w.stream("y", np.int64, align=4096) as s:
        for i in range(0, p["n"], 300):
            s.append(np.arange(i, min(i + 300, p["n"]), dtype=np.int64))
    w.path("notes", ".txt").write_text("hello")
    w.meta["n"] = p["n"]


BOOM = {"on": False}


@D.register_dataset("toy-crash", description="fails halfway", profiles={"ci": {}})
def _crash(w, p):
    w.array("x", np.zeros(10))
    if BOOM["on"]:
        raise RuntimeError("interrupted")


def test_build_is_deterministic_and_verified(data_root):
    ds = D.open_dataset("toy-test", "ci")
    x = ds.array("x")
    assert x.shape == (1000, 4) and x.dtype == np.float32
    assert ds.meta["n"] == 1000
    assert np.array_equal(ds.array("y", mmap=False), np.arange(1000))
    assert ds.info("y")["bytes"] % 4096 == 0
    assert ds.path("notes").read_text() == "hello"
    m = json.loads((ds.dir / "manifest.json").read_text())
    assert m["seed"] == 7 and set(m["files"]) == {"x", "y", "notes"}
    # same seed -> same bytes in a different root
    other = D.make_dataset("toy-test", "ci", root=data_root / "other")
    assert np.array_equal(other.array("x"), x)


def test_existing_copy_is_reused_not_rebuilt(data_root):
    ds = D.make_dataset("toy-test", "ci")
    mtime = (ds.dir / "manifest.json").stat().st_mtime_ns
    ds2 = D.make_dataset("toy-test", "ci")
    assert (ds2.dir / "manifest.json").stat().st_mtime_ns == mtime


def test_truncated_file_names_file_and_command(data_root):
    ds = D.make_dataset("toy-test", "ci")
    p = ds.path("x")
    with open(p, "r+b") as fh:
        fh.truncate(100)
    D._VERIFIED.clear()
    with pytest.raises(D.DatasetError, match=r"x\.bin is truncated.*labkit data make toy-test --profile ci --force"):
        D.open_dataset("toy-test", "ci")
    # never silently rebuilt over
    with pytest.raises(D.DatasetError):
        D.make_dataset("toy-test", "ci")
    assert p.stat().st_size == 100
    D.make_dataset("toy-test", "ci", force=True)
    assert D.open_dataset("toy-test", "ci").array("x").shape == (1000, 4)


def test_corrupted_file_detected(data_root):
    ds = D.make_dataset("toy-test", "ci")
    p = ds.path("x")
    b = bytearray(p.read_bytes())
    b[10] ^= 0xFF
    p.write_bytes(bytes(b))
    D._VERIFIED.clear()
    with pytest.raises(D.DatasetError, match="corrupted"):
        D.open_dataset("toy-test", "ci")


def test_interrupted_build_leaves_nothing(data_root):
    BOOM["on"] = True
    try:
        with pytest.raises(RuntimeError):
            D.make_dataset("toy-crash", "ci")
    finally:
        BOOM["on"] = False
    parent = data_root / "toy-crash"
    assert not (parent / "ci").exists()
    assert [p for p in parent.iterdir()] == []
    with pytest.raises(D.DatasetError, match="not built"):
        D.open_dataset("toy-crash", "ci", build=False)


def test_bad_name_and_profile(data_root):
    with pytest.raises(ValueError, match="name='nope'.*toy-test"):
        D.open_dataset("nope", "ci")
    with pytest.raises(ValueError, match="profile='huge'"):
        D.open_dataset("toy-test", "huge")
    with pytest.raises(ValueError, match="profile='large'.*ci, small"):
        D.make_dataset("toy-test", "large")


def test_built_folder_is_shareable_and_a_stray_file_is_refused(data_root):
    ds = D.make_dataset("toy-test", "ci")
    umask = D._umask()
    assert (ds.dir.stat().st_mode & 0o777) == 0o777 & ~umask  # not mkdtemp's private 0700
    # A file where the dataset folder belongs: refused with the command, replaced only with --force.
    stray = D.dataset_dir("toy-test", "small")
    stray.write_text("not a dataset")
    with pytest.raises(D.DatasetError, match=r"is a file, not a dataset folder.*--force"):
        D.make_dataset("toy-test", "small")
    assert stray.read_text() == "not a dataset"
    ds = D.make_dataset("toy-test", "small", force=True)
    assert ds.dir.is_dir() and ds.meta["n"] == 5000
    assert [p.name for p in stray.parent.iterdir() if p.name.startswith(".")] == []  # no leftovers
