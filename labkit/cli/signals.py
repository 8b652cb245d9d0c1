"""Stop signals (SIGINT, SIGTERM, SIGHUP) become one clean stop, and a closed pipe does not end a run."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

class PipeSafe:
    """A text stream that outlives its reader: after a broken pipe, writes go nowhere.

    A bench asked for ``--json`` or ``--record`` must still write them when whoever reads its
    progress goes away (``labkit bench spmm --json r.json 2>&1 | head``).
    """

    def __init__(self, stream) -> None:
        self._s = stream
        self.broken = False

    def _break(self) -> None:
        self.broken = True
        try:  # the stream's own buffer flushes into /dev/null at exit, not into the closed pipe
            os.dup2(os.open(os.devnull, os.O_WRONLY), self._s.fileno())
        except (OSError, ValueError, AttributeError):
            pass

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._s.write(text)
            except BrokenPipeError:
                self._break()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._s.flush()
            except BrokenPipeError:
                self._break()

    def __getattr__(self, name: str):
        return getattr(self._s, name)


#: Set in the environment of the child benches `labkit reproduce` runs.
CHILD_ENV = "LABKIT_REPRODUCE_CHILD"


#: Exit status of a command stopped by each signal: 128 + its number, as a shell reports it.
STOP_EXIT = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}


#: Code that an exception must not interrupt half-way: multiprocessing's finalizers and its
#: resource tracker's bookkeeping (each pairs an unlink with an unregister).
_CLEANUP_FILES = (os.sep + os.path.join("multiprocessing", "util.py"),
                  os.sep + os.path.join("multiprocessing", "synchronize.py"),
                  os.sep + os.path.join("multiprocessing", "resource_tracker.py"))


def _in_cleanup(frame) -> bool:
    """Return True if `frame` or a caller runs multiprocessing's clean-up code."""
    while frame is not None:
        if frame.f_code.co_filename.endswith(_CLEANUP_FILES):
            return True
        frame = frame.f_back
    return False


