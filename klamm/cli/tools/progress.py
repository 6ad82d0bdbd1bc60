"""A tiny progress bar for stderr: `[#####.....]  45% 1.2/2.6 MiB 12345 records 3.4k/s`."""

from __future__ import annotations

import time
from typing import TextIO

_WIDTH = 30
_INTERVAL_S = 0.2  # redraw at most five times a second: drawing is not free


class ProgressBar:
    """Byte-driven progress of reading a file of `total` bytes; draws over one line."""

    def __init__(self, stream: TextIO, total: int, label: str = "records") -> None:
        self.stream = stream
        self.total = max(total, 0)
        self.label = label
        self.done = 0
        self.count = 0
        self._started = time.monotonic()
        self._drawn = 0.0

    def update(self, nbytes: int, count: int = 1) -> None:
        self.done += nbytes
        self.count += count
        now = time.monotonic()
        if now - self._drawn >= _INTERVAL_S:
            self._drawn = now
            self._draw(now)

    def finish(self) -> None:
        self._draw(time.monotonic())
        self.stream.write("\n")
        self.stream.flush()

    def render(self, now: float) -> str:
        fraction = min(self.done / self.total, 1.0) if self.total else 1.0
        filled = int(fraction * _WIDTH)
        rate = self.count / max(now - self._started, 1e-6)
        return (f"[{'#' * filled}{'.' * (_WIDTH - filled)}] {fraction * 100:3.0f}% "
                f"{_mib(self.done)}/{_mib(self.total)} MiB {self.count} {self.label} {_short(rate)}/s")

    def _draw(self, now: float) -> None:
        self.stream.write("\r" + self.render(now))
        self.stream.flush()


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):.1f}"


def _short(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.1f}M"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"
