"""The cluster network's widgets: the diagram, the link probes on the dashboard, the rate slider."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from labkit.core import cluster as C

OK, WHY = C.can_shape() if os.environ.get("LABKIT_NO_NETNS", "") in ("", "0") else (False, "LABKIT_NO_NETNS set")
shaped_only = pytest.mark.skipif(not OK, reason=f"no shaped cluster here: {WHY}")


def _nodes(fig):
    (tr,) = [t for t in fig.data if t.name == "nodes"]
    return tr


def test_loopback_diagram_has_a_node_per_host_and_the_switch(monkeypatch):
    from labkit.ui.network import cluster_diagram, link_probes
    monkeypatch.setenv("LABKIT_NO_NETNS", "1")
    with C.start_cluster(3, "1gbit") as cl:
        fig = cluster_diagram(cl)
        nodes = _nodes(fig)
        assert len(nodes.x) == 4 and nodes.text[0].startswith("switch")
        assert [t.split("<br>") for t in nodes.text[1:]] == [["h0", "127.0.0.1"], ["h1", "127.0.0.1"],
                                                             ["h2", "127.0.0.1"]]
        (rates,) = [t for t in fig.data if t.name == "link rates"]
        assert list(rates.text) == ["loopback (not shaped)"] * 3
        assert "not shaped" in fig.layout.title.text and "LABKIT_NO_NETNS" in fig.layout.title.text
        assert link_probes(cl) == {}


def test_rate_slider_on_loopback_is_disabled_and_says_why(monkeypatch):
    pytest.importorskip("ipywidgets")
    from labkit.ui.network import rate_slider
    monkeypatch.setenv("LABKIT_NO_NETNS", "1")
    with C.start_cluster(1, "1gbit") as cl:
        box = rate_slider(cl)
        slider, note = box.children
        assert slider.disabled and slider.value == 10**9 and "not shaped" in note.value


WHIRL = r"""
import socket, sys
if sys.argv[1] == "recv":
    s = socket.socket(); s.bind((sys.argv[2], 5002)); s.listen(1); print("ready", flush=True)
    c, _ = s.accept()
    while c.recv(1 << 20):
        pass
else:
    c = socket.create_connection((sys.argv[2], 5002)); buf = b"x" * (1 << 20)
    for _ in range(int(sys.argv[3])):
        c.sendall(buf)
"""


@shaped_only
def test_shaped_diagram_probes_and_slider():
    pytest.importorskip("ipywidgets")
    from labkit.ui.dashboard import Dashboard
    from labkit.ui.network import cluster_diagram, link_dashboard, link_probes, rate_slider
    with C.start_cluster(4, "1gbit") as cl:
        fig = cluster_diagram(cl)
        nodes = _nodes(fig)
        assert len(nodes.x) == 5
        assert [t.split("<br>") for t in nodes.text[1:]] == [[h.name, h.addr] for h in cl.hosts]
        assert cl.client_addr in nodes.text[0]
        (rates,) = [t for t in fig.data if t.name == "link rates"]
        assert list(rates.text) == ["1 Gbit/s"] * 4

        probes = link_probes(cl)
        assert sorted(probes) == [f"h{i} Gbit/s" for i in range(4)]
        first = {k: f() for k, f in probes.items()}
        assert all(isinstance(v, float) and v >= 0 for v in first.values())
        r = cl.popen(1, [sys.executable, "-c", WHIRL, "recv", cl.hosts[1].addr], stdout=subprocess.PIPE, text=True)
        assert r.stdout.readline().strip() == "ready"
        s = cl.popen(3, [sys.executable, "-c", WHIRL, "send", cl.hosts[1].addr, "20"])
        assert s.wait(timeout=120) == 0 and r.wait(timeout=60) == 0
        after = {k: f() for k, f in probes.items()}
        assert all(isinstance(v, float) and v >= 0 for v in after.values())
        # the two links that carried 20 MiB report it; a bystander reports next to nothing
        assert after["h1 Gbit/s"] > 0 and after["h3 Gbit/s"] > 0
        assert after["h0 Gbit/s"] < after["h1 Gbit/s"] / 100

        # the probes fit the dashboard's `extra` as they are
        dash = Dashboard(extra=probes, extra_unit="Gbit/s", figure=False, interval=0.1)
        with dash:
            deadline = time.monotonic() + 60
            while len(dash.samples) < 2 and time.monotonic() < deadline:
                dash._stop.wait(0.05)  # woken early if the dashboard stops
        assert len(dash.samples) >= 2 and not dash.errors
        assert all(isinstance(s[k], float) and s[k] >= 0 for s in dash.samples for k in probes)
        assert set(probes) <= set(link_dashboard(cl, figure=False).series)

        slider, _ = rate_slider(cl).children
        assert not slider.disabled and slider.value == 10**9
        slider.value = 2 * 10**8
        assert cl.rate_bit_s == 2 * 10**8
        assert list([t for t in cluster_diagram(cl).data if t.name == "link rates"][0].text) == ["200 Mbit/s"] * 4
