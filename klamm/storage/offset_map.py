"""The cleaner's key -> latest offset map over the dirty section of a log (Kafka's SkimpyOffsetMap).

Keys are stored as their 16-byte MD5 digest, as Kafka does, so a map's size does
not depend on key sizes. Capacity follows Kafka's accounting: the dedupe buffer
holds `memory // 24` slots (16-byte hash + 8-byte offset) and is filled only up to
`load_factor` of them; the cleaner stops mapping when the map is full and cleans
only up to the last offset mapped. (A Python dict uses more memory per entry than
Kafka's open-addressing array; the limit keeps Kafka's cleaning behaviour.)
"""

from __future__ import annotations

import hashlib

ENTRY_BYTES = 24  # 16-byte MD5 digest + 8-byte offset, as in Kafka


class OffsetMap:
    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self.slots = max(memory // ENTRY_BYTES, 1)
        self.max_entries = max(int(self.slots * load_factor), 1)
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1  # the last offset mapped (or skipped over); cleaning stops after it

    @property
    def size(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    @property
    def utilization(self) -> float:
        return len(self._offsets) / self.slots

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[hashlib.md5(key).digest()] = offset
        self.latest_offset = max(self.latest_offset, offset)

    def get(self, key: bytes) -> int:
        """The latest offset mapped for `key`, or -1."""
        return self._offsets.get(hashlib.md5(key).digest(), -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = max(self.latest_offset, offset)

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1
