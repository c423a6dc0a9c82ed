"""A worker of ``--workers N`` whose supervisor died stops itself, gracefully.

uvicorn's supervisor passes signals on to its workers and starts a dead one again. Killed
outright (``SIGKILL`` to its pid alone, the OOM killer), it does neither, and its workers went
on serving the shared socket with nobody to restart them or to stop them: ``SIGTERM`` to the
server's pid then reached no process. A worker now looks every second whether its parent is
still the supervisor that started it. Once it is not, it sends itself ``SIGTERM``: uvicorn's
graceful stop, the turns running commit within the grace, and the leases are given back.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

log = logging.getLogger("agentscript.server")

# Seconds between two looks at the parent.
EVERY = 1.0


def stop_when_orphaned(parent: int, every: float = EVERY) -> threading.Thread:
    """Watch, in a daemon thread, that this process's parent stays ``parent``; when it
    changes, log it and send this process ``SIGTERM``."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        log.error(
            "the server's supervisor (pid %d) is gone; this worker stops, letting its turns finish",
            parent,
        )
        os.kill(os.getpid(), signal.SIGTERM)

    watcher = threading.Thread(target=watch, name="agentscript-orphan-watch", daemon=True)
    watcher.start()
    return watcher
