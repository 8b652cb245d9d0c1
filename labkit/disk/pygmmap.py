"""PyG on a memory-mapped dataset under a memory cgroup: the anchor the disk papers compare against.

``pyg_mmap`` trains the same model on the same mini-batches as the other systems (same seeds,
same sampler, same trainer seed), but the way people run PyG on a memory-mapped dataset:
``indptr``, ``indices``, ``features`` and ``labels`` opened with :class:`numpy.memmap`, sampling and
gathering straight through the mapping (page faults, kernel readahead, the OS page cache; no
direct I/O, no labkit caches), stages one after another.

The page cache only means something if it is bounded, so the run happens in a child process
placed in a fresh memory cgroup (cgroup v1 memory controller, as root):

1. the child starts inside the new group (no limit yet), imports everything, opens the manifest
   and reports its baseline RSS before touching the data; ``B`` is that baseline as charged to
   the group (memory.stat ``rss`` + ``mapped_file``: library pages another group had already
   cached are resident but not charged here, so VmRSS would overstate it);
2. the parent drops the dataset files' page cache (``posix_fadvise(DONTNEED)``) so earlier runs
   do not serve it, and the child trains the warm-up group of mini-batches while a thread samples
   its anonymous RSS every 2 ms: ``W`` = the peak anonymous growth of a mini-batch in training
   (gathered rows, activations, sampler arrays, model);
3. the parent sets the limit to ``B + budget + W`` (the kernel trims the page cache to fit) and
   the child trains the timed groups, timing each mini-batch itself.

``W`` is the same allowance CaliEX gets outside its budget (the model and the batch being
trained); a limit of ``B + budget`` alone leaves no room for a mini-batch's gathered rows at the
small profile (a few hundred MiB against a 176 MiB budget): the child is OOM-killed (measured).
The cgroup is always removed afterwards and the child never outlives the call.

Where there is no usable cgroup (not Linux, not root, no v1 memory controller, cgroup v2 without
a delegated subtree) :func:`cgroup_support` says why and :func:`run_pyg_mmap` returns
``{"skipped": reason}``.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from labkit.core.machine import mounts

SYSTEM = "pyg_mmap"
_PROBED: tuple[Path | None, str] | None = None


def _memory_mount() -> tuple[Path | None, bool]:
    """Return (mount point of the cgroup v1 memory controller or None, whether cgroup2 is mounted)."""
    v1, v2 = None, False
    for _dev, mnt, fstype, opts in mounts():
        if fstype == "cgroup" and "memory" in opts:
            v1 = Path(mnt)
        elif fstype == "cgroup2":
            v2 = True
    return v1, v2


def cgroup_support(refresh: bool = False) -> tuple[Path | None, str]:
    """Return (memory cgroup directory new groups go under, "") or (None, why there is none).

    New groups are made under this process's own memory cgroup, so they stay inside whatever
    limits already contain it. A probe group is created and removed to be sure it works.
    """
    global _PROBED
    if _PROBED is not None and not refresh:
        return _PROBED
    _PROBED = _probe()
    return _PROBED


def _probe() -> tuple[Path | None, str]:
    if not sys.platform.startswith("linux"):
        return None, f"memory cgroups need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return None, f"creating a memory cgroup needs root (euid {os.geteuid()})"
    mount, v2 = _memory_mount()
    if mount is None:
        return None, ("no cgroup v1 memory controller is mounted" + (
            " (only cgroup v2: a v2 memory limit needs a delegated subtree, which pyg_mmap does not set up)"
            if v2 else ""))
    own = ""
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if "memory" in ctrls.split(","):
                    own = path
    except (OSError, ValueError):
        pass
    parent = mount / own.lstrip("/")
    if not (parent / "cgroup.procs").exists():
        parent = mount  # the mount shows a namespaced root
    probe = parent / f"labkit-probe-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        probe.mkdir()
    except OSError as e:
        return None, f"cannot create a memory cgroup under {parent}: {e.strerror or e}"
    try:
        if not (probe / "memory.limit_in_bytes").exists():
            return None, f"{probe} has no memory.limit_in_bytes (memory controller not usable)"
        (probe / "memory.limit_in_bytes").write_text(str(1 << 30))
    except OSError as e:
        return None, f"cannot set a limit on a memory cgroup under {parent}: {e.strerror or e}"
    finally:
        try:
            probe.rmdir()
        except OSError:
            pass
    return parent, ""


def sweep_cgroups(parent: Path) -> list[Path]:
    """Remove the empty labkit memory cgroups under `parent` whose creating process is gone (a bench
    killed before its clean-up); return those removed. Groups of live processes are left alone."""
    removed = []
    for g in Path(parent).glob("labkit-pyg-mmap-*"):
        try:
            pid = int(g.name.split("-")[3])
            os.kill(pid, 0)
            continue  # its process is alive: not ours to remove
        except ProcessLookupError:
            pass
        except (ValueError, IndexError, PermissionError):
            continue
        try:
            g.rmdir()  # refused while it still has tasks
            removed.append(g)
        except OSError:
            pass
    return removed


class MemoryCgroup:
    """A fresh v1 memory cgroup under `parent`; removed on exit (its tasks killed first)."""

    def __init__(self, parent: Path) -> None:
        self.path = Path(parent) / f"labkit-pyg-mmap-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> "MemoryCgroup":
        sweep_cgroups(self.path.parent)
        self.path.mkdir()
        return self

    def _read(self, name: str) -> str:
        return (self.path / name).read_text()

    def set_limit(self, nbytes: int) -> None:
        try:
            (self.path / "memory.limit_in_bytes").write_text(str(int(nbytes)))
        except OSError as e:
            raise RuntimeError(f"cannot set {self.path}/memory.limit_in_bytes to {nbytes}: {e.strerror or e} "
                               "(the group could not be reclaimed down to it)") from None

    def reset_max_usage(self) -> None:
        (self.path / "memory.max_usage_in_bytes").write_text("0")

    def stats(self) -> dict:
        """Usage, peak usage, limit hits, OOM kills and memory.stat of the group."""
        out = {"usage": int(self._read("memory.usage_in_bytes")),
               "max_usage": int(self._read("memory.max_usage_in_bytes")),
               "limit": int(self._read("memory.limit_in_bytes")),
               "failcnt": int(self._read("memory.failcnt"))}
        for line in self._read("memory.oom_control").splitlines():
            k, _, v = line.partition(" ")
            if k == "oom_kill":
                out["oom_kill"] = int(v)
        for line in self._read("memory.stat").splitlines():
            k, _, v = line.partition(" ")
            if k in ("cache", "rss", "mapped_file", "pgmajfault"):
                out[f"stat_{k}"] = int(v)
        return out

    def tasks(self) -> list[int]:
        try:
            return [int(x) for x in self._read("cgroup.procs").split()]
        except OSError:
            return []

    def __exit__(self, *exc) -> None:
        for _ in range(100):
            pids = self.tasks()
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"could not remove memory cgroup {self.path}")


def drop_page_cache(paths) -> None:
    """Ask the kernel to drop the page cache of `paths` (posix_fadvise DONTNEED; unmapped pages only)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def dataset_files(ds) -> list[Path]:
    return [ds.path(k) for k in ("indptr", "indices", "features", "labels")]


