"""`klamm cluster`: kafka-cluster.sh (Kafka's ClusterTool).

    klamm cluster cluster-id (--bootstrap-server B | --bootstrap-controller C) [--config FILE]
    klamm cluster unregister (--bootstrap-server B | --bootstrap-controller C) --id N [--config FILE]

cluster-id prints "Cluster ID: <id>"; unregister removes a decommissioned broker's registration
(UnregisterBroker: it leaves every ISR, then the metadata) and prints "Broker <id> is no longer
registered.", or the error and exit code 1. librdkafka has no UnregisterBroker, so this tool speaks
the protocol with klamm's own client, secured as --config says (TLS, SASL PLAIN or SCRAM).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from klamm.cli.tools.common import ToolError, error, peer_security_of
from klamm.cli.tools.metadata_quorum import active_controller, api_version, cluster_id, connect

UNREGISTER_BROKER = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="cluster_command", required=True, metavar="{cluster-id,unregister}")
    identify = commands.add_parser("cluster-id", help="Get information about the ID of a cluster.")
    unregister = commands.add_parser("unregister", help="Unregister a broker.")
    for command in (identify, unregister):
        target = command.add_mutually_exclusive_group(required=True)
        target.add_argument("--bootstrap-server", "-b", metavar="HOST:PORT[,...]",
                            help="A list of host/port pairs to use for establishing the connection to the Kafka "
                                 "cluster.")
        target.add_argument("--bootstrap-controller", "-C", metavar="HOST:PORT[,...]",
                            help="A list of host/port pairs to use for establishing the connection to the KRaft "
                                 "controllers.")
        command.add_argument("--config", "-c", dest="client_config_file", type=Path, metavar="FILE",
                             help="A property file containing configurations for the Admin client.")
    unregister.add_argument("--id", "-i", type=int, required=True, help="The ID of the broker to unregister.")


def run(args: argparse.Namespace) -> int:
    try:
        print(asyncio.run(_run(args)))
        return 0
    except ToolError as exc:
        return error(str(exc))


async def _run(args: argparse.Namespace) -> str:
    from klamm.broker.client import BrokerUnavailable

    to_controller = args.bootstrap_controller is not None
    address = args.bootstrap_controller if to_controller else args.bootstrap_server
    security = peer_security_of(args)
    connection, versions = await connect(address, security, "klamm-cluster")
    try:
        if args.cluster_command == "cluster-id":
            return f"Cluster ID: {await cluster_id(connection, versions, to_controller)}"
        if to_controller:  # a quorum's write: the active controller takes it
            connection, versions = await active_controller(connection, versions, security)
        await unregister_broker(connection, versions, args.id)
        return f"Broker {args.id} is no longer registered."
    except BrokerUnavailable as exc:
        raise ToolError(f"cannot reach {address}: {exc}") from None
    finally:
        connection.close()


async def unregister_broker(connection: Any, versions: dict[int, int], node_id: int) -> None:
    if UNREGISTER_BROKER not in versions:
        raise ToolError("The target cluster does not support the broker unregistration API.")
    version = api_version(versions, UNREGISTER_BROKER, 0, "UNREGISTER_BROKER")
    response = await connection.request(UNREGISTER_BROKER, version, {"broker_id": node_id})
    if response.error_code != 0:
        raise ToolError(f"{response.error_code.name.upper()}: {response.error_message or ''}".rstrip(": "))
