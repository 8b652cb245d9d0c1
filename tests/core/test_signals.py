"""Stop signals (issue 33 items 6 and 7): a command stopped by SIGINT, SIGTERM or SIGHUP exits 130,
143 or 129 with one line on stderr, after its own clean-up, and leaves no process or folder behind.

Every wait here is on an event (a line of output, a process or file appearing), with a generous
deadline for a loaded machine, never a fixed sleep.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from labkit import cli


def _toy(monkeypatch, name, bench):
    from labkit import catalog
    from labkit.core.bench import Claim
    from labkit.core.systems import System, register
    register(System(name, "Toy", "toy paper", bench, [Claim(f"{name}.x", "x", "2x", 1.0)]))
    monkeypatch.setattr(catalog, "NAMES", catalog.NAMES + (name,))
    monkeypatch.setattr(catalog, "CATALOG", catalog.CATALOG + (
        catalog.Entry(name, "Toy", "toy", "labkit.core.systems", "x.ipynb"),))


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_during_a_wait_stops_the_bench_with_one_line(monkeypatch, capsys, sig, status):
    """A bench blocked in a wait (a lock, as Dask's client waits) is woken and stopped, its clean-up runs."""
    cleaned = []

    def bench(b):
        b.log("started")
        try:
            os.kill(os.getpid(), sig)  # to the process, as `kill PID` or a terminal's Ctrl-C sends it
            threading.Event().wait()  # no timeout: only the signal can end it
        finally:
            cleaned.append(True)

    _toy(monkeypatch, f"toysig{sig}", bench)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    assert cli.main(["bench", f"toysig{sig}"]) == status
    err = capsys.readouterr().err.strip().splitlines()
    assert cleaned == [True]
    assert err[-1] == f"labkit: interrupted ({signal.Signals(sig).name}); stopped and cleaned up"
    assert not any("Traceback" in ln for ln in err), err
    # The caller's own signal handling is back as it was.
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == mask


def test_an_interrupt_a_library_swallows_still_stops_the_bench(monkeypatch, capsys):
    """Issue 33 item 7: a Ctrl-C caught where the bench cannot see it (Dask, a finalizer) ended
    `labkit bench graph` with exit 0 and a full report; it must still stop the bench, exit 130."""
    after = []

    def bench(b):
        try:  # as a library that catches KeyboardInterrupt and carries on
            os.kill(os.getpid(), signal.SIGINT)
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        after.append("compare")
        b.compare("c", {"a": lambda: None}, repeats=1, warmup=0)
        after.append("measured")

    _toy(monkeypatch, "toyswallow", bench)
    assert cli.main(["bench", "toyswallow", "--quiet"]) == 130
    out, err = capsys.readouterr()
    assert after == ["compare"] and out == ""  # stopped at the next progress point, no report
    assert err.strip() == "labkit: interrupted (SIGINT); stopped and cleaned up"


def _descendants(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _running(pids: list[int]) -> list[int]:
    out = []
    for p in pids:
        try:
            if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _wait_until(cond, what: str, deadline_s: float = 300.0):
    end = time.monotonic() + deadline_s
    while True:
        v = cond()
        if v:
            return v
        assert time.monotonic() < end, f"{what} did not happen within {deadline_s:.0f} s"
        time.sleep(0.05)


_GONE = re.compile(r"UserWarning: resource_tracker: '(/mp-[^']+)': \[Errno 2\] No such file or directory")
_LEAKED = re.compile(r"UserWarning: resource_tracker: There appear to be (\d+) leaked semaphore")


def _stderr_lines(rest: str) -> list[str]:
    """`rest`'s non-blank lines, less the resource tracker's reports of semaphores that were already gone.

    Under heavy load a Dask worker stopped by its nanny can be cut between unlinking a semaphore and
    telling the tracker, which then reports it "leaked" and finds no such file: nothing is left
    behind. Every leaked semaphore it reports must be such a one; a real leak (a semaphore still
    there, which the tracker then removes) keeps its lines and fails the test.
    """
    lines = [ln for ln in rest.splitlines() if ln.strip()]
    gone = [i for i, ln in enumerate(lines) if _GONE.search(ln)]
    leaked = [i for i, ln in enumerate(lines) if _LEAKED.search(ln)]
    if not leaked or sum(int(_LEAKED.search(lines[i]).group(1)) for i in leaked) != len(gone):
        return lines
    drop = {j for i in gone + leaked for j in (i, i + 1)
            if j == i or (j < len(lines) and lines[j].lstrip().startswith("warnings.warn("))}
    return [ln for i, ln in enumerate(lines) if i not in drop]


def _read_until(proc, marker: str, lines: list[str], deadline_s: float = 600.0) -> None:
    """Read `proc`'s stderr into `lines` until a line holds `marker` (the test's event)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        ln = proc.stderr.readline()
        if not ln:
            raise AssertionError(f"exited ({proc.wait()}) before {marker!r}:\n{''.join(lines)}")
        lines.append(ln)
        if marker in ln:
            return
    raise AssertionError(f"no {marker!r} within {deadline_s:.0f} s")


@pytest.mark.slow
@pytest.mark.dask
def test_sigterm_to_reproduce_stops_its_child_bench_and_leaves_nothing(data_root, tmp_path):
    """Issue 33 item 6: SIGTERM to `labkit reproduce` orphaned its child bench, the child's Dask
    workers and resource tracker, left its labkit-reproduce-* folder and leaked semaphores."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    p = subprocess.Popen([sys.executable, "-m", "labkit.cli", "reproduce", "--profile", "ci", "--only", "graph"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        lines: list[str] = []
        _read_until(p, "Dask workers", lines)  # the child bench is starting its cluster
        # ... and its two workers are up (processes of the child bench's own).
        _wait_until(lambda: len(_descendants(p.pid)) >= 4, "the child bench, its tracker and 2 workers")
        tree = _descendants(p.pid)
        assert any(n.startswith("labkit-reproduce-") for n in os.listdir(tmp))
        p.send_signal(signal.SIGTERM)
        _, rest = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 143, rest
    assert _stderr_lines(rest) == ["labkit: interrupted (SIGTERM); stopped and cleaned up"], rest
    assert "Traceback" not in rest
    _wait_until(lambda: not _running(tree), f"the end of every process of the tree {tree}", 60)
    assert not [n for n in os.listdir(tmp) if n.startswith("labkit-reproduce-")]


# Where the Ctrl-C lands: the first progress line (before any worker), the line announcing the
# Dask workers (while they start), and once both workers run (epochs going on, a ~10 s window).
POINTS = {"first progress": ("[graph] build:", 0), "workers starting": ("Dask workers", 0),
          "cluster in use": ("Dask workers", 3)}


@pytest.mark.slow
@pytest.mark.dask
@pytest.mark.parametrize("point", list(POINTS))
def test_ctrl_c_during_bench_graph_is_one_line_and_exit_130(data_root, point):
    """Issue 33 item 7: Ctrl-C (SIGINT to the whole process group, as a terminal sends it) during
    `labkit bench graph` was swallowed (exit 0, full report) or gave 33-105-line tracebacks."""
    p = subprocess.Popen([sys.executable, "-m", "labkit.cli", "bench", "graph", "--profile", "ci"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        lines: list[str] = []
        marker, processes = POINTS[point]
        _read_until(p, marker, lines)
        if processes:  # the resource tracker and both workers
            _wait_until(lambda: len(_descendants(p.pid)) >= processes, "the Dask workers")
        tree = _descendants(p.pid)
        os.killpg(p.pid, signal.SIGINT)
        out, rest = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    after = _stderr_lines(rest)
    assert p.returncode == 130, rest
    assert len(after) <= 2 and after[-1] == "labkit: interrupted (SIGINT); stopped and cleaned up", rest
    assert "Traceback" not in rest and not any("leaked semaphore" in ln for ln in after) and out == ""
    _wait_until(lambda: not _running(tree), f"the end of every process of the tree {tree}", 60)


def test_ctrl_c_during_data_make_leaves_no_half_built_folder(data_root):
    """Ctrl-C while `labkit data make` builds: exit 130, one line, and no `.ci.building-*` folder left
    (an interrupt that landed before the build's clean-up was armed left one)."""
    p = subprocess.Popen([sys.executable, "-m", "labkit.cli", "data", "make", "caliex", "--profile", "ci"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        def building():
            return p.poll() is not None or any(n.startswith(".ci.building-") for n in
                                               (os.listdir(data_root / "caliex") if (data_root / "caliex").is_dir() else []))
        _wait_until(building, "the build's temporary folder")
        assert p.poll() is None, "the build finished before it could be interrupted"
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1] == "labkit: interrupted (SIGINT); stopped and cleaned up" and "Traceback" not in err
    assert os.listdir(data_root / "caliex") == []
