"""`klamm metadata-quorum`: kafka-metadata-quorum.sh (Kafka's MetadataQuorumCommand).

    klamm metadata-quorum (--bootstrap-server B | --bootstrap-controller C) describe --status
    klamm metadata-quorum (--bootstrap-server B | --bootstrap-controller C) describe --replication [--human-readable]

--status prints the quorum's summary (ClusterId, LeaderId, LeaderEpoch,
HighWatermark, MaxFollowerLag, MaxFollowerLagTimeMs, CurrentVoters,
CurrentObservers); --replication a table of every replica (Leader, Follower,
Observer), both in the tool's exact layout. A broker forwards DescribeQuorum to
the controller; --bootstrap-controller asks the controller listener directly
(and its DescribeCluster, endpoint type CONTROLLER, for the cluster id). Not
supported: add-controller and remove-controller (klamm's quorum is static).
librdkafka has no DescribeQuorum, so this tool speaks the protocol itself with
klamm's own client, at the versions the server advertises, secured as
--command-config says (TLS, SASL PLAIN or SCRAM).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import time
import uuid
from pathlib import Path
from typing import Any

from klamm.cli.tools.common import ToolError, error, peer_security_of
from klamm.controller.quorum_info import NO_DIRECTORY_ID, QuorumInfo, ReplicaInfo, from_response

API_VERSIONS, DESCRIBE_QUORUM, DESCRIBE_CLUSTER = 18, 55, 60
QUORUM_VERSION, CLUSTER_VERSION = 2, 1  # the newest this tool reads
BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2
METADATA_TOPIC = "__cluster_metadata"
HEADERS = ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                        help="A comma-separated list of host:port pairs to use for establishing the connection "
                             "to the Kafka cluster.")
    target.add_argument("--bootstrap-controller", metavar="HOST:PORT[,...]",
                        help="A comma-separated list of host:port pairs to use for establishing the connection "
                             "to the Kafka controllers.")
    parser.add_argument("--command-config", dest="client_config_file", type=Path, metavar="FILE",
                        help="Property file containing configs to be passed to Admin Client.")
    commands = parser.add_subparsers(dest="quorum_command", required=True, metavar="{describe}")
    describe = commands.add_parser("describe", help="Describe the metadata quorum info")
    describe.add_argument("--status", action="store_true",
                          help="A short summary of the quorum status and the other provides detailed information "
                               "about the status of replication.")
    describe.add_argument("--replication", action="store_true",
                          help="Detailed information about the status of replication")
    describe.add_argument("--human-readable", action="store_true", help="Human-readable output")


def run(args: argparse.Namespace) -> int:
    try:
        if args.status and args.replication:
            raise ToolError("Only one of --status or --replication should be specified with describe sub-command")
        if not args.status and not args.replication:
            raise ToolError("One of --status or --replication must be specified with describe sub-command")
        if args.status and args.human_readable:
            raise ToolError("The option --human-readable is only supported along with --replication")
        print(asyncio.run(_describe(args)))
        return 0
    except ToolError as exc:
        return error(str(exc))


async def _describe(args: argparse.Namespace) -> str:
    from klamm.broker.client import BrokerUnavailable

    to_controller = args.bootstrap_controller is not None
    address = args.bootstrap_controller if to_controller else args.bootstrap_server
    security = peer_security_of(args)
    connection, versions = await connect(address, security)
    if to_controller:  # of a quorum, only the active controller describes it: ask there (as Kafka's Admin)
        connection, versions = await active_controller(connection, versions, security)
    try:
        quorum = await describe_quorum(connection, versions)
        if args.replication:
            return table_text(HEADERS, replication_rows(quorum, args.human_readable, int(time.time() * 1000)))
        return status_text(await cluster_id(connection, versions, to_controller), quorum)
    except BrokerUnavailable as exc:
        raise ToolError(f"cannot reach {address}: {exc}") from None
    finally:
        connection.close()


async def connect(address: str, security: Any, client_id: str = "klamm-metadata-quorum") -> tuple[Any, dict[int, int]]:
    """The first of the addresses that answers ApiVersions, and its newest version of each API."""
    from klamm.broker.client import BrokerConnection, BrokerUnavailable

    failure: Exception | None = None
    for entry in address.split(","):
        host, _, port = entry.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ToolError(f"invalid address {entry!r}: expected host:port")
        connection = BrokerConnection(host.strip("[]"), int(port), client_id, 30, security)
        try:
            response = await connection.request(API_VERSIONS, 0, {})
        except BrokerUnavailable as exc:
            failure = exc
            continue
        return connection, {int(k.api_key): int(k.max_version) for k in response.api_keys}
    raise ToolError(f"cannot reach {address}: {failure}")


def api_version(versions: dict[int, int], api_key: int, newest: int, name: str) -> int:
    if api_key not in versions:
        raise ToolError(f"The node does not support {name}")
    return min(versions[api_key], newest)


async def describe_quorum(connection: Any, versions: dict[int, int]) -> QuorumInfo:
    version = api_version(versions, DESCRIBE_QUORUM, QUORUM_VERSION, "DESCRIBE_QUORUM")
    response = await connection.request(DESCRIBE_QUORUM, version, {"topics": [
        {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]})
    if response.error_code != 0:
        raise ToolError(getattr(response, "error_message", None) or response.error_code.name)
    if len(response.topics) != 1 or len(response.topics[0].partitions) != 1:
        raise ToolError("DescribeMetadataQuorum received an answer for other than one partition")
    partition = response.topics[0].partitions[0]
    if partition.error_code != 0:
        raise ToolError(getattr(partition, "error_message", None) or partition.error_code.name)
    return from_response(partition, getattr(response, "nodes", ()))


async def active_controller(connection: Any, versions: dict[int, int],
                             security: Any) -> tuple[Any, dict[int, int]]:
    """The controller DescribeCluster names active, when it is not the one `connection` reaches."""
    version = api_version(versions, DESCRIBE_CLUSTER, CLUSTER_VERSION, "DESCRIBE_CLUSTER")
    response = await connection.request(DESCRIBE_CLUSTER, version, {
        "include_cluster_authorized_operations": False, "endpoint_type": CONTROLLERS_ENDPOINT})
    voters = {b.broker_id: (b.host, b.port) for b in response.brokers} if response.error_code == 0 else {}
    if len(voters) < 2 or response.controller_id not in voters:
        return connection, versions
    host, port = voters[response.controller_id]
    connection.close()
    return await connect(f"{host}:{port}", security)


async def cluster_id(connection: Any, versions: dict[int, int], to_controller: bool) -> str:
    """DescribeCluster's cluster id, of the controllers' endpoint type at a controller (KIP-919)."""
    version = api_version(versions, DESCRIBE_CLUSTER, CLUSTER_VERSION, "DESCRIBE_CLUSTER")
    endpoint_type = CONTROLLERS_ENDPOINT if to_controller else BROKERS_ENDPOINT
    response = await connection.request(DESCRIBE_CLUSTER, version, {
        "include_cluster_authorized_operations": False, "endpoint_type": endpoint_type})
    if response.error_code != 0:
        raise ToolError(response.error_message or response.error_code.name)
    return str(response.cluster_id)


# ---------------------------------------------------------------------- output


def uuid_text(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): 22 base64url characters."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def _leader(quorum: QuorumInfo) -> ReplicaInfo:
    for voter in quorum.voters:
        if voter.replica_id == quorum.leader_id:
            return voter
    raise ToolError(f"the leader {quorum.leader_id} is not among the voters")


def status_text(cluster: str, quorum: QuorumInfo) -> str:
    leader = _leader(quorum)
    # The voter furthest behind: the first with the smallest log end offset (Java's Stream.min).
    behind = min(quorum.voters, key=lambda v: v.log_end_offset)
    if behind is leader:
        lag_ms = 0
    elif leader.last_caught_up_timestamp != -1 and behind.last_caught_up_timestamp != -1:
        lag_ms = leader.last_caught_up_timestamp - behind.last_caught_up_timestamp
    else:
        lag_ms = -1
    return (f"ClusterId:              {cluster}\n"
            f"LeaderId:               {quorum.leader_id}\n"
            f"LeaderEpoch:            {quorum.leader_epoch}\n"
            f"HighWatermark:          {quorum.high_watermark}\n"
            f"MaxFollowerLag:         {leader.log_end_offset - behind.log_end_offset}\n"
            f"MaxFollowerLagTimeMs:   {lag_ms}\n"
            f"CurrentVoters:          {_replicas_text(quorum, quorum.voters)}\n"
            f"CurrentObservers:       {_replicas_text(quorum, quorum.observers)}")


def _replicas_text(quorum: QuorumInfo, replicas: list[ReplicaInfo]) -> str:
    return "[" + ", ".join(_node_text(quorum, r) for r in replicas) + "]"


def _node_text(quorum: QuorumInfo, replica: ReplicaInfo) -> str:
    directory = "null" if replica.directory_id == NO_DIRECTORY_ID else f'"{uuid_text(replica.directory_id)}"'
    text = f'{{"id": {replica.replica_id}, "directoryId": {directory}'
    endpoints = quorum.voter_endpoints.get(replica.replica_id, [])
    if endpoints:
        text += ', "endpoints": [' + ", ".join(f'"{_endpoint_text(*e)}"' for e in endpoints) + "]"
    return text + "}"


def _endpoint_text(name: str, host: str, port: int) -> str:
    return f"{name}://{f'[{host}]' if ':' in host else host}:{port}"


def replication_rows(quorum: QuorumInfo, human_readable: bool, now_ms: int) -> list[list[str]]:
    leader = _leader(quorum)
    followers = [v for v in quorum.voters if v.replica_id != quorum.leader_id]
    groups = (([leader], "Leader"), (followers, "Follower"), (quorum.observers, "Observer"))
    return [[str(r.replica_id), uuid_text(r.directory_id), str(r.log_end_offset),
             str(leader.log_end_offset - r.log_end_offset),
             _timestamp_text(r.last_fetch_timestamp, human_readable, now_ms, "last fetch"),
             _timestamp_text(r.last_caught_up_timestamp, human_readable, now_ms, "last caught up"), status]
            for replicas, status in groups for r in replicas]


def _timestamp_text(timestamp_ms: int, human_readable: bool, now_ms: int, what: str) -> str:
    if timestamp_ms == -1 or not human_readable:
        return str(timestamp_ms)
    if not 0 < timestamp_ms <= now_ms:
        raise ToolError(f"Error while computing relative time, possible drift in system clock.\n"
                        f"Current timestamp is {now_ms}, {what} timestamp is {timestamp_ms}")
    return f"{now_ms - timestamp_ms} ms ago"


def table_text(headers: list[str], rows: list[list[str]]) -> str:
    """Kafka's ToolsUtils.prettyPrintTable: every cell left-aligned to its column's width, then a tab."""
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    return "\n".join("".join(cell.ljust(width) + "\t" for cell, width in zip(row, widths))
                     for row in [headers, *rows])