class StopSignals:
    """Turn SIGINT, SIGTERM and SIGHUP into `Interrupted` in the main thread, for one command.

    SIGINT is blocked in the main thread before anything else starts, so every thread and child
    process started afterwards (Dask workers, the multiprocessing resource tracker, a child
    bench) inherits it blocked: a Ctrl-C at the terminal, sent to the whole process group, then
    reaches none of them mid-way; this process alone gets it (a relay thread waits for it and
    interrupts the main thread, waking it from any wait with a second, private signal), and
    stops its workers through their own clean-up path. SIGTERM and SIGHUP are not sent to a
    whole group by a terminal's Ctrl-C; they are handled in the main thread as usual.
    Everything is put back on exit, so an in-process caller (a test) keeps its own handling.
    """

    _WAKE = signal.SIGUSR2
    _active = 0  # commands in progress with these handlers (see _forked)
    _hooked = False

    def __init__(self, tracker: bool = False, restore: bool = True) -> None:
        self.tracker = tracker  # start multiprocessing's resource tracker first (see __enter__)
        # False for the process's own command line: the stop signals then stay blocked to the end,
        # so a second Ctrl-C during the exit (Dask's exit hooks) cannot print a traceback.
        self.restore = restore

    def __enter__(self) -> "StopSignals":
        import threading
        self.active = threading.current_thread() is threading.main_thread() and hasattr(signal, "pthread_sigmask")
        if not self.active:
            return self
        if self.tracker:
            # multiprocessing starts its resource tracker on first use and then UNBLOCKS SIGINT in the
            # thread that started it (Dask's process-starting thread): start it now, from here.
            from multiprocessing import resource_tracker
            resource_tracker.ensure_running()
        # Before any import below: a thread they start (numpy's BLAS pool) would not inherit it.
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        from labkit.core.bench import STOP_SIGNALS
        STOP_SIGNALS.clear()
        self._closing = False
        self._stops_seen = 0  # stop signals the wake-up fd has reported
        names = ("SIGINT", "SIGTERM", "SIGHUP")
        self.signals = [getattr(signal, n) for n in names if hasattr(signal, n)]
        self._old = {s: signal.getsignal(s) for s in [*self.signals, self._WAKE]}
        for sig in self.signals:
            signal.signal(sig, self._raise)
        signal.signal(self._WAKE, lambda *_: None)  # only wakes the main thread from a blocking call
        self._main = threading.main_thread().ident
        self._relay = threading.Thread(target=self._relay_sigint, name="labkit-sigint-relay", daemon=True)
        self._relay.start()
        # A thread that was running before (an in-process caller's) may still take a signal: Python
        # then only flags it for the main thread, which a blocking wait would not notice. The
        # wake-up fd reports every signal Python's handler sees, whichever thread ran it.
        import socket
        self._wr, self._rd = socket.socketpair()
        self._wr.setblocking(False)
        self._old_fd = signal.set_wakeup_fd(self._wr.fileno(), warn_on_full_buffer=False)
        self._waker = threading.Thread(target=self._wake_on_stop, name="labkit-signal-waker", daemon=True)
        self._waker.start()
        if not StopSignals._hooked and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=StopSignals._forked)
            StopSignals._hooked = True
        StopSignals._active += 1
        return self

    @staticmethod
    def _forked() -> None:
        """In a child forked without exec (a worker pool): the usual handling, and no writes to our wake-up fd."""
        if not StopSignals._active:
            return
        StopSignals._active = 0
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)

    @staticmethod
    def _raise(signum, frame) -> None:
        from labkit.core.bench import STOP_SIGNALS, Interrupted
        if _in_cleanup(frame):
            # Raised here, the exception would cut a clean-up in two (a semaphore unlinked but not
            # unregistered: the resource tracker then reports it leaked): try again in a moment.
            import _thread
            import threading
            threading.Timer(0.02, _thread.interrupt_main, (signum,)).start()
            return
        if not STOP_SIGNALS:
            quiet_teardown()
        STOP_SIGNALS.append(signum)
        raise Interrupted(signum)

    def _relay_sigint(self) -> None:
        import _thread
        while True:
            signal.sigwait({signal.SIGINT})
            if self._closing:
                return
            from labkit.core.bench import STOP_SIGNALS
            seen = len(STOP_SIGNALS)
            _thread.interrupt_main(signal.SIGINT)  # runs _raise in the main thread ...
            self._poke(seen + 1)  # ... now, not after its current wait

    def _poke(self, target: int) -> None:
        """Wake the main thread from a blocking call until its handler has run `target` times in all.

        One wake-up can land just before the main thread enters its wait, which then sleeps on
        with the signal flagged but unhandled: so it is repeated until the handler has run.
        """
        import time
        from labkit.core.bench import STOP_SIGNALS
        end = time.monotonic() + 60
        while len(STOP_SIGNALS) < target and not self._closing and time.monotonic() < end:
            signal.pthread_kill(self._main, self._WAKE)
            time.sleep(0.02)

    def _wake_on_stop(self) -> None:
        stops = set(self.signals)
        while True:
            try:
                got = self._rd.recv(64)
            except OSError:
                return
            if not got or self._closing:
                return
            n = sum(b in stops for b in got)  # not our own wake-up signal, which reports here too
            if n:
                self._stops_seen += n
                self._poke(self._stops_seen)

    def __exit__(self, *exc) -> None:
        if not self.active:
            return
        StopSignals._active = max(0, StopSignals._active - 1)
        from labkit.core.bench import STOP_SIGNALS
        # Quiet from here: a second signal must not turn the one-line exit into a traceback.
        signal.pthread_sigmask(signal.SIG_BLOCK, set(self.signals))
        self._closing = True
        signal.pthread_kill(self._relay.ident, signal.SIGINT)  # ends the relay's sigwait
        self._relay.join(5)
        signal.set_wakeup_fd(self._old_fd)
        self._wr.close()  # ends the waker's recv
        self._waker.join(5)
        self._rd.close()
        if not self.restore:
            return
        for sig, old in self._old.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        STOP_SIGNALS.clear()
        signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)


def quiet_teardown() -> None:
    """Silence what tearing down half-started work prints once the user has asked to stop.

    A Dask cluster interrupted while its workers start cannot close cleanly: Dask logs the
    failed start, its exit hook's assertion and never-retrieved task errors, dozens of lines
    about a stop that was asked for. The processes still end (this process closes its clusters
    or, failing that, its workers exit with it); only the messages go, for the rest of the process.
    """
    import logging
    import warnings
    warnings.simplefilter("ignore")  # "coroutine ... was never awaited": a wait the interrupt cut short
    for name in ("distributed", "asyncio", "tornado"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    sys.unraisablehook = lambda unraisable: None  # "Exception ignored in ..." from finalizers and exit hooks


def stopped(signum: int | None) -> int:
    """Say on one line that the command was stopped by `signum` (None: a KeyboardInterrupt); return its exit status."""
    import signal
    name = signal.Signals(signum).name if signum else "SIGINT"
    # Whatever a clean-up interrupted half-way raised is not the story: the signal is.
    if not os.environ.get(CHILD_ENV):  # a child bench of reproduce: the parent's line says it
        with contextlib.suppress(Exception):
            print(f"labkit: interrupted ({name}); stopped and cleaned up", file=sys.stderr, flush=True)
    return STOP_EXIT.get(name, 128 + int(signum or 2))
