"""Unit tests of the `klamm <tool>` building blocks: line reader, formatter, tables, parsers, dump-log lines."""

from __future__ import annotations

import argparse
import io
import uuid

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE  # noqa: E402

from klamm.cli.main import build_parser  # noqa: E402
from klamm.cli.tools import configs, consumer_groups, dump_log, metadata_quorum  # noqa: E402
from klamm.cli.tools.common import ToolError  # noqa: E402
from klamm.cli.tools.console_consumer import Formatter  # noqa: E402
from klamm.cli.tools.console_producer import LineReader, read_lines  # noqa: E402
from klamm.cli.tools.progress import ProgressBar  # noqa: E402
from klamm.controller.quorum_info import NO_DIRECTORY_ID, QuorumInfo, ReplicaInfo  # noqa: E402
from klamm.protocol.batch import read_batch_header  # noqa: E402
from klamm.protocol.records import ControlRecordType, NewRecord, build_batch, build_control_batch, decode_batch  # noqa: E402


# ------------------------------------------------------------------ line reader


def test_line_reader_value_only():
    assert LineReader().parse("a\tb", 1) == (None, b"a\tb", [])


def test_line_reader_key_and_headers():
    reader = LineReader.from_properties({"parse.key": "true", "key.separator": ":", "parse.headers": "true",
                                         "headers.delimiter": "|", "headers.separator": ";",
                                         "headers.key.separator": "="})
    assert reader.parse("h1=v1;h2=|k:v:w", 1) == (b"k", b"v:w", [("h1", b"v1"), ("h2", b"")])


def test_line_reader_null_marker():
    reader = LineReader.from_properties({"parse.key": "true", "parse.headers": "true", "null.marker": "NULL"})
    assert reader.parse("h:NULL\tNULL\tNULL", 1) == (None, None, [("h", None)])
    assert reader.parse("NULL\tk\tv", 1) == (b"k", b"v", [])


def test_line_reader_missing_separator():
    reader = LineReader(parse_key=True)
    with pytest.raises(ToolError, match="No key separator found on line number 3: 'novalue'"):
        reader.parse("novalue", 3)
    assert LineReader(parse_key=True, ignore_error=True).parse("novalue", 3) == (None, b"novalue", [])


def test_line_reader_rejects_equal_separators():
    with pytest.raises(ToolError, match="headers.delimiter and headers.separator may not be equal"):
        LineReader.from_properties({"headers.delimiter": ",", "headers.separator": ","})


def test_read_lines_strips_line_ends():
    assert list(read_lines(io.BytesIO(b"a\nb\r\nc"))) == [("a", 2), ("b", 3), ("c", 1)]


# ------------------------------------------------------------------ formatter


class FakeMessage:
    def __init__(self, key, value, headers=None, ts=(TIMESTAMP_CREATE_TIME, 1700000000000), partition=0, offset=7):
        self._key, self._value, self._headers, self._ts = key, value, headers, ts
        self._partition, self._offset = partition, offset

    def key(self): return self._key
    def value(self): return self._value
    def headers(self): return self._headers
    def timestamp(self): return self._ts
    def partition(self): return self._partition
    def offset(self): return self._offset


def test_formatter_default_prints_value():
    assert Formatter().format(FakeMessage(b"k", b"v")) == b"v\n"


def test_formatter_timestamp_key_value():
    f = Formatter.from_properties({"print.timestamp": "true", "print.key": "true"})
    assert f.format(FakeMessage(b"key", b"value")) == b"CreateTime:1700000000000\tkey\tvalue\n"


def test_formatter_every_column():
    f = Formatter.from_properties({p: "true" for p in ("print.timestamp", "print.partition", "print.offset",
                                                        "print.headers", "print.key")} | {"key.separator": " | "})
    msg = FakeMessage(None, None, [("a", b"1"), ("b", None)], ts=(TIMESTAMP_LOG_APPEND_TIME, 5), partition=2)
    assert f.format(msg) == b"LogAppendTime:5 | Partition:2 | Offset:7 | a:1,b:null | null | null\n"


def test_formatter_without_value_and_headers():
    f = Formatter.from_properties({"print.key": "true", "print.value": "false", "print.headers": "true",
                                   "null.literal": "<none>"})
    assert f.format(FakeMessage(None, b"v", ts=(TIMESTAMP_NOT_AVAILABLE, -1))) == b"NO_HEADERS\t<none>\n"
    assert Formatter(print_value=False).format(FakeMessage(b"k", b"v")) == b""


