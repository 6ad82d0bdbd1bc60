"""`klamm reassign-partitions`: kafka-reassign-partitions.sh (Kafka's ReassignPartitionsCommand).

    klamm reassign-partitions --bootstrap-server B --reassignment-json-file F (--execute | --verify | --cancel)
    klamm reassign-partitions --bootstrap-server B --list

The JSON file is Kafka's: {"version": 1, "partitions": [{"topic": "foo", "partition": 0,
"replicas": [2, 3, 4]}, ...]}. --execute prints the current assignment (to roll
back with) and starts the moves; --verify reports each partition's state;
--cancel stops the moves in progress; --list shows them. Output and exit codes
are the tool's. Not supported: --generate, throttles and log-dir moves.
librdkafka has no reassignment API, so this tool speaks the protocol itself
(AlterPartitionReassignments, ListPartitionReassignments, Metadata) with
klamm's own client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from klamm.cli.tools.common import ToolError, error, peer_security_of

METADATA, ALTER, LIST = 3, 45, 46
TIMEOUT_MS = 30_000
ACTIONS = ("execute", "verify", "cancel", "list")

Assignment = dict[tuple[str, int], list[int]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]",
                        help="the broker(s) to connect to")
    parser.add_argument("--reassignment-json-file", type=Path, metavar="FILE",
                        help='{"version": 1, "partitions": [{"topic": T, "partition": P, "replicas": [...]}]}')
    parser.add_argument("--command-config", dest="client_config_file", type=Path, metavar="FILE",
                        help="client properties: security.protocol, sasl.*, ssl.* (TLS, SASL PLAIN or SCRAM)")
    for action in ACTIONS:
        parser.add_argument(f"--{action}", action="store_true", help=f"{action} the reassignment")


def run(args: argparse.Namespace) -> int:
    chosen = [action for action in ACTIONS if getattr(args, action)]
    if len(chosen) != 1:
        return error("Command must include exactly one action: --execute, --verify, --cancel, --list")
    try:
        if chosen[0] != "list" and args.reassignment_json_file is None:
            raise ToolError(f"Missing required argument \"[reassignment-json-file]\" for --{chosen[0]}")
        return asyncio.run(_run(args, chosen[0]))
    except ToolError as exc:
        return error(str(exc))


async def _run(args: argparse.Namespace, action: str) -> int:
    from klamm.broker.client import BrokerConnection, BrokerUnavailable

    host, _, port = args.bootstrap_server.split(",")[0].rpartition(":")
    connection = BrokerConnection(host, int(port), "klamm-reassign-partitions", security=peer_security_of(args))
    try:
        if action == "list":
            print(current_reassignments_text(await _list(connection)))
            return 0
        proposed = parse_reassignment_file(args.reassignment_json_file)
        if action == "execute":
            return await _execute(connection, proposed)
        if action == "verify":
            print(verify_text(proposed, await _replicas(connection), await _list(connection)))
            return 0
        return await _cancel(connection, proposed)
    except BrokerUnavailable as exc:
        raise ToolError(f"cannot reach {args.bootstrap_server}: {exc}") from None
    finally:
        connection.close()


def parse_reassignment_file(path: Path) -> Assignment:
    try:
        data = json.loads(path.read_text())
        parts = {(str(p["topic"]), int(p["partition"])): [int(r) for r in p["replicas"]] for p in data["partitions"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ToolError(f"invalid reassignment file {path}: {exc}") from None
    duplicated = {f"{t}-{p}": r for (t, p), r in parts.items() if len(set(r)) != len(r)}
    if duplicated:
        raise ToolError("Partition replica lists may not contain duplicate entries: "
                        + ", ".join(f"{tp} contains multiple entries for {r}" for tp, r in duplicated.items()))
    return parts


async def _replicas(connection: Any) -> Assignment:
    response = await connection.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                       "include_topic_authorized_operations": False})
    return {(t.name, p.partition_index): list(p.replica_nodes) for t in response.topics for p in t.partitions}


async def _list(connection: Any) -> dict[tuple[str, int], Any]:
    response = await connection.request(LIST, 0, {"timeout": TIMEOUT_MS, "topics": None})
    return {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}


async def _alter(connection: Any, targets: dict[tuple[str, int], list[int] | None]) -> dict[str, str]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), replicas in sorted(targets.items()):
        topics.setdefault(topic, []).append({"partition_index": index, "replicas": replicas})
    response = await connection.request(ALTER, 0, {"timeout": TIMEOUT_MS, "topics": [
        {"name": name, "partitions": parts} for name, parts in topics.items()]})
    return {f"{t.name}-{p.partition_index}": p.error_message or p.error_code.name
            for t in response.responses for p in t.partitions if p.error_code != 0}


async def _execute(connection: Any, proposed: Assignment) -> int:
    current = await _replicas(connection)
    missing = [f"{t}-{p}" for t, p in proposed if (t, p) not in current]
    if missing:
        raise ToolError(f"Topic partitions {', '.join(missing)} do not exist")
    print("Current partition replica assignment\n")
    print(reassignment_json({tp: current[tp] for tp in proposed}))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    errors = await _alter(connection, dict(proposed))
    if errors:
        raise ToolError("Error reassigning partition(s):\n" + "\n".join(f"{tp}: {m}" for tp, m in errors.items()))
    names = ",".join(f"{t}-{p}" for t, p in sorted(proposed))
    print(f"Successfully started partition reassignment{'' if len(proposed) == 1 else 's'} for {names}")
    return 0


async def _cancel(connection: Any, proposed: Assignment) -> int:
    active = await _list(connection)
    moving = sorted(tp for tp in proposed if tp in active)
    if not moving:
        print("None of the specified partition reassignments are active.")
        return 0
    errors = await _alter(connection, {tp: None for tp in moving})
    if errors:
        raise ToolError("Error cancelling partition reassignment(s) for:\n"
                        + "\n".join(f"{tp}: {m}" for tp, m in errors.items()))
    names = ",".join(f"{t}-{p}" for t, p in moving)
    print(f"Successfully cancelled partition reassignment{'' if len(moving) == 1 else 's'} for: {names}")
    return 0


def reassignment_json(parts: Assignment) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(parts.items())]}, separators=(",", ":"))


def verify_text(proposed: Assignment, current: Assignment, active: dict[tuple[str, int], Any]) -> str:
    lines = ["Status of partition reassignment:"]
    for (topic, index), target in sorted(proposed.items()):
        name = f"{topic}-{index}"
        if (topic, index) in active:
            lines.append(f"Reassignment of partition {name} is still in progress.")
        elif current.get((topic, index)) == target:
            lines.append(f"Reassignment of partition {name} is completed.")
        else:
            replicas = ",".join(map(str, current.get((topic, index), [])))
            lines.append(f"There is no active reassignment of partition {name}, but replica set is {replicas} "
                         f"rather than {','.join(map(str, target))}.")
    return "\n".join(lines)


def current_reassignments_text(active: dict[tuple[str, int], Any]) -> str:
    if not active:
        return "No partition reassignments found."
    lines = []
    for (topic, index), p in sorted(active.items()):
        adding = f" adding: {','.join(map(str, p.adding_replicas))}." if p.adding_replicas else ""
        removing = f" removing: {','.join(map(str, p.removing_replicas))}." if p.removing_replicas else ""
        lines.append(f"{topic}-{index}: replicas: {','.join(map(str, p.replicas))}.{adding}{removing}")
    return "Current partition reassignments:\n" + "\n".join(lines)
