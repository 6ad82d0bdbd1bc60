"""`klamm console-consumer`: kafka-console-consumer.sh (ConsoleConsumer + DefaultMessageFormatter).

With --group the consumer subscribes and commits like any group member. Without it,
it assigns the partitions itself (all of the topic's, or --partition) and never
commits; librdkafka insists on a group.id, so a random `console-consumer-N` is set
but no group is joined.

Formatter properties (`--property`): print.timestamp, print.partition,
print.offset, print.headers, print.key, print.value (default true),
key.separator (TAB), line.separator (newline), headers.separator (","),
null.literal ("null").
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from confluent_kafka import (OFFSET_BEGINNING, OFFSET_END, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME,
                             Consumer, KafkaError, KafkaException, TopicPartition)

from klamm.cli.tools.common import ToolError, client_config, error, kafka_error_message, key_value
from klamm.config.properties import load_properties
from klamm.confluent_headers import headers_of

POLL_S = 0.2
BATCH = 500


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    parser.add_argument("--topic", help="the topic to consume")
    parser.add_argument("--include", metavar="REGEX", help="consume every topic matching REGEX (needs --group or subscribes with a random group)")
    parser.add_argument("--group", help="the consumer group: subscribe and commit (else assign, no commits)")
    parser.add_argument("--partition", type=int, help="consume only this partition")
    parser.add_argument("--offset", help="where to start: earliest, latest (default) or an offset")
    parser.add_argument("--from-beginning", action="store_true", help="start at the earliest offset without a committed one")
    parser.add_argument("--max-messages", type=int, default=-1, help="exit after this many records")
    parser.add_argument("--timeout-ms", type=int, help="exit when no record arrived for this long")
    parser.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"), default="read_uncommitted")
    parser.add_argument("--property", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                        help="a formatter property (print.key, print.timestamp, key.separator, ...)")
    parser.add_argument("--formatter-config", type=Path, metavar="FILE", help="a properties file of formatter properties")
    parser.add_argument("--consumer-property", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                        help="a consumer config (librdkafka names)")
    parser.add_argument("--consumer.config", "--command-config", dest="client_config_file", type=Path, metavar="FILE",
                        help="a properties file of consumer configs")
    parser.add_argument("--skip-message-on-error", action="store_true", help="skip a record that fails instead of exiting")


# ---------------------------------------------------------------------- formatter


@dataclass(frozen=True)
class Formatter:
    """DefaultMessageFormatter: the chosen columns, then the value and a line separator."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> "Formatter":
        defaults = cls()
        kwargs = {}
        for name in ("print.timestamp", "print.partition", "print.offset", "print.headers", "print.key", "print.value"):
            if name in props:
                kwargs[name.replace(".", "_")] = props[name].strip().lower() == "true"
        for name in ("key.separator", "line.separator", "headers.separator", "null.literal"):
            if name in props:
                kwargs[name.replace(".", "_")] = props[name].encode("utf-8")
        return cls(**{**defaults.__dict__, **kwargs})

    def format(self, msg) -> bytes:
        """One record's bytes: `CreateTime:T<sep>Partition:P<sep>Offset:O<sep>h:v<sep>key<sep>value\\n`."""
        columns: list[bytes] = []
        if self.print_timestamp:
            columns.append(timestamp_text(msg.timestamp()).encode())
        if self.print_partition:
            columns.append(f"Partition:{msg.partition()}".encode())
        if self.print_offset:
            columns.append(f"Offset:{msg.offset()}".encode())
        if self.print_headers:
            columns.append(self._headers(headers_of(msg)))  # keys as Java decodes them, whatever their bytes
        if self.print_key:
            columns.append(self._or_null(msg.key()))
        out = self.key_separator.join(columns)
        if self.print_value:
            if columns:
                out += self.key_separator
            return out + self._or_null(msg.value()) + self.line_separator
        # Kafka ends the last printed column with the line separator; nothing at all if none.
        return out + self.line_separator if columns else out

    def _headers(self, headers: list[tuple[str, bytes | None]] | None) -> bytes:
        if not headers:
            return b"NO_HEADERS"
        return self.headers_separator.join(k.encode("utf-8") + b":" + self._or_null(v) for k, v in headers)

    def _or_null(self, data: bytes | None) -> bytes:
        return self.null_literal if data is None else data


def timestamp_text(timestamp: tuple[int, int]) -> str:
    kind, value = timestamp
    if kind == TIMESTAMP_CREATE_TIME:
        return f"CreateTime:{value}"
    if kind == TIMESTAMP_LOG_APPEND_TIME:
        return f"LogAppendTime:{value}"
    return "NO_TIMESTAMP"


# ---------------------------------------------------------------------- options


