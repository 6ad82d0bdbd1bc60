"""Crash safety of the cleaner's swap: a crash after any file operation leaves a log that
reopens with either the old or the new contents (never a mix inside one group, never a
duplicate offset, never a lost latest value)."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from test_cleaner import EAGER, NOW, append, dump, k, shared_cleaner

from klamm.storage import cleaner as cleaner_module
from klamm.storage.cleaner import Cleaner, commit_clean, log_to_clean, prepare_clean
from klamm.storage.log import Log, LogConfig


class Crash(Exception):
    pass


def build(tmp_path, segment_bytes: int) -> Log:
    log = Log.open(tmp_path / "topic-0", LogConfig(segment_bytes=segment_bytes), time_ms=lambda: NOW)
    n = 0
    for segment in range(4):
        for _ in range(5):
            append(log, [(k(n % 4), f"v{n}".encode()), (k(10 + segment), f"s{n}".encode())])
            n += 1
        log.roll()
    append(log, [(k(1), b"active")])
    return log


def abandon(log: Log, *extra) -> None:
    """What a killed process leaves: files as they are, nothing flushed or renamed on the way out."""
    for segment in [*log._segments, *extra]:
        try:
            os.close(segment.fd)
        except OSError:
            pass


def latest(records) -> dict:
    out = {}
    for offset, key, value in records:
        out[key] = (offset, value)
    return out


def crash_after(count: int, monkeypatch, names=("rename",)) -> Callable[[], int]:
    """Make the (count+1)-th file operation of the swap raise; returns a counter of operations."""
    calls = [0]
    real = {name: getattr(os, name) for name in names}

    def wrap(name):
        def op(*args, **kwargs):
            if calls[0] >= count:
                raise Crash(f"crash before {name} #{calls[0]}")
            calls[0] += 1
            return real[name](*args, **kwargs)
        return op

    for name in names:
        monkeypatch.setattr(cleaner_module.os, name, wrap(name))
    return lambda: calls[0]


def run_with_crash(tmp_path, monkeypatch, segment_bytes: int, count: int):
    log = build(tmp_path, segment_bytes)
    old = dump(log)
    ltc = log_to_clean(log, EAGER, None, NOW, log.log_end_offset)
    result = shared_cleaner().clean(prepare_clean(ltc, NOW))
    new_segments = [group.new for group in result.groups]
    crash_after(count, monkeypatch)
    crashed = True
    try:
        commit_clean(log, result)
        crashed = False
    except Crash:
        pass
    monkeypatch.undo()
    abandon(log, *new_segments)
    return old, crashed


def _failing_after(count: int):
    calls = [0]
    real = cleaner_module.fsync_dir

    def fsync_dir(path):
        if calls[0] >= count:
            raise Crash("crash at fsync")
        calls[0] += 1
        real(path)
    return fsync_dir


def expected_new(tmp_path, segment_bytes: int) -> list:
    log = build(tmp_path / "reference", segment_bytes)
    ltc = log_to_clean(log, EAGER, None, NOW, log.log_end_offset)
    result = shared_cleaner().clean(prepare_clean(ltc, NOW))
    _, replaced = commit_clean(log, result)
    for segment in replaced:
        segment.delete()
    contents = dump(log)
    log.close()
    return contents


def reopen(tmp_path, clean_shutdown: bool) -> Log:
    return Log.open(tmp_path / "topic-0", LogConfig(), recovery_point=0, clean_shutdown=clean_shutdown,
                    time_ms=lambda: NOW)


# One group: 3 old segments -> 3*2 renames for the others, then 3 (swap) + 3 (first old) + 3 (final).
ONE_GROUP_RENAMES = 3 * 3 + 9


@pytest.mark.parametrize("clean_shutdown", [True, False])
@pytest.mark.parametrize("count", range(ONE_GROUP_RENAMES + 1))
def test_crash_between_any_two_renames_of_a_swap(tmp_path, monkeypatch, count, clean_shutdown):
    new = expected_new(tmp_path, 1 << 20)
    old, crashed = run_with_crash(tmp_path, monkeypatch, 1 << 20, count)
    assert crashed == (count < ONE_GROUP_RENAMES)
    log = reopen(tmp_path, clean_shutdown)
    got = dump(log)
    # Old until the cleaned .log file is renamed to .swap (after the 3 other old segments and
    # the 2 cleaned indexes), new from then on.
    assert got in (old, new), f"crash after {count} renames: neither old nor new contents"
    if count < 3 * 3 + 3:
        assert got == old
    else:
        assert got == new
    assert latest(got) == latest(old)
    leftovers = [p.name for p in (tmp_path / "topic-0").iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]
    assert leftovers == []
    log.close()
    # The recovered log is a normal log: it reopens cleanly and can be cleaned again.
    log = reopen(tmp_path, True)
    assert dump(log) == got
    log.close()


def test_the_swap_itself_fsyncs_nothing(tmp_path, monkeypatch):
    """The renames are made durable by one directory fsync afterwards, off the event loop
    (the broker's cleaner service, klamm.broker.cleaner_tasks): a crash before it
    leaves a prefix of the renames, which test_crash_between_any_two_renames_of_a_swap covers."""
    new = expected_new(tmp_path, 1 << 20)
    monkeypatch.setattr(cleaner_module, "fsync_dir", _failing_after(0))
    old, crashed = run_with_crash(tmp_path, monkeypatch, 1 << 20, ONE_GROUP_RENAMES)
    assert not crashed
    log = reopen(tmp_path, False)
    assert dump(log) == new and latest(new) == latest(old)
    log.close()


@pytest.mark.parametrize("count", [0, 4, 9, 13, 20, 27, 31, 40, 100])
def test_crash_in_a_multi_group_commit_keeps_each_group_old_or_new(tmp_path, monkeypatch, count):
    new = expected_new(tmp_path, 400)
    old, _ = run_with_crash(tmp_path, monkeypatch, 400, count)
    log = reopen(tmp_path, False)
    got = dump(log)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)), "duplicate or unordered offsets"
    assert set(new) <= set(got) <= set(old)
    assert latest(got) == latest(old)
    log.close()


def test_crash_while_writing_cleaned_files(tmp_path):
    """The worker died mid-write: only .cleaned files exist; they are dropped, the log is unchanged."""
    log = build(tmp_path, 1 << 20)
    old = dump(log)
    ltc = log_to_clean(log, EAGER, None, NOW, log.log_end_offset)
    result = shared_cleaner().clean(prepare_clean(ltc, NOW))
    [group] = result.groups
    with open(group.new.log_path, "r+b") as f:
        f.truncate(group.new.size // 2)  # torn
    abandon(log, group.new)
    log = reopen(tmp_path, False)
    assert dump(log) == old
    assert not [p for p in (tmp_path / "topic-0").iterdir() if p.suffix == ".cleaned"]
    log.close()


def test_aborted_cleaning_leaves_no_files(tmp_path):
    log = build(tmp_path, 1 << 20)
    old = dump(log)
    cleaner = Cleaner(1 << 20)
    cleaner.stop()
    ltc = log_to_clean(log, EAGER, None, NOW, log.log_end_offset)
    with pytest.raises(cleaner_module.CleaningAborted):
        cleaner.clean(prepare_clean(ltc, NOW))
    assert dump(log) == old
    assert not [p for p in (tmp_path / "topic-0").iterdir() if ".cleaned" in p.name]
    log.close()