# ---------------------------------------------------------------- the child process

def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _io_read_bytes() -> int:
    try:
        with open("/proc/self/io") as fh:
            for line in fh:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class _AnonPeak:
    """Samples RssAnon every `every` seconds in a thread; `.peak` is the highest seen."""

    def __init__(self, every: float = 0.002) -> None:
        self.peak = _status_kib("RssAnon")
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, args=(every,), daemon=True)

    def _run(self, every: float) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _status_kib("RssAnon"))
            time.sleep(every)

    def __enter__(self) -> "_AnonPeak":
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, _status_kib("RssAnon"))


def open_mmap_system(ds, cfg, seed: int = 0):
    """(sampler, features, trainer, labels): the dataset's arrays as np.memmap, no labkit caches."""
    import numpy as np

    from labkit.disk.sampler import NeighborSampler
    from labkit.disk.store import MemoryFeatures, MemoryTopology
    from labkit.disk.train import Trainer

    def mm(key):
        info = ds.info(key)
        return np.memmap(ds.path(key), dtype=np.dtype(info["dtype"]), mode="r", shape=tuple(info["shape"]))
    # np.asarray: a plain ndarray view of the mapping (numba kernels take it; no copy).
    topo = MemoryTopology(np.asarray(mm("indptr")), np.asarray(mm("indices")))
    feat = MemoryFeatures(np.asarray(mm("features")))
    sampler = NeighborSampler(topo, list(cfg.fanouts), seed)
    trainer = Trainer(cfg, feat.dim, int(ds.meta["num_classes"]), seed=seed)
    return sampler, feat, trainer, np.asarray(mm("labels"))


