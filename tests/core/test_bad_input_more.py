"""A dataset root that is a file is named as `root`, and CaliEX's workload names a bad seed."""

from __future__ import annotations

import pytest

from labkit.core import datasets as D


@D.register_dataset("toy-root-test", description="test dataset", profiles={"ci": {}})
def _toy(w, p):
    w.meta["n"] = 1


def test_make_dataset_names_a_root_that_is_a_file(tmp_path, data_root):
    f = tmp_path / "readme.md"
    f.write_text("x")
    for call in (D.make_dataset, D.open_dataset):
        with pytest.raises(D.DatasetError, match=rf"root='{f}' is not accepted; it is a file, expected a folder") as e:
            call("toy-root-test", "ci", root=f)
        assert "LABKIT_DATA" not in str(e.value)
    assert D.make_dataset("toy-root-test", "ci", root=tmp_path / "ok").meta["n"] == 1


def test_a_root_that_cannot_be_created_is_named_as_root(tmp_path, data_root):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "toy-root-test").write_text("a file where the dataset's folder belongs")
    with pytest.raises(D.DatasetError, match=r"cannot create a dataset under .*; pass root= a writable folder") as e:
        D.make_dataset("toy-root-test", "ci", root=tmp_path / "r")
    assert "LABKIT_DATA" not in str(e.value)


# CaliEX's workload (labkit/disk/system.py) checks its seed before opening (or building) the dataset.
@pytest.mark.parametrize("seed, shown", [(-1, "-1"), (1.5, r"1\.5"), ("x", "'x'")])
def test_disk_workload_names_a_bad_seed(seed, shown, data_root):
    from labkit.disk.system import workload
    with pytest.raises(ValueError, match=rf"seed={shown} is not accepted; expected an integer in "
                                         r"\[0, 2\*\*63\)"):
        workload("ci", seed=seed)
    assert not any(data_root.iterdir())  # nothing was built
