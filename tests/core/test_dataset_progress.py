"""An opt-in one-line progress display for first-use dataset builds; silent by default."""

from __future__ import annotations

import numpy as np

from labkit.core import datasets as D


@D.register_dataset("toy-progress", description="test dataset for the build bar", profiles={"ci": {"n": 64}})
def _toy(w, p):
    w.array("x", np.arange(p["n"], dtype=np.int64))


def test_build_shows_stages_only_when_asked(data_root, capsys):
    ds = D.open_dataset("toy-progress", "ci", progress=True)
    err = capsys.readouterr().err
    assert np.array_equal(ds.array("x", mmap=False), np.arange(64))
    assert "building toy-progress/ci" in err and "3/3" in err  # generating, hashing, committing
    # Already built: nothing to show. A forced rebuild without progress is silent too.
    D.open_dataset("toy-progress", "ci", progress=True)
    D.make_dataset("toy-progress", "ci", force=True)
    assert "building" not in capsys.readouterr().err