# ------------------------------------------------------------------ consumer-groups


def test_offset_table_widths():
    rows = [consumer_groups.OffsetRow("g", "a-rather-long-topic-name", 0, 3, 10, "consumer-1-abc", "/127.0.0.1", "c1"),
            consumer_groups.OffsetRow("g", "t", 1, None, 4)]
    lines = consumer_groups.offset_table(rows)
    assert lines[0] == ""
    assert lines[1] == ("GROUP           TOPIC                    PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  "
                        "LAG             CONSUMER-ID     HOST            CLIENT-ID")
    assert lines[2] == ("g               a-rather-long-topic-name 0          3               10              "
                        "7               consumer-1-abc  /127.0.0.1      c1")
    assert lines[3] == ("g               t                        1          -               4               "
                        "-               -               -               -")


def test_reset_table():
    lines = consumer_groups.reset_table({"g": {("t", 1): 5, ("t", 0): 2}})
    assert lines == ["", f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} {'NEW-OFFSET':<15}",
                     f"{'g':<30} {'t':<30} {'0':<10} {'2':<15}", f"{'g':<30} {'t':<30} {'1':<10} {'5':<15}"]


@pytest.mark.parametrize("text, expected", [
    ("2023-11-14T22:13:20.000", 1700000000000),
    ("2023-11-14T22:13:20.123Z", 1700000000123),
    ("2023-11-14T23:13:20.000+01:00", 1700000000000),
    ("2023-11-14T23:13:20.000+0100", 1700000000000),
    ("2023-11-14T21:13:20.000-01", 1700000000000),
])
def test_parse_datetime(text, expected):
    assert consumer_groups.parse_datetime(text) == expected


def test_parse_datetime_needs_milliseconds():
    with pytest.raises(ToolError):
        consumer_groups.parse_datetime("2023-11-14T22:13:20")


# ------------------------------------------------------------------ configs


def test_parse_add_config_brackets_and_empty_values():
    assert configs.parse_add_config("a=1,b=[x,y],c=") == {"a": "1", "b": "x,y", "c": ""}
    with pytest.raises(ToolError, match="key=val"):
        configs.parse_add_config("a")
    assert configs.parse_delete_config(["a,b", "c"]) == ["a", "b", "c"]


# ------------------------------------------------------------------ dump-log


def test_batch_and_record_lines():
    data = build_batch([NewRecord(b"k", b"v", [("h1", b"x"), ("h2", None)], timestamp=1000),
                        NewRecord(None, b"w", timestamp=1001)],
                       base_offset=5, producer_id=7, producer_epoch=1, base_sequence=10,
                       partition_leader_epoch=3, timestamp_ms=1000)
    header = read_batch_header(data, 0)
    line = dump_log.batch_line(header, True, 0)
    assert line == ("baseOffset: 5 lastOffset: 6 count: 2 baseSequence: 10 lastSequence: 11 producerId: 7 "
                    "producerEpoch: 1 partitionLeaderEpoch: 3 isTransactional: false isControl: false "
                    "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1001 "
                    f"size: {len(data)} magic: 2 compresscodec: none crc: {header.crc} isvalid: true")
    _, records = decode_batch(data)
    assert dump_log.record_line(header, records[0], True, False) == (
        "| offset: 5 CreateTime: 1000 keySize: 1 valueSize: 1 sequence: 10 headerKeys: [h1,h2] key: k payload: v")
    assert dump_log.record_line(header, records[1], True, False) == (
        "| offset: 6 CreateTime: 1001 keySize: -1 valueSize: 1 sequence: 11 headerKeys: [] payload: w")
    assert dump_log.record_line(header, records[0], True, True) == "| key: k payload: v"


def test_control_record_line():
    data = build_control_batch(ControlRecordType.COMMIT, coordinator_epoch=4, base_offset=9, producer_id=2, producer_epoch=0,
                               partition_leader_epoch=0, timestamp_ms=50)
    header = read_batch_header(data, 0)
    _, (record,) = decode_batch(data)
    assert dump_log.record_line(header, record, True, False) == (
        "| offset: 9 CreateTime: 50 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 4")
    assert "isTransactional: true isControl: true" in dump_log.batch_line(header, True, 0)


