"""Worker processes that end when the process that started them dies, even by ``kill -9`` (layer 1).

A worker blocked on its task queue never learns that its parent died: it holds the write end of that queue
itself, so the read never ends. :func:`exit_with_parent`, called first thing in a worker, makes it exit:

- Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (through ctypes), so the kernel kills the worker as soon as its
  parent goes. The kernel ties this to the parent *thread* that started the worker: use it only for workers
  that the starting thread stops before it ends (the text phase's parse pool: started and shut down within one
  indexing run).
- Everywhere: the parent may have died before the call (then ``getppid()`` already names another process: exit
  now), and a daemon thread checks ``getppid()`` every ``poll_s`` seconds (an orphan is re-parented).

``multiprocessing``'s resource tracker needs nothing of its own: it ends once every process holding its pipe
(the parent and the workers) is gone.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading

__all__ = ["POLL_S", "exit_with_parent"]

log = logging.getLogger(__name__)

#: Seconds between two checks of the parent's pid (the portable check).
POLL_S = 1.0
#: ``PR_SET_PDEATHSIG`` of ``<linux/prctl.h>``.
_PR_SET_PDEATHSIG = 1


def exit_with_parent(parent_pid: int, *, poll_s: float = POLL_S, death_signal: bool = True) -> None:
    """Make this process exit when ``parent_pid`` (the pid of the process that started it) dies.

    ``death_signal``: also ask Linux for ``SIGKILL`` at the parent's death (see the module docstring for the
    thread caveat); ignored elsewhere. Exits at once (``os._exit(0)``) when the parent is already gone. Never
    raises: a failed ``prctl`` leaves the portable check.
    """
    if death_signal and sys.platform.startswith("linux"):
        _set_parent_death_signal()
    _exit_if_orphan(parent_pid)

    def watch() -> None:
        wake = threading.Event()  # never set: a sleep that cannot be cut short by a signal handler
        while True:
            wake.wait(poll_s)
            _exit_if_orphan(parent_pid)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _exit_if_orphan(parent_pid: int) -> None:
    if os.getppid() != parent_pid:
        os._exit(0)


def _set_parent_death_signal() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            log.debug("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    except (OSError, AttributeError) as exc:  # no libc symbol: keep the portable check
        log.debug("prctl(PR_SET_PDEATHSIG) unavailable: %s", exc)
