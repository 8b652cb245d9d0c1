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


def test_manifest_is_as_shareable_as_the_folder(data_root):
    ds = D.make_dataset("toy-test", "ci")
    assert ((ds.dir / "manifest.json").stat().st_mode & 0o777) == 0o666 & ~D._umask()  # not 0600


def test_force_rebuild_interrupted_between_renames_restores_the_old_copy(data_root, monkeypatch):
    ds = D.make_dataset("toy-test", "ci")
    before = (ds.dir / "manifest.json").read_text()
    real = os.rename

    def rename(src, dst):
        if ".building-" in str(src):  # the new build going into place: interrupt right before it
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(D.os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        D.make_dataset("toy-test", "ci", force=True)
    monkeypatch.setattr(D.os, "rename", real)
    assert (ds.dir / "manifest.json").read_text() == before
    assert [p.name for p in ds.dir.parent.iterdir()] == ["ci"]  # nothing hidden, nothing half-built
    D._VERIFIED.clear()
    assert D.open_dataset("toy-test", "ci", build=False).array("x").shape == (1000, 4)


def _dead_pid():
    import subprocess
    import sys
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_leftovers_of_killed_builds_are_swept_and_a_parked_copy_comes_back(data_root):
    """A build killed by SIGKILL leaves its pid-named folders; the next build clears or restores them."""
    ds = D.make_dataset("toy-test", "ci")
    parent, dead = ds.dir.parent, _dead_pid()
    # Killed between the two renames of a --force rebuild: the copy is parked, no dataset in place.
    parked = parent / f".ci.old-{dead}-abcd1234"
    os.rename(ds.dir, parked)
    half = parent / f".ci.building-{dead}-x1y2z3"
    half.mkdir()
    (half / "x.bin").write_bytes(b"partial")
    mine = parent / f".ci.building-{os.getpid()}-live00"  # a live process's build is left alone
    mine.mkdir()
    legacy = parent / ".ci.building-q8r9s0t1"  # no pid in the name: not ours to judge
    legacy.mkdir()
    D._VERIFIED.clear()
    again = D.open_dataset("toy-test", "ci", build=False)
    assert again.array("x").shape == (1000, 4)
    assert sorted(p.name for p in parent.iterdir()) == sorted(["ci", mine.name, legacy.name])
    # A dead build's parked copy when the dataset is in place is superseded: removed.
    stale = parent / f".ci.old-{dead}-ffff0000"
    stale.mkdir()
    D.make_dataset("toy-test", "ci")
    assert not stale.exists() and mine.exists()


def test_stream_closes_its_file_when_the_builder_fails(data_root):
    held = []

    @D.register_dataset("toy-stream-crash", description="fails inside a stream", profiles={"ci": {}})
    def _crash(w, p):
        with w.stream("y", np.int64) as s:
            held.append(s)
            s.append(np.arange(10, dtype=np.int64))
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        D.make_dataset("toy-stream-crash", "ci")
    assert held and held[0]._fh.closed
    assert [p for p in (data_root / "toy-stream-crash").iterdir()] == []


@D.register_dataset("toy-full-disk", description="the disk fills up halfway", profiles={"ci": {}})
def _full_disk(w, p):
    w.array("x", np.zeros(10))
    if BOOM["on"]:
        raise OSError(28, "No space left on device")


def test_a_build_that_fills_the_disk_says_so_on_one_line_and_keeps_the_copy_that_was_there(data_root):
    first = D.make_dataset("toy-full-disk", "ci")
    before = (first.dir / "manifest.json").read_text()
    BOOM["on"] = True
    try:
        with pytest.raises(D.DatasetError) as e:
            D.make_dataset("toy-full-disk", "ci", force=True)
        msg = str(e.value)
        assert "\n" not in msg
        assert msg.startswith(f"building toy-full-disk/ci ran out of disk space under {data_root / 'toy-full-disk'} (")
        assert "free once the partial build was removed; the copy that was there is kept): " in msg
        assert msg.endswith("set LABKIT_DATA to a folder on a larger disk")
        D.make_dataset("toy-full-disk", "ci")  # no rebuild asked: the kept copy is served
        assert (first.dir / "manifest.json").read_text() == before
        assert sorted(p.name for p in (data_root / "toy-full-disk").iterdir()) == ["ci"]  # no partial build left
        import shutil
        shutil.rmtree(first.dir)
        with pytest.raises(D.DatasetError, match=r"; nothing was kept\): "):
            D.make_dataset("toy-full-disk", "ci")
        assert list((data_root / "toy-full-disk").iterdir()) == []
    finally:
        BOOM["on"] = False