def test_dump_log_file_with_trailing_garbage(tmp_path, capsys):
    first = build_batch([NewRecord(None, b"a")], base_offset=0, timestamp_ms=1)
    second = build_batch([NewRecord(None, b"b")], base_offset=1, timestamp_ms=2)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(first + second + b"\x00\x01\x02")
    args = build_parser().parse_args(["dump-log", "--files", str(path), "--deep-iteration"])
    assert dump_log.run(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"Dumping {path}"
    assert out[1] == "Log starting offset: 0"
    assert out[2].startswith("baseOffset: 0 lastOffset: 0 count: 1 ") and " position: 0 " in out[2]
    assert out[3].startswith("| offset: 0 CreateTime: 1 keySize: -1 valueSize: 1")
    assert f" position: {len(first)} " in out[4]
    assert out[6] == f"Found 3 invalid bytes at the end of {path.name}"


def test_dump_index_reports_mismatch(tmp_path, capsys):
    batch = build_batch([NewRecord(None, b"a"), NewRecord(None, b"b")], base_offset=0, timestamp_ms=1)
    (tmp_path / "00000000000000000000.log").write_bytes(batch)
    index = tmp_path / "00000000000000000000.index"
    index.write_bytes((0).to_bytes(4, "big") + (0).to_bytes(4, "big"))  # should be offset 1 (the batch's last)
    args = build_parser().parse_args(["dump-log", "--files", str(index)])
    assert dump_log.run(args) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[1] == "offset: 0 position: 0"
    assert "Mismatches in :" in captured.err and "  Index offset: 0, log offset: 1" in captured.err


# ------------------------------------------------------------------ metadata-quorum

DIRECTORY = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")


def three_voters(**leader: int) -> QuorumInfo:
    """Leader 2 between two followers (a replicated quorum's answer), one observer with a directory id."""
    return QuorumInfo(leader_id=2, leader_epoch=5, high_watermark=1200, voters=[
        ReplicaInfo(1, NO_DIRECTORY_ID, 1190, 1_700_000_000_900, 1_700_000_000_500),
        ReplicaInfo(2, NO_DIRECTORY_ID, 1200, 1_700_000_001_000, leader.get("caught_up", 1_700_000_001_000)),
        ReplicaInfo(3, NO_DIRECTORY_ID, 1150, 1_700_000_000_950, -1)],
        observers=[ReplicaInfo(7, DIRECTORY, 1201, 1_700_000_000_990, 1_700_000_000_800)],
        voter_endpoints={1: [("CONTROLLER", "c1", 9093)], 2: [("CONTROLLER", "::1", 9093), ("ALT", "c2", 9094)],
                         3: []})


def test_quorum_status_text():
    assert metadata_quorum.status_text("abc", three_voters()).splitlines() == [
        "ClusterId:              abc",
        "LeaderId:               2",
        "LeaderEpoch:            5",
        "HighWatermark:          1200",
        "MaxFollowerLag:         50",  # voter 3, furthest behind
        "MaxFollowerLagTimeMs:   -1",  # voter 3 was never caught up
        ('CurrentVoters:          [{"id": 1, "directoryId": null, "endpoints": ["CONTROLLER://c1:9093"]}, '
         '{"id": 2, "directoryId": null, "endpoints": ["CONTROLLER://[::1]:9093", "ALT://c2:9094"]}, '
         '{"id": 3, "directoryId": null}]'),
        'CurrentObservers:       [{"id": 7, "directoryId": "Dx4tPEtaaXiHlqW0w9Lh8A"}]']


def test_quorum_status_lag_time_of_the_furthest_follower():
    info = three_voters()
    info.voters[2] = ReplicaInfo(3, NO_DIRECTORY_ID, 1150, 1_700_000_000_950, 1_700_000_000_400)
    assert "MaxFollowerLagTimeMs:   600" in metadata_quorum.status_text("abc", info)
    alone = QuorumInfo(1, 0, 5, [ReplicaInfo(1, NO_DIRECTORY_ID, 5, 9, 9)], [], {})
    assert "MaxFollowerLag:         0\nMaxFollowerLagTimeMs:   0\n" in metadata_quorum.status_text("x", alone)


def test_quorum_replication_table():
    rows = metadata_quorum.replication_rows(three_voters(), False, 0)
    text = metadata_quorum.table_text(metadata_quorum.HEADERS, rows)
    # Kafka's prettyPrintTable: cells padded to the column width, each followed by a tab
    assert text.splitlines() == [
        "NodeId\tDirectoryId           \tLogEndOffset\tLag\tLastFetchTimestamp\tLastCaughtUpTimestamp\tStatus  \t",
        "2     \tAAAAAAAAAAAAAAAAAAAAAA\t1200        \t0  \t1700000001000     \t1700000001000        \tLeader  \t",
        "1     \tAAAAAAAAAAAAAAAAAAAAAA\t1190        \t10 \t1700000000900     \t1700000000500        \tFollower\t",
        "3     \tAAAAAAAAAAAAAAAAAAAAAA\t1150        \t50 \t1700000000950     \t-1                   \tFollower\t",
        "7     \tDx4tPEtaaXiHlqW0w9Lh8A\t1201        \t-1 \t1700000000990     \t1700000000800        \tObserver\t"]


def test_quorum_replication_human_readable():
    rows = metadata_quorum.replication_rows(three_voters(), True, 1_700_000_001_000)
    assert [row[4:6] for row in rows] == [["0 ms ago", "0 ms ago"], ["100 ms ago", "500 ms ago"],
                                          ["50 ms ago", "-1"], ["10 ms ago", "200 ms ago"]]
    with pytest.raises(ToolError, match="possible drift in system clock.\nCurrent timestamp is 1700000000000, "
                                        "last fetch timestamp is 1700000001000"):
        metadata_quorum.replication_rows(three_voters(), True, 1_700_000_000_000)


@pytest.mark.parametrize(("options", "message"), [
    (["--status", "--replication"], "Only one of --status or --replication should be specified"),
    ([], "One of --status or --replication must be specified with describe sub-command"),
    (["--status", "--human-readable"], "The option --human-readable is only supported along with --replication")])
def test_quorum_option_errors(capsys, options, message):
    args = build_parser().parse_args(["metadata-quorum", "--bootstrap-server", "b:1", "describe", *options])
    assert metadata_quorum.run(args) == 1
    assert message in capsys.readouterr().err


def test_quorum_needs_exactly_one_bootstrap():
    parser = build_parser()
    for argv in (["metadata-quorum", "describe", "--status"],
                 ["metadata-quorum", "--bootstrap-server", "b:1", "--bootstrap-controller", "c:1", "describe"]):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)