def batch_digest(batch, x) -> str:
    """sha256 of a mini-batch's sampled graph and gathered rows (to compare across processes)."""
    import numpy as np
    h = hashlib.sha256()
    for a in (batch.n_id, batch.edge_src, batch.edge_dst, batch.node_hops, batch.edge_hops, x):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _child(argv: list[str]) -> None:
    profile, model, per_call, rounds, fraction, digests = (argv[0], argv[1], int(argv[2]), int(argv[3]),
                                                          float(argv[4]), argv[5] == "1")
    take = int(argv[6]) if len(argv) > 6 else per_call
    import numpy as np  # noqa: F401  (imports first: they belong to the baseline)
    import torch  # noqa: F401
    import torch_geometric  # noqa: F401

    from labkit.core.datasets import open_dataset
    from labkit.core.machine import rss_bytes
    from labkit.disk.pipeline import run_serial
    from labkit.disk.system import workload
    from labkit.disk.train import ModelConfig
    import labkit.graph.sampling  # noqa: F401

    def say(**kw):
        sys.stdout.write(json.dumps(kw) + "\n")
        sys.stdout.flush()

    def wait_go():
        if sys.stdin.readline().strip() != "go":
            sys.exit(3)

    ds = open_dataset("caliex", profile, full_verify=False)  # the parent verified it
    cfg = ModelConfig.paper(model)
    say(event="baseline", rss=rss_bytes()[0], anon=_status_kib("RssAnon"))
    wait_go()
    ds, cfg, budget, _, seeds = workload(profile, model, rounds * per_call, budget_fraction=fraction,
                                         full_verify=False)
    # The bench's groups of `per_call` (same seeds, same batch indices), the first `take` of each.
    groups = [seeds[i * per_call:i * per_call + take] for i in range(rounds)]
    sampler, feat, trainer, labels = open_mmap_system(ds, cfg)
    out_digests = []

    def run_group(k):
        if digests:  # same schedule, batch by batch, digesting what the trainer gets
            for j, s in enumerate(groups[k]):
                i = 10_000 * (k + 1) + j
                b = sampler.sample(s, i)
                x = feat.gather(b.n_id)
                out_digests.append(batch_digest(b, x))
                trainer.step(b, x, labels)
            return None
        return run_serial(sampler, feat, trainer, groups[k], labels, first_index=10_000 * (k + 1))

    anon0 = _status_kib("RssAnon")
    with _AnonPeak() as ap:
        run_group(0)  # warm-up (same as the bench's warm-up call)
    say(event="warm", anon_growth=ap.peak - anon0, anon_peak=ap.peak)
    wait_go()
    flt0, io0 = _majflt(), _io_read_bytes()
    runs = [run_group(k) for k in range(1, rounds)]
    nb = (rounds - 1) * take
    res = {"event": "done", "batches": nb, "major_faults": _majflt() - flt0, "read_bytes": _io_read_bytes() - io0,
           "accs": [float(a) for a in trainer.accs], "losses": [float(v) for v in trainer.losses],
           "digests": out_digests}
    if not digests:
        res["seconds"] = sum(r.seconds for r in runs)
        res["busy"] = {s: sum(r.busy[s] for r in runs) for s in ("sample", "gather", "train")}
    say(**res)


