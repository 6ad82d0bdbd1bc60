"""A log's `partition.metadata`: the id of the topic the log belongs to (Kafka's PartitionMetadataFile, KIP-516).

    version: 0
    topic_id: <the topic id: 16 bytes in URL-safe base64 without padding, as Kafka prints a Uuid>

A log found under a topic's name whose file names another topic id belongs to a deleted topic whose deletion
never reached the disk (a crash between the deletion's commit and its directory's rename, or a broker down while
the topic was deleted and made again): the new topic must not take its records. A file that cannot be read
counts as absent: such a log is taken as before the file existed.
"""

from __future__ import annotations

import base64
import logging
import os
import uuid
from pathlib import Path

FILE_NAME = "partition.metadata"
VERSION = 0

log = logging.getLogger(__name__)


def read(directory: Path) -> uuid.UUID | None:
    """The topic id the directory's file names; None when it has none, or none that can be read."""
    try:
        text = (directory / FILE_NAME).read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("%s: cannot read %s: %s", directory, FILE_NAME, exc)
        return None
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    try:
        if int(fields["version"]) != VERSION:
            raise ValueError(f"version {fields['version']}")
        raw = base64.urlsafe_b64decode(fields["topic_id"] + "==")
        if len(raw) != 16:
            raise ValueError(f"{len(raw)} bytes")
        return uuid.UUID(bytes=raw)
    except (KeyError, ValueError) as exc:
        log.warning("%s: ignoring a malformed %s (%s)", directory, FILE_NAME, exc)
        return None


def write(directory: Path, topic_id: uuid.UUID) -> None:
    """Write the file whole or not at all (a temporary file renamed over it; `.tmp` leftovers are removed when
    the log opens)."""
    encoded = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")
    temporary = directory / f"{FILE_NAME}.tmp"
    temporary.write_text(f"version: {VERSION}\ntopic_id: {encoded}\n", encoding="ascii")
    os.replace(temporary, directory / FILE_NAME)
