"""Power loss: only what was fsynced survives; recovery must still yield a valid prefix.

SIGKILL keeps the page cache, so a killed broker loses nothing that was written.
Here a `RecordingIO` stands in for the segments' file seam (klamm.storage.segment.FileIO):
it performs every write for real (the live log keeps working) and remembers, per
`.log` file, the bytes as of its last fsync plus the writes since; `index_recording`
does the same for the offset and time indexes (their module's `os`, and the segments'
fsyncs of them by name). A crash builds a disk image from the fsynced bytes and an
arbitrary subset of the later writes (the last one possibly torn), loses or keeps
unsynced index files and producer snapshots at random, and recovers a Log from that image.

Properties, over random appends, rolls, flush jobs finishing out of order, and crash points:
  * the recovery point never passes an offset whose bytes were not fsynced;
  * recovery yields what was written, cut short: every batch CRC-valid, the very
    bytes appended at its offset, offsets increasing, contiguous up to the recovery
    point at the crash, every offset present readable through the rebuilt indexes;
  * nothing below the recovery point at the crash is lost (an ack under
    flush.messages=1 waits for exactly that), whatever older recovery point
    the checkpoint file holds;
  * a segment wholly below it comes back with its max timestamp (what retention
    goes by), whether its time index was trusted or rebuilt.

Above the recovery point, a segment that lost its unsynced tail at a batch boundary
may be followed by a later segment whose unsynced writes survived: recovery then
keeps both, with a gap, as Kafka's does (it cuts the log only at an invalid batch,
and compaction makes gaps between segments legitimate, so a gap alone proves nothing).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_storage_helpers import append, batch

from klamm.protocol.batch import crc_ok, read_batch_header, split_batches
from klamm.storage.log import FlushJob, Log, LogConfig
from klamm.storage.producer_state import SNAPSHOT_SUFFIX
from klamm.storage import index as index_module
from klamm.storage import segment as segment_module
from klamm.storage.segment import FileIO

CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=120)
PRODUCER = 17


@dataclass
class _File:
    durable: bytes  # content as of the last fsync
    pending: list[tuple[str, int, bytes]] = field(default_factory=list)  # ("w", pos, data) / ("t", size, b"")


def _apply(content: bytes, ops: list[tuple[str, int, bytes]]) -> bytes:
    buf = bytearray(content)
    for kind, at, data in ops:
        if kind == "t":
            del buf[at:]
        else:
            if len(buf) < at:
                buf += bytes(at - len(buf))  # a hole reads as zeros
            buf[at: at + len(data)] = data
    return bytes(buf)


class RecordingIO(FileIO):
    """Real file operations, plus a record of what each fsync made durable."""

    def __init__(self) -> None:
        self.files: dict[str, _File] = {}
        self._paths: dict[int, str] = {}
        self.fsyncs = 0

    def open(self, path: Path, flags: int, mode: int) -> int:
        fd = os.open(path, flags, mode)
        key = str(path)
        if key not in self.files:
            self.files[key] = _File(Path(path).read_bytes())  # what a previous life left is durable
        self._paths[fd] = key
        return fd

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, position: int) -> int:
        self.files[self._paths[fd]].pending.append(("w", position, bytes(data)))
        return os.pwrite(fd, data, position)

    def ftruncate(self, fd: int, size: int) -> None:
        self.files[self._paths[fd]].pending.append(("t", size, b""))
        os.ftruncate(fd, size)

    def fsync(self, fd: int) -> None:
        state = self.files[self._paths[fd]]
        state.durable = _apply(state.durable, state.pending)
        state.pending = []
        self.fsyncs += 1

    def durable(self, path: Path) -> bytes:
        return self.files[str(path)].durable

    # The index files, written through index_recording.
    def index_op(self, fd: int, op: tuple[str, int, bytes]) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")  # its name now: a spare file is renamed before it is written
        if path not in self.files:
            self.files[path] = _File(Path(path).read_bytes())
        self.files[path].pending.append(op)

    def index_fsync(self, path: str) -> None:
        state = self.files.get(os.path.realpath(path))
        if state is not None:
            state.durable = _apply(state.durable, state.pending)
            state.pending = []


class _IndexOs:
    """klamm.storage.index's `os` while index_recording: writes and fsyncs go to the RecordingIO too."""

    def __init__(self, io: RecordingIO) -> None:
        self._io = io

    def __getattr__(self, name: str):
        return getattr(os, name)

    def pwrite(self, fd: int, data, position: int) -> int:
        self._io.index_op(fd, ("w", position, bytes(data)))
        return os.pwrite(fd, data, position)

    def ftruncate(self, fd: int, size: int) -> None:
        self._io.index_op(fd, ("t", size, b""))
        os.ftruncate(fd, size)

    def fsync(self, fd: int) -> None:
        self._io.index_fsync(os.readlink(f"/proc/self/fd/{fd}"))
        os.fsync(fd)


