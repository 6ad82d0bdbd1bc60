"""`klamm console-producer`: kafka-console-producer.sh (ConsoleProducer + LineMessageReader).

Reads lines from stdin, or from `--file PATH` with a progress bar on stderr, and
produces one record per line with confluent-kafka's Producer. The reader
properties (`--property`) are LineMessageReader's:

    parse.key=true        key and value split at key.separator (default TAB)
    parse.headers=true    headers first, ending at headers.delimiter (default TAB),
                          pairs split by the regex headers.separator (default ","),
                          key and value by headers.key.separator (default ":")
    null.marker=S         a key, value or header value equal to S is null
    ignore.error=true     a line without a separator is a value rather than an error
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

from confluent_kafka import KafkaException, Producer

from klamm.cli.tools.common import ToolError, client_config, error, kafka_error_message, key_value
from klamm.cli.tools.progress import ProgressBar
from klamm.config.properties import load_properties

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

Header = tuple[str, bytes | None]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    parser.add_argument("--topic", required=True, help="the topic to produce to")
    parser.add_argument("--property", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                        help="a line reader property (parse.key, key.separator, parse.headers, ...)")
    parser.add_argument("--reader-config", type=Path, metavar="FILE", help="a properties file of line reader properties")
    parser.add_argument("--producer-property", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                        help="a producer config (librdkafka names)")
    parser.add_argument("--producer.config", "--command-config", dest="client_config_file", type=Path, metavar="FILE",
                        help="a properties file of producer configs")
    parser.add_argument("--compression-codec", nargs="?", const="gzip", default="none", choices=CODECS,
                        help="none (default), gzip (if given without a value), snappy, lz4 or zstd")
    parser.add_argument("--request-required-acks", default="-1", help="acks (default -1: all)")
    parser.add_argument("--timeout", type=int, default=1000, metavar="MS", help="linger.ms (default 1000)")
    parser.add_argument("--sync", action="store_true", help="wait for each record to be acknowledged")
    parser.add_argument("--file", type=Path, help="read this file instead of stdin")
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None,
                          help="show a progress bar on stderr for --file (default: when stderr is a terminal)")
    progress.add_argument("--no-progress", dest="progress", action="store_false")


# ------------------------------------------------------------------ line reader


@dataclass
class LineReader:
    """LineMessageReader: turns one line into (key, value, headers)."""

    parse_key: bool = False
    key_separator: str = "\t"
    parse_headers: bool = False
    headers_delimiter: str = "\t"
    headers_separator: str = ","
    headers_key_separator: str = ":"
    ignore_error: bool = False
    null_marker: str | None = None
    _separator_re: re.Pattern = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._separator_re = re.compile(self.headers_separator)
        self._check_distinct()

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> "LineReader":
        def flag(name: str) -> bool:
            return props.get(name, "false").strip().lower() == "true"

        defaults = cls()
        return cls(
            parse_key=flag("parse.key"),
            key_separator=props.get("key.separator", defaults.key_separator),
            parse_headers=flag("parse.headers"),
            headers_delimiter=props.get("headers.delimiter", defaults.headers_delimiter),
            headers_separator=props.get("headers.separator", defaults.headers_separator),
            headers_key_separator=props.get("headers.key.separator", defaults.headers_key_separator),
            ignore_error=flag("ignore.error"),
            null_marker=props.get("null.marker"),
        )

    def _check_distinct(self) -> None:
        pairs = [("headers.delimiter", self.headers_delimiter, "headers.separator", self.headers_separator),
                 ("headers.delimiter", self.headers_delimiter, "headers.key.separator", self.headers_key_separator),
                 ("headers.separator", self.headers_separator, "headers.key.separator", self.headers_key_separator)]
        if self.null_marker is not None:
            pairs += [("null.marker", self.null_marker, name, value) for name, value in
                      (("key.separator", self.key_separator), ("headers.separator", self.headers_separator),
                       ("headers.delimiter", self.headers_delimiter),
                       ("headers.key.separator", self.headers_key_separator))]
        for name_a, a, name_b, b in pairs:
            if a == b:
                raise ToolError(f"{name_a} and {name_b} may not be equal")

    def parse(self, line: str, line_number: int) -> tuple[bytes | None, bytes | None, list[Header]]:
        headers_text = self._field(self.parse_headers, line, 0, self.headers_delimiter, "headers delimiter", line_number)
        start = 0 if headers_text is None else len(headers_text) + len(self.headers_delimiter)
        key = self._field(self.parse_key, line, start, self.key_separator, "key separator", line_number)
        if key is not None:
            start += len(key) + len(self.key_separator)
        value = line[start:]
        headers = []
        if headers_text is not None and headers_text != self.null_marker:
            headers = self._headers(headers_text, line_number)
        return self._bytes(key), self._bytes(value), headers

    def _field(self, enabled: bool, line: str, start: int, separator: str, name: str, line_number: int) -> str | None:
        if not enabled:
            return None
        index = line.find(separator, start)
        if index == -1:
            if self.ignore_error:
                return None
            raise ToolError(f"No {name} found on line number {line_number}: '{line}'")
        return line[start:index]

    def _headers(self, text: str, line_number: int) -> list[Header]:
        pairs = self._separator_re.split(text)
        while len(pairs) > 1 and pairs[-1] == "":  # Java's String.split drops trailing empty strings
            pairs.pop()
        headers = []
        for pair in pairs:
            key, sep, value = pair.partition(self.headers_key_separator)
            if not sep:
                if not self.ignore_error:
                    raise ToolError(f"No header key separator found in pair '{pair}' on line number {line_number}")
                headers.append((pair, None))
                continue
            if key == self.null_marker:
                raise ToolError(f"Header keys should not be equal to the null marker '{self.null_marker}' as they can't be null")
            headers.append((key, self._bytes(value)))
        return headers

    def _bytes(self, text: str | None) -> bytes | None:
        if text is None or text == self.null_marker:
            return None
        return text.encode("utf-8")


def read_lines(stream: BinaryIO) -> Iterator[tuple[str, int]]:
    """(line without its end, bytes it took) for each line, like BufferedReader.readLine."""
    for raw in stream:
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        yield line.decode("utf-8", "replace"), len(raw)


# ------------------------------------------------------------------ producing


class Delivery:
    """Counts delivery reports; prints failures like ConsoleProducer's ErrorLoggingCallback."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.delivered = 0
        self.failed = 0

    def __call__(self, err, msg) -> None:
        if err is None:
            self.delivered += 1
            return
        self.failed += 1
        key = len(msg.key()) if msg.key() is not None else -1
        value = len(msg.value()) if msg.value() is not None else -1
        print(f"ERROR Error when sending message to topic {self.topic} with key: {key} bytes, "
              f"value: {value} bytes with error: {err.str()}", file=sys.stderr)


