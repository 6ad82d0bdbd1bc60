"""`klamm leader-election`: kafka-leader-election.sh (Kafka's LeaderElectionCommand).

    klamm leader-election --bootstrap-server B --election-type preferred|unclean
                          (--topic T --partition P | --all-topic-partitions | --path-to-json-file F)
                          [--admin.config FILE]

The JSON file is Kafka's: {"partitions": [{"topic": "foo", "partition": 1}, ...]}.
Output is the tool's: the partitions elected, those whose valid replica was
already leader (ELECTION_NOT_NEEDED), and one line per failure, which makes the
exit code 1.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from klamm.cli.tools.common import ToolError, admin_config, error, kafka_error_message

TIMEOUT_S = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", help="the broker(s) to connect to. REQUIRED.")
    parser.add_argument("--admin.config", dest="client_config_file", type=Path, metavar="FILE",
                        help="a properties file of admin client configs (librdkafka names)")
    parser.add_argument("--election-type", type=str.upper, choices=("PREFERRED", "UNCLEAN"),
                        help="preferred: only where the leader is not the preferred replica; "
                             "unclean: only where there is no leader. REQUIRED.")
    parser.add_argument("--topic", help="the topic of the one partition to elect")
    parser.add_argument("--partition", type=int, help="the partition to elect; REQUIRED with --topic")
    parser.add_argument("--all-topic-partitions", action="store_true", help="every eligible partition")
    parser.add_argument("--path-to-json-file", type=Path, metavar="FILE",
                        help='{"partitions": [{"topic": "foo", "partition": 1}, ...]}')


def run(args: argparse.Namespace) -> int:
    try:
        validate(args)
        partitions = requested_partitions(args)
    except ToolError as exc:
        return error(str(exc))
    admin = AdminClient(admin_config(args))
    election = ElectionType[args.election_type]
    try:
        # No timeout kwargs: confluent-kafka 2.16's binding fails on them (SystemError); socket.timeout.ms bounds it.
        results = admin.elect_leaders(election, partitions).result(TIMEOUT_S)
    except KafkaException as exc:
        code = exc.args[0].code() if exc.args and hasattr(exc.args[0], "code") else None
        if code == KafkaError._TIMED_OUT:
            print("Timeout waiting for election results")
        elif code == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            print("Not authorized to perform leader election")
        return error(kafka_error_message(exc))
    return report(args.election_type, results)


def validate(args: argparse.Namespace) -> None:
    missing = [flag for flag, value in (("--bootstrap-server", args.bootstrap_server),
                                        ("--election-type", args.election_type)) if value is None]
    if missing:
        raise ToolError(f"Missing required option(s): {', '.join(missing)}")
    chosen = sum((args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None))
    if chosen != 1:
        raise ToolError("One and only one of the following options is required: "
                        "--topic, --all-topic-partitions, --path-to-json-file")
    if args.topic is not None and args.partition is None:
        raise ToolError("Missing required option(s): --partition")
    if args.topic is None and args.partition is not None:
        raise ToolError("Option --partition is only allowed if --topic is used")


def requested_partitions(args: argparse.Namespace) -> list[TopicPartition] | None:
    """The partitions to elect; None asks the controller for every eligible one."""
    if args.topic is not None:
        return [TopicPartition(args.topic, args.partition)]
    if args.path_to_json_file is not None:
        return parse_election_file(args.path_to_json_file)
    return None


def parse_election_file(path: Path) -> list[TopicPartition]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ToolError(f"cannot read {path}: {exc}") from None
    if not data:
        raise ToolError("Replica election data is empty")
    if not isinstance(data, dict) or "partitions" not in data:
        raise ToolError('Replica election data is missing "partitions" field')
    try:
        pairs = [(str(entry["topic"]), int(entry["partition"])) for entry in data["partitions"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ToolError(f"invalid replica election data: {exc}") from None
    duplicates = sorted({pair for pair in pairs if pairs.count(pair) > 1})
    if duplicates:
        raise ToolError("Replica election data contains duplicate partitions: "
                        + ", ".join(f"{topic}-{partition}" for topic, partition in duplicates))
    return [TopicPartition(topic, partition) for topic, partition in pairs]


def report(election: str, results: dict[TopicPartition, KafkaError | KafkaException | None]) -> int:
    """Print as LeaderElectionCommand does; 1 when any partition could not be elected."""
    succeeded, noop, failed = [], [], []
    for tp, outcome in sorted(results.items(), key=lambda item: (item[0].topic, item[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        err = outcome.args[0] if isinstance(outcome, KafkaException) and outcome.args else outcome
        if err is None or (isinstance(err, KafkaError) and err.code() == KafkaError.NO_ERROR):
            succeeded.append(name)
        elif isinstance(err, KafkaError) and err.code() == KafkaError.ELECTION_NOT_NEEDED:
            noop.append(name)
        else:
            failed.append((name, err.str() if isinstance(err, KafkaError) else str(err)))
    if succeeded:
        print(f"Successfully completed leader election ({election}) for partitions {', '.join(succeeded)}")
    if noop:
        print(f"Valid replica already elected for partitions {', '.join(noop)}")
    for name, message in failed:
        print(f"Error completing leader election ({election}) for partition: {name}: {message}")
    if failed:
        return error(f"{len(failed)} replica(s) could not be elected")
    return 0