@contextlib.contextmanager
def index_recording(io: RecordingIO) -> Iterator[None]:
    original_os, original_fsync_path = index_module.os, segment_module.fsync_path

    def fsync_path(path: Path) -> None:
        io.index_fsync(str(path))
        original_fsync_path(path)

    index_module.os, segment_module.fsync_path = _IndexOs(io), fsync_path
    try:
        yield
    finally:
        index_module.os, segment_module.fsync_path = original_os, original_fsync_path


def durable_prefix(log: Log, io: RecordingIO) -> int:
    """The end of the longest run of offsets, from the log start, whose batches are all fsynced."""
    end = log.log_start_offset
    for segment in log.segments:
        content = io.durable(segment.log_path)
        position = 0
        while position + 61 <= len(content):
            header = read_batch_header(content, position)
            if position + header.size > len(content) or not crc_ok(content, header):
                break
            end = header.next_offset
            position += header.size
        if position < segment.size:
            return end
    return end


def crash_image(live: Path, image: Path, io: RecordingIO, recovery_point: int, data: st.DataObject) -> None:
    """The directory a power loss leaves: fsynced bytes, then any of the writes after them."""
    shutil.copytree(live, image)
    for path in sorted(image.iterdir()):
        live_path = live / path.name
        if path.suffix == ".log":
            state = io.files[str(live_path)]
            kept = [op for op in state.pending if data.draw(st.booleans(), label=f"keep write to {path.name}")]
            if kept and kept[-1][0] == "w" and data.draw(st.booleans(), label="torn"):
                kind, at, payload = kept[-1]
                kept[-1] = (kind, at, payload[: data.draw(st.integers(0, len(payload)), label="torn at")])
            path.write_bytes(_apply(state.durable, kept))
        elif path.suffix in (".index", ".timeindex"):
            state = io.files.get(os.path.realpath(live_path))
            if state is not None and state.pending:  # what the fsync left, and any of the writes since
                if data.draw(st.booleans(), label=f"lose {path.name}"):
                    path.unlink()
                    continue
                kept = [op for op in state.pending if data.draw(st.booleans(), label=f"keep write to {path.name}")]
                path.write_bytes(_apply(state.durable, kept))
        elif path.name.endswith(SNAPSHOT_SUFFIX) and int(path.name[: -len(SNAPSHOT_SUFFIX)]) > recovery_point:
            fate = data.draw(st.sampled_from(["keep", "lose", "torn"]), label=f"fate of {path.name}")
            if fate == "lose":
                path.unlink()
            elif fate == "torn":
                path.write_bytes(path.read_bytes()[:7])


_ops = st.lists(st.sampled_from(["append", "append", "append", "begin", "run", "complete", "flush"]),
                min_size=1, max_size=40)


