"""What machine a measurement was taken on."""

from __future__ import annotations

import functools
import os
import platform
import shutil


@functools.lru_cache(maxsize=1)
def cpu_name() -> str:
    """Return the CPU model name from /proc/cpuinfo, or platform.processor()."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_detail(cpuinfo: str | None = None) -> str:
    """Return what tells two CPUs of one model name apart: family, model and widest vector ISA.

    "AMD EPYC" names CPUs years apart (a Zen1 with AVX2 runs this lab's kernels at well under half
    the speed of a Zen4 with AVX-512), so bench reports give e.g. "family 25 model 17, AVX-512".
    `cpuinfo` is the text of /proc/cpuinfo (read when None); "" where it cannot be read.
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as fh:
                cpuinfo = fh.read()
        except OSError:
            return ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block says it for all
            continue
        k, _, v = line.partition(":")
        fields.setdefault(k.strip(), v.strip())
    flags = set(fields.get("flags", "").split())
    isa = ("AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "AVX" if "avx" in flags
           else "SSE" if flags else "")
    parts = []
    if "cpu family" in fields and "model" in fields:
        parts.append(f"family {fields['cpu family']} model {fields['model']}")
    if isa:
        parts.append(isa)
    return ", ".join(parts)


def cores() -> int:
    """Return the number of CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def memory_bytes() -> int:
    """Return total physical memory in bytes."""
    import psutil
    return int(psutil.virtual_memory().total)


def cgroup_memory_limit(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> int | None:
    """Return the tightest memory limit of this process's cgroups in bytes, or None where there is none.

    Reads cgroup v2 ``memory.max`` of this process's group and of each group above it, and cgroup
    v1 ``memory.limit_in_bytes`` of its memory group and of the hierarchy's root (in a container
    the path in /proc/self/cgroup may name a group outside the mount, so the root counts too).
    "max", or v1's "no limit" (a figure near 2**63), is no limit.
    """
    paths: list[str] = []
    try:
        with open(proc_cgroup) as fh:
            lines = fh.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        hid, _, rest = line.partition(":")
        controllers, _, group = rest.partition(":")
        group = group.strip("/")
        if hid == "0" and controllers == "":
            parts = group.split("/") if group else []
            paths += [os.path.join(root, *parts[:k], "memory.max") for k in range(len(parts), -1, -1)]
        elif "memory" in controllers.split(","):
            paths += [os.path.join(root, "memory", group, "memory.limit_in_bytes"),
                      os.path.join(root, "memory", "memory.limit_in_bytes")]
    limits = []
    for path in dict.fromkeys(paths):
        try:
            with open(path) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # v1 writes "no limit" as 2**63 rounded down to a page
            limits.append(int(text))
    return min(limits) if limits else None


def memory_limit_bytes() -> int:
    """Return the most memory this process could ever hold: total RAM, or its cgroup's limit if lower."""
    limit = cgroup_memory_limit()
    total = memory_bytes()
    return total if limit is None else min(total, limit)


def available_memory_bytes() -> int:
    """Return the memory the OS can hand out now without swapping (psutil's 'available'), in bytes."""
    import psutil
    return int(psutil.virtual_memory().available)


def require_memory(what: str, need: int, *, available: int | None = None, hint: str = "") -> None:
    """Raise LabkitError, before anything is allocated, when `what` needs more than the memory available.

    `need` is an estimate of the peak in bytes; `available` defaults to :func:`available_memory_bytes`.
    The one-line message names what was refused, both sizes and the machine's total; `hint` says
    what to do instead.
    """
    from labkit.core.errors import LabkitError
    from labkit.core.units import fmt_bytes
    avail = available_memory_bytes() if available is None else int(available)
    if need > avail:
        raise LabkitError(f"{what} needs about {fmt_bytes(need)} of memory; this machine has {fmt_bytes(avail)} "
                          f"available ({fmt_bytes(memory_bytes())} in all)" + (f": {hint}" if hint else ""))


def gpu_info() -> dict | None:
    """Return {name, memory_bytes, count} of the first NVIDIA GPU, or None (nvidia-ml-py, lazily)."""
    try:
        import pynvml  # provided by nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        n = pynvml.nvmlDeviceGetCount()
        if n == 0:
            return None
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h).total
        return {"name": name if isinstance(name, str) else name.decode(), "memory_bytes": int(mem),
                "count": int(n)}
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def mounts() -> list[tuple[str, str, str, tuple[str, ...]]]:
    """Return /proc/self/mounts as (device, mount point, filesystem type, options); [] where unreadable."""
    out = []
    try:
        with open("/proc/self/mounts") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 4:
                    out.append((parts[0], parts[1].replace("\\040", " "), parts[2], tuple(parts[3].split(","))))
    except OSError:
        pass
    return out


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark for this process (Linux clear_refs 5); False if unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def release_free_memory() -> bool:
    """Hand freed heap memory back to the OS (glibc ``malloc_trim``); False where unavailable.

    After a burst of temporaries (a tuner scoring many plans, a cache fill) glibc keeps the
    freed pages in its arenas, where they count as resident memory nobody uses.
    """
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):
        return False


def rss_bytes() -> tuple[int, int]:
    """Return (current RSS, peak RSS since the last reset) of this process in bytes; zeros if unknown."""
    rss = hwm = 0
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, hwm


def chromium_path() -> str | None:
    """Return the path of a Chromium binary on PATH, or None."""
    for name in ("chromium", "chromium-browser"):
        p = shutil.which(name)
        if p:
            return p
    return None


def cpu_ticks() -> tuple[int, int] | None:
    """Return (steal, total) CPU ticks of the whole machine so far (/proc/stat), or None where unknown.

    Steal is time the hypervisor gave this VM's virtual CPUs to someone else: a bench run under
    heavy steal is slower across the board, so reports state the share during the run.
    """
    try:
        with open("/proc/stat") as fh:
            first = fh.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu" or len(first) < 9:
        return None
    v = [int(x) for x in first[1:9]]  # user nice system idle iowait irq softirq steal (guest is in user)
    return v[7], sum(v)


def steal_share(start: tuple[int, int] | None, end: tuple[int, int] | None = None) -> float | None:
    """Share of the machine's CPU time stolen by the hypervisor between two :func:`cpu_ticks` readings."""
    end = cpu_ticks() if end is None else end
    if start is None or end is None or end[1] <= start[1]:
        return None
    return (end[0] - start[0]) / (end[1] - start[1])


def machine_info() -> dict:
    """Return the machine block of a bench JSON: cpu, cpu_detail, cores, memory, gpu."""
    gpu = gpu_info()
    return {"cpu": cpu_name(), "cpu_detail": cpu_detail(), "cores": cores(), "memory": memory_bytes(),
            "gpu": gpu["name"] if gpu else None}
