"""PyG's layers, fetched so that the source files PyG writes for them do not pile up in the temp folder.

PyG renders each message-passing class's ``propagate`` (and ``edge_updater``) from a template
into a file in the temp folder the first time the class is instantiated in a process, imports
it, and never deletes it: every process that builds a model leaves a few ``torch_geometric.*.py``
files behind (hundreds per test run). :func:`layer` returns the PyG class and makes sure the files
this process generated are removed when it exits (the modules are loaded by then; nothing reads
the files again).
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
import threading

_registered = False
_lock = threading.Lock()


def remove_generated_modules() -> list[str]:
    """Delete the temp files of the PyG modules this process generated; return their paths."""
    tmp = os.path.realpath(tempfile.gettempdir())
    removed = []
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None) if name.startswith("torch_geometric.") else None
        if not path or os.path.dirname(os.path.realpath(path)) != tmp:
            continue
        if not os.path.basename(path).startswith(name + "_"):  # module_from_template's naming
            continue
        try:
            os.unlink(path)
            removed.append(path)
        except OSError:
            pass
    return removed


def layer(name: str):
    """Return ``torch_geometric.nn.<name>`` (e.g. ``"SAGEConv"``) with the generated-file clean-up armed."""
    global _registered
    import torch_geometric.nn as pyg_nn
    with _lock:
        if not _registered:
            atexit.register(remove_generated_modules)
            _registered = True
    return getattr(pyg_nn, name)
