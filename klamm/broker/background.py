"""Threads that work beside the event loop at a lower CPU priority than its thread.

On two cores the loop's thread shares the CPUs with the clients and with the broker's own
background work. Work that can wait (removing a deleted topic's files, importing the message
types no client has asked for yet) runs in threads of nice 19, so that the loop's thread, when it
wakes, does not wait on a run queue behind them.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("klamm.background")

BACKGROUND_NICE = 19


def background_executor(name: str) -> ThreadPoolExecutor:
    """One thread, named `name`, at BACKGROUND_NICE."""
    return ThreadPoolExecutor(1, thread_name_prefix=name, initializer=lower_priority)


def lower_priority() -> None:
    """Give the calling thread, only it, the CPU priority BACKGROUND_NICE (Linux: a thread has its own nice value)."""
    if sys.platform == "linux":
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
        except OSError as exc:
            log.debug("%s keeps the broker's CPU priority: %s", threading.current_thread().name, exc)