@settings(max_examples=int(os.environ.get("PL_EXAMPLES", "150")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops, data=st.data())
def test_power_loss_recovers_a_valid_prefix_with_every_fsynced_record(tmp_path_factory, ops, data):
    root = tmp_path_factory.mktemp("power")
    io = RecordingIO()
    live = root / "live" / "topic-0"
    log = Log.open(live, CONFIG, io=io)
    written: dict[int, bytes] = {}  # base offset -> the batch bytes as appended
    last_seq: dict[int, int] = {}  # base offset -> the idempotent producer's last sequence in that batch
    sequence = 0
    timestamps: dict[int, int] = {}  # base offset -> the batch's timestamp
    begun: list[FlushJob] = []
    ran: list[FlushJob] = []
    recovery_points = [0]
    with index_recording(io):  # the live log's index writes and fsyncs, until the crash's image is made
        for step, op in enumerate(ops):
            if op == "append":
                records = data.draw(st.integers(1, 4), label="records")
                buf = batch(records, value_size=data.draw(st.integers(1, 120), label="value size"),
                            producer_id=PRODUCER, epoch=0, sequence=sequence, timestamp=1000 + step)
                result = append(log, buf)
                written[result.first_offset] = bytes(buf)
                timestamps[result.first_offset] = 1000 + step
                sequence += records
                last_seq[result.first_offset] = sequence - 1
            elif op == "begin":
                job = log.begin_flush()
                if job is not None:
                    begun.append(job)
            elif op == "run" and begun:
                job = begun.pop(data.draw(st.integers(0, len(begun) - 1), label="job to run"))
                job.run()
                ran.append(job)
            elif op == "complete" and ran:
                log.complete_flush(ran.pop(data.draw(st.integers(0, len(ran) - 1), label="job to complete")))
            elif op == "flush":
                log.flush()
            # The invariant under test, checked at the seam after every step.
            assert log.recovery_point <= durable_prefix(log, io)
            recovery_points.append(log.recovery_point)

        at_crash = log.recovery_point
        checkpoint = data.draw(st.sampled_from(recovery_points), label="checkpointed recovery point")
        image = root / "image" / "topic-0"
        crash_image(live, image, io, at_crash, data)

    recovered = Log.open(image, CONFIG, recovery_point=checkpoint, clean_shutdown=False)
    try:
        assert recovered.log_end_offset >= at_crash  # nothing fsynced (acknowledged) is lost
        present = []
        offset = recovered.log_start_offset
        while offset < recovered.log_end_offset:
            chunk = recovered.read_bytes(offset, 1 << 20)
            if not chunk:
                break  # only a gap above the recovery point is left (see the module docstring)
            for header in split_batches(chunk):
                assert header.base_offset >= offset  # increasing
                assert header.base_offset == offset or offset >= at_crash  # contiguous below the recovery point
                assert crc_ok(chunk, header)
                assert chunk[header.position: header.position + header.size] == written[header.base_offset]
                present.append(header.base_offset)
                offset = header.next_offset
        assert sorted(o for o in written if o < at_crash) == [o for o in present if o < at_crash]
        # Producer state (from a roll's snapshot, possibly lost or torn, plus replay) matches the data kept.
        entry = recovered.producer_state.last_entry(PRODUCER)
        assert (entry.last_seq if entry is not None else -1) == (last_seq[present[-1]] if present else -1)
        segments = recovered.segments
        for segment, end in zip(segments, [s.base_offset for s in segments[1:]] + [recovered.log_end_offset]):
            held = [timestamps[base] for base in present if segment.base_offset <= base < end]
            if end <= at_crash and held:
                assert segment.max_timestamp == max(held)  # retention's view of it, trusted index or rebuilt
        for base in present:
            found = recovered.read(base, 1, max_offset=recovered.log_end_offset, min_one=True)
            head = read_batch_header(os.pread(found.fd, 61, found.position))
            assert head.base_offset == base  # the rebuilt indexes find every batch
        end = recovered.log_end_offset
        append(recovered, batch(2))  # the recovered log takes appends after its end
        assert recovered.log_end_offset == end + 2
    finally:
        recovered.close()
        log.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(appends=st.lists(st.integers(1, 5), min_size=2, max_size=12), data=st.data())
def test_recovery_point_advances_only_over_a_contiguous_run_of_finished_jobs(tmp_path_factory, appends, data):
    """Out-of-order completions: a job that finishes before an earlier one must wait for it."""
    io = RecordingIO()
    log = Log.open(tmp_path_factory.mktemp("order") / "topic-0", CONFIG, io=io)
    jobs = []
    for records in appends:
        append(log, batch(records, value_size=60))
        job = log.begin_flush()
        assert job is not None
        jobs.append(job)
    order = data.draw(st.permutations(range(len(jobs))), label="completion order")
    finished: set[int] = set()
    for n in order:
        jobs[n].run()
        log.complete_flush(jobs[n])
        finished.add(n)
        prefix = 0
        while prefix in finished:
            prefix += 1
        expected = jobs[prefix - 1].target if prefix else 0
        assert log.recovery_point == expected
        assert log.recovery_point <= durable_prefix(log, io)
    assert log.recovery_point == log.log_end_offset
    log.close()


def test_a_sync_flush_covers_jobs_still_running(tmp_path):
    """flush() (shutdown, inline fsync) makes everything durable even while a worker's job is still out."""
    io = RecordingIO()
    log = Log.open(tmp_path / "topic-0", CONFIG, io=io)
    append(log, batch(3))
    running = log.begin_flush()
    append(log, batch(2))
    log.flush()
    assert log.recovery_point == log.log_end_offset == 5
    assert durable_prefix(log, io) == 5
    running.run()
    log.complete_flush(running)  # late: changes nothing
    assert log.recovery_point == 5
    log.close()


def test_truncation_forgets_jobs_in_flight(tmp_path):
    """A job begun before a truncation covers removed offsets: its completion must not count for new ones."""
    io = RecordingIO()
    log = Log.open(tmp_path / "topic-0", CONFIG, io=io)
    append(log, batch(4))
    job = log.begin_flush()
    log.truncate_to(0)
    append(log, batch(3))
    job.run()
    log.complete_flush(job)
    assert log.recovery_point == 0
    assert log.unflushed_messages == 3
    log.close()


def _index_fsyncs(monkeypatch) -> list[str]:
    synced: list[str] = []
    original = segment_module.fsync_path

    def fsync_path(path: Path) -> None:
        synced.append(path.name)
        original(path)

    monkeypatch.setattr(segment_module, "fsync_path", fsync_path)
    return synced


def test_a_flush_leaves_the_indexes_of_its_last_segment_to_recovery(tmp_path, monkeypatch):
    """flush.messages=1 fsyncs the .log alone; the indexes of a segment are fsynced once a flush passes its end."""
    synced = _index_fsyncs(monkeypatch)
    io = RecordingIO()
    log = Log.open(tmp_path / "topic-0", CONFIG, io=io)
    for _ in range(3):
        append(log, batch(1, value_size=60))
        log.flush()
    assert len(log.segments) == 1 and synced == []
    assert io.fsyncs == 3
    while len(log.segments) == 1:
        append(log, batch(1, value_size=200))
    first_base = log.segments[0].base_offset
    log.flush()  # covers the roll: the finished segment's indexes go with it
    assert sorted(synced) == [f"{first_base:020d}.index", f"{first_base:020d}.timeindex"]
    synced.clear()
    append(log, batch(1, value_size=60))
    log.flush()
    assert synced == []
    log.close()  # a clean shutdown leaves nothing to rebuild: the last segment's indexes too
    active = log.segments[-1].base_offset
    assert sorted(synced) == [f"{active:020d}.index", f"{active:020d}.timeindex"]


def test_a_clean_shutdown_syncs_the_indexes_a_flush_left_even_with_nothing_new(tmp_path, monkeypatch):
    synced = _index_fsyncs(monkeypatch)
    log = Log.open(tmp_path / "topic-0", CONFIG, io=RecordingIO())
    append(log, batch(2, value_size=60))
    job = log.begin_flush()
    job.run()
    log.complete_flush(job)
    assert log.recovery_point == log.log_end_offset and synced == []
    log.close()
    assert sorted(synced) == ["00000000000000000000.index", "00000000000000000000.timeindex"]


def test_recovery_rebuilds_the_segment_of_the_last_flushed_offset(tmp_path):
    """A recovery point at a segment's base: the segment before it holds the last flushed offset, and its
    indexes may never have been fsynced, so recovery rebuilds them rather than trusting them."""
    log = Log.open(tmp_path / "topic-0", CONFIG, io=RecordingIO())
    while len(log.segments) == 1:
        append(log, batch(1, value_size=200, timestamp=5000 + log.log_end_offset))
    boundary = log.segments[1].base_offset
    log.close()
    first = log.segments[0]
    first.time_index.path.write_bytes(b"")  # its entries lost: a trusted empty index passes the sanity checks
    reopened = Log.open(tmp_path / "topic-0", CONFIG, recovery_point=boundary, clean_shutdown=False)
    try:
        assert reopened.segments[0].max_timestamp == 5000 + boundary - 1
    finally:
        reopened.close()
