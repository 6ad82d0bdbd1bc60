"""Kafka's plain-text checkpoint files, written atomically.

On-disk format (Kafka's CheckpointFile), one item per line, UTF-8:

    <version>            always "0"
    <count>              number of entry lines that follow
    <entry> * count      space-separated fields

Offset checkpoints (`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`)
have "topic partition offset" entries; the leader epoch checkpoint has
"epoch startOffset" entries.

Invariant: a reader sees either the old or the new file, never a mix, because a
write goes to `<name>.tmp`, is fsynced, renamed over the target, and the
directory is fsynced so the rename itself is durable.
"""

from __future__ import annotations

import os
from pathlib import Path

VERSION = 0


class CorruptCheckpoint(ValueError):
    """The checkpoint file exists but does not parse."""


def write_checkpoint(path: Path, entries: list[tuple[object, ...]], version: int = VERSION, *,
                     sync_dir: bool = True) -> None:
    """Replace `path` atomically with a checkpoint holding `entries` (fields joined by spaces); with
    `sync_dir=False` the caller fsyncs the directory (making the rename durable) itself."""
    lines = [str(version), str(len(entries))]
    lines.extend(" ".join(str(field) for field in entry) for entry in entries)
    data = ("\n".join(lines) + "\n").encode()
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(path.parent)


def read_checkpoint(path: Path, fields: int, version: int = VERSION) -> list[list[str]]:
    """The entries of the checkpoint at `path`, each split into `fields` strings; [] if missing."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    lines = text.splitlines()
    try:
        found_version = int(lines[0].strip())
        count = int(lines[1].strip())
    except (IndexError, ValueError) as exc:
        raise CorruptCheckpoint(f"{path}: malformed header") from exc
    if found_version != version:
        raise CorruptCheckpoint(f"{path}: unsupported version {found_version}")
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise CorruptCheckpoint(f"{path}: expected {count} entries, found {len(entries)}")
    for entry in entries:
        if len(entry) != fields:
            raise CorruptCheckpoint(f"{path}: malformed entry {' '.join(entry)!r}")
    return entries


def write_offset_checkpoint(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    """Write "topic partition offset" entries in the mapping's order (Kafka's files are unsorted too): sorting
    10,000 entries is one call that holds the interpreter lock for milliseconds (21 ms here), in the thread
    that writes beside the event loop."""
    entries = [(topic, partition, offset) for (topic, partition), offset in offsets.items()]
    write_checkpoint(path, entries)


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset} from an offset checkpoint; {} if the file is missing."""
    result = {}
    for topic, partition, offset in read_checkpoint(path, 3):
        try:
            result[(topic, int(partition))] = int(offset)
        except ValueError as exc:
            raise CorruptCheckpoint(f"{path}: malformed entry {topic} {partition} {offset}") from exc
    return result


def fsync_dir(directory: Path, *, missing_ok: bool = False) -> None:
    """Make renames/creations inside `directory` durable; with `missing_ok`, nothing if it is gone (a log
    deleted meanwhile: its directory renamed away)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except FileNotFoundError:
        if missing_ok:
            return
        raise
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
