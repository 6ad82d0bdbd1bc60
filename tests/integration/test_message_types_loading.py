"""load_message_types: a broker makes every version's message types before a request needs them."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

import klamm.protocol.api as api
from tests.conftest import BrokerProcess, free_port


def test_newest_versions_first_until_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[int, int]] = []
    monkeypatch.setattr(api, "message_types", lambda key, version: made.append((key, version)))
    versions = {0: (3, 5), 1: (4, 6), 20: (1, 2)}

    assert api.load_message_types(versions) == 8
    # each API's newest version, then the one below it, ...: what clients negotiate comes first
    assert made == [(0, 5), (1, 6), (20, 2), (0, 4), (1, 5), (20, 1), (0, 3), (1, 4)]

    made.clear()
    assert api.load_message_types(versions, stopped=lambda: len(made) == 2) == 2
    assert made == [(0, 5), (1, 6)]


def test_a_version_kio_lacks_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    def message_types(key: int, version: int) -> None:
        if version == 2:
            raise ImportError("no such version")
    monkeypatch.setattr(api, "message_types", message_types)
    assert api.load_message_types({20: (1, 3)}) == 2


def test_klamm_serve_makes_every_version_it_advertises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from klamm.broker.handlers import registry

    advertised = sum(a.max_version - a.min_version + 1 for a in registry().values())
    monkeypatch.setenv("KLAMM_LOG_LEVEL", "DEBUG")
    broker = BrokerProcess(free_port(), tmp_path / "data", tmp_path / "broker.log")
    broker.start()
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"message types of (\d+) API versions made", broker.log_text())):
            assert time.monotonic() < deadline, "klamm serve did not make its message types"
            time.sleep(0.1)
    finally:
        broker.stop()
    assert int(found.group(1)) == advertised
