"""PyG's generated layer sources are removed when a process that built labkit models exits."""

import os
import subprocess
import sys

CHILD = """
import os, sys
from labkit.disk.train import GAT, SAGE
SAGE(8, 16, 3, 2); GAT(8, 16, 3, 2, 4)
made = sorted(os.path.basename(m.__file__) for n, m in sys.modules.items()
              if n.startswith("torch_geometric.") and getattr(m, "__file__", "").startswith(os.environ["TMPDIR"]))
print("\\n".join(made))
"""


def test_generated_pyg_modules_do_not_outlive_the_process(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300,
                         check=True).stdout.split()
    # PyG wrote them (one propagate per conv class at least) while the child ran ...
    assert any(name.startswith("torch_geometric.nn.conv.sage_conv_SAGEConv_propagate_") for name in out), out
    assert any(name.startswith("torch_geometric.nn.conv.gat_conv_GATConv_propagate_") for name in out), out
    # ... and none is left once it exited.
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("torch_geometric.")]
