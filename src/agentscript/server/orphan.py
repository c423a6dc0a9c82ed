"""A worker of ``--workers N`` whose supervisor died stops itself, gracefully.

uvicorn's supervisor passes signals on to its workers and starts a dead one again. Killed
outright (``SIGKILL`` to its pid alone, the OOM killer), it does neither, and its workers went
on serving the shared socket with nobody to restart them or to stop them: ``SIGTERM`` to the
server's pid then reached no process. On Linux the kernel now sends each worker ``SIGTERM`` the
moment its supervisor dies (``PR_SET_PDEATHSIG``); everywhere, a thread also looks every second
whether the parent is still the supervisor that started it, and says so in the log. Either way
it is uvicorn's graceful stop: the turns running commit within the grace, and the leases are
given back.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time

log = logging.getLogger("agentscript.server")

# Seconds between two looks at the parent.
EVERY = 1.0
# The supervisor's pid, set in the environment its workers inherit: a worker still starting
# when the supervisor died has been reparented already, so its own parent then names nobody.
SUPERVISOR_ENV = "AGENTSCRIPT_SUPERVISOR_PID"


def supervisor_pid() -> int:
    """The pid of the supervisor that started this worker (its parent when not told)."""
    given = os.environ.get(SUPERVISOR_ENV, "")
    return int(given) if given.isdigit() else os.getppid()


def stop_when_orphaned(parent: int, every: float = EVERY) -> threading.Thread:
    """Watch, in a daemon thread, that this process's parent stays ``parent``; when it
    changes, log it and send this process ``SIGTERM``. On Linux the kernel also sends it the
    moment the parent dies (``PR_SET_PDEATHSIG``), which needs no thread to be scheduled. A
    parent that died before this was asked for is noticed by the thread's first look."""
    _ask_kernel_for_sigterm()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        log.error(
            "the server's supervisor (pid %d) is gone; this worker stops, letting its turns finish",
            parent,
        )
        os.kill(os.getpid(), signal.SIGTERM)  # again, if the kernel sent it already: harmless

    watcher = threading.Thread(target=watch, name="agentscript-orphan-watch", daemon=True)
    watcher.start()
    return watcher


# prctl(2): PR_SET_PDEATHSIG, the signal this process gets when its parent dies.
_PR_SET_PDEATHSIG = 1


def _ask_kernel_for_sigterm() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the watching thread still notices
