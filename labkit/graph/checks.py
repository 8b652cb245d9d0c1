"""Checks of what training reads: node features (numeric, 2-d, finite) and labels (class ids).

One NaN among millions of feature values turns every parameter to NaN after one step, with no
error; a label outside [0, num_classes) fails deep in torch. Stores, the GSL graph and the
trainers check at construction, once, with one vectorised pass, and name the first bad entry.
"""

from __future__ import annotations

import numpy as np

from labkit.core.errors import bad_value

#: Entries per slice of the finite check: bounds its temporary mask (a memory-mapped matrix of
#: billions of entries is read in slices, never copied whole).
_SLICE = 1 << 24

FEATURES_ACCEPTED = "a 2-d array of finite numbers, one row per node (ints and bools are cast to float32)"


def _array(arg: str, x, accepted: str) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if not hasattr(x, "__len__"):
        raise bad_value(arg, type(x).__name__, accepted)
    try:
        return np.asarray(x)
    except (ValueError, TypeError):  # ragged nested lists
        raise bad_value(arg, f"a {type(x).__name__} NumPy cannot make one array of", accepted) from None


def check_features(x, num_nodes: int, arg: str = "features") -> np.ndarray:
    """Return `x` as a 2-d float array of `num_nodes` finite rows, else raise naming the first bad value.

    Float arrays are kept as they are (no copy, a memory map stays one); integer and bool arrays
    are cast to float32. NaN and inf are refused, naming how many there are and the first one's
    row and column.
    """
    a = _array(arg, x, FEATURES_ACCEPTED)
    if a.dtype.kind not in "biuf":
        raise bad_value(arg, f"array of dtype {a.dtype}", FEATURES_ACCEPTED)
    if a.ndim != 2 or a.shape[0] != num_nodes:
        raise bad_value(arg, f"array of shape {a.shape}", f"{num_nodes} rows (one per node of the graph), 2-d")
    if a.dtype.kind != "f":
        return a.astype(np.float32)
    rows = max(1, _SLICE // max(1, a.shape[1]))
    for lo in range(0, a.shape[0], rows):
        part = a[lo:lo + rows]
        if not np.isfinite(part).all():
            # Slices before this one are finite: the first bad value is in this one.
            bad = ~np.isfinite(part)
            count = int(bad.sum()) + sum(int((~np.isfinite(a[i:i + rows])).sum())
                                         for i in range(lo + rows, a.shape[0], rows))
            r, c = np.unravel_index(int(np.argmax(bad)), bad.shape)
            r += lo
            raise bad_value(f"{arg}[{r}, {c}]", a[r, c], f"finite numbers ({count:,} of the {a.size:,} values of "
                            f"{arg} are NaN or inf; this is the first)")
    return a


def label_accepted(num_classes: int | None) -> str:
    """What a label must be, in messages."""
    return f"a class id in [0, {num_classes})" if num_classes is not None else "a class id >= 0"


def check_labels(y, num_nodes: int | None, num_classes: int | None = None, arg: str = "labels",
                 ids=None, ids_arg: str = "ids") -> np.ndarray:
    """Return `y` if it is a 1-d integer array of class ids in [0, num_classes) (>= 0 when not given), else raise.

    One per node when `num_nodes` is given; with `ids` only those entries are checked (the nodes a
    trainer reads). Unlabelled nodes have no -1 here: leave them out of the training ids, as PyG's
    train masks do.
    """
    a = _array(arg, y, "a 1-d integer array of class ids, one per node")
    if a.ndim != 1 or (num_nodes is not None and len(a) != num_nodes):
        want = f"{num_nodes} entries (one per node), 1-d" if num_nodes is not None else "a 1-d array"
        raise bad_value(arg, f"array of shape {a.shape}", want)
    if a.dtype.kind not in "iu" and len(a):
        raise bad_value(arg, f"array of dtype {a.dtype}", "an integer array of class ids")
    if ids is not None:
        from labkit.graph.csr import check_node_ids
        ids = check_node_ids(ids_arg, ids, len(a), f"ids of {arg}")
    vals = a if ids is None else a[ids]
    if len(vals):
        bad = vals < 0
        if num_classes is not None:
            bad |= vals >= num_classes
        if bad.any():
            i = int(np.argmax(bad))
            pos = i if ids is None else int(ids[i])
            raise bad_value(f"{arg}[{pos}]", vals[i], label_accepted(num_classes))
    return a