def producer_config(args: argparse.Namespace) -> dict[str, str]:
    defaults = {"client.id": "console-producer", "acks": args.request_required_acks,
                "linger.ms": str(args.timeout), "compression.type": args.compression_codec}
    return client_config(args, defaults, args.producer_property)


def reader_properties(args: argparse.Namespace) -> dict[str, str]:
    props = load_properties(args.reader_config) if args.reader_config else {}
    props.update(dict(args.property))
    return props


def run(args: argparse.Namespace) -> int:
    try:
        reader = LineReader.from_properties(reader_properties(args))
        producer = Producer(producer_config(args))
    except (ToolError, KafkaException, OSError) as exc:
        return error(f"klamm console-producer: {kafka_error_message(exc)}")
    delivery = Delivery(args.topic)
    try:
        if args.file is not None:
            with open(args.file, "rb") as stream:
                bar = None
                if args.progress or (args.progress is None and sys.stderr.isatty()):
                    bar = ProgressBar(sys.stderr, os.fstat(stream.fileno()).st_size)
                produce_lines(producer, args, reader, stream, delivery, bar)
        else:
            produce_lines(producer, args, reader, sys.stdin.buffer, delivery, None)
    except (ToolError, OSError) as exc:
        producer.flush(30)
        return error(f"klamm console-producer: {exc}")
    finally:
        remaining = producer.flush(60)
    if remaining:
        return error(f"klamm console-producer: {remaining} records were not delivered")
    return 1 if delivery.failed else 0


def produce_lines(producer: Producer, args: argparse.Namespace, reader: LineReader, stream: BinaryIO,
                  delivery: Delivery, bar: ProgressBar | None) -> None:
    prompt = stream is sys.stdin.buffer and sys.stdin.isatty() and sys.stdout.isatty()
    line_number = 0
    if prompt:
        print(">", end="", flush=True)
    for line, nbytes in read_lines(stream):
        line_number += 1
        key, value, headers = reader.parse(line, line_number)
        send(producer, args.topic, key, value, headers, delivery)
        if args.sync:
            producer.flush()
        if bar is not None:
            bar.update(nbytes)
        if prompt:
            print(">", end="", flush=True)
    if bar is not None:
        bar.finish()


def send(producer: Producer, topic: str, key: bytes | None, value: bytes | None, headers: list[Header],
         delivery: Delivery) -> None:
    while True:
        try:
            producer.produce(topic, value=value, key=key, headers=headers or None, on_delivery=delivery)
            producer.poll(0)
            return
        except BufferError:
            # librdkafka's queue is full: serve delivery reports until there is room.
            producer.poll(0.1)
