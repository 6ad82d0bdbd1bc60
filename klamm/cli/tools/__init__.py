"""`klamm <tool>`: clients that behave like Kafka's shell tools.

Each tool lives in its own module with `add_arguments(parser)` and `run(args) -> int`:

    topics            kafka-topics.sh            (TopicCommand)
    console-producer  kafka-console-producer.sh  (ConsoleProducer, LineMessageReader)
    console-consumer  kafka-console-consumer.sh  (ConsoleConsumer, DefaultMessageFormatter)
    consumer-groups   kafka-consumer-groups.sh   (ConsumerGroupCommand)
    configs           kafka-configs.sh           (ConfigCommand)
    leader-election   kafka-leader-election.sh   (LeaderElectionCommand)
    reassign-partitions kafka-reassign-partitions.sh (ReassignPartitionsCommand: execute, verify, cancel, list)
    metadata-quorum   kafka-metadata-quorum.sh   (MetadataQuorumCommand: describe --status, --replication)
    acls              kafka-acls.sh              (AclCommand: --add, --remove, --list)
    cluster           kafka-cluster.sh           (ClusterTool: cluster-id, unregister)
    dump-log          kafka-dump-log.sh          (DumpLogSegments), offline
    storage           kafka-storage.sh           (StorageTool: random-uuid, format, info), offline

The network tools are built on confluent-kafka (librdkafka), so they work against
any Kafka-compatible broker; none of them imports klamm.broker, except
reassign-partitions, metadata-quorum and cluster, whose APIs librdkafka lacks: they speak
the protocol with klamm's own client (klamm.broker.client, imported when they
run). dump-log reads segment files with klamm.protocol only.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

# (command, module, help); modules are imported when the parser is built.
TOOLS: tuple[tuple[str, str, str], ...] = (
    ("topics", "klamm.cli.tools.topics", "create, list, describe, alter and delete topics (kafka-topics.sh)"),
    ("console-producer", "klamm.cli.tools.console_producer", "produce lines of stdin or a file (kafka-console-producer.sh)"),
    ("console-consumer", "klamm.cli.tools.console_consumer", "print the records of a topic (kafka-console-consumer.sh)"),
    ("consumer-groups", "klamm.cli.tools.consumer_groups", "list, describe, reset and delete consumer groups (kafka-consumer-groups.sh)"),
    ("configs", "klamm.cli.tools.configs", "describe and alter topic and broker configs (kafka-configs.sh)"),
    ("leader-election", "klamm.cli.tools.leader_election", "elect preferred or unclean partition leaders (kafka-leader-election.sh)"),
    ("storage", "klamm.cli.tools.storage", "format log directories for a cluster (kafka-storage.sh)"),
    ("reassign-partitions", "klamm.cli.tools.reassign_partitions",
     "move partition replicas between brokers (kafka-reassign-partitions.sh)"),
    ("metadata-quorum", "klamm.cli.tools.metadata_quorum",
     "describe the metadata quorum: leader, voters, observers (kafka-metadata-quorum.sh)"),
    ("acls", "klamm.cli.tools.acls", "add, remove and list ACLs (kafka-acls.sh)"),
    ("cluster", "klamm.cli.tools.cluster", "print the cluster id, unregister a broker (kafka-cluster.sh)"),
    ("dump-log", "klamm.cli.tools.dump_log", "print segment, index and time index files offline (kafka-dump-log.sh)"),
)


def add_parsers(commands: Any) -> None:
    """Add one subparser per tool to `commands` (an argparse subparsers action)."""
    for name, module_name, help_text in TOOLS:
        parser = commands.add_parser(name, help=help_text, description=help_text)
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            # The network tools need confluent-kafka; `klamm serve` must work without it.
            parser.set_defaults(tool_run=_missing(name, exc))
            parser.add_argument("rest", nargs=argparse.REMAINDER)
            continue
        module.add_arguments(parser)
        parser.set_defaults(tool_run=module.run)


def is_tool(args: argparse.Namespace) -> bool:
    return getattr(args, "tool_run", None) is not None


def run(args: argparse.Namespace) -> int:
    """Run the tool the arguments were parsed for; returns the exit code."""
    from klamm.cli.tools.common import ToolError

    try:
        return args.tool_run(args)
    except ToolError as exc:  # e.g. a client properties file the shared client config refuses
        print(exc, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # e.g. `klamm dump-log ... | head`: stop quietly; point stdout at /dev/null so
        # the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _missing(name: str, exc: ImportError):
    def run_missing(args: argparse.Namespace) -> int:
        print(f"klamm {name}: needs confluent-kafka ({exc}); pip install confluent-kafka", file=sys.stderr)
        return 1
    return run_missing