def _majflt() -> int:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_majflt


# ---------------------------------------------------------------- the parent side

def run_pyg_mmap(profile: str, model: str = "sage", per_call: int = 1, rounds: int = 2, fraction: float = 0.15,
                 *, digests: bool = False, timeout: float = 900.0, allowance: bool = True,
                 take: int | None = None) -> dict:
    """Run pyg_mmap in a child process in a fresh memory cgroup; return its measurements.

    The child trains `rounds` groups of `per_call` mini-batches (the bench's groups: the first is
    the warm-up), timing the others; `take` trains only each group's first `take` (same seeds
    and batch indices as the bench's, for a baseline that takes seconds per batch). Returns ``{"skipped": reason}`` where no cgroup is usable.
    `allowance=False` leaves the batch in training out of the limit (baseline + budget only; at
    the small profile the child is then OOM-killed, measured).
    """
    from labkit.core.datasets import open_dataset
    from labkit.core.errors import check_range
    from labkit.disk.system import dataset_bytes
    check_range("per_call", per_call, 1, integer=True)
    check_range("rounds", rounds, 2, integer=True)
    take = per_call if take is None else take
    check_range("take", take, 1, per_call, integer=True)
    parent, reason = cgroup_support()
    if parent is None:
        return {"skipped": reason}
    ds = open_dataset("caliex", profile)
    budget = int(fraction * dataset_bytes(ds))
    t0 = time.perf_counter()
    with MemoryCgroup(parent) as cg:
        cmd = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cg.path / "cgroup.procs"), sys.executable,
               "-m", "labkit.disk.pygmmap", profile, model, str(per_call), str(rounds), repr(fraction),
               "1" if digests else "0", str(take)]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        lines: queue.Queue = queue.Queue()
        err: list[str] = []
        threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout] + [lines.put(None)],
                         daemon=True).start()
        threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True).start()

        def expect(event: str) -> dict:
            left = timeout - (time.perf_counter() - t0)
            try:
                line = lines.get(timeout=max(1.0, left))
            except queue.Empty:
                raise TimeoutError(f"pyg_mmap child gave no {event!r} within {timeout:.0f} s") from None
            if line is None:
                proc.wait(timeout=30)
                st = cg.stats()
                why = (f"OOM-killed in its cgroup (limit {st['limit'] / 2**20:.0f} MiB)" if st.get("oom_kill")
                       else f"exited with {proc.returncode}")
                raise RuntimeError(f"pyg_mmap child {why} before {event!r}: {''.join(err)[-400:].strip()}")
            msg = json.loads(line)
            if msg.get("event") != event:
                raise RuntimeError(f"pyg_mmap child said {msg.get('event')!r}, expected {event!r}")
            return msg

        def go() -> None:
            proc.stdin.write("go\n")
            proc.stdin.flush()

        try:
            base = expect("baseline")
            st0 = cg.stats()
            # What the group holds of the child at baseline: its anonymous memory and the mapped
            # file pages charged to it (library pages another group already cached are not).
            charged = st0.get("stat_rss", 0) + st0.get("stat_mapped_file", 0)
            drop_page_cache(dataset_files(ds))
            go()
            warm = expect("warm")
            limit = charged + budget + (warm["anon_growth"] if allowance else 0)
            cg.set_limit(limit)
            cg.reset_max_usage()
            go()
            done = expect("done")
            stats = cg.stats()
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    done.update(baseline_rss=base["rss"], baseline_charged=charged, budget=budget, anon_growth=warm["anon_growth"], limit=limit,
                cgroup=stats, wall_s=time.perf_counter() - t0)
    return done


if __name__ == "__main__":
    _child(sys.argv[1:])
