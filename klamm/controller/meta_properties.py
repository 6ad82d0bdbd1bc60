"""`meta.properties`: the identity of a log directory, as Kafka (KRaft) writes it.

Each log dir holds a Java properties file:

    version=1
    node.id=<int>
    cluster.id=<22-char base64url uuid>
    directory.id=<22-char base64url uuid, unique per directory>

At first start klamm generates the cluster id (unless configured) and writes the
file into every log dir; later starts check that every dir agrees with the
configured node id and with each other, as Kafka refuses mixed directories.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "META_PROPERTIES",
    "MetaProperties",
    "MetaPropertiesError",
    "ensure_meta_properties",
    "random_base64_uuid",
    "read_meta_properties",
    "write_meta_properties",
]

META_PROPERTIES = "meta.properties"


class MetaPropertiesError(RuntimeError):
    """A log directory belongs to another node or cluster, or its file is unreadable."""


@dataclass(frozen=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: str
    version: int = 1


def random_base64_uuid() -> str:
    """Kafka's Uuid.randomUuid().toString(): 22 base64url chars, never starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


def _parse_properties(text: str) -> dict[str, str]:
    values = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in line:
                key, value = line.split(sep, 1)
                values[key.strip()] = value.strip()
                break
    return values


def read_meta_properties(log_dir: Path) -> MetaProperties | None:
    """The directory's identity, or None when it has no meta.properties yet."""
    path = Path(log_dir) / META_PROPERTIES
    if not path.exists():
        return None
    values = _parse_properties(path.read_text(encoding="utf-8"))
    try:
        return MetaProperties(
            cluster_id=values["cluster.id"],
            node_id=int(values["node.id"]),
            directory_id=values.get("directory.id", ""),
            version=int(values.get("version", "1")),
        )
    except (KeyError, ValueError) as exc:
        raise MetaPropertiesError(f"malformed {path}: {exc}") from exc


def write_meta_properties(log_dir: Path, props: MetaProperties) -> None:
    """Write atomically (temp file, fsync, rename) so a crash never leaves half a file."""
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    text = (
        "#\n#Written by klamm\n"
        f"cluster.id={props.cluster_id}\n"
        f"directory.id={props.directory_id}\n"
        f"node.id={props.node_id}\n"
        f"version={props.version}\n"
    )
    tmp = log_dir / (META_PROPERTIES + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, log_dir / META_PROPERTIES)
    fd = os.open(log_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_meta_properties(log_dirs: Iterable[Path], node_id: int, cluster_id: str | None = None) -> str:
    """Check or write meta.properties in every log dir; return the cluster id.

    The cluster id is, in order: the one already in the dirs, the configured one,
    a newly generated one. Dirs that disagree on cluster or node id are an error.
    """
    dirs = [Path(d) for d in log_dirs]
    existing = {d: read_meta_properties(d) for d in dirs}
    found_clusters = {p.cluster_id for p in existing.values() if p is not None}
    if len(found_clusters) > 1:
        raise MetaPropertiesError(f"log dirs belong to different clusters: {sorted(found_clusters)}")
    if found_clusters:
        found = found_clusters.pop()
        if cluster_id is not None and cluster_id != found:
            raise MetaPropertiesError(f"configured cluster id {cluster_id} does not match {found} in the log dirs")
        cluster_id = found
    elif cluster_id is None:
        cluster_id = random_base64_uuid()
    for directory, props in existing.items():
        if props is None:
            write_meta_properties(directory, MetaProperties(cluster_id, node_id, random_base64_uuid()))
        elif props.node_id != node_id:
            raise MetaPropertiesError(
                f"{directory / META_PROPERTIES} has node.id {props.node_id}, but this node is {node_id}")
    return cluster_id