# ------------------------------------------------------------------ misc


def test_progress_bar_render():
    out = io.StringIO()
    bar = ProgressBar(out, total=2 << 20)
    bar.update(1 << 20, 10)
    text = bar.render(bar._started + 2.0)
    assert text.startswith("[" + "#" * 15 + "." * 15 + "]  50% 1.0/2.0 MiB 10 records 5/s")
    bar.finish()
    assert out.getvalue().endswith("\n")


def test_parser_knows_every_tool():
    parser = build_parser()
    for argv in (["topics", "--bootstrap-server", "b", "--list"],
                 ["console-producer", "--bootstrap-server", "b", "--topic", "t"],
                 ["console-consumer", "--bootstrap-server", "b", "--topic", "t"],
                 ["consumer-groups", "--bootstrap-server", "b", "--list"],
                 ["configs", "--bootstrap-server", "b", "--entity-type", "topics", "--describe"],
                 ["metadata-quorum", "--bootstrap-controller", "c", "describe", "--status"],
                 ["dump-log", "--files", "x.log"]):
        args = parser.parse_args(argv)
        assert isinstance(args, argparse.Namespace) and args.tool_run is not None


def test_dump_log_shows_bytes_that_are_not_utf8_as_kafkas_tool_does():
    from klamm.cli.tools.dump_log import _utf8
    assert _utf8("ključ".encode()) == "ključ"
    # Java's new String(bytes, UTF_8): an encoded surrogate is one U+FFFD (Python's "replace" gives three)
    assert _utf8(b"a\xed\xa0\x80b") == "a\ufffdb"
    assert _utf8(b"k\xed\xa0") == "k\ufffd"


def test_tools_keep_librdkafka_notices_off_stderr_unless_asked(tmp_path):
    from argparse import Namespace

    from klamm.cli.tools.common import client_config

    assert client_config(Namespace(bootstrap_server="b:9092"))["log_level"] == "4"
    asked = tmp_path / "client.properties"
    asked.write_text("log_level=6\n")
    assert client_config(Namespace(bootstrap_server="b:9092", client_config_file=asked))["log_level"] == "6"
    debugging = tmp_path / "debug.properties"
    debugging.write_text("debug=broker\n")
    assert "log_level" not in client_config(Namespace(bootstrap_server="b:9092", client_config_file=debugging))
    assert "log_level" not in client_config(Namespace(bootstrap_server="b:9092"), overrides=[("debug", "all")])