def check_args(args: argparse.Namespace) -> None:
    """ConsoleConsumerOptions' checks (an --offset without --partition applies to all partitions)."""
    if bool(args.topic) == bool(args.include):
        raise ToolError("Exactly one of --include/--topic is required.")
    if args.partition is not None and not args.topic:
        raise ToolError("The topic is required when partition is specified.")
    if args.from_beginning and args.offset is not None:
        raise ToolError("Options from-beginning and offset cannot be specified together.")
    if args.group and args.partition is not None:
        raise ToolError("Options group and partition cannot be specified together.")
    if args.group and args.offset is not None:
        raise ToolError("Options group and offset cannot be specified together (use klamm consumer-groups --reset-offsets).")
    if args.offset is not None:
        start_offset(args)


def start_offset(args: argparse.Namespace) -> int:
    """librdkafka's start offset for assigned partitions."""
    text = (args.offset or ("earliest" if args.from_beginning else "latest")).strip().lower()
    if text == "earliest":
        return OFFSET_BEGINNING
    if text == "latest":
        return OFFSET_END
    try:
        offset = int(text)
    except ValueError:
        offset = -1
    if offset < 0:
        raise ToolError(f"The provided offset value '{args.offset}' is incorrect. "
                        "Valid values are 'earliest', 'latest', or a non-negative long.")
    return offset


def consumer_config(args: argparse.Namespace) -> dict[str, str]:
    defaults = {
        "client.id": "console-consumer",
        "isolation.level": args.isolation_level,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "enable.partition.eof": "false",
    }
    if args.group:
        defaults["group.id"] = args.group
    conf = client_config(args, defaults, args.consumer_property)
    if not args.group and ("group.id" not in conf or args.topic):
        # assign() mode: librdkafka wants some group.id; nothing is committed to it.
        conf.setdefault("group.id", f"console-consumer-{random.randrange(100000)}")
        if args.topic:
            conf["enable.auto.commit"] = "false"
            conf["enable.auto.offset.store"] = "false"
    return conf


def formatter_properties(args: argparse.Namespace) -> dict[str, str]:
    props = load_properties(args.formatter_config) if args.formatter_config else {}
    props.update(dict(args.property))
    return props


# ---------------------------------------------------------------------- running


def run(args: argparse.Namespace) -> int:
    try:
        check_args(args)
        formatter = Formatter.from_properties(formatter_properties(args))
    except (ToolError, OSError) as exc:
        return error(f"klamm console-consumer: {exc}")
    try:
        consumer = Consumer(consumer_config(args))
    except (KafkaException, ValueError) as exc:
        return error(f"klamm console-consumer: {kafka_error_message(exc)}")
    count = 0
    try:
        start(consumer, args)
        count = consume(consumer, args, formatter, sys.stdout.buffer)
    except (ToolError, KafkaException) as exc:
        print(f"ERROR Error processing message, terminating consumer process: {kafka_error_message(exc)}",
              file=sys.stderr)
        return 1
    finally:
        consumer.close()
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def start(consumer: Consumer, args: argparse.Namespace) -> None:
    if args.include:
        consumer.subscribe(["^" + args.include.replace(",", "|")])
    elif args.group:
        consumer.subscribe([args.topic])
    else:
        consumer.assign(assignment(consumer, args))


def assignment(consumer: Consumer, args: argparse.Namespace) -> list[TopicPartition]:
    offset = start_offset(args)
    if args.partition is not None:
        return [TopicPartition(args.topic, args.partition, offset)]
    metadata = consumer.list_topics(args.topic, timeout=30)
    topic = metadata.topics.get(args.topic)
    if topic is None or topic.error is not None:
        reason = topic.error.str() if topic is not None and topic.error is not None else "unknown topic"
        raise ToolError(f"cannot consume {args.topic}: {reason}")
    return [TopicPartition(args.topic, p, offset) for p in sorted(topic.partitions)]


def consume(consumer: Consumer, args: argparse.Namespace, formatter: Formatter, out: BinaryIO) -> int:
    """Print records until --max-messages or --timeout-ms; returns how many were printed."""
    count = 0
    last = time.monotonic()
    while args.max_messages < 0 or count < args.max_messages:
        want = BATCH if args.max_messages < 0 else min(BATCH, args.max_messages - count)
        messages = consumer.consume(want, POLL_S)
        now = time.monotonic()
        if not messages:
            if args.timeout_ms is not None and (now - last) * 1000 >= args.timeout_ms:
                break
            continue
        last = now
        for msg in messages:
            if msg.error() is not None:
                handle_error(msg.error(), args)
                continue
            try:
                out.write(formatter.format(msg))
            except (TypeError, ValueError) as exc:
                if not args.skip_message_on_error:
                    raise ToolError(str(exc)) from exc
                print(f"ERROR Error processing message, skipping this message: {exc}", file=sys.stderr)
                continue
            count += 1
        out.flush()
    return count


def handle_error(err: KafkaError, args: argparse.Namespace) -> None:
    if err.code() == KafkaError._PARTITION_EOF:
        return
    if err.fatal() or not err.retriable() and err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                            KafkaError._UNKNOWN_PARTITION,
                                                            KafkaError.TOPIC_AUTHORIZATION_FAILED):
        raise KafkaException(err)
    print(f"WARN {err.str()}", file=sys.stderr)
