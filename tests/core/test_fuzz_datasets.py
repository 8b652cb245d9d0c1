"""Fuzz the dataset loader (open_dataset, verify: the manifest reader) with damaged copies on disk.

Every case copies one good dataset into a fresh root and damages it: a file truncated, extended,
byte-flipped, removed or turned into a folder; the manifest truncated, replaced by other bytes,
or rewritten with one field changed. Each case must end in a correct load or a one-line
DatasetError naming the file (issue 33), never a raw exception.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit.core import datasets as D
from tests.fuzz import FUZZ_SETTINGS, Refused, fuzz_call

NAME = "toy-fuzz-load"


@D.register_dataset(NAME, description="fuzzed dataset", profiles={"ci": {"n": 300}})
def _toy(w, p):
    w.array("x", w.rng().standard_normal((p["n"], 3)).astype(np.float32))
    w.array("ids", np.arange(p["n"], dtype=np.int64))
    w.path("notes", ".txt").write_text("notes")


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """One good copy of the dataset (its root) and its arrays, built once for every case."""
    root = tmp_path_factory.mktemp("fuzz-good")
    ds = D.make_dataset(NAME, "ci", root=root)
    return root, {k: ds.array(k, mmap=False) for k in ("x", "ids")}


_case = itertools.count()

FILES = ("x.bin", "ids.bin", "notes.txt")
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                      st.text(max_size=12))
JSON_ANY = st.recursive(JSON_LEAF, lambda c: st.one_of(st.lists(c, max_size=3),
                                                     st.dictionaries(st.text(max_size=6), c, max_size=3)),
                        max_leaves=8)
FIELDS = ("file", "bytes", "sha256", "shape", "dtype", "align")

damage = st.one_of(
    st.tuples(st.just("truncate"), st.sampled_from(FILES + ("manifest.json",)), st.integers(0, 4000)),
    st.tuples(st.just("extend"), st.sampled_from(FILES), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("flip"), st.sampled_from(FILES + ("manifest.json",)), st.integers(0, 4000)),
    st.tuples(st.just("remove"), st.sampled_from(FILES + ("manifest.json",)), st.none()),
    st.tuples(st.just("folder"), st.sampled_from(FILES + ("manifest.json",)), st.none()),
    st.tuples(st.just("manifest_bytes"), st.just("manifest.json"), st.binary(max_size=200)),
    st.tuples(st.just("manifest_json"), st.just("manifest.json"), JSON_ANY),
    st.tuples(st.just("field"), st.sampled_from(("x", "ids", "notes")), st.tuples(st.sampled_from(FIELDS), JSON_ANY)),
    st.tuples(st.just("top"), st.sampled_from(("files", "version", "meta", "name")), JSON_ANY),
)


def _apply(d: Path, how: str, target: str, arg) -> bool:
    """Damage the copy in `d`; return True when its manifest still describes the original bytes."""
    p = d / target
    if how == "truncate":
        with open(p, "r+b") as fh:
            fh.truncate(min(arg, max(0, p.stat().st_size - 1)))
    elif how == "extend":
        with open(p, "ab") as fh:
            fh.write(arg)
    elif how == "flip":
        b = bytearray(p.read_bytes())
        b[arg % len(b)] ^= 0xFF
        p.write_bytes(bytes(b))
    elif how == "remove":
        p.unlink()
    elif how == "folder":
        p.unlink()
        p.mkdir()
        (p / "inside").write_text("x")
    elif how == "manifest_bytes":
        p.write_bytes(arg)
    elif how == "manifest_json":
        p.write_text(json.dumps(arg))
    else:
        m = json.loads(p.read_text() if target == "manifest.json" else (d / "manifest.json").read_text())
        if how == "field":
            fld, value = arg
            m["files"][target][fld] = value
        else:
            m[target] = arg
        (d / "manifest.json").write_text(json.dumps(m))
    return False


@FUZZ_SETTINGS
@given(damage)
def test_a_damaged_dataset_loads_correctly_or_is_one_line_naming_the_file(good, damage):
    src, arrays = good
    how, target, arg = damage
    root = src.parent / f"fuzz-case-{next(_case)}"
    shutil.copytree(src, root)
    d = root / NAME / "ci"
    _apply(d, how, target, arg)
    for full in (False, True):
        try:
            ds = fuzz_call("open_dataset", D.open_dataset, NAME, "ci", root=root, build=False, full_verify=full)
        except Refused as r:
            msg = str(r.error)
            assert isinstance(r.error, D.DatasetError), msg
            assert str(d) in msg and "labkit data make toy-fuzz-load --profile ci --force" in msg, msg
            continue
        # Loaded: every array it describes must be readable, and with a full check the data is the
        # original wherever the manifest was not edited (sizes alone cannot catch a flipped byte).
        for key, info in ds.manifest["files"].items():
            if "shape" in info:
                a = ds.array(key, mmap=False)
                if full and how not in ("field", "top", "manifest_json") and key in arrays:
                    assert np.array_equal(a, arrays[key])
    shutil.rmtree(root, ignore_errors=True)


@FUZZ_SETTINGS
@given(st.binary(max_size=300))
def test_the_manifest_reader_refuses_any_bytes_on_one_line(good, blob):
    src, _ = good
    root = src.parent / f"fuzz-manifest-{next(_case)}"
    d = root / NAME / "ci"
    d.mkdir(parents=True)
    (d / "manifest.json").write_bytes(blob)
    try:
        fuzz_call("verify", D.verify, d, NAME, "ci", version=1)
    except Refused as r:
        assert isinstance(r.error, D.DatasetError) and str(d / "manifest.json") in str(r.error)
    shutil.rmtree(root, ignore_errors=True)
