import json
import math

import pytest

from labkit.core.atomic import atomic_open, atomic_write_json, atomic_write_text
from labkit.core.errors import check_choice, check_range
from labkit.core.metrics import ResultTable, record_metrics


def test_check_choice_and_range_messages():
    with pytest.raises(ValueError, match=r"^mode='x' is not accepted; expected one of a, b$"):
        check_choice("mode", "x", ["a", "b"])
    with pytest.raises(ValueError, match=r"sparsity=1.0 is not accepted; expected a number in \[0, 1\)"):
        check_range("sparsity", 1.0, 0, 1, hi_open=True)
    with pytest.raises(ValueError, match="n=2.5"):
        check_range("n", 2.5, 1, 64, integer=True)
    with pytest.raises(ValueError, match="x=nan"):
        check_range("x", math.nan, 0, 1)
    assert check_range("n", 4, 1, 64, integer=True) == 4


def test_check_range_accepts_numpy_scalars_and_refuses_bools_and_nan():
    import numpy as np

    assert check_range("n", np.int64(8), 1, 64, integer=True) == 8
    assert check_range("n", np.int32(1), 1, 64, integer=True) == 1
    assert check_range("x", np.float32(0.5), 0, 1) == 0.5
    assert check_range("n", np.float64(4.0), 1, 64, integer=True) == 4  # whole-valued floats pass
    with pytest.raises(ValueError, match=r"^n=100 is not accepted; expected an integer in \[1, 64\]$"):
        check_range("n", np.int64(100), 1, 64, integer=True)  # the plain value, not np.int64(100)
    with pytest.raises(ValueError, match="^x=nan is not accepted"):
        check_range("x", np.float64("nan"), 0, 1)
    with pytest.raises(ValueError, match="n=2.5"):
        check_range("n", np.float64(2.5), 1, 64, integer=True)
    for bad in (True, np.bool_(True), "3", None, np.array([1, 2]), math.inf):
        with pytest.raises(ValueError, match="^n=.* is not accepted; expected an integer"):
            check_range("n", bad, 1, 64, integer=True)


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    p = tmp_path / "f.json"
    atomic_write_json(p, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_open(p, "w") as fh:
            fh.write("garbage")
            raise RuntimeError("crash mid-write")
    assert json.loads(p.read_text()) == {"a": 1}
    assert [x.name for x in tmp_path.iterdir()] == ["f.json"]
    with pytest.raises(FileExistsError, match="already exists"):
        atomic_write_json(p, {"b": 2}, overwrite=False)


def test_record_metrics(tmp_path):
    import numpy as np
    p = tmp_path / "m.json"
    out = record_metrics({"a": np.float32(1.5), "b": {"c": np.int64(3)}, "l": [1, 2]}, str(p))
    assert json.loads(p.read_text()) == out == {"a": 1.5, "b": {"c": 3}, "l": [1, 2]}
    with pytest.raises(ValueError, match=r"metrics\['x'\]=inf"):
        record_metrics({"x": float("inf")})


def test_result_table_html():
    t = ResultTable(title="t")
    t.add(name="a", value=1.23456)
    t.add(name="b", extra="<x>")
    h = t._repr_html_()
    assert "<th>extra</th>" in h and "&lt;x&gt;" in h and "1.235" in h


def test_atomic_write_keeps_the_mode_of_the_file_it_replaces(tmp_path):
    """Not mkstemp's private 0600: BENCHMARKS.md and manifests stay as shareable as they were."""
    import os

    from labkit.core.atomic import _umask
    p = tmp_path / "B.md"
    atomic_write_text(p, "new file")
    assert p.stat().st_mode & 0o777 == 0o666 & ~_umask()  # what open() would have made
    os.chmod(p, 0o640)
    atomic_write_text(p, "replaced")
    assert p.stat().st_mode & 0o777 == 0o640 and p.read_text() == "replaced"
    os.chmod(p, 0o604)
    atomic_write_json(p, {"a": 1})
    assert p.stat().st_mode & 0o777 == 0o604


def test_atomic_write_through_a_symlink_updates_its_target(tmp_path):
    import os

    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "x.md"
    target.write_text("old")
    os.chmod(target, 0o644)
    link = tmp_path / "link.md"
    link.symlink_to(os.path.join("real", "x.md"))
    atomic_write_text(link, "via link")
    assert link.is_symlink() and target.read_text() == "via link"
    assert target.stat().st_mode & 0o777 == 0o644
    assert sorted(x.name for x in (tmp_path / "real").iterdir()) == ["x.md"]  # temp file went beside the target
    with pytest.raises(FileExistsError, match="link.md"):
        atomic_write_text(link, "refused", overwrite=False)
    assert target.read_text() == "via link"
    dangling = tmp_path / "dangling.md"
    dangling.symlink_to("real/new.md")
    atomic_write_text(dangling, "created", overwrite=False)
    assert dangling.is_symlink() and (tmp_path / "real" / "new.md").read_text() == "created"


def test_record_metrics_replaces_its_own_output_atomically(tmp_path):
    """Re-running a notebook (or its last cell) rewrites METRICS_OUT: that file is the run's output."""
    import os
    p = tmp_path / "m.json"
    record_metrics({"a": 1}, str(p))
    os.chmod(p, 0o644)
    record_metrics({"a": 2}, str(p))
    assert json.loads(p.read_text()) == {"a": 2} and p.stat().st_mode & 0o777 == 0o644
    assert [x.name for x in tmp_path.iterdir()] == ["m.json"]


def test_atomic_write_refuses_a_missing_folder_instead_of_creating_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"path=.*nodir.*its folder .*nodir' does not exist"):
        atomic_write_text(tmp_path / "nodir" / "x.txt", "text")
    assert list(tmp_path.iterdir()) == []
